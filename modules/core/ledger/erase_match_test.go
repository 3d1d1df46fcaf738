package ledger_test

import (
	"bytes"
	"context"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestEraseMatchersAgree stores each body twice, in plaintext and sealed,
// and erases the subject cus_1: both copies of a body are erased or both
// kept, by one rule. A JSON body (after any JSON whitespace, a newline
// included) holds the subject as a whole string value or key; a form body
// as a whole key or value (decoded), a word of a value, or inside a JSON
// value. cus_12 is another id, never the subject: a JSON body holding only
// cus_12 after a newline was erased from plaintext and kept sealed.
func TestEraseMatchersAgree(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	bodies := map[string]struct {
		body  string
		holds bool
	}{
		"json_newline_other_id": {"\n{\"customer\":\"cus_12\"}", false},
		"json_newline_subject":  {"\r\n\t {\"customer\":\"cus_1\"}", true},
		"json_other_id":         {`{"customer":"cus_12"}`, false},
		"json_subject":          {`{"customer":"cus_1"}`, true},
		"json_key":              {`{"cus_1":true}`, true},
		"json_escaped":          {`{"customer":"\u0063us_1"}`, true},
		"json_quote_inside":     {`{"note":"a\"cus_1"}`, false},
		"json_in_text":          {`{"note":"refund cus_1 today"}`, false},
		"form_value":            {`user=cus_1&text=hi`, true},
		"form_other_id":         {`user=cus_12&text=hi`, false},
		"form_encoded":          {`user=%63us_1`, true},
		"form_word":             {`text=refund+cus_1+please`, true},
		"form_word_other_id":    {`text=refund+cus_12+please`, false},
		"form_json":             {`payload=%7B%22user%22%3A%22cus_1%22%7D`, true},
		"form_json_other_id":    {`payload=%7B%22user%22%3A%22cus_12%22%7D`, false},
		"text_other_id":         {"cus_12", false},
	}
	plain := ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{})
	sealed := ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{Sealer: sealerOf(t, bytes.Repeat([]byte{7}, 32))})
	var want []string
	for id, b := range bodies {
		for ns, store := range map[string]*ledger.Store{"plain": plain, "sealed": sealed} {
			_, err := store.Claim(ctx, ledger.Claim{Namespace: ns, EventID: id, Provider: "stripe", Source: ns, Type: "x", Payload: []byte(b.body)})
			require.NoError(t, err)
		}
		if b.holds {
			want = append(want, id)
		}
	}
	require.Equal(t, len(bodies), h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'sealed' AND payload LIKE 'sealed:%'`))
	_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET status = 'settled'`)
	require.NoError(t, err)

	for _, ns := range []string{"plain", "sealed"} {
		dry, err := sealed.Erase(ctx, "cus_1", ns, true)
		require.NoError(t, err)
		require.ElementsMatch(t, want, eraseIDs(dry.Rows), "%s: the rows a dry run finds", ns)
		done, err := sealed.Erase(ctx, "cus_1", ns, false)
		require.NoError(t, err)
		require.ElementsMatch(t, want, eraseIDs(done.Rows), "%s: the rows erased", ns)
	}
	erased := func(ns string) []string {
		rows, err := h.DB.SQL.Query(`SELECT event_id FROM webhook_event WHERE namespace = $1 AND erased_at IS NOT NULL`, ns)
		require.NoError(t, err)
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		sort.Strings(ids)
		return ids
	}
	sort.Strings(want)
	require.Equal(t, want, erased("plain"))
	require.Equal(t, want, erased("sealed"), "the sealed copies: the same rows")
	for id, b := range bodies {
		require.Equal(t, b.holds, ledger.Holds([]byte(b.body), "cus_1"), id)
	}
}
