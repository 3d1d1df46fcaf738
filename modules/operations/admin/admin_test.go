package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/operations/admin"
)

const token = "admin-token"

// fakeLedger answers Find, Locate, Requeue and DiscardMany with the
// errors a test sets; the rest of admin.Ledger is not called.
type fakeLedger struct {
	admin.Ledger
	findErr, requeueErr, discardErr error
	discarded                       []string
	reasons                         map[ledger.EventKey]string
}

func (f *fakeLedger) Find(_ context.Context, ns, id string) (*ent.WebhookEvent, error) {
	if f.findErr != nil {
		return nil, f.findErr
	}
	if ns == "" {
		ns = "stripe"
	}
	if reason, ok := f.reasons[ledger.EventKey{Namespace: ns, EventID: id}]; ok {
		return &ent.WebhookEvent{Namespace: ns, EventID: id, Status: webhookevent.StatusDiscarded, DiscardReason: &reason, Payload: `{}`}, nil
	}
	return &ent.WebhookEvent{Namespace: ns, EventID: id, Status: webhookevent.StatusFailed, Payload: `{}`}, nil
}

// Locate is Find without the payload.
func (f *fakeLedger) Locate(ctx context.Context, ns, id string) (*ent.WebhookEvent, error) {
	row, err := f.Find(ctx, ns, id)
	if row != nil {
		row.Payload = ""
	}
	return row, err
}

func (f *fakeLedger) Requeue(context.Context, string, string, bool) (ledger.RequeueResult, error) {
	return ledger.RequeueRequeued, f.requeueErr
}

func (f *fakeLedger) DiscardMany(_ context.Context, keys []ledger.EventKey, reason string) ([]*ent.WebhookEvent, error) {
	if f.discardErr != nil {
		return nil, f.discardErr
	}
	if f.reasons == nil {
		f.reasons = map[ledger.EventKey]string{}
	}
	rows := make([]*ent.WebhookEvent, len(keys))
	for i, k := range keys {
		f.discarded = append(f.discarded, k.Namespace+"/"+k.EventID+": "+reason)
		f.reasons[k] = reason
		rows[i], _ = f.Locate(context.Background(), k.Namespace, k.EventID)
	}
	return rows, nil
}

func serve(t *testing.T, l admin.Ledger, method, path, contentType, body string, header http.Header) (int, map[string]any) {
	t.Helper()
	gin.SetMode(gin.TestMode)
	e := gin.New()
	admin.Routes(e, admin.Config{Token: token, Ledger: l})
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	e.ServeHTTP(w, req)
	var out map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &out)
	return w.Code, out
}

// TestEventActionsShareTheirErrors: requeue and discard resolve the event
// and answer its errors alike.
func TestEventActionsShareTheirErrors(t *testing.T) {
	t.Parallel()
	reason := `{"reason":"poison"}`
	for _, c := range []struct {
		name                            string
		findErr, requeueErr, discardErr error
		want                            int
		says                            string
	}{
		{name: "unknown", findErr: ledger.ErrNotFound, want: http.StatusNotFound, says: "not found"},
		{name: "ambiguous", findErr: fmt.Errorf("%w: pass a namespace (a, b)", ledger.ErrAmbiguous), want: http.StatusConflict, says: "pass a namespace"},
		{name: "being applied", requeueErr: ledger.ErrBeingApplied, discardErr: ledger.ErrBeingApplied, want: http.StatusConflict, says: "try again"},
		{name: "settled", requeueErr: ledger.ErrSettled, discardErr: ledger.ErrNotDiscardable, want: http.StatusConflict, says: "settled"},
		{name: "database", requeueErr: context.DeadlineExceeded, discardErr: context.DeadlineExceeded, want: http.StatusInternalServerError, says: "internal error"},
	} {
		l := &fakeLedger{findErr: c.findErr, requeueErr: c.requeueErr, discardErr: c.discardErr}
		for _, path := range []string{"/admin/events/evt_1/requeue", "/admin/events/evt_1/discard"} {
			code, out := serve(t, l, http.MethodPost, path, "application/json", reason, nil)
			require.Equal(t, c.want, code, "%s %s: %v", c.name, path, out)
			require.Contains(t, out["error"], c.says, "%s %s", c.name, path)
		}
		require.Empty(t, l.discarded)
	}
}

func TestDiscardReason(t *testing.T) {
	t.Parallel()
	l := &fakeLedger{}
	for _, body := range []string{"", "{}", `{"reason":""}`, `{"reason":" \n"}`, `{"reason":`, `["poison"]`} {
		code, out := serve(t, l, http.MethodPost, "/admin/events/evt_1/discard", "application/json", body, nil)
		require.Equal(t, http.StatusBadRequest, code, "%q: %v", body, out)
	}
	code, _ := serve(t, l, http.MethodPost, "/admin/events/evt_1/discard", "application/json",
		`{"reason":"`+strings.Repeat("x", 17<<10)+`"}`, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.Empty(t, l.discarded)

	code, out := serve(t, l, http.MethodPost, "/admin/events/evt_1/discard?namespace=acct_2", "", `{"reason":"poison"}`, nil)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, "discarded", out["status"])
	require.Equal(t, "poison", out["discard_reason"])
	require.Equal(t, "acct_2", out["namespace"])
	require.Equal(t, []string{"acct_2/evt_1: poison"}, l.discarded)

	// A browser's form, with its CSRF token, under basic auth.
	form := url.Values{"reason": {"from a form"}, admin.CSRFField: {admin.CSRFToken(token)}}.Encode()
	basic := http.Header{"Authorization": {"Basic " + basicAuth("ops", token)}}
	code, out = serve(t, l, http.MethodPost, "/admin/events/evt_2/discard", "application/x-www-form-urlencoded", form, basic)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, "from a form", out["discard_reason"])

	// Without that proof, basic auth is refused before anything changes.
	code, _ = serve(t, l, http.MethodPost, "/admin/events/evt_3/discard", "application/json", `{"reason":"forged"}`, basic)
	require.Equal(t, http.StatusForbidden, code)
	require.Len(t, l.discarded, 2)
}

func basicAuth(user, pass string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, pass)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}
