package odata

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
)

// syntaxMessage is the service's message for a malformed filter (docs/protocol.md §5.1).
const syntaxMessage = "Bad Request - Error in query syntax."

// syntaxError is the error every parse failure returns: 400 InvalidInput, the service's
// message, and a Detail naming the byte offset and the problem.
func syntaxError(pos int, format string, args ...any) *azerr.Error {
	return azerr.Newf(azerr.InvalidInput, syntaxMessage).
		WithDetail(fmt.Sprintf("position %d: %s", pos, fmt.Sprintf(format, args...)))
}

type tokKind uint8

const (
	tEOF tokKind = iota
	tLParen
	tRParen
	tIdent   // property name or keyword; text holds it
	tLiteral // any literal but true/false (those are identifiers until the parser decides)
)

type token struct {
	kind tokKind
	pos  int
	text string       // tIdent: the identifier
	val  entity.Value // tLiteral
}

// describe renders a token for an error message.
func (t token) describe(src string) string {
	switch t.kind {
	case tEOF:
		return "end of filter"
	case tLParen:
		return "'('"
	case tRParen:
		return "')'"
	case tIdent:
		return strconv.Quote(t.text)
	}
	end := t.pos + 40
	if end > len(src) {
		end = len(src)
	}
	return "literal " + strconv.Quote(src[t.pos:end])
}

// lexer produces tokens on demand, so memory stays bounded by the parser's limits
// however long the input is.
type lexer struct {
	src string
	i   int
}

// scan returns the next token; at the end of input it keeps returning tEOF.
func (l *lexer) scan() (token, error) {
	src, i := l.src, l.i
	for i < len(src) && isSpace(src[i]) {
		i++
	}
	l.i = i
	if i == len(src) {
		return token{kind: tEOF, pos: i}, nil
	}
	c := src[i]
	switch {
	case c == '(':
		l.i++
		return token{kind: tLParen, pos: i}, nil
	case c == ')':
		l.i++
		return token{kind: tRParen, pos: i}, nil
	case c == '\'':
		s, next, err := lexQuoted(src, i)
		if err != nil {
			return token{}, err
		}
		l.i = next
		return token{kind: tLiteral, pos: i, val: entity.StringValue(s)}, nil
	case c == '-' || isDigit(c):
		v, next, err := lexNumber(src, i)
		if err != nil {
			return token{}, err
		}
		l.i = next
		return token{kind: tLiteral, pos: i, val: v}, nil
	}
	r, n := utf8.DecodeRuneInString(src[i:])
	if !isIdentStart(r) {
		if r == utf8.RuneError && n <= 1 {
			return token{}, syntaxError(i, "invalid UTF-8 byte 0x%02x", src[i])
		}
		return token{}, syntaxError(i, "unexpected character %q", r)
	}
	j := i + n
	for j < len(src) {
		r, n := utf8.DecodeRuneInString(src[j:])
		if !isIdentPart(r) {
			break
		}
		j += n
	}
	if j < len(src) && src[j] == '\'' {
		v, next, err := lexPrefixed(src, i, j)
		if err != nil {
			return token{}, err
		}
		l.i = next
		return token{kind: tLiteral, pos: i, val: v}, nil
	}
	l.i = j
	return token{kind: tIdent, pos: i, text: src[i:j]}, nil
}

// isSpace accepts what a query string can carry between tokens once decoded.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// isIdentStart and isIdentPart are the rules of entity.ValidatePropertyName.
func isIdentStart(r rune) bool {
	if r < utf8.RuneSelf {
		return r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')
	}
	return r != utf8.RuneError && unicode.IsLetter(r)
}

func isIdentPart(r rune) bool {
	if r < utf8.RuneSelf {
		return r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9')
	}
	return r != utf8.RuneError && (unicode.IsLetter(r) || unicode.IsDigit(r) ||
		unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Mc, r) || unicode.Is(unicode.Pc, r))
}

// isIdent reports whether s is a valid identifier.
func isIdent(s string) bool {
	for i, r := range s {
		if i == 0 && !isIdentStart(r) || i > 0 && !isIdentPart(r) {
			return false
		}
	}
	return s != ""
}

