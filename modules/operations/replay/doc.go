// Package replay pulls back events a receiver missed, from the providers'
// own APIs, and feeds them through the same claim as HTTP deliveries: what
// the ledger already has is a duplicate, only the missing events are new.
//
// Stripe: GET /v1/events for a time window (optionally only events whose
// delivery failed). Paddle: GET /events. GitHub has no events API for
// webhooks: its failed deliveries whose GUID the ledger lacks are
// redelivered by GitHub itself.
//
// An event that holds a subject `hookledger erase` erased in the
// namespace (erased_subject) is not claimed: it is counted as erased.
//
// It owns the replay_watermark table (ent/schema/replay_watermark.go) and the
// reconcile_stripe periodic job, off by default, which replays Stripe's
// undelivered events since the last watermark.
package replay
