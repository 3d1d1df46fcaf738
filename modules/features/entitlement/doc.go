// Package entitlement keeps each customer's active features, from Stripe
// Entitlements' entitlements.active_entitlement_summary.updated events,
// per ledger namespace.
//
// It owns two tables: entitlement (ent/schema/entitlement.go), one row per
// active feature of a customer, keyed by (namespace, provider,
// customer_id, lookup_key), and entitlement_summary
// (ent/schema/entitlement_summary.go), the version of the newest summary
// applied for each customer, which guards the customer's rows even when
// that summary's set is empty. A summary is the customer's whole set: the
// newest one replaces the rows of older ones, and an older summary
// delivered late changes nothing. Two summaries of one second are ordered
// by their sets, then their event ids, so that every order of delivery
// ends in the same rows. A summary lists the entitlements Stripe put in
// the event (its first page when has_more is set).
//
// A customer erased in the namespace is not written; the module's erase
// hook deletes the customer's rows and summary.
package entitlement
