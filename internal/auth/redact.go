package auth

import (
	"encoding/base64"
	"slices"
	"strings"
)

// Redacted replaces a credential in text that is logged.
const Redacted = "REDACTED"

// minRedactedKey is the shortest account key text (unpadded base64) a Redactor looks for
// by value: a shorter one would match ordinary names. Keys that short (under 12 bytes) are
// still redacted where they are assigned (AccountKey=…).
const minRedactedKey = 16

// maxDecodeRounds bounds how many layers of percent-encoding a Redactor peels off
// (%253F is two layers; a client that encodes a URL three times over is already odd).
const maxDecodeRounds = 4

// secretNames are the assignments whose value is a credential: a SAS signature (sig=),
// and an account key as connection strings carry it (AccountKey=). Matched without regard
// to case, anywhere in the text: redacting a harmless value that happens to follow such a
// name costs an operator little; logging a signature costs the account.
var secretNames = [...]string{"sig", "accountkey"}

// A Redactor removes credentials from the client-supplied strings the server logs (the
// account and table it addressed, the keys, the client request id, a path): a SAS
// signature or an account key that a client put where the server did not expect it — a
// percent-encoded '?' that turned a SAS into part of the path, a connection string pasted
// into a header — must not reach a log, where anyone who reads the log could use it.
//
// It looks through every layer of percent-encoding: a value is decoded (at most
// maxDecodeRounds times, leniently: a '%' not followed by two hex digits stays as it is)
// and searched for sig=… and AccountKey=… (any case) and for the text of any of the
// server's account keys. If it holds none, it is returned unchanged; otherwise its
// decoded form is returned with each such value replaced by Redacted (every occurrence
// of it, so that a signature repeated elsewhere in the value goes too). A value ends at
// '&', ';', ',', a quote, '<', '>' or a line break, none of which base64 uses.
//
// String is on the request path: a value that holds neither '=' nor '%' and is shorter
// than the shortest key, as nearly every name and id is, costs two byte scans and no
// allocation. A Redactor is immutable and safe for concurrent use; the zero value (no
// keys) redacts assignments only.
type Redactor struct {
	keys   []string // every account key's unpadded base64 text
	minKey int      // the shortest of them (0 without keys)
}

// NewRedactor returns a Redactor that also looks for the keys of accounts.
func NewRedactor(accounts []Account) *Redactor {
	r := &Redactor{}
	for _, a := range accounts {
		for _, k := range a.Keys {
			// Unpadded: the padded form contains it, and so does a key written without
			// its '=' padding.
			for _, s := range keyForms(base64.RawStdEncoding.EncodeToString(k)) {
				if len(s) < minRedactedKey || slices.Contains(r.keys, s) {
					continue
				}
				r.keys = append(r.keys, s)
				if r.minKey == 0 || len(s) < r.minKey {
					r.minKey = len(s)
				}
			}
		}
	}
	return r
}

// keyForms returns a key's text and what a request path makes of it: a path's leading
// '/' and repeated '/' are dropped or merged when it is split into its segments, so a key
// sent as a (percent-encoded) table name was logged without its first '/' (a key that
// began with '/', 1 in 64) and escaped redaction.
func keyForms(s string) []string {
	merged := s
	for strings.Contains(merged, "//") {
		merged = strings.ReplaceAll(merged, "//", "/")
	}
	return []string{s, strings.TrimLeft(s, "/"), merged, strings.TrimLeft(merged, "/")}
}

// String returns s with every credential in it redacted (see Redactor).
func (r *Redactor) String(s string) string { return r.StringWith(s, "") }

// StringWith is String that also redacts extra wherever it occurs, decoded or not: a
// secret the caller knows besides the accounts' keys, such as the signature of the SAS the
// request itself carried, which a client may also have put in a header. An extra shorter
// than 16 characters is ignored.
func (r *Redactor) StringWith(s, extra string) string {
	if len(extra) < minRedactedKey {
		extra = ""
	}
	shortest := 0
	if r != nil {
		shortest = r.minKey
	}
	if extra != "" && (shortest == 0 || len(extra) < shortest) {
		shortest = len(extra)
	}
	if shortest != 0 && len(s) >= shortest {
		return r.redact(s, extra)
	}
	if len(s) > 16 {
		if strings.IndexByte(s, '=') >= 0 || strings.IndexByte(s, '%') >= 0 {
			return r.redact(s, extra)
		}
		return s
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '=' || c == '%' {
			return r.redact(s, extra)
		}
	}
	return s
}

// redact is String's slow path.
func (r *Redactor) redact(s, extra string) string {
	d := decodeAll(s)
	type span struct{ start, end int }
	var spans []span
	var global []string // values redacted wherever they occur
	for i := 0; i < len(d); i++ {
		if d[i] != '=' {
			continue
		}
		for _, name := range secretNames {
			if i >= len(name) && strings.EqualFold(d[i-len(name):i], name) {
				end := i + 1
				for end < len(d) && !endsValue(d[end]) {
					end++
				}
				if end > i+1 {
					spans = append(spans, span{i + 1, end})
					if end-i-1 >= minRedactedKey {
						// Long enough to be told from ordinary text: a repeat of it
						// elsewhere in the value is the same secret.
						global = append(global, d[i+1:end])
					}
				}
				i = end - 1 // an '=' inside the value is part of it
				break
			}
		}
	}
	if r != nil {
		for _, k := range r.keys {
			if strings.Contains(d, k) {
				global = append(global, k)
			}
		}
	}
	if extra != "" && strings.Contains(d, extra) {
		global = append(global, extra)
	}
	if len(spans) == 0 && len(global) == 0 {
		return s
	}
	if len(spans) > 0 {
		var b strings.Builder
		b.Grow(len(d))
		at := 0
		for _, sp := range spans { // in order and disjoint
			b.WriteString(d[at:sp.start])
			b.WriteString(Redacted)
			at = sp.end
		}
		b.WriteString(d[at:])
		d = b.String()
	}
	// Longest first, so that a key inside a longer value goes with that value.
	slices.SortFunc(global, func(a, b string) int { return len(b) - len(a) })
	for _, v := range global {
		d = strings.ReplaceAll(d, v, Redacted)
	}
	return d
}

// endsValue reports whether c ends an assigned value.
func endsValue(c byte) bool {
	switch c {
	case '&', ';', ',', '"', '\'', '<', '>', '\r', '\n':
		return true
	}
	return false
}

// decodeAll percent-decodes s until nothing changes, at most maxDecodeRounds times.
func decodeAll(s string) string {
	for range maxDecodeRounds {
		d, changed := percentDecode(s)
		if !changed {
			break
		}
		s = d
	}
	return s
}

// percentDecode decodes every %XX of s (hex digits in either case) and leaves anything
// else, including a '%' not followed by two hex digits, as it is. '+' stays '+'.
func percentDecode(s string) (string, bool) {
	i := strings.IndexByte(s, '%')
	if i < 0 {
		return s, false
	}
	var b []byte
	changed := false
	for ; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			if b == nil {
				b = make([]byte, 0, len(s))
				b = append(b, s[:i]...)
			}
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			changed = true
			continue
		}
		if b != nil {
			b = append(b, s[i])
		}
	}
	if !changed {
		return s, false
	}
	return string(b), true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
