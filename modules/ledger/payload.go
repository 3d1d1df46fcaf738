package ledger

import "github.com/hookledger/hookledger/modules/provider"

// ErrUnstorable marks a delivery whose JSON PostgreSQL's jsonb refuses
// (provider.ErrUnstorable).
var ErrUnstorable = provider.ErrUnstorable

// CheckPayload refuses, before any database access, a payload the ledger
// could not keep readable as jsonb: the check the provider's parse made,
// for callers that claim without it.
func CheckPayload(body []byte) error { return provider.CheckJSONB(body) }
