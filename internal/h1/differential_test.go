package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The differential test: the same bytes sent to h1 and to net/http, alone, pipelined and
// split at arbitrary points, must get the same responses (status, headers but Date,
// framing, body) and the same end of the connection. It is how h1 keeps net/http's rules
// for every request it answers and hands every other one over intact.
//
// TestDifferential runs the hand-written cases and a seeded, bounded set of generated
// ones (CERULEAN_H1_DIFF_SEED picks another seed, CERULEAN_H1_DIFF_N another count);
// FuzzDifferential explores further from the corpus in testdata/fuzz/FuzzDifferential:
//
//	go test -run '^$' -fuzz FuzzDifferential -fuzztime 10m ./h1

// diffServers are a net/http server and an h1 server with the same handler and settings,
// started once per test binary.
var diffServers = sync.OnceValues(func() (netAddr, h1Addr string) {
	quiet := log.New(io.Discard, "", 0)
	cfg := func() *http.Server {
		return &http.Server{Handler: testHandler(), ErrorLog: quiet, ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout: 5 * time.Second, MaxHeaderBytes: 8 << 10}
	}
	ln1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go cfg().Serve(ln1)
	go (&Server{HTTP: cfg()}).Serve(ln2)
	return ln1.Addr().String(), ln2.Addr().String()
})

// transcript sends raw to addr in the pieces splits cuts it into, with a pause between
// them, closes the sending side, and describes what comes back: each response (as
// describe does; methods are the requests' methods in order, GET past the list), then how
// the connection ended.
func transcript(addr string, raw []byte, splits []int, methods []string) []string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return []string{"dial: " + err.Error()}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	cuts := append(slices.Clone(splits), len(raw))
	go func() {
		prev := 0
		for _, at := range cuts {
			if at < prev || at > len(raw) {
				continue
			}
			if _, err := c.Write(raw[prev:at]); err != nil {
				return
			}
			prev = at
			time.Sleep(3 * time.Millisecond)
		}
		c.(*net.TCPConn).CloseWrite()
	}()
	br := bufio.NewReader(c)
	var out []string
	for i := 0; ; i++ {
		m := http.MethodGet
		if i < len(methods) {
			m = methods[i]
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: m})
		if err != nil {
			var ne net.Error
			switch {
			case err == io.EOF:
				out = append(out, "end")
			case errors.As(err, &ne) && ne.Timeout():
				out = append(out, "still open")
			case strings.Contains(err.Error(), "connection reset"):
				out = append(out, "reset")
			default:
				out = append(out, "error: "+err.Error())
			}
			return out
		}
		out = append(out, addrs.ReplaceAllString(describe(resp), ""))
	}
}

// addrs are the connection's addresses in an error, which differ between the servers.
var addrs = regexp.MustCompile(`read tcp [0-9.:]+->[0-9.:]+: `)

