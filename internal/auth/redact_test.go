package auth

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
)

func TestRedactorString(t *testing.T) {
	const sig = "u6kPz3Xb+Q9/aWvLr0N1pS2tC4dE5fG6hH7iJ8kK9lM="
	key := make([]byte, 64)
	for i := range key {
		key[i] = byte(i*7 + 3)
	}
	keyText := base64.StdEncoding.EncodeToString(key)
	r := NewRedactor([]Account{{Name: "acct", Keys: [][]byte{key}}, DevAccount()})
	q := url.QueryEscape
	for _, c := range []struct{ in, want string }{
		{"mytable", "mytable"},
		{"", ""},
		{"Tables?sv=2019-02-02&sig=" + sig + "&se=x", "Tables?sv=2019-02-02&sig=REDACTED&se=x"},
		{"Tables?sv=2019-02-02&sig=" + q(sig), "Tables?sv=2019-02-02&sig=REDACTED"},
		{"Tables%3Fsv%3D2019-02-02%26sig%3D" + q(q(sig)), "Tables?sv=2019-02-02&sig=REDACTED"},
		{"Tables%253Fsv%253D1%2526SIG%253D" + q(q(q(sig))), "Tables?sv=1&SIG=REDACTED"},
		{"Tables%3fSig%3d" + q(sig), "Tables?Sig=REDACTED"},
		{"sig=" + sig + " and again " + sig, "sig=REDACTED"}, // a value runs to a separator
		{"sig=" + sig + "&again=" + sig, "sig=REDACTED&again=REDACTED"},
		{"sig=a", "sig=REDACTED"},
		{"a=b&c=d", "a=b&c=d"},
		{"100%", "100%"},
		{"%zz%4", "%zz%4"},
		{"config=1", "config=1"},
		{"AccountName=acct;AccountKey=" + keyText + ";TableEndpoint=x", "AccountName=acct;AccountKey=REDACTED;TableEndpoint=x"},
		{"x" + strings.TrimRight(keyText, "=") + "y", "xREDACTEDy"},
		{"x" + keyText[:80] + "y", "x" + keyText[:80] + "y"}, // not the key
		{"key " + url.PathEscape(keyText), "key REDACTED=="},
		{"dev " + DevAccountKey, "dev REDACTED=="},
	} {
		if got := r.String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	// A key that begins with '/' or holds "//", sent as a table name: the path's segments
	// lose the leading '/' and merge repeated ones, and the log shows what is left.
	slash := make([]byte, 64)
	copy(slash, []byte{0xff, 0xff, 0xff, 0xfc, 0x3f, 0xff}) // "////P///…"
	for i := 6; i < len(slash); i++ {
		slash[i] = byte(i*13 + 5)
	}
	slashText := base64.RawStdEncoding.EncodeToString(slash)
	if !strings.HasPrefix(slashText, "/") || !strings.Contains(slashText, "//") {
		t.Fatalf("test key %q lacks a leading / and a //", slashText)
	}
	rs := NewRedactor([]Account{{Name: "s", Keys: [][]byte{slash}}})
	merged := slashText
	for strings.Contains(merged, "//") {
		merged = strings.ReplaceAll(merged, "//", "/")
	}
	for _, in := range []string{slashText, strings.TrimLeft(slashText, "/"), merged, strings.TrimLeft(merged, "/")} {
		if got := rs.String("t " + in); got != "t "+Redacted {
			t.Errorf("String(%q) = %q: a key's path form kept", "t "+in, got)
		}
	}
	// Without keys (the zero value), assignments are still redacted.
	var z *Redactor
	if got := z.String("x&sig=" + sig); got != "x&sig=REDACTED" {
		t.Errorf("nil Redactor: %q", got)
	}
	if got := z.String(keyText); got != keyText {
		t.Errorf("nil Redactor redacted a key it does not know: %q", got)
	}
	// The request's own signature, bare, wherever it is.
	if got := r.StringWith("id "+url.QueryEscape(sig), sig); got != "id REDACTED" {
		t.Errorf("StringWith: %q", got)
	}
	if got := r.StringWith("id", sig); got != "id" {
		t.Errorf("StringWith on a short value: %q", got)
	}
	if got := r.String(strings.Repeat("a", 100)); got != strings.Repeat("a", 100) {
		t.Errorf("long harmless value changed: %q", got)
	}
}

// The common case costs no allocation: names and ids without '=' or '%'.
func TestRedactorNoAlloc(t *testing.T) {
	r := NewRedactor([]Account{DevAccount()})
	for _, s := range []string{"mytable", "7d6c4e0c-3a8f-4c51-9e7b-6f1f9b1f2a11", "p=1", "100%", strings.Repeat("k", 200)} {
		if n := testing.AllocsPerRun(100, func() { _ = r.String(s) }); n != 0 {
			t.Errorf("String(%q): %v allocations", s, n)
		}
	}
}

func BenchmarkRedactorString(b *testing.B) {
	r := NewRedactor([]Account{DevAccount()})
	for _, s := range []string{"mytable", "7d6c4e0c-3a8f-4c51-9e7b-6f1f9b1f2a11"} {
		b.Run(s[:7], func(b *testing.B) {
			for range b.N {
				_ = r.String(s)
			}
		})
	}
}
