package console_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/operations/console"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// overviewAt serves the console over db with its clock at now and returns
// the overview's sources table row of source.
func overviewAt(t *testing.T, db *dbtest.DB, now time.Time, source string) string {
	t.Helper()
	_, row := overviewPage(t, db, now, source)
	return row
}

// overviewPage is the overview page and its row of source.
func overviewPage(t *testing.T, db *dbtest.DB, now time.Time, source string) (page, row string) {
	t.Helper()
	gin.SetMode(gin.TestMode)
	r := gin.New()
	console.Routes(r, console.Config{
		Auth: func(c *gin.Context) { c.Next() }, Ledger: ledger.NewStore(db.SQL, nil, ledger.StoreOptions{}), DB: db.SQL,
		Sources: []console.Source{{Name: source, Provider: "stripe", Fingerprints: []string{"fp_0"}}},
		NowFunc: func() time.Time { return now },
	})
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/console/", nil))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	page = w.Body.String()
	row = regexp.MustCompile(`(?s)<tr>\s*<td><a href="/console/events\?source=` + source + `">.*?</tr>`).FindString(page)
	require.NotEmpty(t, row, "no row for %s in:\n%s", source, page)
	return page, row
}

// TestLastDeliveryCountsFromItsTime: a delivery claimed 4 s before the
// page is "4s ago", however far into its minute it came; what only the
// per-minute counts know (a signature failure, a secret's last match, a
// duplicate) is given as the bound those counts allow, never as a time
// it did not happen at.
func TestLastDeliveryCountsFromItsTime(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	minute := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	claimed := minute.Add(57 * time.Second)
	now := claimed.Add(4 * time.Second)
	_, err := db.SQL.Exec(`
		INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, received_at)
		VALUES ('stripe', 'evt_last_1', 'stripe', 'stripe', 'invoice.paid', '{}', 'claimed', $1)`, claimed)
	require.NoError(t, err)
	_, err = db.SQL.Exec(`
		INSERT INTO delivery_stat (minute, source, outcome, count) VALUES
			($1, 'stripe', 'claimed', 1), ($1, 'stripe', 'invalid_signature', 2), ($1, 'stripe', 'secret:0:fp_0', 1)`, minute)
	require.NoError(t, err)

	row := overviewAt(t, db, now, "stripe")
	require.Contains(t, row, "<td>4s ago</td>", "the last delivery, from its claim's time")
	require.Contains(t, row, "<td>under 2m ago</td>", "the last signature failure, known to its minute")
	require.Contains(t, row, "#0 <code>fp_0</code>: 1, last under 2m ago", "the secret's last match, known to its minute")
}

// TestTooLargeIsCounted: deliveries refused 413 (over MAX_BODY_BYTES) show
// in the overview's totals and in their source's row, where a relay that
// dead-letters them would otherwise leave no trace on the console.
func TestTooLargeIsCounted(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	now := time.Now().UTC()
	minute := now.Truncate(time.Minute).Add(-5 * time.Minute)
	_, err := db.SQL.Exec(`
		INSERT INTO delivery_stat (minute, source, outcome, count) VALUES
			($1, 'relayed', 'too_large', 3), ($1, 'relayed', 'claimed', 7), ($1, 'relayed', 'forbidden', 1)`, minute)
	require.NoError(t, err)

	page, row := overviewPage(t, db, now, "relayed")
	require.Regexp(t, `<span>too large \(413\)</span><b id="total-too-large">3</b>`, page)
	cells := regexp.MustCompile(`(?s)<td>(.*?)</td>`).FindAllStringSubmatch(row, -1)
	require.Len(t, cells, 10, row)
	require.Equal(t, "7", cells[1][1], "claimed")
	require.Equal(t, "1", cells[7][1], "refused by allow_ips")
	require.Equal(t, "3", cells[8][1], "refused as too large")
}
