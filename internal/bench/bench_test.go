package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsDefaults(t *testing.T) {
	t.Setenv(EnvConnectionString, "")
	o, err := ParseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Options{
		ConnectionString: DevConnectionString,
		Workers:          32,
		Duration:         10 * time.Second,
		EntitySize:       1024,
		Preload:          10000,
		Partitions:       100,
		Workloads:        DefaultWorkloads,
	}
	if !optionsEqual(o, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", o, want)
	}
	if !strings.Contains(DevConnectionString, "TableEndpoint=http://127.0.0.1:10002/devstoreaccount1") {
		t.Fatal("dev connection string does not point at 127.0.0.1:10002")
	}
}

func TestParseFlagsExplicit(t *testing.T) {
	t.Setenv(EnvConnectionString, "AccountName=fromenv;AccountKey=a2V5")
	o, err := ParseFlags([]string{
		"--connection-string", "AccountName=x;AccountKey=eQ==",
		"--workers", "4", "--duration=3s", "--entity-size", "70000", "--preload", "50",
		"--partitions", "7", "--hot-partition", "--workloads", "batch, Insert,insert",
		"--table", "MyBench1", "--keep", "--json",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{
		ConnectionString: "AccountName=x;AccountKey=eQ==",
		Workers:          4, Duration: 3 * time.Second, EntitySize: 70000, Preload: 50,
		Partitions: 7, HotPartition: true, Workloads: []string{"insert", "batch"},
		Table: "MyBench1", Keep: true, JSON: true,
	}
	if !optionsEqual(o, want) {
		t.Fatalf("got %+v\nwant %+v", o, want)
	}

	// The environment supplies the default connection string.
	o, err = ParseFlags([]string{"--workloads=all"})
	if err != nil {
		t.Fatal(err)
	}
	if o.ConnectionString != "AccountName=fromenv;AccountKey=a2V5" {
		t.Fatalf("env connection string not used: %q", o.ConnectionString)
	}
	if !slices.Equal(o.Workloads, DefaultWorkloads) {
		t.Fatalf("all: %v", o.Workloads)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--workers", "0"},
		{"--workers", "-3"},
		{"--duration", "0s"},
		{"--entity-size", "600000"},
		{"--partitions", "0"},
		{"--workloads", "insert,delete"},
		{"--workloads", ","},
		{"--table", "1bad"},
		{"--table", "ab"},
		{"--consistency", "eventual"},
		{"--consistency", "Cosmos"},
		{"--no-such-flag"},
		{"extra"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("ParseFlags(%q): no error", args)
		}
	}
	t.Setenv(EnvConnectionString, "AccountName=x;AccountKey=U0VDUkVU")
	var usage bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: got %v, want flag.ErrHelp", err)
	}
	if u := usage.String(); strings.Contains(u, "U0VDUkVU") || strings.Contains(u, "Eby8") || !strings.Contains(u, "-hot-partition") {
		t.Errorf("usage must list the flags and show no account key:\n%s", u)
	}
}

func optionsEqual(a, b Options) bool {
	return a.ConnectionString == b.ConnectionString && a.Workers == b.Workers &&
		a.Duration == b.Duration && a.EntitySize == b.EntitySize && a.Preload == b.Preload &&
		a.Partitions == b.Partitions && a.HotPartition == b.HotPartition &&
		slices.Equal(a.Workloads, b.Workloads) && a.Table == b.Table && a.Keep == b.Keep &&
		a.JSON == b.JSON && a.Progress == b.Progress
}

func TestHistogramBuckets(t *testing.T) {
	// Every value falls inside its bucket, buckets are contiguous and
	// monotonic, and no bucket is wider than 1/32 of its lower bound.
	prevIdx := -1
	for v := time.Duration(0); v < 1<<22; v = v*17/16 + 1 {
		i := bucketOf(v)
		lo, w := bucketBounds(i)
		if uint64(v) < lo || uint64(v) >= lo+w {
			t.Fatalf("value %d in bucket %d = [%d,%d)", v, i, lo, lo+w)
		}
		if i < prevIdx {
			t.Fatalf("bucket index decreased at %d", v)
		}
		if lo >= 64 && float64(w)/float64(lo) > 1.0/32 {
			t.Fatalf("bucket %d too wide: %d/%d", i, w, lo)
		}
		prevIdx = i
	}
	for i := 1; i < nBuckets; i++ {
		plo, pw := bucketBounds(i - 1)
		lo, _ := bucketBounds(i)
		if plo+pw != lo {
			t.Fatalf("gap between buckets %d and %d", i-1, i)
		}
	}
	if got := bucketOf(time.Duration(math.MaxInt64)); got != nBuckets-1 {
		t.Fatalf("huge value bucket %d", got)
	}
	if got := bucketOf(-5); got != 0 {
		t.Fatalf("negative value bucket %d", got)
	}
}

func TestPercentile(t *testing.T) {
	var h histogram
	if h.percentile(0.5) != 0 {
		t.Fatal("empty histogram should report 0")
	}
	h.record(1234567 * time.Nanosecond)
	for _, q := range []float64{0.01, 0.5, 0.99, 1} {
		if got := h.percentile(q); got != 1234567 {
			t.Fatalf("single value p%v = %v", q*100, got)
		}
	}

	// 1..1000 ms, shuffled across two histograms that are then merged.
	var a, b histogram
	for i := 1000; i >= 1; i-- {
		d := time.Duration(i) * time.Millisecond
		if i%3 == 0 {
			a.record(d)
		} else {
			b.record(d)
		}
	}
	a.merge(&b)
	if a.count() != 1000 {
		t.Fatalf("count %d", a.count())
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {0.001, time.Millisecond}, {1, time.Second}} {
		got := a.percentile(c.q)
		if rel := math.Abs(float64(got-c.want)) / float64(c.want); rel > 0.017 {
			t.Errorf("p%v = %v, want %v ±1.7%%", c.q*100, got, c.want)
		}
	}

	// Heavy tail: 990 fast ops and 10 slow ones; p99 must be fast, p99.1 slow.
	var ht histogram
	for range 990 {
		ht.record(2 * time.Millisecond)
	}
	for range 10 {
		ht.record(800 * time.Millisecond)
	}
	if p := ht.percentile(0.99); p > 3*time.Millisecond {
		t.Errorf("tail p99 = %v, want ~2ms", p)
	}
	if p := ht.percentile(0.991); p < 790*time.Millisecond {
		t.Errorf("tail p99.1 = %v, want ~800ms", p)
	}
}

func TestFormatting(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.6: "1,234,568", -1234: "-1,234"} {
		if got := commas(v); got != want {
			t.Errorf("commas(%v) = %q, want %q", v, got, want)
		}
	}
	for d, want := range map[time.Duration]string{1500 * time.Microsecond: "1.50ms", 31200 * time.Microsecond: "31.2ms", 1234 * time.Millisecond: "1234ms", 12 * time.Second: "12.0s"} {
		if got := fmtLatency(d); got != want {
			t.Errorf("fmtLatency(%v) = %q, want %q", d, got, want)
		}
	}
	r := Result{Workload: "insert", Ops: 10, Entities: 10, Seconds: 1, EntitiesPerSec: 10,
		P50: 1500 * time.Microsecond, P99: 3 * time.Millisecond,
		HottestPartition: "i0017", HottestPartitionPerSec: 1234, PartitionTarget: 2000}
	var buf bytes.Buffer
	writeResultText(&buf, r)
	if !strings.Contains(buf.String(), "hottest partition i0017: 1,234/s = 62% of the 2,000/s target") {
		t.Errorf("text report:\n%s", buf.String())
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	if m["p50_ms"] != 1.5 || m["p99_ms"] != 3.0 || m["workload"] != "insert" || m["ops_per_sec"] != 10.0 {
		t.Errorf("json: %s", js)
	}
}

func TestEndpointOf(t *testing.T) {
	for cs, want := range map[string]string{
		DevConnectionString: "http://127.0.0.1:10002/devstoreaccount1",
		"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.chinacloudapi.cn": "https://acct.table.core.chinacloudapi.cn",
		"AccountName=acct;SharedAccessSignature=sv=2020&sig=secret":                                            "https://acct.table.core.windows.net",
	} {
		if got := endpointOf(cs); got != want {
			t.Errorf("endpointOf(%q) = %q, want %q", cs, got, want)
		}
	}
}

func TestAppendEntity(t *testing.T) {
	b := &bench{payload: makePayload(70_000), pkWidth: 4}
	js := b.appendEntity(nil, b.pk("i", 7), "rk-1", 3, 42, stamp(nil))
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatalf("invalid JSON: %v\n%.200s", err, js)
	}
	if m["PartitionKey"] != "i0007" || m["RowKey"] != "rk-1" || m["Seq"] != "42" || m["Seq@odata.type"] != "Edm.Int64" {
		t.Fatalf("entity: %.300s", js)
	}
	total := 0
	for _, k := range []string{"Payload", "Payload2", "Payload3"} {
		s, _ := m[k].(string)
		if len(s) == 0 || len(s) > maxPropertyChars {
			t.Fatalf("%s has %d chars", k, len(s))
		}
		total += len(s)
	}
	if total != 70_000 {
		t.Fatalf("payload %d bytes, want 70000", total)
	}
}

