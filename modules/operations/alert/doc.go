// Package alert tells operators about problems before customers do. The
// elected leader checks the alert rules every ALERT_CHECK_INTERVAL (the
// periodic job alert_check): a failure group appearing or growing tenfold,
// the oldest pending event older than a threshold, one source's refused
// signatures above a count, or deliveries answered 503, in five minutes,
// the leader's scheduled drift check finding drift, the ledger's sweep
// finding orphans. Each change of an alert's state (firing, resolved) is one
// message, delivered to ALERT_WEBHOOK_URL by a job of its own
// (alert_notify) with River's retries. The notify jobs are the record of
// each alert's last state: the check reads them under an advisory lock and
// inserts the next ones in the same transaction, so a restart or a second
// process never sends a state twice. It owns no tables; it reads the
// ledger's backlog and delivery_stat.
//
// Job kinds: alert_check, alert_notify.
package alert
