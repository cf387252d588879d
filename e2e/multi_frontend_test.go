package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// Several stateless front ends on one PostgreSQL database, and PostgreSQL restarting
// under load. These tests start their own servers with --engine postgres on the database
// scripts/test starts (CERULEAN_TEST_POSTGRES_URL), whatever CERULEAN_TEST_ENGINE_ARGS
// says. Without a database they skip, except in CI, where they fail.
//
// TestPostgresFault stops the database for a while, so scripts/test runs it only in the
// pass where nothing else uses that database at the same time (the e2e package alone, on
// the postgres engine; Go runs a top-level test that is not parallel by itself).

func postgresURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("CERULEAN_TEST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CERULEAN_TEST_POSTGRES_URL is not set (scripts/test starts PostgreSQL and sets it)")
		}
		t.Skip("CERULEAN_TEST_POSTGRES_URL is not set; scripts/test starts PostgreSQL and sets it")
	}
	return url
}

// withArgs appends serve flags.
func withArgs(args ...string) serverOption {
	return func(c *serverConfig) { c.extra = append(c.extra, args...) }
}

func startPostgresServers(t *testing.T, n int) []*server {
	url := postgresURL(t)
	var out []*server
	for range n {
		out = append(out, startServer(t, withArgs("--engine", "postgres", "--postgres-url", url)))
	}
	return out
}

// postgresServiceClients starts n front ends on one PostgreSQL database and returns a
// service client of each.
func postgresServiceClients(t *testing.T, n int) []*aztables.ServiceClient {
	srvs := startPostgresServers(t, n)
	svcs := make([]*aztables.ServiceClient, len(srvs))
	for i, s := range srvs {
		svcs[i] = newServiceClient(t, s)
	}
	return svcs
}

// tableOnEach creates a table through the first service client and returns a client of
// it through each one, and its name.
func tableOnEach(t *testing.T, svcs []*aztables.ServiceClient) ([]*aztables.Client, string) {
	_, name := newTable(t, svcs[0])
	clients := make([]*aztables.Client, len(svcs))
	for i, svc := range svcs {
		clients[i] = svc.NewClient(name)
	}
	return clients, name
}

