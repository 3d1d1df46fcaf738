// Package drift compares hookledger's business rows with the provider's own
// objects, reports where they differ, and repairs them through the modules'
// own handlers.
//
// A feature module opts in by implementing Module for one provider: list
// the provider's objects of its kind, fetch one by id, read its stored
// rows, compare a row with an object, and describe the event that repairs
// a row. Check pages every module's objects, reads the rows each page
// names, then fetches by id the object of every stored row the pages did
// not return (written since --since, when given); each pair is compared
// unless the row's version is as new as the provider's answer (an event
// applied since the provider answered). Times are the provider's: a
// Stripe answer is dated by its Date header (StripeGet). A Finding is one
// drifted object: missing here, missing at the provider, differing in
// some fields, or ahead (the row dated after the answer by more than the
// check took), with the row's version, the time the provider answered,
// and whether a replayed event wrote the row. A row erase redacted, or an
// object that holds a subject erase recorded (erased_subject), is
// reported apart (Report.Erased) and never repaired.
//
// Fix repairs findings without a write path of its own: each repair is a
// synthetic, namespaced provider event (drift_<object id>_<unix time>)
// whose object is the provider's answer and whose created is the moment
// the provider answered, by its clock, claimed through the ledger's
// normal claim and marked replayed. The workers apply it with the
// module's handlers under the module's version guard, like any delivery:
// a row that an event of a later moment has already moved is left as it
// is, and the repair is in the ledger, with its payload, for the console
// to show. A repair whose id was claimed before is reported as a
// duplicate; one holding an erased subject is not claimed.
//
// RegisterSchedule runs Check on the elected leader every DRIFT_INTERVAL
// (job kind drift_check), exports the drifted objects per kind in
// hookledger_drift_objects{kind} and logs a summary; it repairs nothing.
//
// The package owns no table and serves no route.
package drift
