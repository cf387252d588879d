package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// Read consistency through the official Go SDK (docs/compatibility.md "Read consistency and replicas"): the
// x-ms-consistency-level header, the headers every read answers, continuation tokens that
// carry their page's position, and the tokens of table-level changes. Replica behaviour
// (real standbys) is tested in replicas_test.go; here every read is served by the
// primary, except, when CERULEAN_TEST_ENGINE_ARGS configures read replicas (scripts/test's
// postgres pass), reads at the levels that may go to one.

// engineReplicas is how many read replicas CERULEAN_TEST_ENGINE_ARGS gives every server.
func engineReplicas() int {
	n := 0
	for _, a := range strings.Fields(os.Getenv("CERULEAN_TEST_ENGINE_ARGS")) {
		if a == "--postgres-replica-url" || strings.HasPrefix(a, "--postgres-replica-url=") {
			n++
		}
	}
	return n
}

// readRecorder is a per-call policy that records, for every GET its client sends, the
// request's continuation parameters and the response's read headers.
type readRecorder struct {
	mu    sync.Mutex
	reads []recordedRead
}

type recordedRead struct {
	query    string // the request's raw query
	token    string // x-ms-session-token
	source   string // x-cerulean-read-source
	position string // x-cerulean-read-position
	next     string // x-ms-continuation-NextRowKey or NextTableName
}

func (r *readRecorder) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	if err != nil || req.Raw().Method != http.MethodGet {
		return resp, err
	}
	h := resp.Header
	next := h.Get("x-ms-continuation-NextRowKey")
	if next == "" {
		next = h.Get("x-ms-continuation-NextTableName")
	}
	r.mu.Lock()
	r.reads = append(r.reads, recordedRead{req.Raw().URL.RawQuery, h.Get("x-ms-session-token"),
		h.Get("x-cerulean-read-source"), h.Get("x-cerulean-read-position"), next})
	r.mu.Unlock()
	return resp, err
}

func (r *readRecorder) take() []recordedRead {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reads
	r.reads = nil
	return out
}

