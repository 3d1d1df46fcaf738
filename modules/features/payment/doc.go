// Package payment records provider payments and their refunds, and sends
// exactly one receipt per payment.
//
// It owns the payment table (ent/schema/payment.go) and the payment_receipt
// job kind, and handles Stripe's payment_intent.succeeded, charge.refunded
// and invoice.paid, and Paddle's transaction.completed.
//
// Amounts merge without an order: amount_refunded is the charge's cumulative
// value and only grows (GREATEST), and status follows from the two amounts,
// so payment and refund events give the same row in any order. A
// charge.refunded that arrives before its payment_intent.succeeded creates
// the payment from the charge (amount, currency, customer); the payment event
// then fills in nothing new. invoice.paid is keyed on the invoice's
// PaymentIntent, so it never creates a second payment; an invoice without
// one is left to its payment_intent.succeeded.
//
// The receipt job is inserted in the transaction that creates the payment
// row, and only then: duplicates, retries, replays and crashes cannot create
// a second one. The job itself runs at least once, so the sender gets the
// payment id as its idempotency key.
//
// Erasing a customer (erase.go) replaces its customer id by ledger.Erased
// and keeps the row, whose existence is what allows one receipt per
// payment.
package payment
