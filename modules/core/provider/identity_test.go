package provider

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHashFieldsDoNotCollide(t *testing.T) {
	t.Parallel()
	f := &IDFallback{HashFields: []string{"team_id", "event.seq"}}
	id := func(body string) string {
		v, err := f.ID(nil, []byte(body))
		require.NoError(t, err)
		return v
	}
	require.NotEqual(t, id(`{"team_id":"T","event":{"seq":9007199254740993}}`), id(`{"team_id":"T","event":{"seq":9007199254740992}}`),
		"integers above 2^53 stay exact")
	require.NotEqual(t, id(`{"team_id":"T","event":{"seq":null}}`), id(`{"team_id":"T","event":{}}`), "null is not absent")
	require.Equal(t, id(`{"team_id":"T","event":{"seq":1}}`), id(`{"event":{"seq":1},"team_id":"T"}`), "key order does not matter")
	v, err := (&IDFallback{JSONPath: "event.seq"}).ID(nil, []byte(`{"event":{"seq":9007199254740993}}`))
	require.NoError(t, err)
	require.Equal(t, "9007199254740993", v)
}

func TestIdentityBounds(t *testing.T) {
	t.Parallel()
	body := func(id, typ string) []byte {
		return []byte(`{"id":"` + id + `","type":"` + typ + `","created":1700000000}`)
	}
	_, err := Stripe.Parse(nil, body(strings.Repeat("a", 255), "x"), nil)
	require.NoError(t, err, "255 bytes is the limit")
	for name, b := range map[string][]byte{
		"long id":        body(strings.Repeat("a", 256), "x"),
		"long type":      body("evt", strings.Repeat("t", 256)),
		"control in id":  body(`evt\n1`, "x"),
		"escaped bell":   body(`evt\u0007`, "x"),
		"bidi override":  body("evt_\u202egnp.exe", "x"),
		"zero width":     body("evt_1\u200b", "x"),
		"bidi in type":   body("evt_2", "invoice\u2066.paid"),
		"case variant":   []byte(`{"Id":"evt","type":"x"}`),
		"duplicate type": []byte(`{"id":"evt","type":"x","type":"y"}`),
	} {
		_, err := Stripe.Parse(nil, b, nil)
		require.ErrorIs(t, err, ErrPayload, name)
	}
	h := http.Header{"X-Github-Delivery": {strings.Repeat("d", 4000)}, "X-Github-Event": {"push"}}
	_, err = GitHub.Parse(h, []byte(`{}`), nil)
	require.ErrorIs(t, err, ErrPayload)
}

func TestOccurredAtBound(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	ev, err := Stripe.Parse(nil, []byte(`{"id":"evt","type":"x","created":9223372036854775807}`), nil)
	require.NoError(t, err)
	require.ErrorIs(t, CheckOccurredAt(ev.OccurredAt, now), ErrPayload, "the largest int64 stays in the future")
	require.ErrorIs(t, CheckOccurredAt(now.Add(25*time.Hour), now), ErrPayload)
	require.NoError(t, CheckOccurredAt(now.Add(23*time.Hour), now))
	require.NoError(t, CheckOccurredAt(time.Time{}, now))
}
