package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/ceruleandb/cerulean/internal/hotpart"
)

// scrape reads /metrics at addr: each series (name and labels) with its value.
func scrape(t testing.TB, addr string) map[string]float64 {
	t.Helper()
	status, ct, body := getDebug(t, addr, "/metrics")
	if status != 200 || !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET /metrics: %d %s", status, ct)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// metricsServer starts a server with --debug-addr and returns it with that address.
func metricsServer(t *testing.T, opts ...serverOption) (*server, string) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	return startServer(t, append(opts, withArgs("--debug-addr", addr))...), addr
}

// TestMetricsMove: the series at /metrics count what the SDK does — requests by
// operation, status class and account, bytes, entities written, read and scanned, batch
// sizes — and a refused signature.
func TestMetricsMove(t *testing.T) {
	srv, debug := metricsServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	before := scrape(t, debug)

	c, _ := newTable(t, svc)
	for i := range 20 {
		e, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprintf("r%02d", i), "N": i})
		if _, err := c.AddEntity(ctx(t), e, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.GetEntity(ctx(t), "p", "r03", nil); err != nil {
		t.Fatal(err)
	}
	// A filter on a property, not the keys: all 20 entities are examined, 2 returned.
	f := "N ge 18"
	pager := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &f})
	got := 0
	for pager.More() {
		page, err := pager.NextPage(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		got += len(page.Entities)
	}
	if got != 2 {
		t.Fatalf("query returned %d entities, want 2", got)
	}
	var actions []aztables.TransactionAction
	for i := range 5 {
		e, _ := json.Marshal(map[string]any{"PartitionKey": "b", "RowKey": fmt.Sprintf("r%d", i)})
		actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: e})
	}
	if _, err := c.SubmitTransaction(ctx(t), actions, nil); err != nil {
		t.Fatal(err)
	}
	wrong := newServiceClientFor(t, srv.Endpoint(acct), acct, base64.StdEncoding.EncodeToString([]byte("not the key")), nil)
	if _, err := wrong.NewListTablesPager(nil).NextPage(ctx(t)); err == nil {
		t.Fatal("a wrong key was accepted")
	}

	after := scrape(t, debug)
	delta := func(series string) float64 { return after[series] - before[series] }
	for _, w := range []struct {
		series string
		min    float64
		max    float64
	}{
		{`cerulean_requests_total{account="` + acct + `",operation="InsertEntity",status_class="2xx"}`, 20, 20},
		{`cerulean_requests_total{account="` + acct + `",operation="QueryEntity",status_class="2xx"}`, 1, 1},
		{`cerulean_requests_total{account="` + acct + `",operation="QueryEntities",status_class="2xx"}`, 1, 1},
		{`cerulean_requests_total{account="` + acct + `",operation="EntityGroupTransaction",status_class="2xx"}`, 1, 1},
		{`cerulean_requests_total{account="` + acct + `",operation="QueryTables",status_class="4xx"}`, 1, 1},
		{`cerulean_request_duration_seconds_count{operation="InsertEntity"}`, 20, 20},
		{`cerulean_request_bytes_total{operation="InsertEntity"}`, 20 * 30, 1e6},
		{`cerulean_response_bytes_total{operation="QueryEntities"}`, 50, 1e6},
		{`cerulean_entities_written_total`, 25, 25},
		{`cerulean_entities_read_total`, 3, 3},
		{`cerulean_entities_scanned_total`, 20, 20}, // the query's; a Get is not a scan
		{`cerulean_batch_size_count`, 1, 1},
		{`cerulean_batch_size_sum`, 5, 5},
		{`cerulean_auth_failures_total{reason="signature"}`, 1, 1},
	} {
		if d := delta(w.series); d < w.min || d > w.max {
			t.Errorf("%s moved by %v, want %v..%v", w.series, d, w.min, w.max)
		}
	}
	engine := "cerulean_pebble_disk_bytes"
	if strings.Contains(os.Getenv("CERULEAN_TEST_ENGINE_ARGS"), "postgres") {
		engine = "cerulean_postgres_pool_max_conns"
	}
	for _, s := range []string{engine, "process_resident_memory_bytes", "go_goroutines"} {
		if _, ok := after[s]; !ok {
			t.Errorf("/metrics has no %s", s)
		}
	}
}

