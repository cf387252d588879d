package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestBenchIndexWorkloads: `cerulean bench --workloads indexinsert,indexquery` on a small
// table, with both clients: every index query returns all of its value's entities (the
// workload counts a short one as an error), the server says it planned them on the index,
// the index queries are faster than the unindexed scans (both one at a time; at 20,000
// entities a scan reads 200 times what an index query does), and the insert turns report
// three rates. The ratio is the 1,000,000-entity run's to show.
func TestBenchIndexWorkloads(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	for _, kind := range []string{"sdk", "raw"} {
		status, stdout, stderr := runTool(t, 3*time.Minute, nil, "bench", "--json", "--connection-string", compatConnectionString(srv),
			"--client", kind, "--workloads", "indexinsert,indexquery", "--duration", "600ms", "--workers", "4",
			"--index-entities", "20000", "--entity-size", "200")
		if status != 0 {
			t.Fatalf("bench --client %s: exit %d\n%s\n%s", kind, status, stdout, stderr)
		}
		var doc struct {
			Results []struct {
				Workload string    `json:"workload"`
				Ops      int64     `json:"ops"`
				Errors   int64     `json:"errors"`
				Inserts  []float64 `json:"index_insert_entities_per_sec"`
				Speedup  float64   `json:"index_speedup"`
				ScanP50  float64   `json:"index_scan_p50_ms"`
				Notes    string    `json:"notes"`
			} `json:"results"`
			Error string `json:"error"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil || doc.Error != "" || len(doc.Results) != 2 {
			t.Fatalf("bench --json: %v %s\n%s", err, doc.Error, stdout)
		}
		ins, q := doc.Results[0], doc.Results[1]
		if ins.Workload != "indexinsert" || ins.Errors != 0 || len(ins.Inserts) != 3 || ins.Inserts[0] <= 0 || ins.Inserts[1] <= 0 || ins.Inserts[2] <= 0 {
			t.Errorf("%s indexinsert: %+v", kind, ins)
		}
		if q.Workload != "indexquery" || q.Errors != 0 || q.Ops == 0 || q.ScanP50 <= 0 || q.Speedup <= 1 {
			t.Errorf("%s indexquery: %+v", kind, q)
		}
		if !strings.Contains(q.Notes, `plan "index ByTag`) {
			t.Errorf("%s indexquery did not run on the index: %s", kind, q.Notes)
		}
		t.Logf("%s: indexinsert %s; indexquery %s", kind, ins.Notes, q.Notes)
	}
}
