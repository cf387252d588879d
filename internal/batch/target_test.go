package batch

import (
	"bytes"
	"math/rand/v2"
	"net/textproto"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// targetSeeds are request-line targets as the SDKs send them and near misses of the fast
// path's rules.
var targetSeeds = []string{
	"http://127.0.0.1:10002/devstoreaccount1/bench?%24format=application%2Fjson%3Bodata%3Dminimalmetadata",
	"https://acct.table.core.windows.net/t(PartitionKey='p',RowKey='r')",
	"http://h/a/t(PartitionKey='p%2F',RowKey='r')?$select=a",
	"/devstoreaccount1/t(PartitionKey='p',RowKey='r')",
	"/t()", "/", "/a?", "/a??", "/a?b?c", "//h/p", "///p", "http://h", "http://h?x", "http://h:/p",
	"http://h:80:81/p", "http://[::1]:80/p", "http://u@h/p", "http://h/p#f", "HTTP://h/p",
	"http:///p", "http://h:8a/p", "http://h.example_x-y/~a-b_c.d$&+,;=:@/e", "t(PartitionKey='a:b')",
	"a:b/c", "http://h/a b", "http://h/\x7f", "http://h/é", "http://h%41/p", "http://h/p?q=%zz",
	"*", "", "mailto:x", "http:h/p", "https://h/!*()'\"<>[]{}|^`",
}

// TestParseTargetFast checks the fast path against url.Parse wherever it applies.
func TestParseTargetFast(t *testing.T) {
	fast := 0
	for _, s := range targetSeeds {
		if checkTargetFast(t, s) {
			fast++
		}
	}
	if fast < 8 {
		t.Errorf("the fast path took only %d of the seeds", fast)
	}
}

// FuzzParseTargetFast checks that the fast path agrees with url.Parse on any target.
func FuzzParseTargetFast(f *testing.F) {
	for _, s := range targetSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkTargetFast(t, s) })
}

func checkTargetFast(t *testing.T, s string) bool {
	t.Helper()
	u := url.URL{Fragment: "untouched"}
	if !parseTargetFast(s, &u) {
		if u.Fragment != "untouched" {
			t.Errorf("%q: refused but written", s)
		}
		return false
	}
	want, err := url.Parse(s)
	if err != nil {
		t.Errorf("%q: fast path accepted what url.Parse refuses: %v", s, err)
		return true
	}
	if !reflect.DeepEqual(&u, want) {
		t.Errorf("%q: fast %#v, url.Parse %#v", s, u, *want)
	}
	return true
}

// TestCanonicalKey checks the shortcuts against textproto for the names the SDKs send, in
// the spellings they send and in others.
func TestCanonicalKey(t *testing.T) {
	names := []string{"Content-Type", "Accept", "Content-Length", "Prefer", "If-Match", "Content-Id",
		"DataServiceVersion", "MaxDataServiceVersion", "x-ms-version", "Content-ID", "content-type",
		"X-MS-VERSION", "if-none-match", "X-HTTP-Method", "x-ms-client-request-id", "Weird_Name", "a b"}
	for k := range commonKeys {
		names = append(names, k)
	}
	for _, n := range names {
		if got, want := canonicalKey(n), textproto.CanonicalMIMEHeaderKey(n); got != want {
			t.Errorf("canonicalKey(%q) = %q, want %q", n, got, want)
		}
	}
}

// indexLineDelim finds what bytes.Index finds, on bodies made of line ends, dashes and
// near misses of the delimiter.
func TestIndexLineDelim(t *testing.T) {
	pat := []byte("\n--bnd")
	pieces := []string{"\n", "\r\n", "-", "--", "--bn", "--bnd", "x", "\n--bn\n", "bnd"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b []byte
		for range rng.IntN(12) {
			b = append(b, pieces[rng.IntN(len(pieces))]...)
		}
		if got, want := indexLineDelim(b, pat), bytes.Index(b, pat); got != want {
			t.Fatalf("%q: %d, want %d", b, got, want)
		}
	}
}

func FuzzIndexLineDelim(f *testing.F) {
	f.Add([]byte("a\n--b\n--bnd--"), "bnd")
	f.Fuzz(func(t *testing.T, b []byte, boundary string) {
		pat := []byte("\n--" + strings.ReplaceAll(boundary, "\n", ""))
		if got, want := indexLineDelim(b, pat), bytes.Index(b, pat); got != want {
			t.Fatalf("%q in %q: %d, want %d", pat, b, got, want)
		}
	})
}

// appendHeader blanks exactly the bytes the byte-by-byte rule blanks, wherever they are.
func TestAppendHeaderSanitizes(t *testing.T) {
	for _, n := range []int{1, 7, 8, 9, 16, 17, 40} {
		for i := 0; i < n; i++ {
			for c := 0; c < 256; c++ {
				v := []byte(strings.Repeat("v", n))
				v[i] = byte(c)
				want := "N: " + string(v) + "\r\n"
				if c < ' ' && c != '\t' || c == 0x7f {
					want = "N: " + strings.Repeat("v", i) + " " + strings.Repeat("v", n-i-1) + "\r\n"
				}
				if got := string(appendHeader(nil, "N", string(v))); got != want {
					t.Fatalf("byte %#x at %d of %d: %q, want %q", c, i, n, got, want)
				}
			}
		}
	}
}
