package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// httpServers are the values of --http-server: each HTTP-level guarantee holds with both.
var httpServers = []string{"h1", "net/http"}

// rawExchange sends raw on a new connection to srv (after the requests in before, each
// sent once the one before it is answered) and reads the answer to raw, and whether the
// server closed the connection after it.
func rawExchange(t *testing.T, srv *server, before []string, raw string) (resp *http.Response, body []byte, closed bool) {
	t.Helper()
	c, err := srv.dial(&net.Dialer{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	for _, b := range before {
		if _, err := io.WriteString(c, b); err != nil {
			t.Fatal(err)
		}
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request before: %v", err)
		}
		io.Copy(io.Discard, r.Body)
	}
	go io.WriteString(c, raw) // the server may answer before it has read it all
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = br.ReadByte()
	var ne net.Error
	return resp, body, !(errors.As(err, &ne) && ne.Timeout())
}

// TestMalformedRequestsAnsweredAsTheService: a request Go's HTTP parser refuses (a bad
// percent-escape in the path, a DEL byte in a header, no Host, a bad method, a head over
// 64 KiB) is answered as the service answers a bad request — status, x-ms-error-code, an
// OData JSON error, x-ms-request-id — on a fresh connection and after a request that went
// to net/http, and it is in the access log and the metrics like any other request; with
// either --http-server.
func TestMalformedRequestsAnsweredAsTheService(t *testing.T) {
	for _, mode := range httpServers {
		t.Run(mode, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "access.log")
			srv, debug := metricsServer(t, withArgs("--access-log", logPath, "--http-server", mode))
			acct := srv.Default().Name
			host := srv.Addr
			before := scrape(t, debug)
			chunked := "POST /" + acct + "/Tables HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
			cases := []struct {
				name, raw, code string
			}{
				{"bad escape", "GET /" + acct + "/Tables%zz HTTP/1.1\r\nHost: " + host + "\r\n", "RequestUrlFailedToParse"},
				{"DEL in a header", "GET /" + acct + "/Tables HTTP/1.1\r\nHost: " + host + "\r\nx-ms-version: 2019-02-02\x7f\r\n", "InvalidHeaderValue"},
				{"no Host", "GET /" + acct + "/Tables HTTP/1.1\r\n", "HostInformationNotPresent"},
				{"bad method", "G(T /" + acct + "/Tables HTTP/1.1\r\nHost: " + host + "\r\n", "InvalidHttpVerb"},
				{"head too large", "GET /" + acct + "/Tables HTTP/1.1\r\nHost: " + host + "\r\nX-Big: " + strings.Repeat("b", 100<<10) + "\r\n", "OutOfRangeInput"},
			}
			var ids []string
			for _, c := range cases {
				for _, after := range []string{"", chunked} {
					id := fmt.Sprintf("malformed-%d", len(ids))
					ids = append(ids, id)
					raw := strings.Replace(c.raw, "\r\n", "\r\nx-ms-client-request-id: "+id+"\r\n", 1) + "\r\n"
					var prior []string
					what := c.name
					if after != "" {
						prior, what = []string{after}, c.name+" after net/http"
					}
					resp, body, closed := rawExchange(t, srv, prior, raw)
					var e struct {
						Err struct {
							Code string `json:"code"`
						} `json:"odata.error"`
					}
					if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("x-ms-error-code") != c.code ||
						json.Unmarshal(body, &e) != nil || e.Err.Code != c.code ||
						!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
						resp.Header.Get("x-ms-request-id") == "" || resp.Header.Get("x-ms-client-request-id") != id {
						t.Errorf("%s: %d %q %q, want 400 %s as an OData error with x-ms-request-id and the client request id",
							what, resp.StatusCode, resp.Header, body, c.code)
					}
					if !closed {
						t.Errorf("%s: connection left open", what)
					}
				}
			}
			for i, id := range ids {
				l := waitAccessLine(t, logPath, func(l accessLine) bool { return l.ClientRequestID == id })
				if want := cases[i/2].code; l.Status != http.StatusBadRequest || l.ErrorCode != want || l.Account != acct {
					t.Errorf("access log for %s: %+v, want status 400 %s account %s", id, l, want, acct)
				}
			}
			after := scrape(t, debug)
			if n := count4xx(after) - count4xx(before); n < float64(len(ids)) {
				t.Errorf("cerulean_requests_total 4xx grew by %v, want at least %d", n, len(ids))
			}
		})
	}
}

