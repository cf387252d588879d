package h1

import (
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// head is a parsed request head of the plain shape.
type head struct {
	method, target string
	header         http.Header
	host           string
	contentLength  int64
	close          bool
}

// maxContentLength bounds the Content-Length taken at face value (18 digits cannot
// overflow an int64); longer ones go to net/http.
const maxContentDigits = 18

// parseHead parses a request head (request line and header lines, ending with an empty
// line, all CRLF-terminated) of the plain shape: HTTP/1.1, a token method, an origin-form
// target, header names that are tokens followed at once by a colon, valid values, exactly
// one valid Host, at most one Content-Length of digits, a Connection header of "close" or
// "keep-alive" if any, and none of Transfer-Encoding, Expect, Upgrade, Trailer or
// HTTP2-Settings. Anything else reports false, for net/http to answer.
//
// The header map holds what net/http's would: canonical keys, values with surrounding
// spaces and tabs trimmed, no Host (it is in head.host), Cache-Control: no-cache added
// for a lone Pragma: no-cache. Its keys and values share one string of the head.
func parseHead(b []byte) (head, bool) {
	var h head
	// Every line ends in CRLF; a CR or LF anywhere else is not the plain shape.
	if len(b) < 4 || string(b[len(b)-4:]) != "\r\n\r\n" {
		return h, false
	}
	s := string(b[:len(b)-2])
	lines := strings.Count(s, "\n")
	if strings.Count(s, "\r") != lines {
		return h, false
	}
	i := strings.IndexByte(s, '\r')
	if s[i+1] != '\n' {
		return h, false
	}
	line := s[:i]
	rest := s[i+2:]
	sp1 := strings.IndexByte(line, ' ')
	if sp1 <= 0 {
		return h, false
	}
	sp2 := strings.IndexByte(line[sp1+1:], ' ')
	if sp2 <= 0 {
		return h, false
	}
	h.method, h.target = line[:sp1], line[sp1+1:sp1+1+sp2]
	if line[sp1+1+sp2+1:] != "HTTP/1.1" || !isToken(h.method) || !validTarget(h.target) {
		return h, false
	}
	n := lines - 1 // header lines
	h.header = make(http.Header, n)
	vals := make([]string, n)
	hosts, lengths := 0, 0
	for k := 0; rest != ""; k++ {
		i := strings.IndexByte(rest, '\r')
		if rest[i+1] != '\n' {
			return h, false
		}
		line, rest = rest[:i], rest[i+2:]
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			return h, false // includes a folded line, which begins with a space or tab
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !isToken(name) || !httpguts.ValidHeaderFieldValue(value) {
			return h, false
		}
		key := canonicalKey(name)
		switch key {
		case "Host":
			hosts++
			if value == "" || !httpguts.ValidHostHeader(value) {
				return h, false
			}
			h.host = value
			continue
		case "Content-Length":
			lengths++
			if lengths > 1 || value == "" || len(value) > maxContentDigits {
				return h, false
			}
			var cl int64
			for j := 0; j < len(value); j++ {
				c := value[j]
				if c < '0' || c > '9' {
					return h, false
				}
				cl = cl*10 + int64(c-'0')
			}
			h.contentLength = cl
		case "Connection":
			switch {
			case strings.EqualFold(value, "close"):
				h.close = true
			case strings.EqualFold(value, "keep-alive"):
			default:
				return h, false
			}
		case "Transfer-Encoding", "Expect", "Upgrade", "Trailer", "Http2-Settings":
			return h, false
		}
		vals[k] = value
		if old, ok := h.header[key]; ok {
			h.header[key] = append(old, value)
		} else {
			h.header[key] = vals[k : k+1 : k+1]
		}
	}
	if hosts != 1 {
		return h, false
	}
	if p, ok := h.header["Pragma"]; ok && len(p) > 0 && p[0] == "no-cache" {
		if _, ok := h.header["Cache-Control"]; !ok {
			h.header["Cache-Control"] = []string{"no-cache"}
		}
	}
	return h, true
}

// trimOWS trims the optional white space (spaces and tabs) around a header value.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// isToken reports whether s is a non-empty RFC 9110 token (a method or a field name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return true
}

// validTarget reports whether t is an origin-form request target of visible ASCII.
func validTarget(t string) bool {
	if t == "" || t[0] != '/' {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] >= 0x7f {
			return false
		}
	}
	return true
}

// commonKeys are the canonical forms of the header names table clients send, so that a
// client sending them in lower case (the JavaScript and Python SDKs) costs no allocation.
var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept", "Accept-Charset", "Accept-Encoding", "Authorization", "Cache-Control",
		"Connection", "Content-Length", "Content-Md5", "Content-Type", "Dataserviceversion",
		"Date", "Host", "If-Match", "If-None-Match", "Maxdataserviceversion", "Origin",
		"Pragma", "Prefer", "Traceparent", "User-Agent", "X-Ms-Client-Request-Id",
		"X-Ms-Date", "X-Ms-Return-Client-Request-Id", "X-Ms-Version",
		"X-Ms-Session-Token", "X-Ms-Consistency-Level", "Access-Control-Request-Method",
		"Access-Control-Request-Headers", "Transfer-Encoding", "Expect", "Upgrade",
		"Trailer", "Http2-Settings",
	} {
		m[k] = k
	}
	return m
}()

// canonicalKey is textproto.CanonicalMIMEHeaderKey of a token, without allocating when
// the name is already canonical or is one of commonKeys.
func canonicalKey(name string) string {
	var buf [64]byte
	if len(name) > len(buf) {
		return textproto.CanonicalMIMEHeaderKey(name)
	}
	upper := true
	same := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			same = false
		}
		buf[i] = c
		upper = c == '-'
	}
	if same {
		return name
	}
	if k, ok := commonKeys[string(buf[:len(name)])]; ok {
		return k
	}
	return string(buf[:len(name)])
}
