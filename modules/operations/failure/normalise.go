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

// spans are the parts of an error text that differ between events of one
// cause and may hold more than one word, in the order they are replaced,
// each by a placeholder. A match holds need at least times times, so a
// text with fewer skips the expression.
var spans = []struct {
	re    *regexp.Regexp
	need  string
	times int
	with  string
}{
	{regexp.MustCompile(`"(?:[^"\\]|\\.)*"`), `"`, 2, `"…"`},
	{regexp.MustCompile(`'(?:[^'\\]|\\.)*'`), `'`, 2, `'…'`},
	{regexp.MustCompile("`[^`]*`"), "`", 2, "`…`"},
	{regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), "-", 4, "<uuid>"},
}

// digits are the numbers left inside words (v2, 404th): each run of
// digits.
var digits = regexp.MustCompile(`[0-9]+`)

// isWordByte reports whether b is a word character as \b sees one.
func isWordByte(b byte) bool {
	return b == '_' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}

// replaceWords replaces each word of text as replaceWord does.
func replaceWords(text string) string {
	var b strings.Builder
	b.Grow(len(text))
	for i := 0; i < len(text); {
		if !isWordByte(text[i]) {
			b.WriteByte(text[i])
			i++
			continue
		}
		j := i
		for j < len(text) && isWordByte(text[j]) {
			j++
		}
		b.WriteString(replaceWord(text[i:j]))
		i = j
	}
	return b.String()
}

// replaceWord is the placeholder of a whole word (a run of ASCII
// letters, digits and _, as \b bounds them) that is a variable part, the
// first of these rules that matches it:
//
//	<id>  a provider id: 1 to 12 letters, _, then a digit before any
//	      further _ (cus_1Nff..., evt_1MtHbE, my_table_2), or 12 or more
//	      letters and digits (sub_NffrFeUfNVHibx)
//	<n>   0x and hex digits; hex digits with a decimal digit among them
//
// and otherwise w with each run of digits replaced by <n>. The rules are
// matched by hand, rather than by searching the text for each as an
// expression, because a Failed page reads every failed event's error and
// the searches cost tens of microseconds an error.
func replaceWord(w string) string {
	digit := strings.ContainsAny(w, "0123456789")
	if prefix, rest, ok := strings.Cut(w, "_"); ok && len(prefix) >= 1 && len(prefix) <= 12 && all(prefix, isLetter) {
		head, _, under := strings.Cut(rest, "_")
		if strings.ContainsAny(head, "0123456789") || !under && len(rest) >= 12 && all(rest, isAlnum) {
			return "<id>"
		}
	}
	if !digit {
		return w
	}
	if hex, ok := strings.CutPrefix(w, "0x"); ok && hex != "" && all(hex, isHex) {
		return "<n>"
	}
	if all(w, isHex) {
		return "<n>"
	}
	return digits.ReplaceAllString(w, "<n>")
}

func isLetter(b byte) bool { return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' }
func isAlnum(b byte) bool  { return isLetter(b) || '0' <= b && b <= '9' }
func isHex(b byte) bool    { return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F' }

// all reports whether every byte of s is one f accepts.
func all(s string, f func(byte) bool) bool {
	for i := range len(s) {
		if !f(s[i]) {
			return false
		}
	}
	return true
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
	for _, v := range spans {
		if strings.Count(text, v.need) >= v.times {
			text = v.re.ReplaceAllString(text, v.with)
		}
	}
	text = replaceWords(text)
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
