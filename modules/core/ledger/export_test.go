package ledger

import "database/sql"

// BacklogQuery is the statement Backlog runs, for the plan test.
const BacklogQuery = backlogQuery

// WrapTx is a Tx on tx with no ent client and no jobs, for the plan test,
// which applies on one connection of its own.
func WrapTx(tx *sql.Tx) *Tx { return &Tx{Tx: tx} }

// CheckPayloadFully is CheckPayload without its fast path.
var CheckPayloadFully = checkPayload
