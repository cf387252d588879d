package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	dto "github.com/prometheus/client_model/go"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/observe"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// series gathers m: every series as "name{l1=v1,…}" (labels in order) with its value
// (a histogram's as its count).
func series(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var ls []string
			for _, l := range mt.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			k := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[k] = mt.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[k] = mt.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[k] = float64(mt.GetHistogram().GetSampleCount())
				out[k+"sum"] = mt.GetHistogram().GetSampleSum()
			default:
				out[k] = 0
			}
		}
	}
	return out
}

func TestObserve(t *testing.T) {
	m, err := New(Options{Accounts: []string{"alpha", "beta"}})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []observe.Request{
		{Operation: "InsertEntity", Account: "alpha", Status: 204, Latency: 2 * time.Millisecond, BytesIn: 100, BytesOut: 0, EntitiesWritten: 1},
		{Operation: "InsertEntity", Account: "alpha", Status: 409, BytesIn: 100, BytesOut: 300},
		{Operation: "QueryEntities", Account: "beta", Status: 200, BytesOut: 1000, EntitiesRead: 3, EntitiesScanned: 50, PageCut: true},
		{Operation: "EntityGroupTransaction", Account: "alpha", Status: 202, BatchSize: 7, EntitiesWritten: 7},
		{Operation: "QueryTables", Account: "intruder", Status: 403, AuthFailure: "signature"},
		{Operation: "NoSuchOperation", Account: "", Status: 503, AuthFailure: "made-up reason"},
	}
	for i := range reqs {
		m.Observe(&reqs[i])
	}
	got := series(t, m)
	for k, want := range map[string]float64{
		"cerulean_requests_total{account=alpha,operation=InsertEntity,status_class=2xx}":           1,
		"cerulean_requests_total{account=alpha,operation=InsertEntity,status_class=4xx}":           1,
		"cerulean_requests_total{account=beta,operation=QueryEntities,status_class=2xx}":           1,
		"cerulean_requests_total{account=alpha,operation=EntityGroupTransaction,status_class=2xx}": 1,
		"cerulean_requests_total{account=other,operation=QueryTables,status_class=4xx}":            1,
		"cerulean_requests_total{account=other,operation=Unknown,status_class=5xx}":                1,
		"cerulean_request_duration_seconds{operation=InsertEntity}":                                2,
		"cerulean_request_duration_seconds{operation=InsertEntity}sum":                             0.002,
		"cerulean_request_bytes_total{operation=InsertEntity}":                                     200,
		"cerulean_response_bytes_total{operation=InsertEntity}":                                    300,
		"cerulean_response_bytes_total{operation=QueryEntities}":                                   1000,
		"cerulean_entities_written_total{}":                                                        8,
		"cerulean_entities_read_total{}":                                                           3,
		"cerulean_entities_scanned_total{}":                                                        50,
		"cerulean_query_pages_cut_total{}":                                                         1,
		"cerulean_batch_size{}":                                                                    1,
		"cerulean_batch_size{}sum":                                                                 7,
		"cerulean_auth_failures_total{reason=signature}":                                           1,
		"cerulean_auth_failures_total{reason=other}":                                               1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	for k := range got {
		if strings.Contains(k, "intruder") || strings.Contains(k, "NoSuchOperation") || strings.Contains(k, "made-up") {
			t.Errorf("series %s carries a value the client chose", k)
		}
	}
}

// TestBounded: whatever accounts, operations, statuses and reasons requests carry, the
// series are at most the product of the fixed label sets.
func TestBounded(t *testing.T) {
	m, err := New(Options{Accounts: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		n := 0
		for k := range series(t, m) {
			if strings.HasPrefix(k, "cerulean_") {
				n++
			}
		}
		return n
	}
	for i := range 10000 {
		m.Observe(&observe.Request{
			Operation:   fmt.Sprintf("Op%d", i),
			Account:     fmt.Sprintf("acct%d", i),
			Table:       fmt.Sprintf("t%d", i),
			Status:      i % 1000,
			AuthFailure: fmt.Sprintf("r%d", i),
		})
	}
	// One operation (Unknown), one account (other), six status classes, one reason.
	if n, want := count(), 6+3+1+(3+2+1); n > want+10 {
		t.Errorf("%d cerulean series after 10,000 distinct requests, want about %d", n, want)
	}
}

func TestPebbleFigures(t *testing.T) {
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx := context.Background()
	if err := eng.CreateTable(ctx, "a", "t", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Apply(ctx, "a", "t", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "r"}}); err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	got := series(t, m)
	if got["cerulean_pebble_disk_bytes{}"] <= 0 {
		t.Errorf("disk bytes %v", got["cerulean_pebble_disk_bytes{}"])
	}
	if got["cerulean_pebble_wal_fsync_duration_seconds{}"] < 1 {
		t.Errorf("WAL fsyncs %v after a write", got["cerulean_pebble_wal_fsync_duration_seconds{}"])
	}
	for _, k := range []string{"cerulean_pebble_compactions_total{}", "cerulean_pebble_block_cache_hits_total{}", "cerulean_pebble_row_cache_hits_total{}", "cerulean_pebble_wal_blocking_syncs_total{}", "cerulean_pebble_pending_table_purges{}", "cerulean_pebble_index_builds{}", "cerulean_pebble_index_build_rows_total{}", "process_open_fds{}", "go_goroutines{}",
		"cerulean_pebble_write_stalls_total{reason=memtables}", "cerulean_pebble_write_stalls_total{reason=l0}",
		"cerulean_pebble_write_stall_seconds_total{reason=memtables}", "cerulean_pebble_write_stall_seconds_total{reason=l0}"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %s", k)
		}
	}
	// Served in the exposition format.
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 200 || !strings.Contains(string(body), "\ncerulean_pebble_disk_bytes ") {
		t.Errorf("/metrics: %d\n%.2000s", rec.Code, body)
	}
}