// sameTranscripts reports whether two transcripts agree. A connection reset loses what
// the client had not read yet (the kernel discards it): a transcript that ends in a reset
// need only be a prefix of the other.
func sameTranscripts(a, b []string) bool {
	a, b = cutAtReset(a), cutAtReset(b)
	if len(a) == len(b) {
		for i := range a {
			if a[i] != b[i] && !(i == len(a)-1 && (a[i] == "reset" || b[i] == "reset")) {
				return false
			}
		}
		return true
	}
	if len(a) > len(b) {
		a, b = b, a
	}
	if a[len(a)-1] != "reset" {
		return false
	}
	for i := range a[:len(a)-1] {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// cutAtReset ends a transcript at its first response cut short by a reset: that response
// and what follows become "reset".
func cutAtReset(t []string) []string {
	for i, r := range t {
		if strings.Contains(r, "connection reset") {
			return append(t[:i:i], "reset")
		}
	}
	return t
}

// checkDifferential fails t if h1 and net/http answer raw differently.
func checkDifferential(t *testing.T, raw []byte, splits []int, methods []string) {
	t.Helper()
	netAddr, h1Addr := diffServers()
	want := transcript(netAddr, raw, splits, methods)
	got := transcript(h1Addr, raw, splits, methods)
	if !sameTranscripts(want, got) {
		t.Errorf("bytes %q split at %v:\nnet/http: %q\nh1:       %q", abbreviate(raw), splits, want, got)
	}
}

// abbreviate shortens long runs of one byte in raw, for the failure message.
func abbreviate(raw []byte) string {
	var b strings.Builder
	for i := 0; i < len(raw); {
		j := i
		for j < len(raw) && raw[j] == raw[i] {
			j++
		}
		if j-i > 16 {
			fmt.Fprintf(&b, "%s<%d×%q>", raw[i:i+1], j-i, raw[i])
		} else {
			b.Write(raw[i:j])
		}
		i = j
	}
	return b.String()
}

// diffCases are the hand-written cases: those TestSameAsNetHTTP and TestTolerance know,
// and the edges of what h1 answers itself.
var diffCases = []struct {
	raw     string
	methods []string
}{
	{"GET /small HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"HEAD /small HTTP/1.1\r\nHost: h\r\n\r\nGET /typed HTTP/1.1\r\nHost: h\r\n\r\n", []string{"HEAD"}},
	{"POST /echo?a=b%20c HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", nil},
	{"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nshort", nil},
	{"POST /ignorebody HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nabcdGET /small HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"POST /echo HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", nil},
	{"GET /small HTTP/1.0\r\n\r\n", nil},
	{"GET /small HTTP/1.1\r\n\r\n", nil},
	{"GET /small HTTP/1.1\r\nHost: h\r\nX-A: a\x01b\r\n\r\n", nil},
	{"GET /small HTTP/1.1\r\nHost: h\r\nX-A: a\x7fb\r\n\r\n", nil},
	{"GET /echo HTTP/1.1\r\nHost: h\r\nX-Ms-Version: a\r\n b\r\n\r\n", nil},
	{"GET /devstoreaccount1/Tables%zz HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"GET /small HTTP/1.1\nHost: h\n\n", nil},
	{"GET /small HTTP/1.1\r\nHost: h\r\n\nGET /typed HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\r\n\r\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\r\n\r\n\r\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"PUT /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\r\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"\r\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"GET /small HTTP/1.1\r\nHo", nil},
	{"GET /small HTTP/1.1\r", nil},
	{"GET /sm", nil},
	{"GET /echo HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("b", 6000) + "\r\n\r\n", nil},
	{"GET /echo HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("b", 9000) + "\r\n\r\n", nil},
	{"NOT HTTP\r\n\r\n", nil},
	{"GET http://h/small HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"GET /small HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /typed HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"GET /close HTTP/1.1\r\nHost: h\r\n\r\nGET /typed HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"GET /large HTTP/1.1\r\nHost: h\r\n\r\nGET /stream HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", nil},
	{"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", nil},
	{"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", nil},
	{"POST /echo HTTP/1.1\r\nHost: h\r\nExpect: coffee\r\nContent-Length: 1\r\n\r\nx", nil},
	{"GET /small HTTP/2.0\r\nHost: h\r\n\r\n", nil},
}

// diffSeed and diffCount are the generated set's: fixed, so that a failure repeats.
func diffSeed(t *testing.T) (seed uint64, n int) {
	seed, n = 42, 400
	if testing.Short() {
		n = 100
	}
	if v := os.Getenv("CERULEAN_H1_DIFF_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CERULEAN_H1_DIFF_SEED: %v", err)
		}
		seed = s
	}
	if v := os.Getenv("CERULEAN_H1_DIFF_N"); v != "" {
		c, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("CERULEAN_H1_DIFF_N: %v", err)
		}
		n = c
	}
	return seed, n
}

// TestDifferential: h1 answers as net/http answers, on the hand-written cases and on
// generated byte sequences (requests assembled from valid and broken pieces, pipelined,
// then mutated), each sent whole and split at random points.
func TestDifferential(t *testing.T) {
	for i, c := range diffCases {
		raw := []byte(c.raw)
		t.Run(fmt.Sprintf("case%d", i), func(t *testing.T) {
			t.Parallel()
			checkDifferential(t, raw, nil, c.methods)
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			checkDifferential(t, raw, randomSplits(rng, len(raw)), c.methods)
		})
	}
	seed, n := diffSeed(t)
	t.Logf("generated cases: seed %d, %d sequences", seed, n)
	for i := range n {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		raw := generate(rng)
		splits := randomSplits(rng, len(raw))
		t.Run(fmt.Sprintf("gen%d", i), func(t *testing.T) {
			t.Parallel()
			checkDifferential(t, raw, splits, nil)
		})
	}
}

// FuzzDifferential is TestDifferential on the fuzzer's bytes; split picks up to three
// points to cut them at.
func FuzzDifferential(f *testing.F) {
	for i, c := range diffCases {
		if c.methods == nil {
			f.Add([]byte(c.raw), uint64(i))
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, split uint64) {
		if len(raw) > 16<<10 || bytes.Contains(raw, []byte("HEAD")) {
			return // HEAD responses need their method to be read
		}
		var splits []int
		for n := len(raw); split > 0 && n > 0 && len(splits) < 3; split >>= 16 {
			splits = append(splits, int(split&0xffff)%n)
		}
		checkDifferential(t, raw, splits, nil)
	})
}

// randomSplits picks up to three points to cut n bytes at, in order.
func randomSplits(rng *rand.Rand, n int) []int {
	if n < 2 {
		return nil
	}
	k := rng.IntN(4)
	var s []int
	for range k {
		s = append(s, 1+rng.IntN(n-1))
	}
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// generate assembles one to three requests from valid and broken pieces, sometimes with
// stray line ends between them, and mutates the result a little now and then.
func generate(rng *rand.Rand) []byte {
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	var b []byte
	for n := 1 + rng.IntN(3); n > 0; n-- {
		method := pick("GET", "GET", "POST", "POST", "PUT", "MERGE", "DELETE", "PATCH", "OPTIONS", "G(T", "get", "")
		target := pick("/small", "/echo", "/echo?a=b", "/typed", "/empty", "/nocontent", "/short", "/large", "/close", "/ignorebody",
			"/devstoreaccount1/Tables%zz", "/t%2", "/caf\xc3\xa9", "http://h/echo", "*", "", "/a b", "//x", "/echo#frag")
		version := pick("HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1 ", "HTTP/1", "http/1.1")
		eol := pick("\r\n", "\r\n", "\r\n", "\r\n", "\n")
		line := method + " " + target + " " + version
		if rng.IntN(20) == 0 {
			line = method + "  " + target + " " + version
		}
		b = append(b, line+eol...)
		body := pick("", "", "abc", "hello world", strings.Repeat("z", 300))
		headers := []string{}
		if rng.IntN(10) != 0 {
			headers = append(headers, pick("Host: h", "Host: h", "host: h", "Host:", "Host: a b", "Host: h\r\nHost: g", "Host: [::1]:80"))
		}
		framing := rng.IntN(10)
		switch {
		case framing < 5:
			headers = append(headers, "Content-Length: "+strconv.Itoa(len(body)))
		case framing < 6:
			headers = append(headers, "Content-Length: "+pick("+3", "3, 3", "-1", "99999999999999999999", "x", strconv.Itoa(len(body)+2)))
		case framing < 7:
			headers = append(headers, "Transfer-Encoding: "+pick("chunked", "chunked", "gzip", "chunked, gzip", "identity"))
			if body != "" {
				body = fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
			} else {
				body = "0\r\n\r\n"
			}
		case framing < 8:
			headers = append(headers, "Content-Length: "+strconv.Itoa(len(body)), "Transfer-Encoding: chunked")
		}
		for range rng.IntN(4) {
			headers = append(headers, pick("X-Ms-Version: 2019-02-02", "Accept: application/json", "Connection: close",
				"Connection: keep-alive", "Connection: Upgrade", "Upgrade: h2c", "Expect: 100-continue", "Expect: coffee",
				"X-Ctl: a\x01b", "X-Del: a\x7fb", "X-Fold: a\r\n b", " X-Lead: a", "NoColon", ": empty", "X-Sp : a",
				"X-Obs: caf\xc3\xa9", "Pragma: no-cache", "Trailer: X-Sum", "X-Big: "+strings.Repeat("y", 3000+rng.IntN(7000))))
		}
		for _, h := range headers {
			b = append(b, h+eol...)
		}
		b = append(b, eol...)
		b = append(b, body...)
		if rng.IntN(5) == 0 {
			b = append(b, pick("\r\n", "\n", "\r\n\r\n", "\r\n\r\n\r\n", "\r")...)
		}
	}
	for range rng.IntN(3) {
		if rng.IntN(3) != 0 || len(b) == 0 {
			continue
		}
		i := rng.IntN(len(b))
		switch rng.IntN(3) {
		case 0:
			b[i] = byte(rng.IntN(256))
		case 1:
			b = append(b[:i], b[i+1:]...)
		default:
			b = append(b[:i], append([]byte{byte(rng.IntN(256))}, b[i:]...)...)
		}
	}
	return b
}