// quick returns options for a short run against the fake.
func quick(cs string) Options {
	return Options{
		ConnectionString: cs,
		Workers:          4,
		Duration:         200 * time.Millisecond,
		EntitySize:       256,
		Preload:          400,
		Partitions:       4,
	}
}

// runLogged runs the bench with o, failing the test on an error, and logs and returns the
// text report with the results.
func runLogged(t *testing.T, o Options) ([]Result, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	rs, err := Run(context.Background(), o, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	return rs, &out
}

func resultByName(t *testing.T, rs []Result, name string) Result {
	t.Helper()
	for _, r := range rs {
		if r.Workload == name {
			return r
		}
	}
	t.Fatalf("no %s result in %+v", name, rs)
	return Result{}
}

// forClients runs test once per client kind (SDK and raw), as subtests.
func forClients(t *testing.T, test func(t *testing.T, client string)) {
	for _, c := range []string{ClientSDK, ClientRaw} {
		t.Run(c, func(t *testing.T) { test(t, c) })
	}
}

func TestRunAgainstFake(t *testing.T) { forClients(t, testRunAgainstFake) }

func testRunAgainstFake(t *testing.T, client string) {
	f, cs := newFake(t)
	o := quick(cs)
	o.Client = client
	rs, out := runLogged(t, o)
	if len(rs) != len(DefaultWorkloads) {
		t.Fatalf("%d results", len(rs))
	}
	for i, r := range rs {
		if r.Workload != DefaultWorkloads[i] {
			t.Errorf("result %d is %s, want %s", i, r.Workload, DefaultWorkloads[i])
		}
	}
	for _, name := range []string{WorkloadInsert, WorkloadRead, WorkloadUpsert, WorkloadUpdate, WorkloadQuery} {
		r := resultByName(t, rs, name)
		if r.Ops == 0 || r.Entities == 0 || r.Errors != 0 || r.Seconds < 0.2 || r.EntitiesPerSec <= 0 ||
			r.P50 <= 0 || r.P99 < r.P50 || r.HottestPartition == "" || r.PartitionTarget != 2000 {
			t.Errorf("%s: implausible result %+v", name, r)
		}
		if math.Abs(r.EntitiesPerSec-float64(r.Entities)/r.Seconds) > 1e-6 {
			t.Errorf("%s: rate %v != %d/%v", name, r.EntitiesPerSec, r.Entities, r.Seconds)
		}
	}
	// 400 entities over min(4, 400/200) = 2 partitions; pages of 50, so
	// every scan followed three continuations to get all 200.
	q := resultByName(t, rs, WorkloadQuery)
	if q.Entities != q.Ops*200 {
		t.Errorf("query: %d entities in %d scans, want 200 each", q.Entities, q.Ops)
	}
	if r := resultByName(t, rs, WorkloadRead); r.HottestPartitionPerSec > r.EntitiesPerSec*0.9 {
		t.Errorf("read not spread over 2 partitions: %+v", r)
	}
	// Every upsert was a PATCH the fake merged (none lost, none sent as another verb).
	if up := resultByName(t, rs, WorkloadUpsert); int64(f.mergeCount()) < up.Ops {
		t.Errorf("upsert: %d ops, the fake merged %d", up.Ops, f.mergeCount())
	}
	u := resultByName(t, rs, WorkloadUpdate)
	if u.HottestPartition != counterPK || u.Entities != u.Ops ||
		!strings.Contains(u.Notes, "final counter") || !strings.Contains(u.Notes, ": OK") {
		t.Errorf("update: %+v", u)
	}
	bt := resultByName(t, rs, WorkloadBatch)
	if !strings.HasPrefix(bt.Notes, "skipped:") || bt.Ops != 0 || !strings.Contains(bt.Notes, "501") {
		t.Errorf("batch should be skipped on a server without batches: %+v", bt)
	}
	for _, name := range []string{WorkloadBatchLoad, WorkloadBulkLoad} {
		if r := resultByName(t, rs, name); !strings.HasPrefix(r.Notes, "skipped:") || r.Ops != 0 {
			t.Errorf("%s should be skipped on a server without batches and bulk writes: %+v", name, r)
		}
	}
	if f.tableCount() != 0 {
		t.Errorf("table not deleted: %d tables remain", f.tableCount())
	}
	text := out.String()
	for _, want := range []string{"cerulean bench:", "preload", "entities/s", "ops/s", "p50", "p99", "of the 2,000/s target", "deleted"} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q", want)
		}
	}
	if strings.Contains(text, "AccountKey") || strings.Contains(text, "Eby8") {
		t.Error("text output leaks the account key")
	}
}