// pebbleMetrics opens a Pebble engine with o in a test directory, closed when the test
// ends, and the metrics of it.
func pebbleMetrics(t *testing.T, o pebble.Options) (*pebble.Engine, *Metrics) {
	t.Helper()
	eng, err := pebble.Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	m, err := New(Options{Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	return eng, m
}

// TestPebbleIndexBuildFigures drives an online build a chunk at a time: while it is not
// finished the builds gauge counts it, and once it is the gauge is 0 and the rows
// counter has advanced by the table's rows, each passed once.
func TestPebbleIndexBuildFigures(t *testing.T) {
	ctx := context.Background()
	eng, m := pebbleMetrics(t, pebble.Options{ExpiryInterval: -1, NoIndexBuilder: true})
	const builds, rowsTotal = "cerulean_pebble_index_builds{}", "cerulean_pebble_index_build_rows_total{}"
	if err := eng.CreateTable(ctx, "a", "t", storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	const rows = 700 // a few chunks of the builder's
	for p := range rows / 100 {
		var muts []storage.Mutation
		for r := range 100 {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%03d", r),
				Props: []entity.Property{{Name: "A", Value: entity.Int32Value(int32(r))}}})
		}
		if _, err := eng.Apply(ctx, "a", "t", fmt.Sprintf("p%d", p), muts); err != nil {
			t.Fatal(err)
		}
	}
	if got := series(t, m); got[builds] != 0 || got[rowsTotal] != 0 {
		t.Fatalf("before any index: builds %v, rows %v; want 0, 0", got[builds], got[rowsTotal])
	}
	if err := eng.SetTableSettings(ctx, "a", "t", storage.TableSettings{Elastic: true,
		Indexes: []storage.IndexDef{{Name: "ByA", Properties: []string{"A"}}}}); err != nil {
		t.Fatal(err)
	}
	passed := 0
	for {
		got := series(t, m)
		if got[rowsTotal] != float64(passed) {
			t.Fatalf("rows counter %v after BuildIndexes passed %d rows", got[rowsTotal], passed)
		}
		if passed == rows {
			if got[builds] != 0 {
				t.Fatalf("builds %v after the build passed every row", got[builds])
			}
			break
		}
		if got[builds] < 1 {
			t.Fatalf("builds %v with the build at %d rows of %d", got[builds], passed, rows)
		}
		n, err := eng.BuildIndexes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 || passed+n > rows {
			t.Fatalf("BuildIndexes passed %d rows after %d, of %d", n, passed, rows)
		}
		passed += n
	}
	info, err := eng.GetTable(ctx, "a", "t")
	if err != nil {
		t.Fatal(err)
	}
	if d := info.Settings.Indexes[0]; d.State != storage.IndexReady {
		t.Fatalf("index %+v after the build, want ready", d)
	}
}

// TestPebbleL0Sublevels checks the L0 gauge against the engine's own figure: none in a
// new store, and the sublevels flushes made once small memtables have filled (few
// enough that no compaction has yet moved them out of L0).
func TestPebbleL0Sublevels(t *testing.T) {
	ctx := context.Background()
	eng, m := pebbleMetrics(t, pebble.Options{MemTableSize: 256 << 10})
	if got := series(t, m)["cerulean_pebble_l0_sublevels{}"]; got != 0 {
		t.Errorf("L0 sublevels %v in a new store, want 0", got)
	}
	if err := eng.CreateTable(ctx, "a", "t", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	payload := entity.StringValue(strings.Repeat("x", 1000))
	// 1 KB entities whose keys keep coming back to the same range, so that each flush's
	// sstable overlaps the one before and makes a sublevel of its own: stop at two.
	for i := 0; ; i++ {
		if i == 5000 {
			t.Fatal("no scrape saw two L0 sublevels after 5,000 KB of writes with 256 KiB memtables")
		}
		if _, err := eng.Apply(ctx, "a", "t", "p", []storage.Mutation{{Op: storage.InsertOrReplace,
			RowKey: fmt.Sprintf("%02d-%06d", i%100, i), Props: []entity.Property{{Name: "V", Value: payload}}}}); err != nil {
			t.Fatal(err)
		}
		st, err := eng.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := st.DB.Levels[0].Sublevels; n >= 2 {
			got := series(t, m)
			// Compactions run in the background: one that finished between the engine's
			// figures and the scrape may have moved the sublevels out of L0. Compare only
			// a scrape that saw the same compactions; otherwise write on and look again.
			if got["cerulean_pebble_compactions_total{}"] != float64(st.DB.Compact.Count) {
				continue
			}
			if v := got["cerulean_pebble_l0_sublevels{}"]; v < 2 {
				t.Errorf("L0 sublevels %v, engine has %d", v, n)
			}
			// The flushes wrote the values to blob files, which are not compactions'.
			if got["cerulean_pebble_compactions_total{}"] == 0 && got["cerulean_pebble_compacted_bytes_total{}"] != 0 {
				t.Errorf("compacted bytes %v with no compaction run", got["cerulean_pebble_compacted_bytes_total{}"])
			}
			return
		}
	}
}

func TestCompactedBytes(t *testing.T) {
	var m pebbledb.Metrics
	// L0: flushes wrote 500 bytes of blob files (Pebble counts them as compacted too) and
	// intra-L0 compactions 70 of sstables and 30 of blob files; L6: compactions rewrote
	// values, 40 bytes of sstables and 900 of blob files.
	m.Levels[0].TableBytesFlushed = 100
	m.Levels[0].BlobBytesFlushed = 500
	m.Levels[0].BlobBytesCompacted = 530
	m.Levels[0].TableBytesCompacted = 70
	m.Levels[6].TableBytesCompacted = 40
	m.Levels[6].BlobBytesCompacted = 900
	if got, want := compactedBytes(&m), uint64(70+30+40+900); got != want {
		t.Errorf("compacted bytes %d, want %d", got, want)
	}
}

func TestWALSyncHistogram(t *testing.T) {
	// Pebble's buckets are in nanoseconds: 0.1 ms, 0.3 ms, 2 ms and 20 s.
	h := &dto.Histogram{SampleCount: ptr(uint64(4)), SampleSum: ptr(2e10 + 2.4e6)}
	for _, b := range []struct {
		ub  float64
		cum uint64
	}{{1e5, 1}, {3e5, 2}, {2e6, 3}, {3e10, 4}} {
		h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: ptr(b.ub), CumulativeCount: ptr(b.cum)})
	}
	mt, err := walSyncHistogram(h)
	if err != nil {
		t.Fatal(err)
	}
	var d dto.Metric
	if err := mt.Write(&d); err != nil {
		t.Fatal(err)
	}
	want := map[float64]uint64{.0001: 1, .0002: 1, .0005: 2, .001: 2, .002: 3, .003: 3, 10: 3}
	for _, b := range d.GetHistogram().GetBucket() {
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("bucket %v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}
	if d.GetHistogram().GetSampleCount() != 4 {
		t.Errorf("count %d", d.GetHistogram().GetSampleCount())
	}
}

func ptr[T any](v T) *T { return &v }

// BenchmarkObserve is the cost metrics add to each request (the cost figure in the
// closing note compares it with a request's own).
func BenchmarkObserve(b *testing.B) {
	m, err := New(Options{Accounts: []string{"devstoreaccount1"}})
	if err != nil {
		b.Fatal(err)
	}
	r := observe.Request{Operation: "InsertEntity", Account: "devstoreaccount1", Status: 204, Latency: time.Millisecond, BytesIn: 1200, BytesOut: 0, EntitiesWritten: 1}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Observe(&r)
		}
	})
}

