package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrUnstorable marks a delivery whose JSON PostgreSQL's jsonb refuses
// though JSON allows it. The ledger keeps the delivered bytes as text, so
// that a signature can be checked again, and every row must stay readable
// with payload::jsonb: such a delivery is refused before the claim (a 400,
// never a retry).
var ErrUnstorable = errors.New("payload cannot be read as jsonb")

// PostgreSQL's numeric limits, which jsonb numbers share: 131,072 decimal
// digits before the point (a base-10,000 weight up to 32,767), 16,383
// after it, and an exponent below INT_MAX/2.
const (
	numericMaxLeadExp = 4*32767 + 3
	numericMaxScale   = 16383
	numericMaxExp     = 1<<30 - 1
)

// CheckPayload refuses what jsonb refuses in a body that is otherwise JSON
// (its syntax was checked when the provider parsed it): invalid UTF-8,
// the escaped NUL character, an unpaired UTF-16 surrogate escape, and
// numbers outside PostgreSQL's numeric range.
func CheckPayload(body []byte) error {
	if plainlyStorable(body) {
		return nil
	}
	return checkPayload(body)
}

// plainlyStorable is CheckPayload's fast path, for a body that is JSON: it
// passes a body that it can tell at a glance holds nothing jsonb refuses,
// and leaves any doubt to checkPayload, which reads every string and
// number. In JSON a backslash is only ever inside a string, where it
// starts an escape, so the escapes are found by looking for backslashes
// alone; and a number outside numeric's range has an exponent (an e or E
// after a digit, or after a point in a body that is not JSON, which the
// full read takes as a number too; a string may hold either: a doubt),
// or more digits than numericMaxScale, so more bytes than a body shorter
// than that has.
func plainlyStorable(body []byte) bool {
	if len(body) > numericMaxScale || !utf8.Valid(body) {
		return false
	}
	for i := bytes.IndexByte(body, '\\'); i >= 0; {
		if i+1 >= len(body) {
			return false
		}
		next := i + 2
		if body[i+1] == 'u' {
			if r := hex4(body[i+2:]); r <= 0 || r >= 0xD800 && r < 0xE000 {
				return false
			}
			next = i + 6
		}
		if next >= len(body) {
			break
		}
		j := bytes.IndexByte(body[next:], '\\')
		if j < 0 {
			break
		}
		i = next + j
	}
	for _, e := range []byte{'e', 'E'} {
		for i := bytes.IndexByte(body, e); i >= 0; {
			if i > 0 && (isDigit(body[i-1]) || body[i-1] == '.') {
				return false
			}
			j := bytes.IndexByte(body[i+1:], e)
			if j < 0 {
				break
			}
			i += 1 + j
		}
	}
	return true
}

// checkPayload is CheckPayload reading every string and number.
func checkPayload(body []byte) error {
	if !utf8.Valid(body) {
		return unstorable("the body is not valid UTF-8")
	}
	for i := 0; i < len(body); i++ {
		for i < len(body) && !startsToken[body[i]] {
			i++
		}
		if i == len(body) {
			break
		}
		switch c := body[i]; {
		case c == '"':
			n, err := checkString(body[i+1:])
			if err != nil {
				return err
			}
			i += n
		case c == '-' || c >= '0' && c <= '9':
			n, err := checkNumber(body[i:])
			if err != nil {
				return err
			}
			i += n - 1
		}
	}
	return nil
}

// startsToken marks the bytes CheckPayload stops at (a string or a
// number begins), and inString those it skips inside a string: table
// lookups in the loops that run over every byte of the body.
var startsToken, inString = func() (start, str [256]bool) {
	for _, c := range []byte(`"-0123456789`) {
		start[c] = true
	}
	for c := range 256 {
		str[c] = c != '"' && c != '\\'
	}
	return start, str
}()

func unstorable(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUnstorable, fmt.Sprintf(format, a...))
}

// checkString checks a string's escapes up to its closing quote and
// returns how many bytes it took, the quote included.
func checkString(s []byte) (int, error) {
	for i := 0; i < len(s); i++ {
		for i < len(s) && inString[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		switch s[i] {
		case '"':
			return i + 1, nil
		case '\\':
			i++
			if i >= len(s) || s[i] != 'u' {
				continue
			}
			r := hex4(s[i+1:])
			i += 4
			switch {
			case r == 0:
				return 0, unstorable(`the body contains \u0000`)
			case r >= 0xD800 && r < 0xDC00:
				if i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					if low := hex4(s[i+3:]); low >= 0xDC00 && low < 0xE000 {
						i += 6
						continue
					}
				}
				return 0, unstorable(`the body contains an unpaired surrogate \u%04x`, r)
			case r >= 0xDC00 && r < 0xE000:
				return 0, unstorable(`the body contains an unpaired surrogate \u%04x`, r)
			}
		}
	}
	return len(s), nil
}

// hex4 reads four hex digits; -1 when they are not.
func hex4(s []byte) int {
	if len(s) < 4 {
		return -1
	}
	v := 0
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | int(c-'A'+10)
		default:
			return -1
		}
	}
	return v
}

// checkNumber checks a JSON number against PostgreSQL's numeric range and
// returns its length.
func checkNumber(s []byte) (int, error) {
	i := 0
	if s[i] == '-' {
		i++
	}
	// lead is the decimal exponent of the first nonzero digit.
	lead, nonzero := 0, false
	intStart := i
	for ; i < len(s) && isDigit(s[i]); i++ {
		if !nonzero && s[i] != '0' {
			nonzero, lead = true, 0
		}
		if nonzero {
			lead++
		}
	}
	lead-- // digits before the point minus one
	if i == intStart {
		return max(i, 1), nil
	}
	scale := 0
	if i < len(s) && s[i] == '.' {
		for i++; i < len(s) && isDigit(s[i]); i++ {
			scale++
			if !nonzero && s[i] != '0' {
				nonzero, lead = true, -scale
			}
		}
	}
	exp := 0
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		neg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			neg = s[i] == '-'
			i++
		}
		for ; i < len(s) && isDigit(s[i]); i++ {
			if exp <= numericMaxExp {
				exp = exp*10 + int(s[i]-'0')
			}
		}
		if exp > numericMaxExp {
			return 0, unstorable("a number's exponent is out of PostgreSQL's range")
		}
		if neg {
			exp = -exp
		}
	}
	if scale-exp > numericMaxScale || nonzero && lead+exp > numericMaxLeadExp {
		return 0, unstorable("a number is out of PostgreSQL's numeric range")
	}
	return i, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
