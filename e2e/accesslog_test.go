package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// accessLine is a line of the access log as an operator's tools read it.
type accessLine struct {
	Time            string   `json:"time"`
	RequestID       string   `json:"request_id"`
	ClientRequestID string   `json:"client_request_id"`
	Account         string   `json:"account"`
	Operation       string   `json:"operation"`
	Table           string   `json:"table"`
	PartitionKey    string   `json:"partition_key"`
	Status          int      `json:"status"`
	ErrorCode       string   `json:"error_code"`
	LatencyMS       *float64 `json:"latency_ms"`
	BytesIn         int64    `json:"bytes_in"`
	BytesOut        int64    `json:"bytes_out"`
	ClientIP        string   `json:"client_ip"`
	Auth            string   `json:"auth"`
	// Plan is a Query Entities line's plan (x-cerulean-plan).
	Plan string `json:"plan"`
}

// readAccessLog parses the file: every line must be whole and valid JSON.
func readAccessLog(t *testing.T, path string) (lines []accessLine, raw string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("%s: last line unterminated", path)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var l accessLine
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.DisallowUnknownFields()
		if err := d.Decode(&l); err != nil {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines, string(b)
}

// waitAccessLine polls path until a line matching ok appears (lines are flushed within
// 100 ms; the bound is for a loaded machine) and returns it.
func waitAccessLine(t *testing.T, path string, ok func(accessLine) bool) accessLine {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			lines, _ := readAccessLog(t, path)
			for _, l := range lines {
				if ok(l) {
					return l
				}
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(path)
			t.Fatalf("no matching line in %s:\n%s", path, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The access log: each request made through the Go SDK and raw HTTP appears as a JSON
// line with its fields; no line holds the account key or a SAS signature; after the file
// is renamed and SIGHUP sent, new lines go to a new file at the path.
func TestAccessLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	srv := startServer(t, withArgs("--access-log", path))
	acct := srv.Default()
	svc := newServiceClient(t, srv)
	client, name := newTable(t, svc)
	pk := `p "quoted" é`
	if _, err := client.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": pk, "RowKey": "r1", "N": 1}), nil); err != nil {
		t.Fatal(err)
	}
	_, err := client.GetEntity(ctx(t), pk, "missing", nil)
	requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
	actions := []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, map[string]any{"PartitionKey": "pb", "RowKey": "1"})},
		{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, map[string]any{"PartitionKey": "pb", "RowKey": "2"})},
	}
	if _, err := client.SubmitTransaction(ctx(t), actions, nil); err != nil {
		t.Fatal(err)
	}
	raw := srv.do(t, rawReq{Method: "GET", Path: "/" + acct.Name + "/" + name + "()", Header: map[string]string{"x-ms-client-request-id": "raw-1"}})
	requireStatus(t, raw, http.StatusOK, "query")
	rawID := raw.Header.Get("x-ms-request-id")

	// SAS requests, one accepted and one with a tampered signature.
	u, err := client.GetTableSASURL(aztables.SASPermissions{Read: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, qs, _ := strings.Cut(u, "?")
	q, err := url.ParseQuery(qs)
	if err != nil || q.Get("sig") == "" {
		t.Fatalf("SAS %q: %v", qs, err)
	}
	sig := q.Get("sig")
	sasClient := sasTableClient(t, srv.Endpoint(acct.Name)+"/"+name+"?"+qs, nil)
	if _, err := sasClient.GetEntity(ctx(t), pk, "r1", nil); err != nil {
		t.Fatalf("SAS read: %v", err)
	}
	q.Set("sig", "dGFtcGVyZWQtc2lnbmF0dXJlLXZhbHVlLXRoYXQtaXMtbG9uZw==")
	bad := sasTableClient(t, srv.Endpoint(acct.Name)+"/"+name+"?"+q.Encode(), nil)
	_, err = bad.GetEntity(ctx(t), pk, "r1", nil)
	requireRespErr(t, err, http.StatusForbidden, "AuthenticationFailed")

	// Each request as a line with its fields.
	line := func(op, pk string, status int, auth string) accessLine {
		return waitAccessLine(t, path, func(l accessLine) bool {
			return l.Operation == op && l.PartitionKey == pk && l.Status == status && l.Auth == auth
		})
	}
	for _, c := range []struct {
		op, pk, auth, code string
		status             int
	}{
		{"CreateTable", "", "SharedKeyLite", "", 201}, // the table named in the body
		{"InsertEntity", pk, "SharedKeyLite", "", 201},
		{"QueryEntity", pk, "SharedKeyLite", "ResourceNotFound", 404},
		{"EntityGroupTransaction", "pb", "SharedKeyLite", "", 202},
		{"QueryEntity", pk, "SAS", "", 200},
		{"QueryEntity", pk, "SAS", "AuthenticationFailed", 403},
	} {
		l := line(c.op, c.pk, c.status, c.auth)
		if l.Account != acct.Name || l.ErrorCode != c.code || l.ClientIP != "127.0.0.1" || l.RequestID == "" ||
			l.LatencyMS == nil || *l.LatencyMS < 0 || l.BytesOut <= 0 {
			t.Errorf("%s %d: %+v", c.op, c.status, l)
		}
		if l.Table != name {
			t.Errorf("%s: table %q, want %q", c.op, l.Table, name)
		}
		if c.op == "InsertEntity" && l.BytesIn <= 0 {
			t.Errorf("insert: bytes_in %d", l.BytesIn)
		}
		ts, err := time.Parse(time.RFC3339Nano, l.Time)
		if err != nil || !strings.HasSuffix(l.Time, "Z") || !strings.Contains(l.Time, ".") || time.Since(ts) > time.Hour || time.Since(ts) < 0 {
			t.Errorf("%s: time %q (%v)", c.op, l.Time, err)
		}
	}
	l := waitAccessLine(t, path, func(l accessLine) bool { return l.RequestID == rawID })
	if l.Operation != "QueryEntities" || l.ClientRequestID != "raw-1" || l.Table != name || l.PartitionKey != "" || l.Plan != "keys" {
		t.Errorf("raw query: %+v", l)
	}

	// No credential anywhere in the file.
	_, text := readAccessLog(t, path)
	for _, secret := range []string{acct.Key, sig, url.QueryEscape(sig), "sig=", "Authorization"} {
		if strings.Contains(text, secret) {
			t.Errorf("access log holds %q:\n%s", secret, text)
		}
	}

	// Rotation: rename, SIGHUP, and the following lines go to a new file at path.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(srv.pid(t), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, err := os.Stat(path); err != nil; _, err = os.Stat(path) {
		if time.Now().After(deadline) {
			t.Fatalf("no new file at %s after SIGHUP:\n%s", path, srv.logs.Tail(4<<10))
		}
		time.Sleep(20 * time.Millisecond)
	}
	after := srv.do(t, rawReq{Method: "GET", Path: "/" + acct.Name + "/Tables"})
	requireStatus(t, after, http.StatusOK, "query tables")
	afterID := after.Header.Get("x-ms-request-id")
	waitAccessLine(t, path, func(l accessLine) bool { return l.RequestID == afterID && l.Operation == "QueryTables" })
	old, _ := readAccessLog(t, path+".1")
	for _, l := range old {
		if l.RequestID == afterID {
			t.Errorf("the request after the reopen went to the rotated file")
		}
	}
	if !containsID(old, rawID) {
		t.Errorf("the rotated file lost the lines before it")
	}
	if !srv.running() {
		t.Fatal("SIGHUP stopped the server")
	}
	// Shutting down flushes: a request just before SIGTERM is in the file after.
	last := srv.do(t, rawReq{Method: "GET", Path: "/" + acct.Name + "/Tables"})
	lastID := last.Header.Get("x-ms-request-id")
	if exitErr, inTime := srv.terminate(30 * time.Second); exitErr != nil || !inTime {
		t.Fatalf("terminate: %v (in time: %v)", exitErr, inTime)
	}
	if lines, _ := readAccessLog(t, path); !containsID(lines, lastID) {
		t.Errorf("the last request's line is not in the file after shutdown")
	}
}

func containsID(lines []accessLine, id string) bool {
	for _, l := range lines {
		if l.RequestID == id {
			return true
		}
	}
	return false
}

// CERULEAN_ACCESS_LOG=- writes the lines to standard output.
func TestAccessLogStdout(t *testing.T) {
	srv := startServer(t, withChildEnv("CERULEAN_ACCESS_LOG=-"))
	r := srv.do(t, rawReq{Method: "GET", Path: "/" + srv.Default().Name + "/Tables"})
	requireStatus(t, r, http.StatusOK, "query tables")
	id := r.Header.Get("x-ms-request-id")
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		for _, s := range strings.Split(srv.logs.Tail(1<<20), "\n") {
			var l accessLine
			if json.Unmarshal([]byte(s), &l) == nil && l.RequestID == id {
				if l.Operation != "QueryTables" || l.Status != http.StatusOK || l.Auth != "SharedKeyLite" {
					t.Errorf("line %s", s)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access line for %s on stdout:\n%s", id, srv.logs.Tail(8<<10))
		}
	}
}
