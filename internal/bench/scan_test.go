package bench

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// scanFilterRE matches the scan workload's filter; the fake serves it by brute force.
var scanFilterRE = regexp.MustCompile(`^PartitionKey ge '([^']*)' and PartitionKey lt '([^']*)' and Ratio lt 0\.01$`)

// scan serves the scan workload's filter: entities with lo <= PartitionKey < hi and a
// numeric Ratio below 0.01, in key order, paged with both continuation headers.
func (f *fakeTables) scan(w http.ResponseWriter, r *http.Request, tbl map[string]*fakeEntity, lo, hi string) {
	var keys []string // pk "\x00" rk, which sorts like (pk, rk) for keys without NUL
	for k, e := range tbl {
		pk, _ := e.props["PartitionKey"].(string)
		ratio, ok := e.props["Ratio"].(float64)
		if pk >= lo && pk < hi && ok && ratio < 0.01 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	start := 0
	q := r.URL.Query()
	if npk := q.Get("NextPartitionKey"); npk != "" {
		start, _ = slices.BinarySearch(keys, npk+"\x00"+q.Get("NextRowKey"))
	}
	size := f.pageSize
	if size == 0 {
		size = 1000
	}
	end := min(len(keys), start+size)
	value := []map[string]any{}
	for _, k := range keys[start:end] {
		value = append(value, tbl[k].render())
	}
	if end < len(keys) && !(f.dropLastPages && end+size >= len(keys)) {
		next := tbl[keys[end]].props
		w.Header().Set("x-ms-continuation-NextPartitionKey", next["PartitionKey"].(string))
		w.Header().Set("x-ms-continuation-NextRowKey", next["RowKey"].(string))
	}
	writeJSON(w, http.StatusOK, map[string]any{"value": value})
}

func TestScanMatches(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{0, 0}, {5, 5}, {10, 10}, {11, 10}, {999, 10}, {1000, 10}, {1005, 15}, {1010, 20},
		{10_000, 100}, {1_000_000, 10_000},
	} {
		if got := scanMatches(tc.n); got != tc.want {
			t.Errorf("scanMatches(%d) = %d, want %d", tc.n, got, tc.want)
		}
		if tc.n > 10_000 {
			continue
		}
		// The same count from the Ratio each preloaded entity gets.
		n := 0
		b := &bench{}
		for i := range tc.n {
			if !strings.Contains(string(b.appendEntity(nil, "r", "k", 0, int64(i), stamp(nil))), `"Ratio":0.00`) {
				continue
			}
			n++
		}
		if n != tc.want {
			t.Errorf("%d preloaded entities have %d Ratios below 0.01, scanMatches says %d", tc.n, n, tc.want)
		}
	}
}

func TestRunScanAgainstFake(t *testing.T) {
	f, cs := newFake(t)
	f.pageSize = 7 // 30 matches: five continuations per scan
	o := quick(cs)
	o.Preload = 2500 // 25 partitions' worth at 200 each, capped at 4: ~625 per partition
	o.Workers = 8
	// Workloads run in AllWorkloads order, so insert runs first and writes entities
	// outside the preload's key space, ~1% of them with a small Ratio too: the scan's key
	// bounds must keep them out (30 per scan, not more).
	o.Workloads = []string{"scan", "insert"}
	rs, out := runLogged(t, o)
	s := resultByName(t, rs, WorkloadScan)
	if s.Ops == 0 || s.Errors != 0 || s.Entities != s.Ops*2500 || s.Seconds < 0.2 || s.P50 <= 0 {
		t.Errorf("scan: implausible result %+v", s)
	}
	if math.Abs(s.EntitiesPerSec-float64(s.Entities)/s.Seconds) > 1e-6 {
		t.Errorf("scan: rate %v != %d/%v", s.EntitiesPerSec, s.Entities, s.Seconds)
	}
	if s.HottestPartition != "" || s.HottestPartitionPerSec != 0 {
		t.Errorf("scan: a scan has no hottest partition: %+v", s)
	}
	for _, want := range []string{"examined", "2,500 preloaded per scan", "4 concurrent scans", "(30 per scan, 1.20% of those examined"} {
		if !strings.Contains(s.Notes, want) {
			t.Errorf("scan notes lack %q: %s", want, s.Notes)
		}
	}
	if text := out.String(); !strings.Contains(text, "scan ") || strings.Contains(text, "hottest partition :") {
		t.Errorf("text report:\n%s", text)
	}

}

func TestRunScanDetectsShortScans(t *testing.T) {
	f, cs := newFake(t)
	f.pageSize = 7
	f.dropLastPages = true
	o := quick(cs)
	o.Preload = 2500
	o.Workloads = []string{"scan"}
	rs, err := Run(context.Background(), o, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err) // request-level failures are counted, not returned
	}
	s := resultByName(t, rs, WorkloadScan)
	if s.Errors == 0 || s.Ops != 0 || !strings.Contains(s.Notes, "incomplete scan") || !strings.Contains(s.Notes, "returned 28 of the 30") {
		t.Errorf("scan: %+v", s)
	}
}
