package e2e

// Change feeds (GET /{table}?comp=changes, issue 45): what a reader sees through the
// REST extension and the Go client, written through the Go SDK.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/ceruleandb/cerulean/client"
)

// newFeedTable creates a uniquely named table with the change feed on (and elastic when
// asked), and returns its SDK client and name.
func newFeedTable(t testing.TB, srv *server, c *client.Client, elastic bool) (*aztables.Client, string) {
	t.Helper()
	name := tableName(t)
	if err := c.CreateTable(ctx(t), name, &client.TableSettings{Elastic: elastic, ChangeFeedRetention: 3600}); err != nil {
		t.Fatalf("CreateTable(%s, change feed): %v", name, err)
	}
	return newServiceClient(t, srv).NewClient(name), name
}

// readAllChanges reads table's feed from from to its current end in pages of limit.
func readAllChanges(t testing.TB, c *client.Client, table, from string, limit int) ([]client.Change, string) {
	t.Helper()
	var out []client.Change
	for {
		p, err := c.ReadChanges(ctx(t), table, client.ChangesOptions{From: from, Limit: limit})
		if err != nil {
			t.Fatalf("ReadChanges(%s, from %q): %v", table, from, err)
		}
		out = append(out, p.Changes...)
		from = p.Continuation
		if len(p.Changes) == 0 {
			return out, from
		}
	}
}

// changeLine is a record as a test compares it: op, keys and the entity's custom
// properties.
func changeLine(t testing.TB, c client.Change) string {
	t.Helper()
	s := c.Op + " " + c.PartitionKey + "/" + c.RowKey
	if len(c.Entity) == 0 {
		return s
	}
	var e map[string]any
	if err := json.Unmarshal(c.Entity, &e); err != nil {
		t.Fatalf("record %d: entity %s: %v", c.Seq, c.Entity, err)
	}
	var props []string
	for k, v := range e {
		switch k {
		case "PartitionKey", "RowKey", "Timestamp", "odata.etag":
			continue
		}
		props = append(props, fmt.Sprintf("%s=%v", k, v))
	}
	return s + " " + strings.Join(slices.Sorted(slices.Values(props)), ",")
}