// count4xx sums the 4xx requests in a scrape.
func count4xx(m map[string]float64) float64 {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "cerulean_requests_total{") && strings.Contains(k, `status_class="4xx"`) {
			n += v
		}
	}
	return n
}

// TestUnfinishedHeadsBoundedMemory: request heads that never end cannot make the server
// hold their bytes. 300 connections each sending a request line and a 1 MB header that
// never ends are refused at 64 KiB; 400 that trickle heads just under that share the
// server's budget for unfinished heads (16 MiB; past it 503 ServerBusy). Either way the
// server stays under 150 MB and answers ordinary requests meanwhile; with either
// --http-server.
func TestUnfinishedHeadsBoundedMemory(t *testing.T) {
	for _, mode := range httpServers {
		t.Run(mode, func(t *testing.T) {
			srv := startServer(t, withArgs("--http-server", mode))
			acct := srv.Default().Name
			rss0, _ := srv.memKB(t)
			for _, phase := range []struct {
				name  string
				conns int
				size  int
			}{{"1 MB heads", 300, 1 << 20}, {"56 KiB heads", 400, 56 << 10}} {
				var wg sync.WaitGroup
				var mu sync.Mutex
				answers := map[int]int{}
				var conns []net.Conn
				for range phase.conns {
					c, err := srv.dial(&net.Dialer{Timeout: 5 * time.Second})
					if err != nil {
						t.Fatal(err)
					}
					conns = append(conns, c)
					c.SetDeadline(time.Now().Add(60 * time.Second))
					wg.Add(2)
					go func() {
						defer wg.Done()
						io.WriteString(c, "GET /"+acct+"/Tables HTTP/1.1\r\nHost: "+srv.Addr+"\r\nX-Big: ")
						chunk := strings.Repeat("a", 16<<10)
						for sent := 0; sent < phase.size; sent += len(chunk) {
							if _, err := io.WriteString(c, chunk[:min(len(chunk), phase.size-sent)]); err != nil {
								return // refused and closed
							}
						}
					}()
					go func() {
						defer wg.Done()
						st := 0
						if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
							st = resp.StatusCode
						}
						mu.Lock()
						answers[st]++
						mu.Unlock()
					}()
				}
				// Meanwhile: the server's memory, and ordinary requests.
				var peak int64
				for i := 0; i < 25; i++ {
					if rss, _ := srv.memKB(t); rss > peak {
						peak = rss
					}
					r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables"})
					if r.Status != http.StatusOK {
						t.Errorf("%s: an ordinary request meanwhile: %d %s", phase.name, r.Status, truncate(r.Body))
					}
					time.Sleep(200 * time.Millisecond)
				}
				t.Logf("%s (%s): RSS %d MB before, peak %d MB; answers by status (0: none yet) %v",
					phase.name, mode, rss0>>10, peak>>10, answers)
				if peak > 150<<10 {
					t.Errorf("%s: the server's RSS reached %d MB, want under 150 MB", phase.name, peak>>10)
				}
				for _, c := range conns {
					c.Close()
				}
				wg.Wait()
				mu.Lock()
				if phase.size > 64<<10 && answers[http.StatusBadRequest] != phase.conns {
					t.Errorf("%s: answers %v, want all %d refused with 400", phase.name, answers, phase.conns)
				}
				if phase.size < 64<<10 && answers[http.StatusServiceUnavailable] == 0 {
					t.Errorf("%s: answers %v, want those past the budget refused with 503", phase.name, answers)
				}
				mu.Unlock()
			}
		})
	}
}
