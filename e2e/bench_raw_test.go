package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// benchRawResult is what `cerulean bench --json` says of a workload, with the raw
// client's, the floor's and the paced round's figures.
type benchRawResult struct {
	Workload    string    `json:"workload"`
	Ops         int64     `json:"ops"`
	Entities    int64     `json:"entities"`
	Errors      int64     `json:"errors"`
	Rate        float64   `json:"entities_per_sec"`
	Rounds      []float64 `json:"rounds_entities_per_sec"`
	FloorPerSec float64   `json:"floor_entities_per_sec"`
	FloorRatio  float64   `json:"floor_ratio"`
	Notes       string    `json:"notes"`
	Paced       *struct {
		Target float64 `json:"target_ops_per_sec"`
		Ops    float64 `json:"ops_per_sec"`
		P99    float64 `json:"p99_ms"`
		Errors int64   `json:"errors"`
	} `json:"paced"`
}

func runBenchJSON(t *testing.T, args ...string) []benchRawResult {
	t.Helper()
	status, stdout, stderr := runTool(t, 3*time.Minute, nil, append([]string{"bench", "--json"}, args...)...)
	if status != 0 {
		t.Fatalf("bench: exit %d\n%s\n%s", status, stdout, stderr)
	}
	var doc struct {
		Results []benchRawResult `json:"results"`
		Error   string           `json:"error"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || doc.Error != "" {
		t.Fatalf("bench --json: %v %s\n%s", err, doc.Error, stdout)
	}
	return doc.Results
}

// TestBenchRawClientAndFloor: `cerulean bench --client raw --floor` runs every workload
// against the server through the raw client — its SharedKeyLite signatures, entity URLs,
// queries with continuation and $batch bodies all accepted, so no request fails — then
// against the floor, in rounds, and paced at half the measured rate; the server's own
// checks (lost updates, short scans) pass. Over TLS in the postgres pass.
func TestBenchRawClientAndFloor(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	rs := runBenchJSON(t, "--connection-string", compatConnectionString(srv), "--client", "raw", "--floor",
		"--rounds", "2", "--latency-at", "0.5", "--duration", "400ms", "--workers", "8",
		"--preload", "1000", "--load", "2000", "--entity-size", "1024")
	seen := map[string]bool{}
	for _, r := range rs {
		seen[r.Workload] = true
		if r.Ops == 0 || r.Errors != 0 || strings.Contains(r.Notes, "skipped") {
			t.Errorf("%s: %+v", r.Workload, r)
			continue
		}
		if r.Workload == "bulkload" {
			if r.FloorPerSec != 0 {
				t.Errorf("bulkload has no floor, got %+v", r)
			}
			continue
		}
		if r.FloorPerSec <= 0 || r.FloorRatio <= 0 || len(r.Rounds) != 2 {
			t.Errorf("%s: no floor or rounds: %+v", r.Workload, r)
		}
		if r.Workload == "batchload" {
			continue // a whole load: not paced
		}
		if p := r.Paced; p == nil || p.Errors != 0 || p.P99 <= 0 || p.Ops > 1.1*p.Target {
			t.Errorf("%s: paced round %+v", r.Workload, r.Paced)
		}
	}
	for _, w := range []string{"insert", "read", "upsert", "update", "query", "scan", "batch", "batchload", "bulkload"} {
		if !seen[w] {
			t.Errorf("no %s result", w)
		}
	}
	for _, r := range rs {
		if r.Workload == "query" && r.Entities != r.Ops*200 {
			t.Errorf("query: %d entities in %d partition reads, want 200 each", r.Entities, r.Ops)
		}
	}
}

// The raw client signs with an account SAS as well as with the key.
func TestBenchRawClientSAS(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	a := srv.Default()
	svc := newServiceClient(t, srv)
	all := aztables.AccountSASPermissions{Read: true, Write: true, Delete: true, List: true, Add: true, Create: true, Update: true, Process: true}
	rt := aztables.AccountSASResourceTypes{Service: true, Container: true, Object: true}
	sasURL, err := svc.GetAccountSASURL(rt, all, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, sas, _ := strings.Cut(sasURL, "?")
	cs := "AccountName=" + a.Name + ";TableEndpoint=" + srv.Endpoint(a.Name) + ";SharedAccessSignature=" + sas + ";"
	rs := runBenchJSON(t, "--connection-string", cs, "--client", "raw", "--workloads", "insert,read,query,batch",
		"--duration", "300ms", "--workers", "4", "--preload", "400")
	for _, r := range rs {
		if r.Ops == 0 || r.Errors != 0 {
			t.Errorf("%s over SAS: %+v", r.Workload, r)
		}
	}
}
