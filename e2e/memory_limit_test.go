package e2e

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestMemoryLimit: with --memory-limit 160MiB (the smallest accepted), writing several
// times that in 1 KiB entities, then reading them back, keeps the server's peak resident
// memory (VmHWM) under the limit: the block cache, memtables, row cache and request
// bodies are budgeted from it (internal/membudget) and the Go runtime keeps its heap
// within the rest. The load (150,000 entities, as in issue 48, about 175 MB of request
// bodies) fills the 4 MiB memtables dozens of times over; the reads fill the row cache
// and the block cache. Without the limit (the fixed 512 MiB budgets) such a run peaked at
// 188–198 MiB. The server exports its budget as cerulean_memory_budget_bytes, which must
// add up under the limit. Pebble only: PostgreSQL's memory is another process's.
func TestMemoryLimit(t *testing.T) {
	if onPostgres() {
		t.Skip("the budget's caches are the pebble engine's")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs Linux /proc to measure the server's peak memory")
	}
	const limitMiB = 160
	srv, debug := debugServer(t, withArgs("--memory-limit", strconv.Itoa(limitMiB)+"MiB"))
	conn := compatConnectionString(srv)
	load := runBenchJSON(t, "--connection-string", conn, "--client", "raw", "--workloads", "batchload",
		"--load", "150000", "--workers", "16", "--table", "memlimit", "--keep")
	if len(load) != 1 || load[0].Errors != 0 || load[0].Entities < 150000 {
		t.Fatalf("load: %+v", load)
	}
	_, loadPeak := srv.memKB(t)
	reads := runBenchJSON(t, "--connection-string", conn, "--client", "raw", "--workloads", "read,scan",
		"--duration", "3s", "--workers", "16", "--preload", "5000", "--table", "memlimit", "--keep")
	for _, r := range reads {
		if r.Errors != 0 || r.Ops == 0 {
			t.Errorf("%s: %+v", r.Workload, r)
		}
	}
	rss, peak := srv.memKB(t)
	t.Logf("--memory-limit %dMiB: peak RSS %d MiB after loading %d entities in %.0f/s, %d MiB after the reads, %d MiB now",
		limitMiB, loadPeak>>10, load[0].Entities, load[0].Rate, peak>>10, rss>>10)
	if peak > limitMiB<<10 {
		t.Errorf("server peak RSS %d MiB, want under --memory-limit %d MiB", peak>>10, limitMiB)
	}

	_, _, body := getDebug(t, debug, "/metrics")
	budget := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), "} ")
		holder, found := strings.CutPrefix(name, `cerulean_memory_budget_bytes{holder="`)
		if !ok || !found {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		budget[strings.TrimSuffix(holder, `"`)] = f
	}
	sum := budget["base"] + budget["block_cache"] + budget["memtables"] + budget["row_cache"] + budget["request_bodies"]
	if budget["limit"] != limitMiB<<20 || budget["memtables"] <= 0 || budget["go_limit"] <= 0 || sum >= budget["limit"] {
		t.Errorf("cerulean_memory_budget_bytes %v: the holders take %.0f MiB", budget, sum/(1<<20))
	}
}