// TestMetricsBounded: thousands of distinct keys, hundreds of tables and ten thousand
// requests naming unknown accounts and tables add no series: the series after a small
// round of each kind of request are all there are after a large one.
func TestMetricsBounded(t *testing.T) {
	srv, debug := metricsServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name

	round := func(tables, partitions, unknown int, prefix string) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		// Tables, each with an entity.
		for i := range tables {
			name := fmt.Sprintf("%s%d", prefix, i)
			if _, err := svc.CreateTable(ctx(t), name, nil); err != nil {
				t.Fatalf("CreateTable(%s): %v", name, err)
			}
			e, _ := json.Marshal(map[string]any{"PartitionKey": name, "RowKey": name})
			if _, err := svc.NewClient(name).AddEntity(ctx(t), e, nil); err != nil {
				t.Fatal(err)
			}
		}
		// Distinct keys: partitions × 100 rows, by batches, 4 at a time.
		c := svc.NewClient(prefix + "0")
		sem := make(chan struct{}, 4)
		for p := range partitions {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				var actions []aztables.TransactionAction
				for r := range 100 {
					e, _ := json.Marshal(map[string]any{"PartitionKey": fmt.Sprintf("%s-p%d", prefix, p), "RowKey": fmt.Sprintf("r%d", r)})
					actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: e})
				}
				if _, err := c.SubmitTransaction(context.Background(), actions, nil); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}()
		}
		wg.Wait()
		// Unknown accounts and tables, unauthenticated, by raw HTTP, 8 at a time.
		work := make(chan int)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					var u string
					if i%2 == 0 {
						u = fmt.Sprintf("%s/%s-acct%d/%s-t%d()", srv.BaseURL(), prefix, i, prefix, i)
					} else {
						u = fmt.Sprintf("%s/%s/%s-t%d(PartitionKey='k%d',RowKey='k%d')", srv.BaseURL(), acct, prefix, i, i, i)
					}
					resp, err := http.Get(u)
					if err != nil {
						select {
						case errs <- err:
						default:
						}
						continue
					}
					resp.Body.Close()
				}
			}()
		}
		for i := range unknown {
			work <- i
		}
		close(work)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}

	// Table names unique to this run: an engine's database may be shared.
	id := strings.ToLower(strconv.FormatInt(time.Now().UnixNano()%1e9, 36))
	round(3, 2, 20, "small"+id)
	small := scrape(t, debug)
	round(300, 100, 10000, "large"+id)
	large := scrape(t, debug)

	if v := large["cerulean_entities_written_total"]; v < 10000+300 {
		t.Fatalf("entities written %v: the large round did not happen", v)
	}
	// The hot-partition metric is the one series that names partitions, by design: the
	// busiest few (hotpart.MetricTop), two series each, whatever the key space.
	hot := func(s string) bool { return strings.HasPrefix(s, "cerulean_hot_partition_") }
	var added []string
	hotSeries := 0
	for s := range large {
		if hot(s) {
			hotSeries++
			continue
		}
		if _, ok := small[s]; !ok {
			added = append(added, s)
		}
	}
	sort.Strings(added)
	if len(added) > 0 {
		t.Errorf("the large round added %d series (%d before), e.g. %q", len(added), len(small), added[:min(len(added), 10)])
	}
	if hotSeries > 2*hotpart.MetricTop {
		t.Errorf("%d hot-partition series, more than the top %d partitions' two each", hotSeries, hotpart.MetricTop)
	}
	for s := range large {
		if !hot(s) && (strings.Contains(s, id) || strings.Contains(s, "acct")) {
			t.Errorf("series %s names the client's data", s)
		}
	}
}

// TestGOMAXPROCSForPebble: a server on Pebble gives the Go scheduler two Ps more than its
// default (pebble.BackgroundProcs), which go_sched_gomaxprocs_threads shows and the
// debug log explains; a GOMAXPROCS in the environment is kept as it is; on PostgreSQL
// (no background work in the process) nothing is raised.
func TestGOMAXPROCSForPebble(t *testing.T) {
	raised := regexp.MustCompile(`GOMAXPROCS raised for Pebble's background work" from=(\d+) to=(\d+)`)
	start := func(env string) (procs int, m []string) {
		srv, addr := metricsServer(t, withChildEnv(env), withArgs("--log-level", "debug"))
		procs = int(scrape(t, addr)["go_sched_gomaxprocs_threads"])
		return procs, raised.FindStringSubmatch(srv.logs.Tail(1 << 20))
	}
	procs, m := start("GOMAXPROCS=") // unset
	switch {
	case onPostgres():
		if m != nil {
			t.Fatalf("GOMAXPROCS raised on PostgreSQL: %q", m[0])
		}
	case m == nil:
		t.Fatalf("no GOMAXPROCS raise logged (go_sched_gomaxprocs_threads %d)", procs)
	default:
		from, _ := strconv.Atoi(m[1])
		to, _ := strconv.Atoi(m[2])
		if from < 1 || to != from+2 || procs != to {
			t.Fatalf("GOMAXPROCS raised from %d to %d, metric %d; want from+2 on the metric", from, to, procs)
		}
	}
	procs, m = start("GOMAXPROCS=1")
	if m != nil || procs != 1 {
		t.Fatalf("with GOMAXPROCS=1 in the environment: metric %d, log %q", procs, m)
	}
}

// TestGCHeapFloor: the server keeps 64 MiB of heap growth between collections
// (internal/gcfloor) by raising GOGC, which go_gc_gogc_percent and go_gc_heap_goal_bytes
// show — a goal of about the headroom on an idle server's few-MiB heap, not the default's
// 4 MiB nor gigabytes; a GOGC in the environment is kept as it is.
func TestGCHeapFloor(t *testing.T) {
	start := func(env string) (percent, goal float64) {
		srv, addr := metricsServer(t, withChildEnv(env))
		// Some requests first, so the heap is a serving server's.
		svc := newServiceClient(t, srv)
		name := tableName(t)
		if _, err := svc.CreateTable(ctx(t), name, nil); err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			e, _ := json.Marshal(map[string]any{"PartitionKey": "p", "RowKey": strconv.Itoa(i)})
			if _, err := svc.NewClient(name).AddEntity(ctx(t), e, nil); err != nil {
				t.Fatal(err)
			}
		}
		m := scrape(t, addr)
		return m["go_gc_gogc_percent"], m["go_gc_heap_goal_bytes"]
	}
	percent, goal := start("GOGC=") // unset
	if percent <= 100 || goal < 64<<20 || goal > 256<<20 {
		t.Fatalf("GOGC unset: go_gc_gogc_percent %v, go_gc_heap_goal_bytes %v; want above 100 and a goal of 64–256 MiB", percent, goal)
	}
	percent, _ = start("GOGC=100")
	if percent != 100 {
		t.Fatalf("with GOGC=100 in the environment: go_gc_gogc_percent %v", percent)
	}
}
