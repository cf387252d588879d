package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// The request log: at debug level a line per request with its operation, status, error
// code, latency and request id; at info level only 5xx answers and slow requests; never a
// credential.
func TestRequestLogLevels(t *testing.T) {
	t.Run("debug", func(t *testing.T) {
		srv := startServer(t, withArgs("--log-level", "debug"))
		svc := newServiceClient(t, srv)
		client, name := newTable(t, svc)
		if _, err := client.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r"}), nil); err != nil {
			t.Fatal(err)
		}
		_, err := client.GetEntity(ctx(t), "p", "missing", nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
		raw := srv.do(t, rawReq{Method: "GET", Path: "/" + srv.Default().Name + "/" + name + "()"})
		requireStatus(t, raw, http.StatusOK, "query")
		id := raw.Header.Get("x-ms-request-id")
		// A SAS request: its signature must not reach the log.
		u, err := client.GetTableSASURL(aztables.SASPermissions{Read: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		_, qs, _ := strings.Cut(u, "?")
		sig := ""
		for _, kv := range strings.Split(qs, "&") {
			if v, ok := strings.CutPrefix(kv, "sig="); ok {
				sig = v
			}
		}
		sasClient := sasTableClient(t, srv.Endpoint(srv.Default().Name)+"/"+name+"?"+qs, nil)
		if _, err := sasClient.GetEntity(ctx(t), "p", "r", nil); err != nil {
			t.Fatalf("SAS read: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		for _, want := range [][]string{
			{"msg=request", "op=CreateTable", "status=201"},
			{"msg=request", "op=InsertEntity", "status=201", "latency="},
			{"msg=request", "op=QueryEntity", "status=404", "code=ResourceNotFound"},
			{"msg=request", "op=QueryEntities", "status=200", "request_id=" + id},
		} {
			if findLogLine(srv, want...) == "" {
				t.Errorf("no debug line with %q in:\n%s", want, srv.logs.Tail(8<<10))
			}
		}
		logs := srv.logs.Tail(1 << 20)
		if sig == "" || strings.Contains(logs, sig) || strings.Contains(logs, "sig=") || strings.Contains(logs, "SharedKey") {
			t.Errorf("a credential in the log (sig %q):\n%s", sig, logs)
		}
	})
	t.Run("info", func(t *testing.T) {
		srv := startServer(t, withArgs("--log-level", "info"), withChildEnv("CERULEAN_STALL_TIMEOUT=1s"))
		svc := newServiceClient(t, srv)
		client, name := newTable(t, svc)
		if _, err := client.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r"}), nil); err != nil {
			t.Fatal(err)
		}
		if line := findLogLine(srv, "op="); line != "" {
			t.Errorf("ordinary request logged at info level: %s", line)
		}
		// A 5xx is logged: an upload that stalls past the stall timeout.
		u, err := startUpload(t, srv, name, 1000)
		if err != nil {
			t.Fatal(err)
		}
		defer u.conn.Close()
		_ = u.send(10, time.Second)
		if status, code, _ := u.result(10 * time.Second); status != http.StatusInternalServerError {
			t.Fatalf("stalled upload: %d %s", status, code)
		}
		time.Sleep(200 * time.Millisecond)
		if findLogLine(srv, "level=WARN", "msg=\"request failed\"", "op=InsertEntity", "status=500", "code=OperationTimedOut") == "" {
			t.Errorf("no info-level line for the 500:\n%s", srv.logs.Tail(8<<10))
		}
	})
	t.Run("slow", func(t *testing.T) {
		srv := startServer(t, withChildEnv("CERULEAN_SLOW_REQUEST=1ns"))
		r := srv.do(t, rawReq{Method: "GET", Path: "/" + srv.Default().Name + "/Tables"})
		time.Sleep(200 * time.Millisecond)
		if findLogLine(srv, "level=INFO", "msg=\"slow request\"", "op=QueryTables", "request_id="+r.Header.Get("x-ms-request-id")) == "" {
			t.Errorf("no slow-request line:\n%s", srv.logs.Tail(8<<10))
		}
	})
}
