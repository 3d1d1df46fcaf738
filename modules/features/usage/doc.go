// Package usage keeps running totals of metered usage.
//
// It owns the usage_total and usage_delta tables (ent/schema/usage_total.go,
// usage_delta.go) and handles usage.recorded events from Standard Webhooks
// sources, event id the webhook-id header, in either of two shapes: the
// envelope {"type","timestamp","data":{"customer_id","metric","quantity"}},
// or the data alone, {"customer_id","metric","quantity"}, as a sender that
// publishes its data verbatim (Hookdeck Outpost) sends it with the type in
// webhook-topic. A body of neither shape fails for good, its failure naming
// both. Each event adds its quantity to (namespace, customer_id, metric).
//
// A delta has no version to compare: a receiver without a ledger counts a
// retried delivery twice. Here the ledger claims each webhook-id once, and
// the module records what each event added (usage_delta), so that applying
// an event again on purpose (requeue --force after a handler fix, or a
// duplicate under CLAIM_MODE=log-only) replaces its delta instead of adding
// it again. An apply transaction writes its deltas and totals when it
// ends, a statement each (two ledger.Writes), so that concurrent applies
// of events of the same customers cannot deadlock.
//
// Erasing a customer (erase.go) deletes its deltas and totals together,
// so every total stays the sum of its deltas.
//
// usage_delta grows by a row per event for ever: the ledger's prune
// deletes webhook_event rows only, and nothing compacts the deltas. A
// pruned event's delta is read again only if the event is claimed anew,
// once KEY_RETENTION has expired its keys; docs/operating.md (Pruning)
// says how an operator deletes the deltas past that age.
package usage
