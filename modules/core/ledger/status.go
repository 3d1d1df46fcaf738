package ledger

import "github.com/hookledger/hookledger/ent/webhookevent"

// The ledger statuses ent generates, as SQL literals, so that statements
// name them as constants. A literal, not a parameter, where a statement
// must match the partial index on claimed and failed rows: the planner
// proves the index's predicate only from values it sees when it plans.
const (
	claimedSQL   = "'" + string(webhookevent.StatusClaimed) + "'"
	settledSQL   = "'" + string(webhookevent.StatusSettled) + "'"
	failedSQL    = "'" + string(webhookevent.StatusFailed) + "'"
	discardedSQL = "'" + string(webhookevent.StatusDiscarded) + "'"
)
