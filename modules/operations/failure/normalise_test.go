package failure

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNormaliseGroupsOneCause: the failures of one cause with different
// ids, numbers and quoted values read alike; other causes, handlers or
// sources do not.
func TestNormaliseGroupsOneCause(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ lastError, handler, wantHandler, want string }{
		{`subscription.Flush: ERROR: new row for relation "subscription" violates check constraint "no_broken_plan" (SQLSTATE 23514)`, "",
			"subscription.Flush", `ERROR: new row for relation "…" violates check constraint "…" (SQLSTATE <n>)`},
		{`gave up after 84 attempts: payment.stripeChargeRefunded: customer cus_NffrFeUfNV2Hib has no payment pi_3MtwBwLkdIwHu7ix28a3tqPa`, "",
			"payment.stripeChargeRefunded", `customer <id> has no payment <id>`},
		{"usage.Flush: panic: runtime error: index out of range [3] with length 3\nusage.(*Module).add\n\t/src/usage.go:42", "usage.Flush",
			"usage.Flush", `panic: runtime error: index out of range [<n>] with length <n>`},
		{`River cancelled the apply job 4711 (River UI Cancel)`, "", "", `River cancelled the apply job <n> (River UI Cancel)`},
		{`github.push: delivery 0b1e2f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5b: ref 'refs/heads/main' at 9fceb02d0ae598e95dc970b74767f19372d61af8`, "",
			"github.push", `delivery <uuid>: ref '…' at <n>`},
	} {
		handler, text := Split(c.lastError, c.handler)
		require.Equal(t, c.wantHandler, handler, c.lastError)
		require.Equal(t, c.want, Normalise(text), c.lastError)
	}
	a := groupID("stripe", "payment.x", Normalise("customer cus_1 not found"))
	require.Equal(t, a, groupID("stripe", "payment.x", Normalise("customer cus_2 not found")), "ids normalised")
	require.NotEqual(t, a, groupID("stripe-eu", "payment.x", Normalise("customer cus_1 not found")), "another source")
	require.NotEqual(t, a, groupID("stripe", "payment.y", Normalise("customer cus_1 not found")), "another handler")
	require.NotEqual(t, a, groupID("stripe", "payment.x", Normalise("customer cus_1 deleted")), "another error")
	require.Len(t, a, 16)
}

// searched is Normalise as the expressions searching the whole text
// define it, each in turn: Normalise must give what they give.
func searched(text string) string {
	for _, v := range []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(`"(?:[^"\\]|\\.)*"`), `"…"`},
		{regexp.MustCompile(`'(?:[^'\\]|\\.)*'`), `'…'`},
		{regexp.MustCompile("`[^`]*`"), "`…`"},
		{regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), "<uuid>"},
		{regexp.MustCompile(`\b[A-Za-z]{1,12}_[A-Za-z0-9]*[0-9][A-Za-z0-9_]*\b`), "<id>"},
		{regexp.MustCompile(`\b[A-Za-z]{1,12}_[A-Za-z0-9]{12,}\b`), "<id>"},
		{regexp.MustCompile(`\b0x[0-9a-fA-F]+\b`), "<n>"},
		{regexp.MustCompile(`\b[0-9a-fA-F]*[0-9][0-9a-fA-F]*\b`), "<n>"},
		{regexp.MustCompile(`[0-9]+`), "<n>"},
	} {
		text = v.re.ReplaceAllString(text, v.with)
	}
	text = strings.Join(strings.Fields(text), " ")
	if len(text) > maxErrorText {
		text = strings.ToValidUTF8(text[:maxErrorText], "") + "…"
	}
	return text
}

// TestNormaliseWordByWord: Normalise, which matches the id and number
// rules against each word, gives what searching the whole text for each
// rule gives, on errors made of ids, uuids, numbers, hex, quoted values,
// words with underscores and digits, and non-ASCII text.
func TestNormaliseWordByWord(t *testing.T) {
	t.Parallel()
	parts := []string{
		"cus_NffrFeUfNV2Hib", "evt_1MtHbE", "in_1Mt", "sub_abcdefghijklmn", "sub_abcdefghijk", "a_b", "my_table_2", "abcdefghijklm_x1",
		"ABCDEFGHIJKLMN_1", "x_", "_x1", "pi_3MtwBwLkdIwHu7ix28a3tqPa", "0b1e2f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "0B1E2F6A-1C2D-4E5F-8A9B-0C1D2E3F4A5B",
		"0b1e2f6a-1c2d-4e5f-8a9b-0c1d2e3f4a5bc", "0x1F", "0xzz", "0x", "9fceb02d0ae598e95dc970b74767f19372d61af8", "deadbeef", "dead1", "v2", "404th",
		"12", "3.14", "-7", "1e10", `"quoted 12"`, `"esc \" 3"`, `'single_1'`, "`tick 9`", "SQLSTATE", "(", ")", ":", "[3]", "é", "日本_1", "ü12",
		"ERROR", "payment", "customer", " ", " ", "\t", "-", "_", "__", "a1_b2", "Z_0", "abc_123_def", "ünï_123", "x", "\"", "'",
		"a_bcdefghijklm", "a_bcdefghijkl", "abcdefghijkl_bcdefghijklm", "abcdefghijklm_bcdefghijklm", "ab_cd_1", "ab_1_cd", "ab__1", "0x_1", "1_ab", "Ab_0",
	}
	rnd := rand.New(rand.NewPCG(50, 1))
	for range 20000 {
		var b strings.Builder
		for range 1 + rnd.IntN(8) {
			b.WriteString(parts[rnd.IntN(len(parts))])
			if rnd.IntN(3) > 0 {
				b.WriteString([]string{" ", " ", ": ", ",", "/", "=", ""}[rnd.IntN(7)])
			}
		}
		text := b.String()
		require.Equal(t, searched(text), Normalise(text), "%q", text)
	}
}

// BenchmarkNormalise is one failed row's error as a group reads it: a
// Failed page reads every failed event's (a few microseconds each).
func BenchmarkNormalise(b *testing.B) {
	const lastError = `payment.stripeInvoicePaid: merge payment pi_3MtwBwLkdIwHu7ix28a3tqPa of customer cus_NffrFeUfNV2Hib (event "evt_1MtHbE"): ERROR: canceling statement due to statement timeout (SQLSTATE 57014)`
	for b.Loop() {
		_, text := Split(lastError, "")
		Normalise(text)
	}
}
