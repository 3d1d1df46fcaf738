// Package alert tells operators about problems before customers do. The
// elected leader checks the alert rules every ALERT_CHECK_INTERVAL (the
// periodic job alert_check): a failure group appearing or growing tenfold,
// an event failed for longer than a threshold, the oldest pending event
// older than a threshold, one source's refused
// signatures above a count, or deliveries answered 503, in five minutes,
// the leader's scheduled drift check finding drift, the ledger's sweep
// finding orphans. Each change of an alert's state (firing, resolved) is one
// message, delivered to ALERT_WEBHOOK_URL by a job of its own
// (alert_notify) with River's retries. The table alert_state records each
// alert's last state: the check reads it under an advisory lock, and
// writes the next states in the transaction that inserts their notify
// jobs, so a state and its message commit together or not at all, and a
// restart, a second process or an alert firing for longer than River keeps
// its jobs never sends a state twice. It owns alert_state; it reads the
// ledger's backlog and delivery_stat.
//
// Job kinds: alert_check, alert_notify.
package alert
