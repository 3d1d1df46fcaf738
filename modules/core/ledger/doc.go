// Package ledger is hookledger's core: the event ledger and the path from a
// verified delivery to settled business state.
//
// It owns the webhook_event table (ent/schema/webhook_event.go), the
// delivery counts in delivery_stat (ent/schema/delivery_stat.go, written by
// DeliveryStats for every receiver) and the job kinds apply_event,
// apply_batch and prune_ledger.
//
//   - Claim: Store.Claim inserts the ledger row with INSERT ... ON
//     CONFLICT DO NOTHING RETURNING and the River job that applies it, in
//     one statement (under log-only, or traced, in one transaction), and
//     says what it did (ClaimResult: claimed, a duplicate, or a duplicate
//     applied again under CLAIM_MODE=log-only, which only the Store
//     decides); Batcher gathers concurrent deliveries
//     into one such claim (group commit). The claim is the design card's
//     ent upsert-do-nothing written as one SQL statement for one row or
//     many (ClaimStatement, which the benchmark's batched ceiling runs
//     too): ent's bulk Create().OnConflict().DoNothing() maps the ids
//     RETURNING yields to its builders by position (sqlgraph's
//     insertLastIDs), and DO NOTHING yields fewer than there are builders,
//     so it cannot say which deliveries of a batch were duplicates; a
//     multi-row VALUES from ent's SQL builder could, but would be another
//     statement, prepared again on every connection, for each batch size.
//     INSERT ... SELECT FROM unnest(...) RETURNING namespace, event_id is
//     one statement for any size.
//   - Apply: one loop (Applier) behind the apply_event and apply_batch jobs
//     settles the ledger rows, runs the handlers a Registry maps to each
//     event's provider and type, and completes River's job, all in one
//     transaction; a failure takes one path whatever its cause: recorded
//     on the row and returned to River as the job's error, which River
//     retries by its policy (the handler's), snoozed (the database's),
//     handed back (shutdown), with a failed batch split into one job per
//     event.
//   - Operate: the Store's Requeue (which targets the event, never a shared
//     batch job), Discard, RequeueMatching, List, Find, FindJob, Prune,
//     CountByStatus, Backlog, DeliveryCounts and DeliverySeries, and the
//     Prometheus Collector serve the admin API, the console and the CLI.
//
// Statuses are ent's constants (webhookevent.StatusClaimed ...). processing
// stays a valid status and filter value, but the apply transaction marks
// rows settled directly, so no session ever sees it: no count includes it,
// and the backlog (admin stats, the console, every /metrics scrape) names
// only claimed and failed, which the partial index webhookevent_pending holds.
// discarded rows (Discard) are out of the backlog, counted through their own
// partial index.
//
// Modules register their handlers, workers (AddWorker) and periodic jobs in
// a Registry, which NewRiver only reads, failing on a registration that
// went wrong. A handler inserts its jobs through the apply's Tx
// (Tx.InsertJob), which ent and River share.
package ledger
