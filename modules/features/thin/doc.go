// Package thin applies Stripe thin events: the notifications an event
// destination sends as "object": "v2.core.event", which name the object
// that changed (related_object) but carry none of its state.
//
// For a thin event of an API v1 resource ("v1." + a snapshot type, such as
// v1.customer.subscription.updated) whose snapshot type some module
// handles, the event's apply job reads the related object from Stripe's
// API (STRIPE_API_BASE, STRIPE_API_KEY; Stripe-Context from the event's
// context; GET /v2/core/events/{id} first when the delivery names no
// related object), each call within ten seconds, and then runs the
// snapshot type's own handlers on the snapshot event the object makes:
// the same business rows come out whether an account sends snapshot or
// thin events, and the fetch's outcome is the event's. The fetch is the
// event's preparation (ledger.Registry.Prepare): it runs before the
// apply's transaction, outside any ledger lock, and a batch that holds a
// thin event gives it a job of its own and settles the others without
// waiting for Stripe. Stripe is never called on the ack path. Stripe unreachable or failing, or a key
// it refuses (401, 403), fails the apply like any handler failure: the row
// is failed with the reason and River retries it on the apply's policy
// (72 hours), and a requeue after fixing the key applies it; a 404 fails
// it for good, recorded. Only the related object of a resource some
// module applies (subscriptions, payment intents, charges, invoices) is
// fetched, by the exact path /v1/<resource>/<id>, and the fetched
// object's kind and id must be those named.
//
// Twins: while an account migrates, Stripe sends a change both as a
// snapshot event and as its thin version, whose snapshot_event names the
// snapshot's id. A thin event whose twin is already in the ledger (checked
// at apply and again before the fetched state is written) leaves the
// change to it. A twin that arrives after the thin event's write applies
// the same change again through the same guarded writes (a versioned
// upsert, a merge whose amounts only grow, one receipt per payment), so
// either order ends with the same rows.
//
// The package owns no table, serves no route and has no job kind of its
// own.
package thin