func TestRunHotPartitionJSONKeep(t *testing.T) {
	f, cs := newFake(t)
	o := quick(cs)
	o.HotPartition = true
	o.Workloads = []string{"query", "insert"}
	o.JSON = true
	o.Keep = true
	o.Table = "benchkeep"
	var out bytes.Buffer
	rs, err := Run(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	ins := resultByName(t, rs, WorkloadInsert)
	if ins.HottestPartition != "i0000" || math.Abs(ins.HottestPartitionPerSec-ins.EntitiesPerSec) > 1e-9 {
		t.Errorf("hot insert: %+v", ins)
	}
	if q := resultByName(t, rs, WorkloadQuery); q.Entities != q.Ops*400 {
		t.Errorf("hot query: all 400 preloaded entities are in one partition: %+v", q)
	}
	if f.tableCount() != 1 {
		t.Error("--keep: table was deleted")
	}

	// Exactly one JSON document, with options (no key) and results.
	dec := json.NewDecoder(&out)
	var doc struct {
		Options map[string]any
		Results []map[string]any
		Error   string
	}
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("decoding JSON output: %v", err)
	}
	if dec.More() {
		t.Error("more than one JSON document on out")
	}
	if doc.Options["endpoint"] == nil || doc.Options["table"] != "benchkeep" || doc.Options["hot_partition"] != true {
		t.Errorf("options: %v", doc.Options)
	}
	if len(doc.Results) != 2 || doc.Results[0]["workload"] != "insert" || doc.Results[0]["p99_ms"] == nil {
		t.Errorf("results: %v", doc.Results)
	}
	if strings.Contains(out.String(), "Eby8") {
		t.Error("JSON output leaks the account key")
	}

	// A second run reuses the existing table and must not delete it.
	o.Keep = false
	o.JSON = false
	o.Workloads = []string{"insert"}
	out.Reset()
	if _, err := Run(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	if f.tableCount() != 1 || !strings.Contains(out.String(), "left in place") {
		t.Errorf("pre-existing table handling:\n%s", out.String())
	}
}

func TestRunDetectsLostUpdates(t *testing.T) { forClients(t, testRunDetectsLostUpdates) }

func testRunDetectsLostUpdates(t *testing.T, client string) {
	f, cs := newFake(t)
	f.loseEvery = 5 // acknowledge every 5th replace without applying it
	o := quick(cs)
	o.Client = client
	o.Workloads = []string{"update"}
	rs, err := Run(context.Background(), o, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "final counter") {
		t.Fatalf("want a final-counter error, got %v", err)
	}
	u := resultByName(t, rs, WorkloadUpdate)
	if u.Errors == 0 || !strings.Contains(u.Notes, "MISMATCH") {
		t.Errorf("update: %+v", u)
	}
}

func TestRunDetectsShortScans(t *testing.T) { forClients(t, testRunDetectsShortScans) }

func testRunDetectsShortScans(t *testing.T, client string) {
	f, cs := newFake(t)
	f.dropLastPages = true
	o := quick(cs)
	o.Client = client
	o.Workloads = []string{"query"}
	rs, err := Run(context.Background(), o, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err) // request-level failures are counted, not returned
	}
	q := resultByName(t, rs, WorkloadQuery)
	if q.Errors == 0 || q.Ops != 0 || !strings.Contains(q.Notes, "incomplete scan") {
		t.Errorf("query: %+v", q)
	}
}

