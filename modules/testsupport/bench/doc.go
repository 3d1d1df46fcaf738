// Package bench measures hookledger on real provider payloads: `hookledger-dev
// bench` (Run) against plain SQL, the reference design and the database's
// batched ceiling, and `hookledger-dev bench-redis` (Storm), a duplicate
// storm with and without the Redis short-circuit. Each run creates and drops
// databases of its own on the development server (devdb) and starts the
// service under test as a process of its own, `serve` of the running
// executable, so that its CPU and memory are measured alone; the reference
// design runs as a whole service the same way (reference.go, `bench
// --serve-reference`). Optional phases (phases.go) measure prune under
// ingest, the claim with kept keys and sealed payloads, each against its
// own control in the same run. It is a lab tool of hookledger-dev, never
// linked into the hookledger binary.
package bench
