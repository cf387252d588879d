package entity

import (
	"errors"
	"strings"
)

// ETag renders a version as the service's weak ETag: W/"datetime'<Timestamp>'" with the
// colons of the timestamp percent-encoded (W/"datetime'2021-04-06T21%3A03%3A31.9231271Z'").
func ETag(version int64) string {
	return string(AppendETag(nil, version))
}

// AppendETag appends ETag(version) to dst.
func AppendETag(dst []byte, version int64) []byte {
	dst = append(dst, `W/"datetime'`...)
	var buf [32]byte
	for _, c := range AppendTicks(buf[:0], version) {
		if c == ':' {
			dst = append(dst, "%3A"...)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, `'"`...)
}

// ErrBadETag reports an If-Match value that is not an ETag at all.
var ErrBadETag = errors.New("entity: malformed etag")

// ParseETag returns the version an ETag names. It accepts ':' or '%3A' in the timestamp
// (clients sometimes decode it). A well-formed weak ETag that does not name a version of
// ours (ok == false, err == nil) can never match; a value that is not a weak ETag at all
// returns ErrBadETag.
func ParseETag(s string) (version int64, ok bool, err error) {
	if !strings.HasPrefix(s, `W/"`) || !strings.HasSuffix(s, `"`) || len(s) < 4 {
		return 0, false, ErrBadETag
	}
	inner := s[3 : len(s)-1]
	if !strings.HasPrefix(inner, "datetime'") || !strings.HasSuffix(inner, "'") || len(inner) < 10 {
		return 0, false, nil
	}
	ts := strings.ReplaceAll(inner[9:len(inner)-1], "%3A", ":")
	ts = strings.ReplaceAll(ts, "%3a", ":")
	v, perr := ParseDateTime(ts)
	if perr != nil {
		return 0, false, nil
	}
	return v, true, nil
}
