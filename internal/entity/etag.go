package entity

import (
	"errors"
	"strings"
)

// ETag renders a version as the service's weak ETag: W/"datetime'<Timestamp>'" with the
// colons of the timestamp percent-encoded (W/"datetime'2021-04-06T21%3A03%3A31.9231271Z'").
func ETag(version int64) string {
	var b [64]byte // the tag is 40 bytes for any year up to 9999
	return string(AppendETag(b[:0], version))
}

// AppendETag appends ETag(version) to dst.
func AppendETag(dst []byte, version int64) []byte {
	dst = append(dst, `W/"datetime'`...)
	var buf [32]byte
	ts := AppendTicks(buf[:0], version)
	if version >= MinDateTime && version <= MaxDateTime { // yyyy-mm-ddThh:mm:ss.fffffffZ
		dst = append(dst, ts[:13]...)
		dst = append(dst, "%3A"...)
		dst = append(dst, ts[14:16]...)
		dst = append(dst, "%3A"...)
		dst = append(dst, ts[17:]...)
		return append(dst, `'"`...)
	}
	for _, c := range ts {
		if c == ':' {
			dst = append(dst, "%3A"...)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, `'"`...)
}

// ErrBadETag reports an If-Match value that is not one weak entity-tag: not an entity-tag
// at all, a list of them, or a strong one (the service answers 400 InvalidInput "The etag
// value '…' … is not valid. Please make sure only one etag value is specified and is
// valid."; docs/compatibility.md "If-Match").
var ErrBadETag = errors.New("entity: malformed etag")

// ParseETag interprets one entity-tag from If-Match and returns the version it names.
//
// The service hands out weak ETags only, and accepts nothing else in If-Match: a value that
// is not one weak entity-tag — a strong tag ("wrong" in quotes, the server's own ETag
// without its W/), a bare token, a list — is malformed (ErrBadETag), 400 InvalidInput, as
// Microsoft documents ("Table service error codes") and as its storage emulator and
// Azurite answer (Azurite: a weak ETag "is required", "for parity with Azure and the
// legacy emulator"). A well-formed weak tag is a precondition, which fails (412) unless it
// names the entity's version. The syntax is RFC 9110's weak entity-tag as .NET's
// EntityTagHeaderValue (the service's stack) reads it: optional whitespace around, the
// weak prefix "W/" or "w/" ("the RFC defines 'W/' as prefix, but we'll be flexible and
// also accept lower-case 'w'"), optional whitespace after it, then one quoted string, in
// which a backslash escapes the next character.
//
// A weak tag names a version (ok) only if its opaque part is exactly the service's
// datetime'<Timestamp>' with each ':' of the timestamp written as ':', "%3A" or "%3a"
// (clients sometimes decode it, and percent-encoding is case-insensitive). Otherwise
// (ok == false, err == nil) it can never match: a foreign tag, or a timestamp not in the
// canonical 7-digit form the server writes (ETags are opaque strings a client echoes, not
// dates it may reformat).
func ParseETag(s string) (version int64, ok bool, err error) {
	s = trimOWS(s)
	weak := false
	if len(s) >= 2 && (s[0] == 'W' || s[0] == 'w') && s[1] == '/' {
		weak = true
		s = trimOWS(s[2:])
	}
	if len(s) < 2 || s[0] != '"' {
		return 0, false, ErrBadETag
	}
	end := -1
	for i := 1; i < len(s); i++ {
		if s[i] == '\\' {
			i++ // quoted-pair
			continue
		}
		if s[i] == '"' {
			end = i
			break
		}
	}
	if end < 0 || trimOWS(s[end+1:]) != "" {
		return 0, false, ErrBadETag // unterminated, or something after it (a list)
	}
	if !weak {
		return 0, false, ErrBadETag
	}
	inner := s[1:end]
	ts, found := strings.CutPrefix(inner, "datetime'")
	if !found || !strings.HasSuffix(ts, "'") {
		return 0, false, nil
	}
	ts = ts[:len(ts)-1]
	if strings.Contains(ts, "%") {
		ts = strings.ReplaceAll(strings.ReplaceAll(ts, "%3A", ":"), "%3a", ":")
	}
	v, perr := ParseDateTime(ts)
	if perr != nil {
		return 0, false, nil
	}
	var buf [32]byte
	if string(AppendTicks(buf[:0], v)) != ts {
		return 0, false, nil
	}
	return v, true, nil
}

// trimOWS removes HTTP optional whitespace (spaces and tabs) at both ends.
func trimOWS(s string) string {
	return strings.Trim(s, " \t")
}
