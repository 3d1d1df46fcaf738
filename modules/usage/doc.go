// Package usage keeps running totals of metered usage.
//
// It owns the usage_total table (ent/schema/usage_total.go) and handles
// usage.recorded events from Standard Webhooks sources: envelope
// {"type","timestamp","data":{"customer_id","metric","quantity"}}, event id
// the webhook-id header. Each event adds its quantity to (customer_id,
// metric).
//
// A delta has no version to compare: applying it twice counts it twice. Its
// exactly-once rests on the ledger alone, which claims each webhook-id once
// and applies it once. This is the case a receiver without a ledger gets
// wrong, and the one CLAIM_MODE=log-only makes visible before enforcing.
package usage
