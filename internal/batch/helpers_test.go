package batch_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A fixture is a raw $batch request as it goes over the wire: request line, headers, a
// blank line, and the body byte for byte. Content-Length is not needed (the body is the
// rest of the file), so hand-written fixtures stay editable.
func readFixture(tb testing.TB, name string) (contentType string, body []byte) {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	ct, body, ok := splitFixture(raw)
	if !ok {
		tb.Fatalf("%s: no blank line after the request headers", name)
	}
	return ct, body
}

// splitFixture separates the request head from the body and finds the Content-Type.
func splitFixture(raw []byte) (contentType string, body []byte, ok bool) {
	i := 0
	for i < len(raw) {
		j := bytes.IndexByte(raw[i:], '\n')
		if j < 0 {
			return "", nil, false
		}
		line := strings.TrimRight(string(raw[i:i+j]), "\r")
		i += j + 1
		if line == "" {
			return contentType, raw[i:], true
		}
		if k, v, found := strings.Cut(line, ":"); found && strings.EqualFold(strings.TrimSpace(k), "Content-Type") {
			contentType = strings.TrimSpace(v)
		}
	}
	return "", nil, false
}

// fixtureFiles lists the request fixtures in testdata.
func fixtureFiles(tb testing.TB) []string {
	tb.Helper()
	names, err := filepath.Glob(filepath.Join("testdata", "*.http"))
	if err != nil {
		tb.Fatal(err)
	}
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	return names
}