// lexQuoted reads the quoted text whose opening quote is src[i], where a doubled quote
// stands for one, and returns it and the offset after the closing quote.
func lexQuoted(src string, i int) (string, int, error) {
	start := i
	i++
	var b strings.Builder
	chunk := i
	for {
		j := strings.IndexByte(src[i:], '\'')
		if j < 0 {
			return "", 0, syntaxError(start, "unterminated quoted literal")
		}
		i += j
		if i+1 < len(src) && src[i+1] == '\'' {
			b.WriteString(src[chunk : i+1])
			i += 2
			chunk = i
			continue
		}
		if b.Len() == 0 {
			return src[chunk:i], i + 1, nil // the common case: no escapes, no copy
		}
		b.WriteString(src[chunk:i])
		return b.String(), i + 1, nil
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// lexNumber reads an Int32, Int64 or Double literal at src[i].
func lexNumber(src string, i int) (entity.Value, int, error) {
	start := i
	if src[i] == '-' {
		i++
	}
	if i == len(src) || !isDigit(src[i]) {
		return entity.Value{}, 0, syntaxError(start, "'-' must be followed by a digit")
	}
	for i < len(src) && isDigit(src[i]) {
		i++
	}
	float := false
	if i < len(src) && src[i] == '.' {
		i++
		if i == len(src) || !isDigit(src[i]) {
			return entity.Value{}, 0, syntaxError(start, "a digit must follow the decimal point in %q", src[start:i])
		}
		for i < len(src) && isDigit(src[i]) {
			i++
		}
		float = true
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		j := i + 1
		if j < len(src) && (src[j] == '+' || src[j] == '-') {
			j++
		}
		if j == len(src) || !isDigit(src[j]) {
			return entity.Value{}, 0, syntaxError(start, "malformed exponent in %q", src[start:j])
		}
		for j < len(src) && isDigit(src[j]) {
			j++
		}
		i = j
		float = true
	}
	text := src[start:i]
	kind := entity.Int32
	if float {
		kind = entity.Double
	}
	if i < len(src) {
		switch src[i] {
		case 'L', 'l':
			if float {
				return entity.Value{}, 0, syntaxError(start, "Unrecognized 'Edm.Int64' literal %q", src[start:i+1])
			}
			kind = entity.Int64
			i++
		case 'D', 'd':
			kind = entity.Double
			i++
		case 'M', 'm':
			return entity.Value{}, 0, syntaxError(start, "Edm.Decimal literals are not supported: %q", src[start:i+1])
		case 'F', 'f':
			return entity.Value{}, 0, syntaxError(start, "Edm.Single literals are not supported: %q", src[start:i+1])
		}
	}
	if i < len(src) {
		if r, _ := utf8.DecodeRuneInString(src[i:]); isIdentPart(r) || r == '.' || r == '\'' {
			return entity.Value{}, 0, syntaxError(start, "malformed number: %q is followed by %q", src[start:i], r)
		}
	}
	switch kind {
	case entity.Int32:
		n, err := strconv.ParseInt(text, 10, 32)
		if err != nil {
			return entity.Value{}, 0, syntaxError(start, "Unrecognized 'Edm.Int32' literal '%s' (write %sL for an Edm.Int64)", text, text)
		}
		return entity.Int32Value(int32(n)), i, nil
	case entity.Int64:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return entity.Value{}, 0, syntaxError(start, "Unrecognized 'Edm.Int64' literal '%sL'", text)
		}
		return entity.Int64Value(n), i, nil
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(f, 0) {
		return entity.Value{}, 0, syntaxError(start, "Unrecognized 'Edm.Double' literal '%s'", src[start:i])
	}
	return entity.DoubleValue(f), i, nil
}

// minLiteralTicks and maxLiteralTicks bound a DateTime literal to the years a .NET
// DateTime holds (0001–9999 in UTC), which is also what keeps String() re-parseable.
var (
	minLiteralTicks = entity.TimeToTicks(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC))
	maxLiteralTicks = entity.MaxDateTime
)

// lexPrefixed reads a prefixed literal: the identifier src[i:j] followed by a quoted
// body at src[j].
func lexPrefixed(src string, i, j int) (entity.Value, int, error) {
	prefix := src[i:j]
	body, next, err := lexQuoted(src, j)
	if err != nil {
		return entity.Value{}, 0, err
	}
	switch strings.ToLower(prefix) {
	case "datetime":
		// OData requires the time ("yyyy-mm-ddThh:mm[:ss[.fffffff]]"); checking for the T
		// here keeps a bare date an error whatever entity.ParseDateTime makes of it.
		ticks, err := entity.ParseDateTime(body)
		if errors.Is(err, entity.ErrFractionDigits) {
			return entity.Value{}, 0, syntaxError(i, "Unrecognized 'Edm.DateTime' literal %s: %v", src[i:next], entity.ErrFractionDigits)
		}
		if err != nil || strings.IndexByte(body, 'T') < 0 || ticks < minLiteralTicks || ticks > maxLiteralTicks {
			return entity.Value{}, 0, syntaxError(i, "Unrecognized 'Edm.DateTime' literal %s", src[i:next])
		}
		return entity.Value{Type: entity.DateTime, Int: ticks}, next, nil
	case "guid":
		g, err := entity.ParseGUID(body)
		if err != nil {
			return entity.Value{}, 0, syntaxError(i, "Unrecognized 'Edm.Guid' literal %s", src[i:next])
		}
		return entity.Value{Type: entity.GUID, Bytes: g}, next, nil
	case "x", "binary":
		b, err := hex.DecodeString(body)
		if err != nil {
			return entity.Value{}, 0, syntaxError(i, "Unrecognized 'Edm.Binary' literal %s (an even number of hex digits)", src[i:next])
		}
		return entity.BinaryValue(b), next, nil
	}
	return entity.Value{}, 0, syntaxError(i, "unsupported literal type %q", prefix)
}