// recordingClient is a service client of the server's default account whose GETs are
// recorded, with extra per-call policies.
func recordingClient(t *testing.T, srv *server, extra ...policy.Policy) (*aztables.ServiceClient, *readRecorder) {
	t.Helper()
	rec := &readRecorder{}
	a := srv.Default()
	cred, err := aztables.NewSharedKeyCredential(a.Name, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	o := clientOptions(nil)
	o.PerCallPolicies = append(extra, rec)
	svc, err := aztables.NewServiceClientWithSharedKey(srv.Endpoint(a.Name), cred, o)
	if err != nil {
		t.Fatal(err)
	}
	return svc, rec
}

// checkRead checks a recorded read's three headers (served by the primary; the token's
// position is the read position) and returns the position.
func checkRead(t *testing.T, what string, r recordedRead) uint64 {
	t.Helper()
	return checkReadFrom(t, what, r, false)
}

// checkReadFrom is checkRead that also accepts a replica as the source if replica.
func checkReadFrom(t *testing.T, what string, r recordedRead, replica bool) uint64 {
	t.Helper()
	tok := parseSessionToken(t, what, r.token)
	ok := r.source == "primary" || replica && strings.HasPrefix(r.source, "replica ")
	if !ok || r.position != strconv.FormatUint(tok.pos, 10) {
		t.Errorf("%s: x-cerulean-read-source %q, x-cerulean-read-position %q, token %q; want primary (or a replica: %v) at the token's position", what, r.source, r.position, r.token, replica)
	}
	return tok.pos
}

// TestPagingPositionsGoSDK: a $top query's pages carry continuation tokens the SDK's
// pager follows to the end — every entity once, in order — while writes go on elsewhere;
// each page's NextRowKey ends in its read position, the next request sends it back, and
// positions never decrease. The same for Query Tables.
func TestPagingPositionsGoSDK(t *testing.T) {
	srv := startServer(t)
	svc, rec := recordingClient(t, srv)
	c, _ := newTable(t, svc)
	const n = 23
	var want []string
	for i := range n {
		pk := fmt.Sprintf("p%d", i%3)
		rk := fmt.Sprintf("r%02d", i)
		if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": pk, "RowKey": rk}), nil); err != nil {
			t.Fatal(err)
		}
	}
	for p := range 3 {
		for i := range n {
			if i%3 == p {
				want = append(want, fmt.Sprintf("p%d/r%02d", p, i))
			}
		}
	}
	top := int32(4)
	pager := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: &top})
	var got []string
	writes := 0
	for pager.More() {
		page, err := pager.NextPage(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range page.Entities {
			var e struct{ PartitionKey, RowKey string }
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			got = append(got, e.PartitionKey+"/"+e.RowKey)
		}
		// A write between pages, in a partition after every page's: positions move on.
		if _, err := c.UpsertEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "zz", "RowKey": fmt.Sprint(writes)}), nil); err != nil {
			t.Fatal(err)
		}
		writes++
	}
	if len(got) < len(want) || strings.Join(got[:len(want)], ",") != strings.Join(want, ",") {
		t.Fatalf("pager returned %d entities %q, want %q first", len(got), got, want)
	}
	reads := rec.take()
	if len(reads) < n/int(top) {
		t.Fatalf("%d pages for %d entities at $top=%d", len(reads), n, top)
	}
	var last uint64
	for i, r := range reads {
		what := fmt.Sprintf("page %d", i+1)
		pos := checkRead(t, what, r)
		if pos < last {
			t.Errorf("%s: position %d after %d", what, pos, last)
		}
		last = pos
		if i+1 < len(reads) {
			if !strings.HasSuffix(r.next, "!"+strconv.FormatUint(pos, 10)) {
				t.Errorf("%s: NextRowKey %q does not end in its position %d", what, r.next, pos)
			}
			if !strings.Contains(reads[i+1].query, "NextRowKey="+r.next) && !strings.Contains(reads[i+1].query, "NextRowKey="+strings.ReplaceAll(r.next, "!", "%21")) {
				t.Errorf("page %d's request %q does not send back NextRowKey %q", i+2, reads[i+1].query, r.next)
			}
		}
	}

	// Query Tables with $top pages the same way.
	for range 4 {
		newTable(t, svc)
	}
	rec.take()
	tp := svc.NewListTablesPager(&aztables.ListTablesOptions{Top: to.Ptr(int32(2))})
	tables := 0
	for tp.More() {
		page, err := tp.NextPage(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		tables += len(page.Tables)
	}
	reads = rec.take()
	if tables < 5 || len(reads) < 3 {
		t.Fatalf("%d tables in %d pages", tables, len(reads))
	}
	last = 0
	for i, r := range reads {
		pos := checkRead(t, fmt.Sprintf("tables page %d", i+1), r)
		if pos < last {
			t.Errorf("tables page %d: position %d after %d", i+1, pos, last)
		}
		last = pos
		if i+1 < len(reads) && !strings.HasSuffix(r.next, "!"+strconv.FormatUint(pos, 10)) {
			t.Errorf("tables page %d: NextTableName %q does not end in its position %d", i+1, r.next, pos)
		}
	}
}

