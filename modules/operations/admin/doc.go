// Package admin serves the operator surfaces behind ADMIN_TOKEN: the JSON
// API under /admin/ and River UI at /riverui/. It owns no tables; it reads
// the ledger and River's jobs, and requeues and discards events, through
// the methods of the ledger's Store it names in Ledger.
//
// Routes: GET /admin/events, GET /admin/events/:event_id,
// POST /admin/events/:event_id/requeue, POST /admin/events/:event_id/discard,
// POST /admin/events/requeue, GET /admin/stats, and /riverui/*.
package admin
