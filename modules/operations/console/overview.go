package console

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
)

// chartOutcomes are the answers the chart stacks, bottom up, with their
// colours; the tallies replayed and would_skip are counted beside them.
var chartOutcomes = []struct{ Name, Color string }{
	{"claimed", "#2f855a"}, {"duplicate", "#3182ce"}, {"invalid_signature", "#c53030"},
	{"bad_request", "#dd6b20"}, {"too_large", "#805ad5"}, {"unavailable", "#d69e2e"},
	{"error", "#742a2a"}, {"not_found", "#718096"},
}

// window is a span the overview can show, with the width of its bars.
type window struct {
	Name string
	Span time.Duration
	Step time.Duration
}

var windows = []window{{"1h", time.Hour, time.Minute}, {"24h", 24 * time.Hour, 15 * time.Minute}}

type overviewData struct {
	Window    window
	Windows   []window
	Chart     chart
	Totals    map[string]int64
	DupRate   float64
	ByStatus  map[string]int64
	Estimated bool
	Oldest    time.Duration
	Latency   latency
	Sources   []sourceHealthRow
	WouldSkip int64
	FirstStat time.Time
	Enforce   enforceReading
	Generated time.Time
}

type latency struct {
	N        int64
	P50, P95 time.Duration
	Max      time.Duration
}

type sourceHealth struct {
	Source
	Claimed, Duplicates, SigFailures int64
	// Forbidden: refused by allow_ips. TooLarge: refused 413, the body
	// over MAX_BODY_BYTES. Mismatches: duplicates whose body differs from
	// the stored one.
	Forbidden, TooLarge, Mismatches int64
	DupRate                         float64
	// LastDelivery is the newest claim's received_at, to the second
	// (LastDeliveryExact), or the minute of the newest duplicate when that
	// came in a later minute: duplicates leave no row with their time.
	LastDelivery      time.Time
	LastDeliveryExact bool
	// LastSigFailure is the minute of the newest, as delivery_stat counts it.
	LastSigFailure time.Time
	Secrets        []secretUse
}

type secretUse struct {
	// Index is the secret's position in the configuration; for a retired
	// or unnamed one, the position it matched at.
	Index       int
	Fingerprint string
	Count       int64
	Last        time.Time
	// Retired: a fingerprint no longer configured. Unnamed: rows recorded
	// before fingerprints were, known by index alone.
	Retired, Unnamed bool
}

// enforceReading answers the adoption guide's "safe to enforce?".
type enforceReading struct {
	Safe    bool
	Reasons []string
}

func (h *handler) overview(c *gin.Context) {
	ctx := c.Request.Context()
	w := windows[0]
	for _, x := range windows {
		if c.Query("window") == x.Name {
			w = x
		}
	}
	if err := h.cfg.Stats.Flush(ctx); err != nil {
		h.fail(c, err)
		return
	}
	now := time.Now()
	if h.cfg.NowFunc != nil {
		now = h.cfg.NowFunc()
	}
	d := overviewData{Window: w, Windows: windows, Generated: now.UTC(), Totals: map[string]int64{}}
	series, err := h.cfg.Ledger.DeliverySeries(ctx, now.Add(-w.Span), w.Step)
	if err != nil {
		h.fail(c, err)
		return
	}
	d.Chart = buildChart(series, now, w)
	for _, p := range series {
		d.Totals[p.Outcome] += p.Count
	}
	d.DupRate = rate(d.Totals["duplicate"], d.Totals["claimed"])
	if d.ByStatus, d.Estimated, err = h.cfg.Ledger.CountByStatus(ctx); err != nil {
		h.fail(c, err)
		return
	}
	backlog, err := h.cfg.Ledger.Backlog(ctx)
	if err != nil {
		h.fail(c, err)
		return
	}
	d.Oldest = backlog.Oldest
	if d.Latency, err = applyLatency(ctx, h.cfg.DB, now.Add(-w.Span)); err != nil {
		h.fail(c, err)
		return
	}
	if d.Sources, err = h.health(ctx, now); err != nil {
		h.fail(c, err)
		return
	}
	if err := h.cfg.DB.QueryRowContext(ctx, `SELECT COALESCE(min(minute), 'epoch') FROM delivery_stat`).Scan(&d.FirstStat); err != nil {
		h.fail(c, fmt.Errorf("first delivery count: %w", err))
		return
	}
	for _, s := range d.Sources {
		d.WouldSkip += s.wouldSkip
	}
	d.Enforce = readEnforce(d, now)
	h.render(c, "overview", "Overview", d)
}

