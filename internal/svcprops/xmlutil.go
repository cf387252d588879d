// Package svcprops implements the XML documents and rules of the Table service's account- and
// table-level settings (docs/protocol.md §3.12–3.13, §10): stored access policies (Get/Set Table
// ACL), service properties (logging, metrics, CORS), service stats, and CORS evaluation for
// preflight and actual requests. It is pure: no HTTP serving and no storage. Parse errors are
// always 400 InvalidXmlDocument *azerr.Error values with a reason (azerr.InvalidXML), the
// service's answer to a malformed document and to an invalid value alike.
package svcprops

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// xmlHeader is the declaration every response document starts with.
const xmlHeader = `<?xml version="1.0" encoding="utf-8"?>`

// errDoc is a 400 InvalidXmlDocument for a malformed or structurally wrong document,
// reason saying what is wrong ("" for none).
func errDoc(reason string) *azerr.Error { return azerr.InvalidXML(reason) }

// errNode is a 400 InvalidXmlDocument for a value the service does not accept in element
// node, the reason naming both (the service answers such values InvalidXmlDocument, not
// InvalidXmlNodeValue, a code the SDKs' table error lists do not know: docs/compatibility.md
// "Unknown operations, invalid XML values, the end of a listing, secrets in logs").
func errNode(node, value string) *azerr.Error {
	return azerr.InvalidXML("The value '" + clip(value) + "' of element " + node + " is not valid.")
}

// errRange is errNode for an integer outside [lo, hi].
func errRange(node, value string, lo, hi int) *azerr.Error {
	return azerr.InvalidXML("The value '" + clip(value) + "' of element " + node + " is not valid: it must be an integer from " +
		strconv.Itoa(lo) + " to " + strconv.Itoa(hi) + ".")
}

// clip shortens a value quoted in a reason.
func clip(v string) string {
	if len(v) > 64 {
		return v[:64] + "..."
	}
	return v
}

// isBlank reports whether body holds nothing but XML whitespace (and an optional BOM).
func isBlank(body []byte) bool {
	return len(bytes.TrimSpace(bytes.TrimPrefix(body, utf8BOM))) == 0
}

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// decodeDoc decodes one XML document into v and checks that its root element is one of roots
// and that nothing but whitespace, comments and processing instructions follows it.
func decodeDoc(body []byte, v any, roots ...string) error {
	body = bytes.TrimPrefix(body, utf8BOM)
	dec := xml.NewDecoder(bytes.NewReader(body))
	dec.CharsetReader = func(charset string, input io.Reader) (io.Reader, error) {
		// Only UTF-8 (and its ASCII subset) is accepted; every SDK sends UTF-8.
		switch strings.ToLower(charset) {
		case "utf-8", "utf8", "us-ascii", "ascii":
			return input, nil
		}
		return nil, errors.New("unsupported charset " + charset)
	}
	var start xml.StartElement
	for {
		tok, err := dec.Token()
		if err != nil {
			return errDoc(xmlReason(err))
		}
		if se, ok := tok.(xml.StartElement); ok {
			start = se
			break
		}
		if cd, ok := tok.(xml.CharData); ok && len(bytes.TrimSpace(cd)) != 0 {
			return errDoc("Text is not expected before the root element.")
		}
	}
	ok := false
	for _, r := range roots {
		if start.Name.Local == r {
			ok = true
		}
	}
	if !ok {
		return errDoc("The root element " + start.Name.Local + " is not expected; it must be " + strings.Join(roots, " or ") + ".")
	}
	if err := dec.DecodeElement(v, &start); err != nil {
		return errDoc(xmlReason(err))
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return errDoc(xmlReason(err))
		}
		switch t := tok.(type) {
		case xml.CharData:
			if len(bytes.TrimSpace(t)) != 0 {
				return errDoc("Text is not expected after the root element.")
			}
		case xml.Comment, xml.ProcInst, xml.Directive:
		default:
			return errDoc("Only one root element is expected.")
		}
	}
}

// xmlReason is the reason for a document encoding/xml could not read.
func xmlReason(err error) string {
	var se *xml.SyntaxError
	if errors.As(err, &se) {
		return "Line " + strconv.Itoa(se.Line) + ": " + se.Msg + "."
	}
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return "The document ends before its root element is complete."
	}
	return "The document is not valid XML."
}

// appendEscaped appends s with XML text escaping.
func appendEscaped(dst []byte, s string) []byte {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return append(dst, b.Bytes()...)
}

// appendElem appends <name>escaped(value)</name>.
func appendElem(dst []byte, name, value string) []byte {
	dst = append(dst, '<')
	dst = append(dst, name...)
	dst = append(dst, '>')
	dst = appendEscaped(dst, value)
	dst = append(dst, "</"...)
	dst = append(dst, name...)
	return append(dst, '>')
}

// parseBool accepts an xs:boolean ("true", "false", "1", "0"; any case), surrounded by
// whitespace.
func parseBool(node string, s *string) (bool, error) {
	v := strings.TrimSpace(*s)
	switch strings.ToLower(v) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, errNode(node, v)
}

// parseInt accepts a decimal integer in [lo, hi], surrounded by whitespace.
func parseInt(node string, s *string, lo, hi int) (int, error) {
	v := strings.TrimSpace(*s)
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, errRange(node, v, lo, hi)
	}
	return n, nil
}

// ParseTime parses an ACL Start/Expiry value: ISO 8601 date-time with 0–9 fraction digits and
// a Z (or numeric offset, or no zone meaning UTC). The result is UTC, truncated to the
// service's 100 ns resolution. Go's SDK sends RFC 3339 (up to 9 digits, possibly an offset);
// JS sends seconds precision.
func ParseTime(s string) (time.Time, bool) {
	s = strings.ToUpper(strings.TrimSpace(s))
	if len(s) < len("2006-01-02T15:04:05") || s[10] != 'T' {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t, err = time.Parse("2006-01-02T15:04:05.999999999", s)
		if err != nil {
			return time.Time{}, false
		}
	}
	t = t.UTC().Truncate(100 * time.Nanosecond)
	if t.Year() < 1 || t.Year() > 9999 {
		return time.Time{}, false
	}
	return t, true
}

// FormatTime renders t the way the service does: UTC with seven fraction digits,
// e.g. 2009-09-28T08:49:37.0000000Z.
func FormatTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.0000000Z")
}
