package failure

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// handlerPrefix is the "module.handler: " that starts a handler failure's
// text, after the "gave up after N attempts: " of a last attempt.
var handlerPrefix = regexp.MustCompile(`^(?:gave up after \d+ attempts: )?(?:([a-z][a-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*): )?`)

// variable are the parts of an error text that differ between events of
// one cause, in the order they are replaced, each by a placeholder.
var variable = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"(?:[^"\\]|\\.)*"`), `"…"`},
	{regexp.MustCompile(`'(?:[^'\\]|\\.)*'`), `'…'`},
	{regexp.MustCompile("`[^`]*`"), "`…`"},
	{regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), "<uuid>"},
	// Provider ids: cus_NffrFeUfNV2Hib, evt_1MtHbE..., in_1Mt...
	{regexp.MustCompile(`\b[A-Za-z]{1,12}_[A-Za-z0-9]*[0-9][A-Za-z0-9_]*\b`), "<id>"},
	{regexp.MustCompile(`\b[A-Za-z]{1,12}_[A-Za-z0-9]{12,}\b`), "<id>"},
	{regexp.MustCompile(`\b0x[0-9a-fA-F]+\b`), "<n>"},
	{regexp.MustCompile(`\b[0-9a-fA-F]*[0-9][0-9a-fA-F]*\b`), "<n>"},
	{regexp.MustCompile(`[0-9]+`), "<n>"},
}

// maxErrorText bounds the normalised error a group is keyed and shown by.
const maxErrorText = 500

// Split reads a failed row's last error: the module.handler that failed
// (handler when the failure log named one, else the text's own prefix,
// "" when neither names one) and the error without that prefix, the
// "gave up after N attempts" of a last attempt, or a panic's frames (its
// first line only).
func Split(lastError, handler string) (string, string) {
	text, _, _ := strings.Cut(strings.TrimSpace(lastError), "\n")
	m := handlerPrefix.FindStringSubmatch(text)
	if handler == "" {
		handler = m[1]
	}
	return handler, strings.TrimSpace(text[len(m[0]):])
}

// Normalise replaces the variable parts of an error text (quoted values,
// uuids, provider ids such as cus_123, numbers and hex digests) by
// placeholders, so the failures of one cause read alike.
func Normalise(text string) string {
	for _, v := range variable {
		text = v.re.ReplaceAllString(text, v.with)
	}
	text = strings.Join(strings.Fields(text), " ")
	if len(text) > maxErrorText {
		text = strings.ToValidUTF8(text[:maxErrorText], "") + "…"
	}
	return text
}

// groupID is the stable id of a group: a hash of its key (source,
// handler and normalised error), so the same cause has the same id on
// every page, command and process, and across restarts.
func groupID(source, handler, normalised string) string {
	sum := sha256.Sum256([]byte(source + "\x00" + handler + "\x00" + normalised))
	return hex.EncodeToString(sum[:8])
}