// TestChangeFeedRecords: every kind of write through the Go SDK appears once, in order,
// with the entity's new state and the ETag a read answers; a continuation reads on
// without repeating; "now" starts at the end; the PartitionKey range splits the feed.
func TestChangeFeedRecords(t *testing.T) {
	srv := startServer(t)
	c := bulkClient(t, srv)
	tc, name := newFeedTable(t, srv, c, false)
	add := func(pk, rk string, props map[string]any) {
		t.Helper()
		props["PartitionKey"], props["RowKey"] = pk, rk
		if _, err := tc.AddEntity(ctx(t), marshal(t, props), nil); err != nil {
			t.Fatal(err)
		}
	}
	add("p1", "a", map[string]any{"V": 1})
	add("p2", "b", map[string]any{"Big": "5", "Big@odata.type": "Edm.Int64"})
	if _, err := tc.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p1", "RowKey": "a", "W": "x"}), &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.UpsertEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p2", "RowKey": "b", "V": 2}), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.SubmitTransaction(ctx(t), []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, map[string]any{"PartitionKey": "p3", "RowKey": "c", "V": 3})},
		{ActionType: aztables.TransactionTypeInsertMerge, Entity: marshal(t, map[string]any{"PartitionKey": "p3", "RowKey": "d", "V": 4})},
	}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.DeleteEntity(ctx(t), "p2", "b", nil); err != nil {
		t.Fatal(err)
	}
	// A batch that fails writes nothing, and records nothing.
	_, err := tc.SubmitTransaction(ctx(t), []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, map[string]any{"PartitionKey": "p3", "RowKey": "e", "V": 5})},
		{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, map[string]any{"PartitionKey": "p3", "RowKey": "c", "V": 6})},
	}, nil)
	if err == nil {
		t.Fatal("a batch inserting an existing entity succeeded")
	}

	all, end := readAllChanges(t, c, name, client.FromBeginning, 2)
	var got []string
	for _, ch := range all {
		got = append(got, changeLine(t, ch))
	}
	want := []string{
		"insert p1/a V=1",
		"insert p2/b Big=5,Big@odata.type=Edm.Int64",
		"merge p1/a V=1,W=x",
		"upsert p2/b V=2",
		"insert p3/c V=3",
		"upsertMerge p3/d V=4",
		"delete p2/b",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("feed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq <= all[i-1].Seq || all[i].At.Before(all[i-1].At) {
			t.Fatalf("records %d and %d out of order: %+v %+v", i-1, i, all[i-1], all[i])
		}
	}
	// The state in a record is what a read answers: same ETag and Timestamp.
	_, resp := getEDM(t, tc, "p1", "a")
	var merged struct {
		ETag string `json:"odata.etag"`
	}
	_ = json.Unmarshal(all[2].Entity, &merged)
	if merged.ETag != string(resp.ETag) {
		t.Errorf("merge record's ETag %s, a read answers %s", merged.ETag, resp.ETag)
	}

	// Nothing after the end; "now" is the end too.
	if more, _ := readAllChanges(t, c, name, end, 10); len(more) != 0 {
		t.Fatalf("read on from the end: %d records", len(more))
	}
	now, err := c.ReadChanges(ctx(t), name, client.ChangesOptions{From: client.FromNow})
	if err != nil || len(now.Changes) != 0 {
		t.Fatalf("from now: %+v, %v", now, err)
	}
	add("p4", "z", map[string]any{"V": 7})
	for _, from := range []string{end, now.Continuation} {
		more, _ := readAllChanges(t, c, name, from, 10)
		if len(more) != 1 || changeLine(t, more[0]) != "insert p4/z V=7" {
			t.Fatalf("after the end: %+v", more)
		}
	}

	// Two consumers with disjoint PartitionKey ranges see their own records.
	var split []string
	for _, r := range [][2]*string{{nil, to.Ptr("p2")}, {to.Ptr("p2"), nil}} {
		p, err := c.ReadChanges(ctx(t), name, client.ChangesOptions{StartPK: r[0], EndPK: r[1]})
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range p.Changes {
			split = append(split, ch.PartitionKey+"/"+ch.RowKey)
		}
		split = append(split, "|")
	}
	if s := strings.Join(split, " "); s != "p1/a p1/a | p2/b p2/b p3/c p3/d p2/b p4/z |" {
		t.Errorf("split consumers read %s", s)
	}
}

