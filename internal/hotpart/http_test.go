package hotpart

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func loaded(t *testing.T) *Tracker {
	clk := newClock()
	tr := New(Options{Now: clk.Now, Warn: -1})
	for i := range 6000 {
		tr.Observe(insert("acct", "orders", "hot"))
		if i%3 == 0 {
			tr.Observe(insert("acct", "orders", "warm"))
			tr.Observe(insert("acct", "users", "u"+strings.Repeat("x", i%20)))
		}
		clk.Advance(10 * time.Millisecond)
	}
	return tr
}

// TestHandler reads /debug/partitions as an operator would.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(loaded(t).Handler())
	defer srv.Close()
	get := func(query string) (Report, int) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/debug/partitions" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r Report
		if resp.StatusCode == http.StatusOK {
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
				t.Fatal(err)
			}
		}
		return r, resp.StatusCode
	}
	r, _ := get("")
	if len(r.Tables) != 2 || r.Tables[0].Table != "orders" || r.Tables[0].Partitions[0].PartitionKey != "hot" ||
		r.TargetPerSec != 2000 || r.Tables[0].Partitions[0].EntitiesPerSec < 99 || r.Tables[0].Partitions[0].EntitiesPerSec > 101 {
		t.Errorf("report: %+v", r)
	}
	if len(r.Tables[1].Partitions) != DefaultTop {
		t.Errorf("users: %d partitions, want the default top %d", len(r.Tables[1].Partitions), DefaultTop)
	}
	if r, _ := get("?table=users&top=2"); len(r.Tables) != 1 || r.Tables[0].Table != "users" || len(r.Tables[0].Partitions) != 2 {
		t.Errorf("?table=users&top=2: %+v", r)
	}
	if r, _ := get("?top=0&account=acct"); len(r.Tables) != 2 || len(r.Tables[1].Partitions) != 20 {
		t.Errorf("?top=0: %+v", r)
	}
	if r, _ := get("?account=nobody"); len(r.Tables) != 0 {
		t.Errorf("?account=nobody: %+v", r)
	}
	if _, code := get("?top=-1"); code != http.StatusBadRequest {
		t.Errorf("?top=-1: status %d", code)
	}
}

// TestCollector: the top partitions as gauges, never more than MetricTop.
func TestCollector(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(loaded(t).Collector())
	if n, err := testutil.GatherAndCount(reg, "cerulean_hot_partition_entities_per_second"); err != nil || n != MetricTop {
		t.Errorf("%d series (%v), want %d", n, err, MetricTop)
	}
	want := `# HELP cerulean_partition_target_entities_per_second A partition's throughput target, entities per second (Azure Table storage's).
# TYPE cerulean_partition_target_entities_per_second gauge
cerulean_partition_target_entities_per_second 2000
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cerulean_partition_target_entities_per_second"); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cerulean_hot_partition_entities_per_second" {
			continue
		}
		m := mf.GetMetric()[0]
		var pk string
		for _, l := range m.GetLabel() {
			if l.GetName() == "partition_key" {
				pk = l.GetValue()
			}
		}
		if pk != "hot" || m.GetGauge().GetValue() < 99 {
			t.Errorf("first series: %v", m)
		}
	}
	if got := label(strings.Repeat("é", 100) + "\xff"); len(got) > maxLabel+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("label: %q", got)
	}
}