func TestPostgresFrontEnds(t *testing.T) {
	svcs := postgresServiceClients(t, 3)
	// A table created through one front end is served by every other one.
	clients, _ := tableOnEach(t, svcs)

	t.Run("Counter", func(t *testing.T) {
		if _, err := clients[1].AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "counter", "RowKey": "c", "N": 0}), nil); err != nil {
			t.Fatal(err)
		}
		cx := ctxFor(t, 2*time.Minute)
		var successes, conflicts atomic.Int64
		var wg sync.WaitGroup
		const goroutines, perGoroutine = 48, 4
		for g := range goroutines {
			c := clients[g%len(clients)]
			wg.Go(func() {
				done := 0
				for attempt := 0; done < perGoroutine; attempt++ {
					if attempt > 10000 {
						t.Errorf("goroutine %d: no progress after %d attempts", g, attempt)
						return
					}
					resp, err := c.GetEntity(cx, "counter", "c", nil)
					if err != nil {
						t.Errorf("goroutine %d: GetEntity: %v", g, err)
						return
					}
					n, ok := decodeEDM(t, resp.Value).Properties["N"].(int32)
					if !ok {
						t.Errorf("goroutine %d: N = %#v", g, decodeEDM(t, resp.Value).Properties["N"])
						return
					}
					etag := resp.ETag
					_, err = c.UpdateEntity(cx, marshal(t, map[string]any{"PartitionKey": "counter", "RowKey": "c", "N": n + 1}),
						&aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeReplace, IfMatch: &etag})
					switch {
					case err == nil:
						successes.Add(1)
						done++
					case statusOf(err) == http.StatusPreconditionFailed:
						conflicts.Add(1)
					default:
						t.Errorf("goroutine %d: UpdateEntity: %v", g, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for i, c := range clients {
			resp, err := c.GetEntity(ctx(t), "counter", "c", nil)
			if err != nil {
				t.Fatal(err)
			}
			n := decodeEDM(t, resp.Value).Properties["N"].(int32)
			if int64(n) != successes.Load() || successes.Load() != goroutines*perGoroutine {
				t.Fatalf("front end %d reads N=%d after %d successful If-Match updates (%d conflicts)", i, n, successes.Load(), conflicts.Load())
			}
		}
		t.Logf("%d successful If-Match updates over %d front ends, %d conflicts", successes.Load(), len(clients), conflicts.Load())
	})

	t.Run("PagesFromDifferentFrontEnds", func(t *testing.T) {
		_, name := newTable(t, svcs[2])
		clients := []*aztables.Client{svcs[0].NewClient(name), svcs[1].NewClient(name), svcs[2].NewClient(name)}
		// 6 partitions × 170 entities, inserted in 100-entity transactions.
		var want []string
		for p := range 6 {
			pk := fmt.Sprintf("part%d", p)
			var actions []aztables.TransactionAction
			for r := range 170 {
				rk := fmt.Sprintf("row%04d", r)
				want = append(want, pk+"/"+rk)
				actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
					Entity: marshal(t, map[string]any{"PartitionKey": pk, "RowKey": rk, "Odd": r%2 == 1, "R": r})})
				if len(actions) == 100 || r == 169 {
					if _, err := clients[p%3].SubmitTransaction(ctx(t), actions, nil); err != nil {
						t.Fatalf("SubmitTransaction: %v", err)
					}
					actions = nil
				}
			}
		}
		slices.Sort(want)
		var wantOdd []string
		for _, k := range want {
			var r int
			fmt.Sscanf(k[strings.Index(k, "/row")+4:], "%d", &r)
			if r%2 == 1 {
				wantOdd = append(wantOdd, k)
			}
		}
		for _, c := range []struct {
			filter string
			top    int32
			want   []string
		}{{"", 37, want}, {"Odd eq true", 50, wantOdd}, {"R ge 100 and Odd eq true", 11, nil}} {
			if c.want == nil {
				for _, k := range wantOdd {
					var r int
					fmt.Sscanf(k[strings.Index(k, "/row")+4:], "%d", &r)
					if r >= 100 {
						c.want = append(c.want, k)
					}
				}
			}
			var got []string
			var npk, nrk *string
			pages := 0
			for ; ; pages++ {
				if pages > 10000 {
					t.Fatal("paging does not end")
				}
				opts := &aztables.ListEntitiesOptions{Top: &c.top, NextPartitionKey: npk, NextRowKey: nrk}
				if c.filter != "" {
					opts.Filter = &c.filter
				}
				// Each page from the next front end.
				pager := clients[pages%len(clients)].NewListEntitiesPager(opts)
				page, err := pager.NextPage(ctx(t))
				if err != nil {
					t.Fatalf("page %d: %v", pages, err)
				}
				if len(page.Entities) > int(c.top) {
					t.Fatalf("page %d holds %d entities, $top %d", pages, len(page.Entities), c.top)
				}
				for _, raw := range page.Entities {
					e := decodeEDM(t, raw)
					got = append(got, e.PartitionKey+"/"+e.RowKey)
				}
				npk, nrk = page.NextPartitionKey, page.NextRowKey
				if (npk == nil || *npk == "") && (nrk == nil || *nrk == "") {
					break
				}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("filter %q, $top %d: %d pages over 3 front ends returned %d entities, want %d, each once and in order",
					c.filter, c.top, pages+1, len(got), len(c.want))
			}
			t.Logf("filter %q, $top %d: %d entities in %d pages, each from the next front end", c.filter, c.top, len(got), pages+1)
		}
	})
}

