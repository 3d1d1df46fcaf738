package console

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"sort"
	"text/template/parse"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/web"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Source is what the console shows of a configured source: never its
// secrets, only their fingerprints (provider.SecretFingerprint), in order.
type Source struct {
	Name         string
	Provider     string
	Fingerprints []string
}

// Ledger is what the console reads, requeues and discards through: the
// methods of *ledger.Store it uses.
type Ledger interface {
	List(ctx context.Context, f ledger.Filter) ([]*ent.WebhookEvent, int64, error)
	Search(ctx context.Context, prefix string, limit int) ([]*ent.WebhookEvent, error)
	Find(ctx context.Context, namespace, eventID string) (*ent.WebhookEvent, error)
	FindJob(ctx context.Context, namespace, eventID string) (*ledger.Job, error)
	FindJobs(ctx context.Context, keys []ledger.EventKey) (map[ledger.EventKey]*ledger.Job, error)
	Requeue(ctx context.Context, namespace, eventID string, force bool) (ledger.RequeueResult, error)
	DiscardMany(ctx context.Context, keys []ledger.EventKey, reason string) ([]*ent.WebhookEvent, error)
	RequeueMatching(ctx context.Context, f ledger.Filter, force, dryRun bool) (ledger.RequeueCounts, error)
	CountByStatus(ctx context.Context) (map[string]int64, bool, error)
	Backlog(ctx context.Context) (ledger.Backlog, error)
	DeliveryCounts(ctx context.Context, since time.Time) ([]ledger.DeliveryCount, error)
	DeliverySeries(ctx context.Context, since time.Time, step time.Duration) ([]ledger.DeliveryPoint, error)
}

// Config holds the console's dependencies.
type Config struct {
	// Auth authenticates every request and refuses a state-changing one
	// without a CSRF proof: the admin surfaces' middleware.
	Auth gin.HandlerFunc
	// CSRFToken is the value the console's forms carry in CSRFField.
	CSRFToken string
	// CSRFField is the form field the Auth middleware reads it from.
	CSRFField string
	Ledger    Ledger
	// DB is where the overview reads what only it shows: apply latency
	// and the first delivery count.
	DB *sql.DB
	// Stats is this process's delivery counts, flushed before a page reads
	// delivery_stat; nil in a process that takes no webhooks.
	Stats   *ledger.DeliveryStats
	Sources []Source
	// LogOnly is CLAIM_MODE=log-only.
	LogOnly bool
	// RiverUI is the path River UI is served at ("/riverui"), "" when off.
	RiverUI string
	// Failures are the failure groups the Failed page shows first.
	Failures Failures
	// Sessions serves /console/login and /console/logout; nil serves
	// neither.
	Sessions Sessions
	// NowFunc is the clock the overview reads its windows and "ago" by;
	// time.Now when nil.
	NowFunc func() time.Time
}

// Routes lists every route the console serves, all behind cfg.Auth and
// none of them to be framed by another site (refusals included).
func Routes(r gin.IRouter, cfg Config) {
	h := &handler{cfg: cfg, pages: parsePages()}
	r.GET("/console", web.NoFraming, cfg.Auth, func(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, "/console/") })
	if cfg.Sessions != nil {
		r.GET("/console/login", web.NoFraming, secureHeaders, h.loginPage)
		r.POST("/console/login", web.NoFraming, secureHeaders, h.login)
		r.GET("/console/logout", web.NoFraming, secureHeaders, h.logout)
		r.POST("/console/logout", web.NoFraming, secureHeaders, h.logout)
	}
	g := r.Group("/console", web.NoFraming, cfg.Auth, secureHeaders)
	g.GET("/", h.overview)
	g.GET("/events", h.events)
	g.GET("/event", h.event)
	g.POST("/event/requeue", h.requeue)
	g.POST("/event/discard", h.discard)
	g.GET("/failed", h.failed)
	g.GET("/failed/confirm", h.confirmFailed)
	g.POST("/failed/requeue", h.requeueFailed)
	g.GET("/failed/group", h.failureGroup)
	g.POST("/failed/group/requeue", h.requeueGroup)
	g.POST("/failed/group/discard", h.discardGroup)
	static, _ := fs.Sub(staticFS, "static")
	g.StaticFS("/static", http.FS(static))
}

type handler struct {
	cfg   Config
	pages map[string]*template.Template
}

