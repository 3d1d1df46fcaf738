// Package console serves the ledger console at /console/: server-rendered
// HTML pages for people, behind the same authentication and CSRF proof as
// the admin API (handed in by app). It owns no tables: it reads the ledger
// (webhook_event), the delivery counts (delivery_stat) and River's jobs,
// and its actions go through the ledger's Requeue, RequeueMatching and
// Discard, as the admin API's do.
//
// Routes: GET /console/ (overview), GET /console/events,
// GET /console/event?namespace=&id=, POST /console/event/requeue,
// POST /console/event/discard, GET /console/failed,
// GET /console/failed/confirm, POST /console/failed/requeue, and the
// embedded stylesheet under /console/static/.
package console