// TestPostgresFault restarts PostgreSQL under a steady insert load through two front
// ends: while the database is down they answer 503 ServerBusy (with Retry-After); once
// it is back they serve again without being restarted; and every insert they
// acknowledged is there afterwards.
func TestPostgresFault(t *testing.T) {
	url := postgresURL(t)
	ctl := strings.Fields(os.Getenv("CERULEAN_TEST_POSTGRES_CTL"))
	if len(ctl) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CERULEAN_TEST_POSTGRES_CTL is not set (scripts/test sets it)")
		}
		t.Skip("CERULEAN_TEST_POSTGRES_CTL is not set; scripts/test sets it to the pg_ctl command of its database")
	}
	pgctl := func(args ...string) {
		t.Helper()
		cmd := exec.Command(ctl[0], append(slices.Clone(ctl[1:]), args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("pg_ctl %v: %v\n%s", args, err, out)
		}
	}
	srvs := []*server{
		startServer(t, withArgs("--engine", "postgres", "--postgres-url", url)),
		startServer(t, withArgs("--engine", "postgres", "--postgres-url", url)),
	}
	var clients []*aztables.Client
	_, name := newTable(t, newServiceClient(t, srvs[0]))
	for _, s := range srvs {
		clients = append(clients, newServiceClient(t, s).NewClient(name))
	}

	type phase int32
	const (
		before phase = iota
		down
		after
	)
	var (
		cur      atomic.Int32
		mu       sync.Mutex
		acked    []string
		statuses = map[phase]map[int]int{before: {}, down: {}, after: {}}
		otherErr []string
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	for w := range 8 {
		c := clients[w%len(clients)]
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				ph := phase(cur.Load())
				rk := fmt.Sprintf("w%02d-%06d", w, i)
				cx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := c.AddEntity(cx, marshal(t, map[string]any{"PartitionKey": "p", "RowKey": rk, "W": w}), nil)
				cancel()
				mu.Lock()
				var re *azcore.ResponseError
				switch {
				case err == nil:
					acked = append(acked, rk)
					statuses[ph][200]++
				case errors.As(err, &re):
					statuses[ph][re.StatusCode]++
					if re.StatusCode == http.StatusServiceUnavailable {
						if ra := re.RawResponse.Header.Get("Retry-After"); ra == "" {
							otherErr = append(otherErr, "503 without Retry-After")
						}
					} else {
						otherErr = append(otherErr, fmt.Sprintf("phase %d: %v", ph, err))
					}
				default:
					otherErr = append(otherErr, fmt.Sprintf("phase %d: transport: %v", ph, err))
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond) // a client honouring Retry-After waits longer
				}
			}
		})
	}
	time.Sleep(time.Second)
	cur.Store(int32(down))
	pgctl("-w", "-m", "fast", "stop")
	time.Sleep(2 * time.Second)
	pgctl("-w", "-t", "60", "start")
	cur.Store(int32(after))
	// Recovery: inserts succeed again on both front ends, without restarting them.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		ok := statuses[after][200] >= 50
		mu.Unlock()
		if ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	t.Logf("responses before the restart %v, while down %v, after %v", statuses[before], statuses[down], statuses[after])
	for _, e := range otherErr {
		t.Errorf("unexpected failure: %s", e)
	}
	if statuses[before][200] == 0 {
		t.Fatal("no insert succeeded before the restart")
	}
	if statuses[down][http.StatusServiceUnavailable] == 0 {
		t.Fatal("no 503 while the database was down")
	}
	if statuses[after][200] < 50 {
		t.Fatalf("only %d inserts succeeded in the 30 s after the database came back", statuses[after][200])
	}
	for i, c := range clients {
		// Both front ends serve reads again, and every acknowledged insert is there.
		var got []string
		for _, raw := range listAll(t, c, nil) {
			got = append(got, decodeEDM(t, raw).RowKey)
		}
		have := make(map[string]bool, len(got))
		for _, rk := range got {
			have[rk] = true
		}
		lost := 0
		for _, rk := range acked {
			if !have[rk] {
				lost++
				if lost < 5 {
					t.Errorf("front end %d: acknowledged insert %s is missing", i, rk)
				}
			}
		}
		if lost > 0 {
			t.Fatalf("front end %d: %d of %d acknowledged inserts lost", i, lost, len(acked))
		}
		t.Logf("front end %d: all %d acknowledged inserts present (%d stored in all, the rest answered 503 but committed)", i, len(acked), len(got))
	}
}
