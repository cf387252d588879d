package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// partitionsReport is /debug/partitions as a client reads it.
type partitionsReport struct {
	WindowSeconds  float64 `json:"window_seconds"`
	TargetPerSec   float64 `json:"target_per_sec"`
	EntitiesPerSec float64 `json:"entities_per_sec"`
	Tables         []struct {
		Account    string `json:"account"`
		Table      string `json:"table"`
		Partitions []struct {
			PartitionKey   string  `json:"partition_key"`
			EntitiesPerSec float64 `json:"entities_per_sec"`
			ErrorPerSec    float64 `json:"error_per_sec"`
			OfTarget       float64 `json:"of_target"`
		} `json:"partitions"`
	} `json:"tables"`
}

func getPartitions(t *testing.T, debugAddr string, q url.Values) partitionsReport {
	t.Helper()
	status, ct, body := getDebug(t, debugAddr, "/debug/partitions?"+q.Encode())
	if status != 200 || ct != "application/json" {
		t.Fatalf("/debug/partitions: %d %q %s", status, ct, body)
	}
	var r partitionsReport
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/debug/partitions: %v\n%s", err, body)
	}
	return r
}

// hotBenchResult is what `cerulean bench --json` says of its one workload.
type hotBenchResult struct {
	Workload         string  `json:"workload"`
	Entities         int64   `json:"entities"`
	HottestPartition string  `json:"hottest_partition"`
	EntitiesPerSec   float64 `json:"entities_per_sec"`
}