// LatencySample is how many of the window's newest events apply latency
// is read from.
func (overviewData) LatencySample() int { return latencySample }

func rate(dups, claimed int64) float64 {
	if dups+claimed == 0 {
		return 0
	}
	return float64(dups) / float64(dups+claimed)
}

// readEnforce is the adoption guide's step 3: a day of counts recorded, no
// failed events, and every duplicate seen was answered as one.
func readEnforce(d overviewData, now time.Time) enforceReading {
	var r enforceReading
	if d.FirstStat.Before(time.Unix(1, 0)) || now.Sub(d.FirstStat) < 24*time.Hour {
		r.Reasons = append(r.Reasons, "less than a day of deliveries recorded: wait for a full day (a week if traffic is low) of real traffic")
	}
	if n := d.ByStatus[string(webhookevent.StatusFailed)]; n > 0 {
		r.Reasons = append(r.Reasons, fmt.Sprintf("%d failed events: fix the handler and requeue them first", n))
	}
	r.Safe = len(r.Reasons) == 0
	return r
}

// latencySample is how many of a window's newest rows apply latency is
// read from: a bounded read of the received_at index, however many rows
// the window holds.
const latencySample = 2000

// applyLatencySQL reads the time from claim to settle of the settled rows
// among the latencySample newest received since $1.
const applyLatencySQL = `
	SELECT count(*),
		percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM settled_at - received_at)),
		percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM settled_at - received_at)),
		max(extract(epoch FROM settled_at - received_at))
	FROM (SELECT status, received_at, settled_at FROM webhook_event
		WHERE received_at >= $1 ORDER BY received_at DESC LIMIT $2) AS newest
	WHERE status = '` + string(webhookevent.StatusSettled) + `' AND settled_at IS NOT NULL`

// applyLatency is the time from claim to settle of the settled events
// among the latencySample newest received since since.
func applyLatency(ctx context.Context, db *sql.DB, since time.Time) (latency, error) {
	var (
		l            latency
		p50, p95, mx sql.NullFloat64
	)
	err := db.QueryRowContext(ctx, applyLatencySQL, since, latencySample).Scan(&l.N, &p50, &p95, &mx)
	if err != nil {
		return l, fmt.Errorf("apply latency: %w", err)
	}
	sec := func(f sql.NullFloat64) time.Duration { return time.Duration(max(f.Float64, 0) * float64(time.Second)) }
	l.P50, l.P95, l.Max = sec(p50), sec(p95), sec(mx)
	return l, nil
}

type sourceHealthRow struct {
	sourceHealth
	wouldSkip       int64
	lastClaimMinute time.Time
}

// lastClaimsSQL reads each source's newest claim's received_at around the
// newest minute delivery_stat counted a claim of it in ($1 sources, $2
// minutes): a claim is counted when it is answered, which may be in the
// minute after the one it was received in. One minute or two of
// webhook_event per source, through the received_at index.
const lastClaimsSQL = `
	SELECT s.source, (SELECT max(e.received_at) FROM webhook_event e
		WHERE e.received_at >= s.minute - interval '1 minute' AND e.received_at < s.minute + interval '1 minute'
		AND e.source = s.source)
	FROM unnest($1::text[], $2::timestamptz[]) AS s(source, minute)`

