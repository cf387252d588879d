package bench

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// The floor replays what the server answered for every workload, with either client:
// every round of the server is followed by one of the floor, the floor's runs are
// error-free (every request kind found its recording, a query's four pages replay in
// order so it returns all 200 entities), and never reach the server.
func TestFloorAgainstFake(t *testing.T) {
	forClients(t, func(t *testing.T, client string) {
		_, cs := newFake(t)
		o := quick(cs)
		o.Client, o.Floor, o.Rounds = client, true, 3
		o.Workloads = []string{WorkloadInsert, WorkloadRead, WorkloadUpdate, WorkloadQuery, WorkloadScan}
		rs, out := runLogged(t, o)
		for _, r := range rs {
			if r.FloorPerSec <= 0 || r.Errors != 0 || len(r.RoundsPerSec) != 3 || strings.Contains(r.Notes, "floor") {
				t.Errorf("%s: %+v", r.Workload, r)
			}
			if d := r.FloorRatio - r.EntitiesPerSec/r.FloorPerSec; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s: ratio %v, want %v / %v", r.Workload, r.FloorRatio, r.EntitiesPerSec, r.FloorPerSec)
			}
		}
		if !strings.Contains(out.String(), "server/floor = ") || !strings.Contains(out.String(), "median of 3 rounds") {
			t.Errorf("text report lacks the floor or the rounds:\n%s", out.String())
		}
	})
}

// The floor alone: each request kind gets the recorded status, headers and body; an
// unrecorded kind gets 501, and the request body is read whole.
func TestFloorReplays(t *testing.T) {
	rec := newRecorder()
	rec.setWorkload(WorkloadRead)
	h := http.Header{"Etag": {`W/"x"`}, "Content-Type": {"application/json"}, "Date": {"old"}, "Content-Length": {"2"}}
	rec.put(rec.key(http.MethodGet, true, "", ""), 200, h, []byte(`{}`))
	rec.put(rec.key(http.MethodGet, true, "", ""), 200, http.Header{}, []byte(`second`)) // the first one stays
	rec.put(rec.key(http.MethodPost, false, "", ""), 409, http.Header{}, nil)            // failures are not kept
	fl, err := startFloor(rec, true, "/devstoreaccount1")
	if err != nil {
		t.Fatal(err)
	}
	defer fl.close()
	hc := &http.Client{Transport: newTransport(1, fl.clientTLS)}
	get := func(method, path string, body io.Reader) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, fl.endpoint+path, body)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get(http.MethodGet, "/t(PartitionKey='a',RowKey='b')", nil)
	if resp.StatusCode != 200 || body != `{}` || resp.Header.Get("ETag") != `W/"x"` || resp.Header.Get("Date") == "old" {
		t.Errorf("replay: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if resp, _ := get(http.MethodPost, "/t", strings.NewReader(strings.Repeat("x", 1<<20))); resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("unrecorded kind: %d", resp.StatusCode)
	}
}

// Paced rounds run at the rate asked for, not flat out, as many as the rounds, and report
// the median of their p99s.
func TestLatencyAtPaces(t *testing.T) {
	_, cs := newFake(t)
	o := quick(cs)
	o.Client, o.Workloads, o.LatencyAt, o.Duration, o.Rounds = ClientRaw, []string{WorkloadRead}, 0.25, 300*time.Millisecond, 3
	rs, err := Run(context.Background(), o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := resultByName(t, rs, WorkloadRead)
	p := r.Paced
	if p == nil || p.Fraction != 0.25 || p.Errors != 0 || p.P99 <= 0 {
		t.Fatalf("paced: %+v", p)
	}
	if want := 0.25 * r.OpsPerSec(); p.TargetOpsPerSec != want || p.OpsPerSec > 1.1*want || p.OpsPerSec < 0.4*want {
		t.Errorf("paced at %.0f ops/s, asked %.0f (a quarter of %.0f)", p.OpsPerSec, p.TargetOpsPerSec, r.OpsPerSec())
	}
	if len(p.RoundsP99) != 3 {
		t.Fatalf("paced rounds' p99s: %v, want 3", p.RoundsP99)
	}
	sorted := slices.Sorted(slices.Values(p.RoundsP99))
	if got := float64(p.P99) / float64(time.Millisecond); got != sorted[1] {
		t.Errorf("paced p99 %.3f ms, want the median of %v", got, p.RoundsP99)
	}
}

// cannedServer answers each connection's requests with the next canned responses, one per
// request, and closes the connection after the last of its list.
func cannedServer(t *testing.T, conns ...[]string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for _, answers := range conns {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			for _, a := range answers {
				req, err := http.ReadRequest(br)
				if err != nil {
					break
				}
				io.Copy(io.Discard, req.Body)
				io.WriteString(c, a)
			}
			c.Close()
		}
	}()
	return "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" +
		"Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
		"TableEndpoint=http://" + ln.Addr().String() + "/devstoreaccount1;"
}