// hotBench runs `cerulean bench --hot-partition` inserting into table for duration with
// workers, and returns its result.
func hotBench(t *testing.T, srv *server, table, duration, workers string) hotBenchResult {
	t.Helper()
	status, stdout, stderr := runCLI(t, "bench", "--connection-string", compatConnectionString(srv),
		"--hot-partition", "--workloads", "insert", "--duration", duration, "--workers", workers, "--table", table, "--keep", "--json")
	if status != 0 {
		t.Fatalf("bench: exit %d\n%s\n%s", status, stdout, stderr)
	}
	var doc struct {
		Results []hotBenchResult `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || len(doc.Results) != 1 || doc.Results[0].HottestPartition == "" {
		t.Fatalf("bench --json: %v\n%s", err, stdout)
	}
	return doc.Results[0]
}

// TestHotPartitionBench: `cerulean bench --hot-partition` against a server with
// --debug-addr shows up in /debug/partitions: the bench's partition is its table's
// busiest, with the entities the bench wrote, ahead of the partitions other clients
// touched; a query confined to one partition counts the entities it read.
func TestHotPartitionBench(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	debugAddr := fmt.Sprintf("127.0.0.1:%d", port)
	srv := startServer(t, withArgs("--debug-addr", debugAddr))
	name := "hotbench" + runID

	// Other clients: 10 partitions of 3 entities, then a query of one of them.
	client := newServiceClient(t, srv).NewClient(name)
	if _, err := client.CreateTable(ctx(t), nil); err != nil {
		t.Fatal(err)
	}
	for p := range 10 {
		for r := range 3 {
			ent := marshal(t, map[string]any{"PartitionKey": fmt.Sprintf("cold%02d", p), "RowKey": fmt.Sprint(r)})
			if _, err := client.AddEntity(ctx(t), ent, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	filter := "PartitionKey eq 'cold07'"
	if got := listAll(t, client, &aztables.ListEntitiesOptions{Filter: &filter}); len(got) != 3 {
		t.Fatalf("query of cold07: %d entities", len(got))
	}

	bench := hotBench(t, srv, name, "3s", "4")

	r := getPartitions(t, debugAddr, url.Values{"account": {devAccount}, "table": {name}, "top": {"3"}})
	if len(r.Tables) != 1 || r.Tables[0].Table != name || r.Tables[0].Account != devAccount || len(r.Tables[0].Partitions) != 3 {
		t.Fatalf("/debug/partitions?table=%s: %+v", name, r)
	}
	ps := r.Tables[0].Partitions
	if ps[0].PartitionKey != bench.HottestPartition {
		t.Fatalf("first partition %q, want the bench's %q: %+v", ps[0].PartitionKey, bench.HottestPartition, ps)
	}
	// The server has run for less than the window: the rate × the window is the count.
	count := ps[0].EntitiesPerSec * r.WindowSeconds
	if count < float64(bench.Entities)-0.5 || count > float64(bench.Entities)*1.05+50 {
		t.Errorf("hot partition counted %.1f entity operations, the bench wrote %d", count, bench.Entities)
	}
	// The next: cold07, its 3 inserts and the 3 entities its query read; then 3.
	if ps[1].PartitionKey != "cold07" || fmt.Sprintf("%.1f", ps[1].EntitiesPerSec*r.WindowSeconds) != "6.0" ||
		fmt.Sprintf("%.1f", ps[2].EntitiesPerSec*r.WindowSeconds) != "3.0" {
		t.Errorf("after the hot one: %+v (window %.1fs)", ps[1:], r.WindowSeconds)
	}
	if r.TargetPerSec != 2000 || ps[0].OfTarget <= 0 || ps[0].ErrorPerSec != 0 {
		t.Errorf("target %v, hot %+v", r.TargetPerSec, ps[0])
	}
	t.Logf("bench %s: %d entities, %.0f/s; /debug/partitions: %.0f/s over %.1fs (%.0f%% of target)",
		bench.HottestPartition, bench.Entities, bench.EntitiesPerSec, ps[0].EntitiesPerSec, r.WindowSeconds, 100*ps[0].OfTarget)

	if all := getPartitions(t, debugAddr, url.Values{"account": {"nobody"}}); len(all.Tables) != 0 {
		t.Errorf("?account=nobody: %+v", all)
	}
}

// TestHotPartitionWarning: a partition that stays above --hot-partition-warn for
// --hot-partition-warn-after gets a warning line naming it, its rate and the threshold; a
// partition below the threshold gets none; when the load stops, a line says it cooled.
// (The sub-windows are 10 s, so this takes about half a minute; it runs in parallel.)
func TestHotPartitionWarning(t *testing.T) {
	t.Parallel()
	srv := startServer(t, withArgs("--hot-partition-warn", "20", "--hot-partition-warn-after", "10s"))
	name := "hotwarn" + runID
	client := newServiceClient(t, srv).NewClient(name)
	if _, err := client.CreateTable(ctx(t), nil); err != nil {
		t.Fatal(err)
	}
	// A cold partition beside it: about 2 entity operations per second for the whole run.
	stopCold := make(chan struct{})
	coldDone := make(chan struct{})
	go func() {
		defer close(coldDone)
		for i := 0; ; i++ {
			select {
			case <-stopCold:
				return
			case <-time.After(500 * time.Millisecond):
			}
			_, _ = client.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "cold", "RowKey": fmt.Sprint(i)}), nil)
		}
	}()
	hot := hotBench(t, srv, name, "20s", "1").HottestPartition
	warned := fmt.Sprintf(`level=WARN msg="hot partition" component=hotpart account=%s table=%s partition_key=%s `, devAccount, name, hot)
	cooled := fmt.Sprintf(`level=INFO msg="hot partition cooled" component=hotpart account=%s table=%s partition_key=%s `, devAccount, name, hot)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(srv.logs.Tail(1<<20), cooled) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	close(stopCold)
	<-coldDone
	logs := srv.logs.Tail(1 << 20)
	line := lineWith(logs, warned)
	if line == "" {
		t.Fatalf("no warning line %q in the server's output", warned)
	}
	if !strings.Contains(line, " threshold=20 target=2000 ") || !strings.Contains(line, " entities_per_sec=") {
		t.Errorf("warning line: %s", line)
	}
	if !strings.Contains(logs, cooled) {
		t.Errorf("no line %q within 30 s of the load's end", cooled)
	}
	if strings.Contains(logs, "partition_key=cold ") {
		t.Errorf("the cold partition (2/s, threshold 20/s) was reported:\n%s", lineWith(logs, "partition_key=cold "))
	}
}

// lineWith returns the first line of s that contains sub ("" if none).
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