// lastClaims sets each source's LastDelivery to its newest claim's own
// time, to the second, unless a duplicate came in a later minute than
// that claim (a duplicate earlier in the claim's minute is not placed
// after it). A claim whose row is gone (pruned, which a day-old row is
// not under any RETENTION) keeps its minute.
func (h *handler) lastClaims(ctx context.Context, sources []*sourceHealthRow) error {
	var names []string
	var minutes []time.Time
	for _, s := range sources {
		if !s.lastClaimMinute.IsZero() {
			names, minutes = append(names, s.Name), append(minutes, s.lastClaimMinute)
		}
	}
	if len(names) == 0 {
		return nil
	}
	rows, err := h.cfg.DB.QueryContext(ctx, lastClaimsSQL, names, minutes)
	if err != nil {
		return fmt.Errorf("last claims: %w", err)
	}
	defer rows.Close()
	at := map[string]time.Time{}
	for rows.Next() {
		var name string
		var t sql.NullTime
		if err := rows.Scan(&name, &t); err != nil {
			return fmt.Errorf("last claims: %w", err)
		}
		if t.Valid {
			at[name] = t.Time
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("last claims: %w", err)
	}
	for _, s := range sources {
		t, ok := at[s.Name]
		if ok && !s.LastDelivery.After(t) {
			s.LastDelivery, s.LastDeliveryExact = t, true
		}
	}
	return nil
}

// health reads each configured source's last day from delivery_stat: its
// answers, and which secret verified its claims (the tallies
// DeliveryStats.TallySecret counts).
func (h *handler) health(ctx context.Context, now time.Time) ([]sourceHealthRow, error) {
	byName := map[string]*sourceHealthRow{}
	var out []*sourceHealthRow
	get := func(name string) *sourceHealthRow {
		if s, ok := byName[name]; ok {
			return s
		}
		s := &sourceHealthRow{sourceHealth: sourceHealth{Source: Source{Name: name}}}
		byName[name] = s
		out = append(out, s)
		return s
	}
	for _, s := range h.cfg.Sources {
		get(s.Name).Source = s
	}
	counts, err := h.cfg.Ledger.DeliveryCounts(ctx, now.Add(-24*time.Hour))
	if err != nil {
		return nil, err
	}
	for _, c := range counts {
		s := get(c.Source)
		switch c.Outcome {
		case "claimed", ledger.StatLateClaim:
			// A claim that committed after its 503 is a row too.
			s.Claimed += c.Count
		case "duplicate":
			s.Duplicates = c.Count
		case "invalid_signature":
			s.SigFailures, s.LastSigFailure = c.Count, c.Last
		case ledger.StatWouldSkip:
			s.wouldSkip = c.Count
		case ledger.StatForbidden:
			s.Forbidden = c.Count
		case metrics.OutcomeTooLarge:
			s.TooLarge = c.Count
		case ledger.StatMismatch:
			s.Mismatches = c.Count
		default:
			if index, fp, ok := ledger.SecretTally(c.Outcome); ok {
				s.Secrets = append(s.Secrets, secretUse{Index: index, Fingerprint: fp, Count: c.Count, Last: c.Last})
			}
		}
		if (c.Outcome == "claimed" || c.Outcome == "duplicate") && c.Last.After(s.LastDelivery) {
			s.LastDelivery = c.Last
		}
		if c.Outcome == "claimed" && c.Last.After(s.lastClaimMinute) {
			s.lastClaimMinute = c.Last
		}
	}
	if err := h.lastClaims(ctx, out); err != nil {
		return nil, err
	}
	res := make([]sourceHealthRow, len(out))
	for i, s := range out {
		s.DupRate = rate(s.Duplicates, s.Claimed)
		s.Secrets = secretUses(s.Source.Fingerprints, s.Secrets)
		res[i] = *s
	}
	return res, nil
}

// secretUses names what matched against the configured secrets
// (fingerprints, in order): each configured secret at its position, used
// or not, so a rotated-out secret shows as unused; a fingerprint no longer
// configured as retired, after them, at the first position it matched at;
// and deliveries whose fingerprint was not recorded by their position
// alone. A secret's tallies at several positions (it moved in a rotation)
// are one secret's.
func secretUses(fingerprints []string, matched []secretUse) []secretUse {
	out := make([]secretUse, len(fingerprints))
	for i, fp := range fingerprints {
		out[i] = secretUse{Index: i, Fingerprint: fp}
	}
	slices.SortFunc(matched, func(a, b secretUse) int { return cmp.Compare(a.Index, b.Index) })
	add := func(to *secretUse, u secretUse) {
		to.Count += u.Count
		if u.Last.After(to.Last) {
			to.Last = u.Last
		}
	}
	for _, u := range matched {
		i := slices.Index(fingerprints, u.Fingerprint)
		if u.Fingerprint != "" && i >= 0 {
			add(&out[i], u)
			continue
		}
		u.Retired, u.Unnamed = u.Fingerprint != "", u.Fingerprint == ""
		j := slices.IndexFunc(out[len(fingerprints):], func(o secretUse) bool {
			return o.Retired == u.Retired && o.Fingerprint == u.Fingerprint && (u.Retired || o.Index == u.Index)
		})
		if j < 0 {
			out = append(out, u)
			continue
		}
		add(&out[len(fingerprints)+j], u)
	}
	return out
}

// chart is a stacked bar chart drawn as SVG on the server.
type chart struct {
	Width, Height int
	Bars          []bar
	Max           int64
	Legend        []legendItem
	Labels        []axisLabel
}

type bar struct {
	X, W  float64
	Rects []rect
	Title string
}

type rect struct {
	Y, H  float64
	Color string
}

type legendItem struct {
	Name, Color string
	X           int
}

type axisLabel struct {
	X    float64
	Text string
}

const chartTop, chartBottom = 10, 180

func buildChart(series []ledger.DeliveryPoint, now time.Time, w window) chart {
	ch := chart{Width: 960, Height: 220}
	n := int(w.Span / w.Step)
	start := now.Add(-w.Span).Truncate(w.Step).Add(w.Step)
	buckets := make([]map[string]int64, n)
	for i := range buckets {
		buckets[i] = map[string]int64{}
	}
	for _, p := range series {
		i := int(p.Minute.Sub(start) / w.Step)
		if i >= 0 && i < n {
			buckets[i][p.Outcome] += p.Count
		}
	}
	for _, b := range buckets {
		var sum int64
		for _, o := range chartOutcomes {
			sum += b[o.Name]
		}
		ch.Max = max(ch.Max, sum)
	}
	scale := 0.0
	if ch.Max > 0 {
		scale = float64(chartBottom-chartTop) / float64(ch.Max)
	}
	bw := float64(ch.Width) / float64(n)
	for i, b := range buckets {
		br := bar{X: float64(i) * bw, W: max(bw-1, 1)}
		y := float64(chartBottom)
		title := start.Add(time.Duration(i) * w.Step).UTC().Format("15:04")
		for _, o := range chartOutcomes {
			if v := b[o.Name]; v > 0 {
				hgt := float64(v) * scale
				y -= hgt
				br.Rects = append(br.Rects, rect{Y: y, H: hgt, Color: o.Color})
				title += fmt.Sprintf(" %s %d", o.Name, v)
			}
		}
		br.Title = title
		ch.Bars = append(ch.Bars, br)
		if i%(n/6) == 0 {
			ch.Labels = append(ch.Labels, axisLabel{X: br.X, Text: start.Add(time.Duration(i) * w.Step).UTC().Format("15:04")})
		}
	}
	for i, o := range chartOutcomes {
		ch.Legend = append(ch.Legend, legendItem{Name: o.Name, Color: o.Color, X: i * 120})
	}
	return ch
}
