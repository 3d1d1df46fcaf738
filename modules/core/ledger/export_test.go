package ledger

// BacklogQuery is the statement Backlog runs, for the plan test.
const BacklogQuery = backlogQuery