// The raw client reads Content-Length and chunked bodies (with extensions and trailers),
// continuation headers, error codes from x-ms-error-code or the body, and redials after
// Connection: close or a dropped connection.
func TestRawClientResponses(t *testing.T) {
	cs := cannedServer(t,
		[]string{
			"HTTP/1.1 200 OK\r\nContent-Length: 24\r\nETag: W/\"1\"\r\n\r\n{\"odata.etag\":\"W/\\\"1\\\"\"}",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nx-ms-continuation-NextPartitionKey: p\r\nX-MS-CONTINUATION-NEXTROWKEY: r\r\n\r\n" +
				"e;ext=1\r\n{\"odata.etag\":\r\n5\r\n1},{\"\r\n0\r\nTrailer: x\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]",
		},
		[]string{
			"HTTP/1.1 404 Not Found\r\nx-ms-error-code: ResourceNotFound\r\nContent-Length: 0\r\n\r\n",
			"HTTP/1.1 409 Conflict\r\nContent-Length: 56\r\n\r\n{\"odata.error\":{\"code\":\"EntityAlreadyExists\",\"x\":\"y\"}}  ",
		},
		[]string{
			"HTTP/1.1 204 No Content\r\nETag: W/\"2\"\r\n\r\n",
		},
	)
	ep, err := newRawEndpoint(cs, "tbl", nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := newRawTarget(ep)
	defer tg.close()
	ctx := context.Background()
	body, etag, err := tg.get(ctx, "a'b", "c d")
	if err != nil || etag != `W/"1"` || !strings.Contains(string(body), "odata.etag") {
		t.Fatalf("get: %q %q %v", body, etag, err)
	}
	if err := tg.c.do(ctx, &request{method: http.MethodGet, path: "/devstoreaccount1/tbl()"}); err != nil {
		t.Fatal(err)
	}
	if got := string(tg.c.body); got != "{\"odata.etag\":1},{\"" || tg.c.nextPK != "p" || tg.c.nextRK != "r" {
		t.Errorf("chunked: body %q, continuation %q %q", got, tg.c.nextPK, tg.c.nextRK)
	}
	if err := tg.c.do(ctx, &request{method: http.MethodGet, path: "/devstoreaccount1/tbl()"}); err != nil || tg.c.nc != nil {
		t.Errorf("Connection: close: err %v, connection kept %v", err, tg.c.nc != nil)
	}
	_, _, err = tg.get(ctx, "a", "b") // a new connection
	var se *statusError
	if !errors.As(err, &se) || se.status != 404 || se.code != "ResourceNotFound" || errKind(err) != "404 ResourceNotFound" {
		t.Errorf("404: %v", err)
	}
	err = tg.insert(ctx, []byte(`{}`))
	if !errors.As(err, &se) || se.status != 409 || se.code != "EntityAlreadyExists" || !isStatus(err, 409) {
		t.Errorf("409 without x-ms-error-code: %v", err)
	}
	// The server closed the second connection after its list: a transport error, then a
	// fresh connection.
	if err := tg.replace(ctx, "a", "b", []byte(`{}`), `W/"1"`); err == nil {
		t.Error("request on a closed connection succeeded")
	} else if errKind(err) != "transport" {
		t.Errorf("closed connection: %v is a %s error", err, errKind(err))
	}
	if err := tg.replace(ctx, "a", "b", []byte(`{}`), `W/"1"`); err != nil || tg.c.etag != `W/"2"` {
		t.Errorf("after redial: %v, etag %q", err, tg.c.etag)
	}
}

// With --consistency, the raw client sends x-ms-consistency-level on reads, as the SDK
// client does (bench.go's consistencyPolicy), and not on writes. Without it, replicas
// served none of a raw bench's reads.
func TestRawClientConsistency(t *testing.T) {
	ep, err := newRawEndpoint(cannedServer(t), "tbl", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range []string{"", "Eventual"} {
		ep.consistency = level
		c := newRawConn(ep)
		for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete} {
			c.buildRequest(&request{method: method, path: "/devstoreaccount1/tbl(PartitionKey='p',RowKey='r')"})
			got := strings.Contains(string(c.req), "\r\nx-ms-consistency-level: Eventual\r\n")
			if want := level != "" && method == http.MethodGet; got != want {
				t.Errorf("consistency %q, %s: header sent %v, want %v:\n%s", level, method, got, want, c.req)
			}
		}
	}
}

// A failed changeset is answered 202 with the failing operation's response: a batch error.
func TestBatchOutcome(t *testing.T) {
	ok := "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_1\r\n\r\n--changesetresponse_1\r\n" +
		"Content-Type: application/http\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n--changesetresponse_1--\r\n--batchresponse_1--\r\n"
	if err := batchOutcome([]byte(ok)); err != nil {
		t.Errorf("success: %v", err)
	}
	failed := strings.Replace(ok, "HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 409 Conflict\r\n\r\n{\"odata.error\":{\"code\":\"EntityAlreadyExists\"}}\r\n", 1)
	err := batchOutcome([]byte(failed))
	if got, code, _ := statusOf(err); got != 409 || code != "EntityAlreadyExists" {
		t.Errorf("failed changeset: %v", err)
	}
	if batchOutcome([]byte("garbage")) == nil {
		t.Error("an answer without a sub-response passed")
	}
}