func TestRunPreloadFailure(t *testing.T) {
	f, cs := newFake(t)
	f.rejectUpserts = true
	o := quick(cs)
	o.Workloads = []string{"read", "query", "insert"}
	rs, err := Run(context.Background(), o, &bytes.Buffer{})
	if err == nil || strings.Count(err.Error(), "preload") != 1 {
		t.Fatalf("want one preload error, got %v", err)
	}
	for _, name := range []string{"read", "query"} {
		if r := resultByName(t, rs, name); r.Ops != 0 || !strings.Contains(r.Notes, "preload failed") {
			t.Errorf("%s: %+v", name, r)
		}
	}
	if r := resultByName(t, rs, "insert"); r.Ops == 0 {
		t.Errorf("insert should still run: %+v", r)
	}
}

func TestRunCountsErrors(t *testing.T) { forClients(t, testRunCountsErrors) }

func testRunCountsErrors(t *testing.T, client string) {
	_, cs := newFake(t)
	o := quick(cs)
	o.Client = client
	o.Workloads = []string{"read"}
	o.Preload = 10
	// Read keys that were never loaded: every GetEntity is a 404.
	b, err := newBench(mustNormalize(t, o), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.createTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.preloadParts = 1
	b.opts.Preload = 1000
	r := b.runRead(context.Background())
	if r.Ops != 0 || r.Errors == 0 || !strings.Contains(r.Notes, "404 ResourceNotFound") {
		t.Errorf("read of missing keys: %+v", r)
	}
}

func TestRunProgressAndCancel(t *testing.T) {
	_, cs := newFake(t)
	o := quick(cs)
	o.Workloads = []string{"insert", "update"}
	o.Duration = 1300 * time.Millisecond
	var progress bytes.Buffer
	o.Progress = &progress
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(1500 * time.Millisecond); cancel() }() // during update
	rs, err := Run(ctx, o, &bytes.Buffer{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("want context.Canceled, got %v", err)
	}
	if len(rs) == 0 || rs[0].Ops == 0 || rs[0].Errors != 0 {
		t.Errorf("results: %+v", rs)
	}
	p := progress.String()
	if !strings.Contains(p, "\rinsert") || !strings.Contains(p, "ops/s") {
		t.Errorf("progress output: %q", p)
	}
}

func TestRunFailsOnUnreachableEndpoint(t *testing.T) {
	o := quick("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:1/devstoreaccount1;")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := Run(ctx, o, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "creating table") {
		t.Fatalf("want creating-table error, got %v", err)
	}
	if _, err := Run(ctx, Options{ConnectionString: "garbage"}, &bytes.Buffer{}); err == nil {
		t.Fatal("want error for a bad connection string")
	}
}

func mustNormalize(t *testing.T, o Options) Options {
	t.Helper()
	n, err := o.normalize()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConsistencyHeader: --consistency sends x-ms-consistency-level on every read of
// every workload (the read, update and query workloads' GETs), and on nothing else.
func TestConsistencyHeader(t *testing.T) {
	o, err := parseFlags([]string{"--consistency", "Eventual"}, io.Discard)
	if err != nil || o.Consistency != "Eventual" {
		t.Fatalf("--consistency Eventual: %+v, %v", o.Consistency, err)
	}
	f, cs := newFake(t)
	q := quick(cs)
	q.Consistency = "Eventual"
	q.Workloads = []string{WorkloadInsert, WorkloadRead, WorkloadUpdate, WorkloadQuery}
	var out bytes.Buffer
	if _, err := Run(context.Background(), q, &out); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.levels["GET Eventual"] == 0 || f.levels["GET "] != 0 {
		t.Errorf("GETs by level: %v, want every GET at Eventual", f.levels)
	}
	for k := range f.levels {
		if !strings.HasPrefix(k, "GET") && strings.HasSuffix(k, "Eventual") {
			t.Errorf("a write carried the level: %q", k)
		}
	}
	if !strings.Contains(out.String(), "x-ms-consistency-level: Eventual") {
		t.Errorf("the report does not say the level:\n%s", out.String())
	}
}