// TestChangeFeedLongPoll: a read with wait answers as soon as a change commits, and
// answers an empty page, still resumable, when none does within its wait.
func TestChangeFeedLongPoll(t *testing.T) {
	srv := startServer(t)
	c := bulkClient(t, srv)
	tc, name := newFeedTable(t, srv, c, false)
	start := time.Now()
	p, err := c.ReadChanges(ctx(t), name, client.ChangesOptions{From: client.FromNow, Wait: time.Second})
	if err != nil || len(p.Changes) != 0 {
		t.Fatalf("wait on an idle feed: %+v, %v", p, err)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 5*time.Second {
		t.Errorf("a 1 s wait on an idle feed answered after %v", d)
	}
	got := make(chan *client.ChangesPage, 1)
	go func() {
		p, err := c.ReadChanges(ctx(t), name, client.ChangesOptions{From: p.Continuation, Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	time.Sleep(300 * time.Millisecond)
	wrote := time.Now()
	if _, err := tc.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r"}), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p == nil || len(p.Changes) != 1 || p.Changes[0].Op != "insert" {
			t.Fatalf("long poll answered %+v", p)
		}
		t.Logf("long poll answered %v after the insert returned", time.Since(wrote))
	case <-time.After(10 * time.Second):
		t.Fatal("long poll not woken by an insert")
	}
}

// TestChangeFeedRefusals: a table without the feed answers as the service answers a comp
// it does not know; bad parameters are 400; a SAS needs r and sees only its key range.
func TestChangeFeedRefusals(t *testing.T) {
	srv := startServer(t)
	c := bulkClient(t, srv)
	plain := tableName(t)
	if err := c.CreateTable(ctx(t), plain, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.ReadChanges(ctx(t), plain, client.ChangesOptions{})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != "InvalidQueryParameterValue" {
		t.Fatalf("changes of a table without the feed: %v", err)
	}
	tc, name := newFeedTable(t, srv, c, false)
	for _, o := range []client.ChangesOptions{{From: "bogus"}, {From: "AQID"}, {Limit: 1001}} {
		if _, err := c.ReadChanges(ctx(t), name, o); !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != "InvalidQueryParameterValue" {
			t.Errorf("ReadChanges(%+v) = %v, want 400 InvalidQueryParameterValue", o, err)
		}
	}
	if _, err := c.ReadChanges(ctx(t), "nosuchtable", client.ChangesOptions{}); !errors.As(err, &e) || e.Status != http.StatusNotFound || e.Code != "TableNotFound" {
		t.Errorf("changes of a missing table: %v", err)
	}
	for _, pk := range []string{"a", "m", "z"} {
		if _, err := tc.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": pk, "RowKey": "1"}), nil); err != nil {
			t.Fatal(err)
		}
	}
	a := srv.Default()
	cred, err := aztables.NewSharedKeyCredential(a.Name, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	sasClient := func(v aztables.SASSignatureValues) *client.Client {
		v.TableName, v.Protocol, v.ExpiryTime = name, aztables.SASProtocolHTTPSandHTTP, time.Now().Add(time.Hour)
		qs, err := v.Sign(cred)
		if err != nil {
			t.Fatal(err)
		}
		qs = appendRange(t, qs, v)
		tg, err := client.Open("TableEndpoint=" + srv.Endpoint(a.Name) + ";SharedAccessSignature=" + qs)
		if err != nil {
			t.Fatal(err)
		}
		return tg.Client
	}
	if _, err := sasClient(aztables.SASSignatureValues{Permissions: to.Ptr(aztables.SASPermissions{Add: true}).String()}).ReadChanges(ctx(t), name, client.ChangesOptions{}); !errors.As(err, &e) || e.Status != http.StatusForbidden || e.Code != "AuthorizationPermissionMismatch" {
		t.Errorf("changes with a SAS without r: %v", err)
	}
	ranged := sasClient(aztables.SASSignatureValues{Permissions: to.Ptr(aztables.SASPermissions{Read: true}).String(), StartPartitionKey: "b", EndPartitionKey: "n"})
	all, _ := readAllChanges(t, ranged, name, client.FromBeginning, 10)
	if len(all) != 1 || all[0].PartitionKey != "m" {
		t.Errorf("a SAS for PartitionKeys b..n read %+v", all)
	}
}

// TestChangeFeedRetention: records older than the table's retention are removed in the
// background; a continuation from before them gets 410 ChangeFeedContinuationExpired,
// never a silent gap, and "beginning" starts at the oldest record retained.
func TestChangeFeedRetention(t *testing.T) {
	srv := startOwnServer(t, withArgs("--expiry-interval", "300ms"))
	c := bulkClient(t, srv)
	name := tableName(t)
	if err := c.CreateTable(ctx(t), name, &client.TableSettings{ChangeFeedRetention: 1}); err != nil {
		t.Fatal(err)
	}
	tc := newServiceClient(t, srv).NewClient(name)
	start, err := c.ReadChanges(ctx(t), name, client.ChangesOptions{From: client.FromNow})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "old"}), nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := readAllChanges(t, c, name, start.Continuation, 10); len(got) != 1 {
		t.Fatalf("before the retention passed: %d records", len(got))
	}
	var e *client.Error
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.ReadChanges(ctx(t), name, client.ChangesOptions{From: start.Continuation})
		if errors.As(err, &e) && e.Status == http.StatusGone && e.Code == client.CodeChangesExpired {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("reading from before a removed record: %v, want 410 %s", err, client.CodeChangesExpired)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := tc.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "new"}), nil); err != nil {
		t.Fatal(err)
	}
	got, _ := readAllChanges(t, c, name, client.FromBeginning, 10)
	if len(got) != 1 || got[0].RowKey != "new" {
		t.Fatalf("from the beginning after the retention: %+v", got)
	}
}