// secureHeaders keeps pages out of frames and runs no script at all:
// payloads are attacker-influenced, and the console needs none.
func secureHeaders(c *gin.Context) {
	c.Header("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	c.Header("X-Frame-Options", "DENY")
	c.Header("X-Content-Type-Options", "nosniff")
	c.Header("Referrer-Policy", "same-origin")
	c.Header("Cache-Control", "no-store")
	c.Next()
}

var funcs = template.FuncMap{
	"ts": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "never"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if v == nil {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		}
		return ""
	},
	// ago is how long before now (the page's time) t was.
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return duration(now.Sub(t)) + " ago"
	},
	// within is how long before now a time known only to its minute
	// (delivery_stat's) was at most: it came at some point in that minute.
	"within": func(now, minute time.Time) string {
		if minute.IsZero() {
			return "never"
		}
		d := now.Sub(minute)
		if d >= time.Hour {
			return duration(d) + " ago"
		}
		return fmt.Sprintf("under %dm ago", d/time.Minute+1)
	},
	"dur":   duration,
	"list":  func(s ...string) []string { return s },
	"pct":   func(f float64) string { return fmt.Sprintf("%.2f%%", f*100) },
	"flash": func(done string) string { return flashes[done] },
}

// flashes are the messages an action's redirect shows on the event page,
// by the code in its done= parameter. Any other value shows nothing: the
// link is anyone's to write, and the page must not say what they wrote.
var flashes = map[string]string{
	"requeued":  "Requeued: its apply job runs now.",
	"pending":   "A job is applying this event right now; nothing was changed.",
	"settled":   "The event is settled; use force to apply it again.",
	"discarded": "Discarded: the event left the backlog and its River job is cancelled. Requeue brings it back.",
}

// duration prints d rounded for people: 42s, 3m10s, 5h2m, 3d4h.
func duration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.0fs", d.Seconds())
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// pageNames are the pages, each templates/<name>.html defining "content".
var pageNames = []string{"overview", "events", "event", "failed", "confirm", "done", "group", "groupdone", "login"}

// shared are parsed with every page: the layout around it, and the
// templates pages call, such as "rows" (rows.html), the event table of the
// events and failed pages.
var shared = []string{"templates/layout.html", "templates/rows.html"}

// parsePages parses each page with the shared templates. A page that
// calls a template none of them defines panics here, when the console is
// built, rather than answering 500 each time it is shown.
func parsePages() map[string]*template.Template {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t := template.Must(template.New("layout.html").Funcs(funcs).
			ParseFS(templateFS, slices.Concat(shared, []string{"templates/" + name + ".html"})...))
		if missing := undefinedCalls(t); len(missing) > 0 {
			panic(fmt.Sprintf("console page %s calls undefined templates %q", name, missing))
		}
		pages[name] = t
	}
	return pages
}

// undefinedCalls lists the templates that t's templates call with
// {{template "name"}} and that none of them defines.
func undefinedCalls(t *template.Template) []string {
	defined := map[string]bool{}
	for _, x := range t.Templates() {
		if x.Tree != nil && x.Tree.Root != nil {
			defined[x.Name()] = true
		}
	}
	var missing []string
	var walk func(parse.Node)
	walk = func(n parse.Node) {
		switch n := n.(type) {
		case *parse.ListNode:
			if n != nil {
				for _, c := range n.Nodes {
					walk(c)
				}
			}
		case *parse.IfNode:
			walk(n.List)
			walk(n.ElseList)
		case *parse.RangeNode:
			walk(n.List)
			walk(n.ElseList)
		case *parse.WithNode:
			walk(n.List)
			walk(n.ElseList)
		case *parse.TemplateNode:
			if !defined[n.Name] && !slices.Contains(missing, n.Name) {
				missing = append(missing, n.Name)
			}
		}
	}
	for _, x := range t.Templates() {
		if x.Tree != nil {
			walk(x.Tree.Root)
		}
	}
	sort.Strings(missing)
	return missing
}

// page is what every page's layout needs beside the page's own data.
type page struct {
	Title   string
	Nav     string
	CSRF    string
	Field   string
	LogOnly bool
	RiverUI string
	Data    any
}

func (h *handler) render(c *gin.Context, name, title string, data any) {
	h.renderStatus(c, http.StatusOK, name, title, data)
}

// renderStatus renders a page answering code.
func (h *handler) renderStatus(c *gin.Context, code int, name, title string, data any) {
	var buf bytes.Buffer
	p := page{Title: title, Nav: name, CSRF: h.cfg.CSRFToken, Field: h.cfg.CSRFField, LogOnly: h.cfg.LogOnly, RiverUI: h.cfg.RiverUI, Data: data}
	if err := h.pages[name].Execute(&buf, p); err != nil {
		h.fail(c, fmt.Errorf("render %s: %w", name, err))
		return
	}
	c.Data(code, "text/html; charset=utf-8", buf.Bytes())
}

func (h *handler) fail(c *gin.Context, err error) {
	web.Logger(c).Error("console request failed", zap.Error(err))
	c.Data(http.StatusInternalServerError, "text/plain; charset=utf-8", []byte("internal error\n"))
}

func (h *handler) message(c *gin.Context, status int, msg string) {
	c.Data(status, "text/plain; charset=utf-8", []byte(msg+"\n"))
}
