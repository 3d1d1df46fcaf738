// Package subscription keeps the newest known state of each provider
// subscription.
//
// It owns the subscription table (ent/schema/subscription.go) and handles
// Stripe's customer.subscription.* and Paddle's subscription.* events. Every
// write is guarded by the row's version, the provider's own order key
// (Stripe: the event's created, in Unix seconds; Paddle: occurred_at, in Unix
// microseconds), so a stale or reordered event never overwrites newer
// state, and an updated that arrives before its created still lands.
//
// Stripe's created has one-second resolution, and a created and an updated
// of one subscription often share a second. At an equal version the
// incoming state wins only when its precedence is strictly higher: first
// the status's place in the subscription lifecycle (incomplete < trialing <
// active < past_due < unpaid/paused < canceled/incomplete_expired, so a
// terminal status always wins), then the event type (created < updated <
// deleted). A full tie keeps the stored row. With STRIPE_API_KEY set, a
// Stripe tie is resolved by the truth instead: the subscription is
// re-fetched from Stripe's API and its current state written at the tied
// version. Every tie is counted in hookledger_version_ties_total
// (resolution applied, kept or refetched).
//
// The states of a batch's events go to a ledger.Write (write.go): the
// apply reads the batch's stored rows, decides each event against the row
// as the events before it left it, in the order it applied them (merge),
// and writes the winners in one statement.
//
// Erasing a customer (erase.go) replaces its customer id by ledger.Erased
// and keeps the row and its version, so a late older event stays stale
// instead of recreating the row. A customer erase recorded (erased_subject)
// is written redacted by every later write, the re-fetch job's included:
// Stripe's copy of the subscription, or a newer event, does not write the
// customer back. StripeDrift (drift.go) names the event that last wrote
// each row, so drift can mark rows a replayed event wrote.
package subscription
