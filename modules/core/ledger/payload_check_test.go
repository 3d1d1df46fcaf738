package ledger_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestCheckPayloadAgreesWithJSONB: CheckPayload refuses exactly the JSON
// documents that PostgreSQL's jsonb refuses, so every stored payload reads
// back with payload::jsonb.
func TestCheckPayloadAgreesWithJSONB(t *testing.T) {
	t.Parallel()
	db := dbtest.Empty(t)
	docs := []string{
		`{"id":"evt_1","n":1}`,
		`{"s":"\u0000"}`, `{"s":"\\u0000"}`, `{"s":"\\\u0000"}`, `{"\u0000":1}`,
		`{"s":"\ud800"}`, `{"s":"\udc00"}`, `{"s":"\ud83d\ude00"}`, `{"s":"\ud83d\u0041"}`, `{"s":"\ud83d"}`,
		`{"s":"\u00e9\u20ac"}`, `{"s":"é"}`, "{\"s\":\"\xff\xfe\"}", "{\"s\":\"\xed\xa0\x80\"}",
		`[1e131071]`, `[1e131072]`, `[-1E+131071]`, `[0.0001e131075]`, `[0.0001e131076]`,
		`[1e-16383]`, `[1e-16384]`, `[0.5e-16382]`, `[0.5e-16383]`, `[0e-16384]`, `[0e999999]`,
		`[1e2147483647]`, `[0e99999999999999999999]`, `[1.5, -0, 0.0, 12345678901234567890]`,
		`[` + strings.Repeat("9", 131072) + `]`, `[` + strings.Repeat("9", 131073) + `]`,
		`[0.` + strings.Repeat("0", 16383) + `]`, `[0.` + strings.Repeat("0", 16384) + `]`,
		`[1.` + strings.Repeat("5", 16384) + `e1]`, `[1.` + strings.Repeat("5", 16385) + `e1]`,
	}
	for _, doc := range docs {
		var pgErr error
		var ok bool
		err := db.Pool.QueryRow(context.Background(), `SELECT $1::text::jsonb IS NOT NULL`, doc).Scan(&ok)
		if err != nil {
			pgErr = err
		}
		goErr := ledger.CheckPayload([]byte(doc))
		name := doc
		if len(name) > 60 {
			name = name[:60] + "..."
		}
		require.Equal(t, pgErr == nil, goErr == nil, "%q: PostgreSQL says %v, CheckPayload %v", name, pgErr, goErr)
		if goErr != nil {
			require.ErrorIs(t, goErr, ledger.ErrUnstorable)
			require.True(t, ledger.IsBadData(goErr))
		}
	}
}

// FuzzCheckPayloadFastPath: CheckPayload's fast path passes no body that
// reading every string and number refuses, JSON or not (a claim built
// without a provider's parse may hold anything), and refuses nothing that
// it passes (its doubts go to the full read).
func FuzzCheckPayloadFastPath(f *testing.F) {
	for _, seed := range []string{
		`{"id":"evt_1","n":1}`, `{"s":"\u0000"}`, `{"s":"\\u0000"}`, `{"s":"\\\u0000"}`, `{"s":"\ud83d\ude00"}`,
		`{"s":"\ud800"}`, `{"s":"\udc00x"}`, `{"s":"sku_1e999999"}`, `[1e131072]`, `[1E-16384]`, `[true,false,null]`,
		`{"s":"\\"}`, `{"s":"a\"b"}`, `{"s":"\u00e9"}`, "{\"s\":\"\xff\"}", `[-0e5]`, `[0.5]`,
	} {
		f.Add([]byte(seed))
	}
	files, err := filepath.Glob("../../../testdata/providers/*/*.json")
	require.NoError(f, err)
	require.NotEmpty(f, files)
	for _, name := range files {
		b, err := os.ReadFile(name)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, full := ledger.CheckPayload(body), ledger.CheckPayloadFully(body)
		require.Equal(t, full == nil, fast == nil, "fast path %v, full read %v", fast, full)
	})
}

// TestCheckPayloadFastPathOnBodiesThatAreNotJSON: a claim built without a
// provider's parse may hold a body that is not JSON; where the full read
// refuses one, so does CheckPayload.
func TestCheckPayloadFastPathOnBodiesThatAreNotJSON(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`[1.e999999]`, `{"n":1.E-99999}`, `[-1.e131072]`} {
		require.Error(t, ledger.CheckPayloadFully([]byte(body)), body)
		require.ErrorIs(t, ledger.CheckPayload([]byte(body)), ledger.ErrUnstorable, body)
	}
}

// TestUnstorablePayloadIsRefusedBeforeTheClaim: through either claim path,
// a payload jsonb refuses is a bad-data error and writes nothing.
func TestUnstorablePayloadIsRefusedBeforeTheClaim(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	b := newBatcher(t, h, 1)
	for i, claim := range []func(context.Context, ledger.Claim) (ledger.ClaimResult, error){h.Claimer.Claim, b.Claim} {
		c := claimOf(fmt.Sprintf("evt_nul%d", i), "invoice.paid")
		c.Payload = []byte(`{"id":"evt_nul","note":"\ud800"}`)
		res, err := claim(context.Background(), c)
		require.NotEqual(t, ledger.Claimed, res)
		require.ErrorIs(t, err, ledger.ErrUnstorable)
		require.True(t, ledger.IsBadData(err))
	}
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep'`))
}