// TestPrincipals: bearer tokens' requests count by principal and status class, the first
// MaxPrincipals principals by name and the rest as "other", so the label stays bounded.
func TestPrincipals(t *testing.T) {
	m, err := New(Options{Accounts: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(&observe.Request{Operation: "InsertEntity", Account: "alpha", Status: 204, AuthScheme: "Bearer", Principal: "oid-1"})
	m.Observe(&observe.Request{Operation: "InsertEntity", Account: "alpha", Status: 403, AuthScheme: "Bearer", Principal: "oid-1", AuthFailure: "role"})
	m.Observe(&observe.Request{Operation: "InsertEntity", Account: "alpha", Status: 204, AuthScheme: "SharedKey"})
	for i := range 1000 {
		m.Observe(&observe.Request{Operation: "QueryEntities", Account: "alpha", Status: 200, AuthScheme: "Bearer", Principal: fmt.Sprintf("oid-x%d", i)})
	}
	got := series(t, m)
	for k, want := range map[string]float64{
		"cerulean_principal_requests_total{principal=oid-1,status_class=2xx}": 1,
		"cerulean_principal_requests_total{principal=oid-1,status_class=4xx}": 1,
		"cerulean_principal_requests_total{principal=other,status_class=2xx}": 1000 - (MaxPrincipals - 1),
		"cerulean_auth_failures_total{reason=role}":                           1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	names := map[string]bool{}
	for k := range got {
		if strings.HasPrefix(k, "cerulean_principal_requests_total{") {
			names[strings.SplitN(strings.TrimPrefix(k, "cerulean_principal_requests_total{principal="), ",", 2)[0]] = true
		}
	}
	if len(names) != MaxPrincipals+1 {
		t.Errorf("%d principal label values, want %d and other", len(names), MaxPrincipals)
	}
}
