// Package branchhead keeps the latest pushed head of every branch and tag,
// per ledger namespace (each GitHub source its own).
//
// It owns the github_branch table (ent/schema/github_branch.go), keyed by
// (namespace, repository, ref), and handles GitHub push events. It is the
// example of a naturally idempotent handler: applying a push sets a ref to
// the push's after commit, so applying it twice changes nothing. Here the
// ledger is a safety net, not a necessity.
// Order still matters (an old push must not move a branch back), so writes
// are guarded by repository.pushed_at, and two pushes of one second are
// ordered by their before/after chain. An apply transaction writes its
// pushes when it ends, branch by branch (a ledger.Write), so that
// concurrent applies of pushes to the same branches cannot deadlock.
package branchhead
