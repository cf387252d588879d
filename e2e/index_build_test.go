package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/ceruleandb/cerulean/client"
)

// indexState is one index of a table's settings as the settings endpoint answers it.
type indexState struct {
	Name     string `json:"Name"`
	State    string `json:"State"`
	Progress int64  `json:"Progress"`
	Failure  string `json:"Failure"`
}

// getIndexState reads index name's state from table's settings.
func getIndexState(ctx context.Context, c *client.Client, table, name string) (indexState, error) {
	resp, err := c.Do(ctx, http.MethodGet, url.PathEscape(table), url.Values{"comp": {"properties"}}, nil, nil)
	if err != nil {
		return indexState{}, err
	}
	defer resp.Body.Close()
	if err := client.ResponseError(resp); err != nil {
		return indexState{}, err
	}
	var body struct {
		Indexes []indexState `json:"Indexes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return indexState{}, err
	}
	for _, ix := range body.Indexes {
		if ix.Name == name {
			return ix, nil
		}
	}
	return indexState{}, fmt.Errorf("table %s declares no index %s: %+v", table, name, body.Indexes)
}

// TestIndexBuildKill: an index added to a table of 1,000,000 entities builds online while
// four writers insert, replace, merge and delete entities (changing the indexed value);
// the server is killed with SIGKILL halfway through the build and restarted, the build
// resumes from where it had persisted (never from the start), the index becomes ready,
// and then a query on it (an index plan, by the plan header) returns exactly what a scan
// of an unindexed copy of the property finds. Opt-in: CERULEAN_TEST_MILLION=1 (a few
// minutes; not in ./scripts/test).
func TestIndexBuildKill(t *testing.T) {
	if os.Getenv("CERULEAN_TEST_MILLION") == "" {
		t.Skip("set CERULEAN_TEST_MILLION=1 to build an index over 1,000,000 entities with a kill -9 halfway")
	}
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("CERULEAN_TEST_INDEX_BUILD_ENTITIES")); err == nil && v > 0 {
		n = v
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, withPort(port)) // the same address after the restart: writers and client keep it
	c := bulkClient(t, srv)
	_, name := newElasticTable(t, srv, c)
	const parts, values = 100, 1000
	tag := func(v int) string { return fmt.Sprintf("t%04d", v%values) }
	entity := func(i, v int) []byte {
		return marshal(t, map[string]any{"PartitionKey": fmt.Sprintf("p%03d", i%parts), "RowKey": fmt.Sprintf("%09d", i),
			"Tag": tag(v), "Copy": tag(v), "N": i})
	}

	// The load, in bulk requests of 1,000.
	began := time.Now()
	for first := 0; first < n; first += 1000 {
		ops := make([]client.BulkOp, 0, 1000)
		for i := first; i < min(n, first+1000); i++ {
			ops = append(ops, client.BulkOp{Op: client.BulkUpsert, Entity: entity(i, i)})
		}
		res, err := c.Bulk(ctx(t), name, ops)
		if err != nil || res.Failed > 0 {
			t.Fatalf("load at %d: %v (%d failed)", first, err, res.Failed)
		}
	}
	t.Logf("loaded %d entities in %v", n, time.Since(began).Round(time.Millisecond))

	// The writers: they keep going through the kill, retrying what fails while the
	// server is down; the final comparison does not depend on which writes landed.
	wctx, stopWriters := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writes, failures atomic.Int64
	tc := newServiceClient(t, srv).NewClient(name)
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 46))
			for wctx.Err() == nil {
				i, v := rng.IntN(n+n/10), rng.IntN(values)
				pk, rk := fmt.Sprintf("p%03d", i%parts), fmt.Sprintf("%09d", i)
				var err error
				switch rng.IntN(4) {
				case 0:
					_, err = tc.UpsertEntity(wctx, entity(i, v), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
				case 1:
					_, err = tc.UpsertEntity(wctx, marshal(t, map[string]any{"PartitionKey": pk, "RowKey": rk, "Tag": tag(v), "Copy": tag(v)}), nil)
				case 2:
					_, err = tc.DeleteEntity(wctx, pk, rk, nil)
				case 3:
					_, err = tc.AddEntity(wctx, entity(i, v), nil)
				}
				if err != nil {
					failures.Add(1) // 404, 409, or the server down
					if statusOf(err) == 0 {
						time.Sleep(20 * time.Millisecond)
					}
					continue
				}
				writes.Add(1)
			}
		})
	}
	defer func() { stopWriters(); wg.Wait() }()

	// Add the index, kill the server halfway through its build.
	cur, err := c.GetTableSettings(ctx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	cur.Indexes = append(cur.Indexes, client.Index{Name: "ByTag", Properties: []string{"Tag"}})
	if err := c.SetTableSettings(ctx(t), name, cur.TableSettings); err != nil {
		t.Fatalf("adding the index: %v", err)
	}
	var killedAt int64
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		st, err := getIndexState(ctx(t), c, name, "ByTag")
		if err != nil {
			t.Fatal(err)
		}
		if st.State != "building" {
			t.Fatalf("the index is %s (%+v) before the build was halfway: nothing to kill", st.State, st)
		}
		if st.Progress >= int64(n/2) {
			killedAt = st.Progress
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the build did not reach halfway in 10 minutes: %+v", st)
		}
	}
	srv.kill()
	t.Logf("killed at build progress %d of %d after %d writes", killedAt, n, writes.Load())
	srv.restart(t)
	first := true
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		st, err := getIndexState(ctx(t), c, name, "ByTag")
		if err != nil {
			t.Fatal(err)
		}
		if first {
			first = false
			if st.State == "building" && st.Progress < killedAt {
				t.Fatalf("after the restart the build is at %d, behind the %d it had persisted", st.Progress, killedAt)
			}
		}
		if st.State == "ready" {
			break
		}
		if st.State != "building" || time.Now().After(deadline) {
			t.Fatalf("the index did not become ready: %+v", st)
		}
	}
	stopWriters()
	wg.Wait()
	t.Logf("%d writes landed, %d failed or refused (the server was down for some)", writes.Load(), failures.Load())

	// The index against a scan: one scan of the unindexed copy, grouped by value, and
	// then each value's query on the index (an index plan, by the plan header).
	type row struct{ PartitionKey, RowKey, Tag, Copy string }
	read := func(filter, sel string) []row {
		var out []row
		for _, b := range listAll(t, tc, &aztables.ListEntitiesOptions{Filter: ptr(filter), Select: ptr(sel)}) {
			var r row
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	byScan := map[string][]string{}
	scanned := 0
	for _, r := range read("Copy ge 't' and Copy lt 'u'", "PartitionKey,RowKey,Copy") {
		byScan[r.Copy] = append(byScan[r.Copy], r.PartitionKey+"/"+r.RowKey)
		scanned++
	}
	if scanned < n*8/10 {
		t.Fatalf("the scan found %d entities of about %d", scanned, n)
	}
	for v := range values {
		filter := fmt.Sprintf("Tag eq '%s'", tag(v))
		resp, err := c.Do(ctx(t), http.MethodGet, name+"()", url.Values{"$filter": {filter}, "$top": {"1"}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if plan := resp.Header.Get("x-cerulean-plan"); plan != "index ByTag: 1 point" {
			t.Fatalf("plan of %s: %q", filter, plan)
		}
		var got []string
		for _, r := range read(filter, "PartitionKey,RowKey") {
			got = append(got, r.PartitionKey+"/"+r.RowKey)
		}
		want := byScan[tag(v)]
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: the index found %d entities, the scan %d", filter, len(got), len(want))
		}
	}
	t.Logf("the index and the scan agree on %d entities, %d values", scanned, values)
}
