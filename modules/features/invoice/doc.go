// Package invoice keeps the latest state of every Stripe invoice: its
// status, amount_due, amount_paid, currency and customer, per ledger
// namespace.
//
// It owns the invoice table (ent/schema/invoice.go), keyed by (namespace,
// provider, external_id), and handles Stripe's invoice events that carry
// the whole invoice (Types). Each event stages its invoice's state; an
// apply writes its batch in one statement, guarded by the event's created,
// so a stale or repeated event never overwrites newer state: an
// invoice.paid followed by an older invoice.finalized leaves the invoice
// paid. Two events of one second are ordered by status (draft, open,
// uncollectible, then the final paid and void), then by their amounts,
// so that every order of delivery ends in the same row.
//
// invoice.paid is also the payment module's: it records the invoice's
// payment there, once, by its PaymentIntent; this module records the
// invoice. An erased customer is written redacted (ledger.Erased), and
// the module's erase hook redacts its rows.
package invoice
