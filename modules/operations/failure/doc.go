// Package failure shows the ledger's failed events as groups: one group
// per source, failing module.handler and error, with the error's variable
// parts (ids, numbers, quoted values) normalised, so 500 events of one
// cause read as one problem. It acts on a whole group through the
// ledger's own Requeue and Discard, one event at a time, and reports what
// each did. It owns no tables; it reads failed webhook_event rows through
// the partial index on claimed and failed rows.
//
// Routes: GET /admin/failures, POST /admin/failures/:id/requeue,
// POST /admin/failures/:id/discard.
package failure
