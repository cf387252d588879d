package table

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Session tokens (x-ms-session-token, docs/compatibility.md "Session tokens"). A token is opaque to clients,
// but its text form is ours: "1:<engine>:<position>" — format version 1, the engine's name
// (storage.Engine.Name) and the commit position in decimal. Positions grow with every
// commit, so of two tokens from one store the one with the larger position covers the
// other; a replica router only compares positions.

// tokenPrefix is the format version; a later format changes it.
const tokenPrefix = "1:"

// FormatToken is the session token of position p on the named engine.
// It is built in one allocation: every write and read answers one.
func FormatToken(engine string, p storage.Position) string {
	var b [64]byte
	t := append(b[:0], tokenPrefix...)
	t = append(t, engine...)
	t = append(t, ':')
	return string(strconv.AppendUint(t, uint64(p), 10))
}

// ParseToken reads a session token header value for the named engine: one token, or a
// comma-separated list of them, of which the newest (the largest position) counts. As in
// any HTTP list (RFC 9110 §5.6.1), spaces around elements and empty elements are ignored,
// so a value with no token at all ("", " , ") is no token: position 0, which every state
// of the engine covers. A value holding anything else — a token of another format, or
// of another engine (whose positions mean nothing here), or a position that is not a
// decimal uint64 — is 400 InvalidHeaderValue naming the header.
func ParseToken(engine, header, value string) (storage.Position, error) {
	var newest storage.Position
	for tok := range strings.SplitSeq(value, ",") {
		tok = strings.Trim(tok, " \t")
		if tok == "" {
			continue
		}
		rest, ok := strings.CutPrefix(tok, tokenPrefix)
		if !ok {
			return 0, badToken(header, value, tok, "is not a session token this server issued")
		}
		name, pos, ok := strings.Cut(rest, ":")
		if !ok || !engineName(name) {
			return 0, badToken(header, value, tok, "is not a session token this server issued")
		}
		if name != engine {
			return 0, badToken(header, value, tok, "was issued by a server on the "+name+" engine, and this one runs on "+engine)
		}
		p, ok := decimal(pos)
		if !ok {
			return 0, badToken(header, value, tok, "does not end in a position (a decimal number)")
		}
		newest = max(newest, storage.Position(p))
	}
	return newest, nil
}

// engineName reports whether s has the shape of an engine name: lower-case letters and
// digits.
func engineName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// decimal parses a uint64 written in ASCII digits only (no sign, no spaces, no '_').
func decimal(s string) (uint64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	p, err := strconv.ParseUint(s, 10, 64)
	return p, err == nil
}

// maxQuoted is how much of a refused value an error message quotes.
const maxQuoted = 100

// badToken is the 400 for a refused token: the message names the header and says what is
// wrong with which token; HeaderName and HeaderValue follow as the service reports any
// bad header (azerr.InvalidHeader).
func badToken(header, value, tok, why string) error {
	e := azerr.InvalidHeader(header, quote(value))
	e.Message = "The value of the " + header + " header is not valid: '" + quote(tok) + "' " + why + "."
	return e
}

// quote shortens s to maxQuoted bytes, on a rune boundary, marking the cut.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Token is the session token of position p on the Service's engine, as writes answer it.
func (s *Service) Token(p storage.Position) string { return FormatToken(s.engine, p) }

// ParseToken reads a session token header value sent to the Service (see ParseToken).
func (s *Service) ParseToken(header, value string) (storage.Position, error) {
	return ParseToken(s.engine, header, value)
}
