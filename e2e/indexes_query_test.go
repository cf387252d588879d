package e2e

// Queries on secondary indexes, black box (issue 46, docs/indexes-design.md §4): the Go
// SDK pages through equality plans in Azure's order and through range plans with their
// index tokens to the end; every answer names its plan in x-cerulean-plan, and the
// access log records it.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/ceruleandb/cerulean/client"
)

func TestIndexQueries(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "access.log")
	srv := startServer(t, withArgs("--access-log", logPath))
	acct := srv.Default().Name
	svc := newServiceClient(t, srv)
	// Declared as the table is created, the indexes are ready at once (an index added to
	// a table with data is built first).
	name := tableName(t)
	sc := settingsClient(t, srv)
	if err := sc.CreateTable(ctx(t), name, &client.TableSettings{Elastic: true, Indexes: []client.Index{
		{Name: "ByEmail", Properties: []string{"Email"}, Unique: true},
		{Name: "ByAge", Properties: []string{"Age"}},
	}}); err != nil {
		t.Fatal(err)
	}
	c := svc.NewClient(name)
	const n = 600
	for p := range 3 {
		var actions []aztables.TransactionAction
		for i := p; i < n; i += 3 {
			actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, map[string]any{
				"PartitionKey": fmt.Sprintf("p%d", p), "RowKey": fmt.Sprintf("%04d", i),
				"Email": fmt.Sprintf("u%d@example.com", i), "Age": i % 50,
			})})
			if len(actions) == 100 {
				if _, err := c.SubmitTransaction(ctx(t), actions, nil); err != nil {
					t.Fatal(err)
				}
				actions = actions[:0]
			}
		}
		if len(actions) > 0 {
			if _, err := c.SubmitTransaction(ctx(t), actions, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	type key struct{ PK, RK string }
	keysOf := func(ents [][]byte) []key {
		var out []key
		for _, b := range ents {
			var e struct {
				PartitionKey, RowKey string
				Age                  int
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			out = append(out, key{e.PartitionKey, e.RowKey})
		}
		return out
	}
	wantKeys := func(match func(i int) bool) []key {
		var out []key
		for i := range n {
			if match(i) {
				out = append(out, key{fmt.Sprintf("p%d", i%3), fmt.Sprintf("%04d", i)})
			}
		}
		slices.SortFunc(out, func(a, b key) int { return strings.Compare(a.PK+"\x00"+a.RK, b.PK+"\x00"+b.RK) })
		return out
	}

	// An equality plan pages in (PartitionKey, RowKey) order with standard tokens.
	got := keysOf(listAll(t, c, &aztables.ListEntitiesOptions{Filter: to.Ptr("Age eq 7 or Age eq 9"), Top: to.Ptr[int32](5)}))
	if want := wantKeys(func(i int) bool { return i%50 == 7 || i%50 == 9 }); !slices.Equal(got, want) {
		t.Errorf("equality plan: got %v, want %v", got, want)
	}
	// A range plan pages to the end on its index tokens (both continuation headers set).
	got = keysOf(listAll(t, c, &aztables.ListEntitiesOptions{Filter: to.Ptr("Age ge 10 and Age lt 13"), Top: to.Ptr[int32](4)}))
	slices.SortFunc(got, func(a, b key) int { return strings.Compare(a.PK+"\x00"+a.RK, b.PK+"\x00"+b.RK) })
	if want := wantKeys(func(i int) bool { a := i % 50; return a >= 10 && a < 13 }); !slices.Equal(got, want) {
		t.Errorf("range plan: got %v, want %v", got, want)
	}

	// The plan header, raw.
	path := "/" + acct + "/" + name + "()"
	for _, c := range []struct{ filter, top, plan string }{
		{"Email eq 'u5@example.com'", "", "index ByEmail: 1 point"},
		{"Age eq 7 or Age eq 9", "", "index ByAge: 2 points"},
		{"Age ge 10 and Age lt 13", "2", "index ByAge: range"},
		{"", "", "keys"},
		{"PartitionKey eq 'p1' or PartitionKey eq 'p2'", "", "keys: 2 ranges"},
		{"PartitionKey eq 'p1' and RowKey eq '0001'", "", "keys: point"},
		{"Age ge 0", "", "keys"},
		{"Age eq 7", "0", "none"},
	} {
		q := url.Values{}
		if c.filter != "" {
			q.Set("$filter", c.filter)
		}
		if c.top != "" {
			q.Set("$top", c.top)
		}
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: path, Query: q.Encode(), Header: map[string]string{"x-ms-client-request-id": "plan-" + c.plan}})
		requireStatus(t, r, http.StatusOK, c.filter)
		if got := r.Header.Get("x-cerulean-plan"); got != c.plan {
			t.Errorf("%s: x-cerulean-plan %q, want %q", c.filter, got, c.plan)
		}
		if c.top == "2" {
			pk, rk := r.Header.Get("x-ms-continuation-NextPartitionKey"), r.Header.Get("x-ms-continuation-NextRowKey")
			if !strings.HasPrefix(pk, "ix1.") || rk == "" {
				t.Errorf("%s: continuation %q %q, want an index token and a NextRowKey", c.filter, pk, rk)
			}
			// A token its filter does not plan on is refused.
			q.Set("$filter", "Email eq 'u5@example.com' or Age gt 3")
			q.Set("NextPartitionKey", pk)
			q.Set("NextRowKey", rk)
			bad := srv.do(t, rawReq{Method: http.MethodGet, Path: path, Query: q.Encode()})
			requireRawErr(t, bad, http.StatusBadRequest, "InvalidInput")
		}
		l := waitAccessLine(t, logPath, func(l accessLine) bool { return l.ClientRequestID == "plan-"+c.plan })
		if l.Plan != c.plan {
			t.Errorf("%s: access log plan %q, want %q", c.filter, l.Plan, c.plan)
		}
	}
}
