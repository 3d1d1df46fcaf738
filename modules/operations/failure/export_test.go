package failure

// FailedSQL is the scan's statement, for the plan test.
const FailedSQL = failedSQL