// TestConsistencyLevelGoSDK: each level name is accepted on every read kind and served
// by the primary, as is a read without the header — except BoundedStaleness,
// ConsistentPrefix and Eventual when the engine arguments configure read replicas, which
// a replica may serve (and does: the test waits until one serves an Eventual read); a bad
// name is 400 InvalidHeaderValue through the SDK.
func TestConsistencyLevelGoSDK(t *testing.T) {
	srv := startServer(t)
	svc, rec := recordingClient(t, srv)
	c, name := newTable(t, svc)
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r"}), nil); err != nil {
		t.Fatal(err)
	}
	replicas := engineReplicas() > 0
	if replicas {
		// Until a replica has replayed the entity, a weak read may not find it there.
		cx := policy.WithHTTPHeader(ctx(t), http.Header{"x-ms-consistency-level": {"Eventual"}})
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := c.GetEntity(cx, "p", "r", nil)
			r := rec.take()
			if err == nil && len(r) == 1 && strings.HasPrefix(r[0].source, "replica ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no replica served the entity at Eventual after 30 s: %v %+v", err, r)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	reads := map[string]func(cx context.Context) error{
		"get entity": func(cx context.Context) error { _, err := c.GetEntity(cx, "p", "r", nil); return err },
		"query entities": func(cx context.Context) error {
			_, err := c.NewListEntitiesPager(nil).NextPage(cx)
			return err
		},
		"query tables": func(cx context.Context) error {
			f := "TableName eq '" + name + "'"
			_, err := svc.NewListTablesPager(&aztables.ListTablesOptions{Filter: &f}).NextPage(cx)
			return err
		},
		"get table acl":      func(cx context.Context) error { _, err := c.GetAccessPolicy(cx, nil); return err },
		"service properties": func(cx context.Context) error { _, err := svc.GetProperties(cx, nil); return err },
	}
	for what, read := range reads {
		for _, level := range []string{"", "Strong", "Session", "BoundedStaleness", "ConsistentPrefix", "Eventual"} {
			cx := ctx(t)
			if level != "" {
				cx = policy.WithHTTPHeader(cx, http.Header{"x-ms-consistency-level": {level}})
			}
			if err := read(cx); err != nil {
				t.Errorf("%s at %q: %v", what, level, err)
				continue
			}
			r := rec.take()
			if len(r) != 1 {
				t.Fatalf("%s: %d reads recorded", what, len(r))
			}
			weak := level == "BoundedStaleness" || level == "ConsistentPrefix" || level == "Eventual"
			checkReadFrom(t, what+" at "+level, r[0], replicas && weak)
		}
		for _, bad := range []string{"strong", "Linearizable", "Session,Strong"} {
			err := read(policy.WithHTTPHeader(ctx(t), http.Header{"x-ms-consistency-level": {bad}}))
			var re *azcore.ResponseError
			if !errors.As(err, &re) || re.StatusCode != 400 || re.ErrorCode != "InvalidHeaderValue" {
				t.Errorf("%s with x-ms-consistency-level %q: %v, want 400 InvalidHeaderValue", what, bad, err)
			}
			rec.take()
		}
	}
}

// TestTableWriteTokensGoSDK: table-level changes answer a session token covering them,
// which a Session read accepts.
func TestTableWriteTokensGoSDK(t *testing.T) {
	srv := startServer(t)
	svc, _ := recordingClient(t, srv)
	name := tableName(t)
	c := svc.NewClient(name)
	var last uint64
	for _, step := range []struct {
		what string
		call func(context.Context) error
	}{
		{"create table", func(cx context.Context) error { _, err := svc.CreateTable(cx, name, nil); return err }},
		{"set table acl", func(cx context.Context) error {
			_, err := c.SetAccessPolicy(cx, &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{{ID: to.Ptr("p1"), AccessPolicy: &aztables.AccessPolicy{Permission: to.Ptr("r")}}}})
			return err
		}},
		{"set service properties", func(cx context.Context) error {
			_, err := svc.SetProperties(cx, aztables.ServiceProperties{Cors: []*aztables.CorsRule{}}, nil)
			return err
		}},
		{"delete table", func(cx context.Context) error { _, err := svc.DeleteTable(cx, name, nil); return err }},
	} {
		tok := captured(t, step.what, step.call)
		if tok.pos < last {
			t.Errorf("%s: position %d after %d", step.what, tok.pos, last)
		}
		last = tok.pos
		cx := policy.WithHTTPHeader(ctx(t), http.Header{"x-ms-consistency-level": {"Session"}, "x-ms-session-token": {tok.text}})
		if _, err := svc.NewListTablesPager(nil).NextPage(cx); err != nil {
			t.Errorf("Session read with the token of %s: %v", step.what, err)
		}
	}
}

// TestDebugReplicas: --debug-addr serves /debug/replicas, an empty JSON array without
// replicas, one entry per replica with them.
func TestDebugReplicas(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	startServer(t, withArgs("--debug-addr", addr))
	status, ct, body := getDebug(t, addr, "/debug/replicas")
	if status != 200 || ct != "application/json" {
		t.Fatalf("/debug/replicas: %d %q %s", status, ct, body)
	}
	if engineReplicas() == 0 {
		if strings.TrimSpace(string(body)) != "[]" {
			t.Errorf("/debug/replicas without replicas: %s", body)
		}
		return
	}
	// With the replicas the engine arguments configure: one entry each, named.
	var list []struct{ Name string }
	if err := json.Unmarshal(body, &list); err != nil || len(list) != engineReplicas() || list[0].Name == "" {
		t.Errorf("/debug/replicas with %d replicas: %v %s", engineReplicas(), err, body)
	}
}
