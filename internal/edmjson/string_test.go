package edmjson

import (
	"bytes"
	"encoding/json"
	"testing"
)

// AppendString writes one valid JSON string on one line that decodes to what
// encoding/json's own encoding of s decodes to (invalid UTF-8 as U+FFFD), for any s.
func TestAppendString(t *testing.T) {
	for _, s := range []string{
		"", "plain", `q"uote`, `back\slash`, "\x00\x01\x1f\x7f", "\b\f\n\r\t", "<&>",
		"\u2028\u2029", "é日本🙂", "\xff", "a\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\uFFFD",
		"exactly8", "sixteen-plain-ab", "long plain run then \x01 and \"quote\" after",
	} {
		checkString(t, s)
	}
}

func checkString(t *testing.T, s string) {
	t.Helper()
	got := AppendString(nil, s)
	if bytes.ContainsAny(got, "\n\r") || bytes.Contains(got, []byte("\u2028")) || bytes.Contains(got, []byte("\u2029")) {
		t.Errorf("AppendString(%q) = %s: a line break written verbatim", s, got)
	}
	var back string
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("AppendString(%q) = %s: %v", s, got, err)
	}
	want, _ := json.Marshal(s)
	var wantBack string
	if err := json.Unmarshal(want, &wantBack); err != nil {
		t.Fatal(err)
	}
	if back != wantBack {
		t.Errorf("AppendString(%q) = %s decodes to %q, want %q", s, got, back, wantBack)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\x00\n", "\xff\xfe", "\u2028", "日本", `\u0000`} {
		f.Add(s)
	}
	f.Fuzz(checkString)
}
