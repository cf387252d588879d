package hotpart

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/observe"
)

// clock is an injectable clock tests move by hand.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func insert(account, table, pk string) *observe.Request {
	return &observe.Request{Account: account, Table: table, PartitionKey: pk, Status: 204, EntitiesWritten: 1}
}

// TestHotPartitionFirst is the acceptance test: uniform load on 1,000
// partitions, one of which takes 30% of it; the hot one is reported first with a rate
// within 10% of the truth.
func TestHotPartitionFirst(t *testing.T) {
	// With the default 1,024 counters per sub-window the 1,000 partitions all fit; with
	// 8 per shard (128) the sketch evicts all the time.
	for _, counters := range []int{0, 8} {
		t.Run(fmt.Sprintf("counters=%d", counters), func(t *testing.T) { testHotPartitionFirst(t, counters) })
	}
}

func testHotPartitionFirst(t *testing.T, counters int) {
	clk := newClock()
	tr := New(Options{Now: clk.Now, Warn: -1, Counters: counters})
	rng := rand.New(rand.NewPCG(1, 2))
	const (
		perStep = 50 // requests every 10 ms: 5,000 entity operations per second
		step    = 10 * time.Millisecond
		steps   = 9400 // 94 s: the window has wrapped, and ends mid sub-window
	)
	var hotTimes []time.Time
	cold := make([]string, 999)
	for i := range cold {
		cold[i] = fmt.Sprintf("p%04d", 1+i)
	}
	r := &observe.Request{Account: "acct", Table: "t", Status: 204, EntitiesWritten: 1}
	for range steps {
		for range perStep {
			if rng.Float64() < 0.3 {
				r.PartitionKey = "p0000"
				hotTimes = append(hotTimes, clk.Now())
			} else {
				r.PartitionKey = cold[rng.IntN(len(cold))]
			}
			tr.Observe(r)
		}
		clk.Advance(step)
	}
	rep := tr.Report(Filter{Table: "t"})
	if len(rep.Tables) != 1 || rep.Tables[0].Account != "acct" || rep.Tables[0].Table != "t" {
		t.Fatalf("tables: %+v", rep.Tables)
	}
	ps := rep.Tables[0].Partitions
	if ps[0].PartitionKey != "p0000" {
		t.Fatalf("first partition %q, want the hot p0000; top: %+v", ps[0].PartitionKey, ps[:3])
	}
	// The truth: the hot partition's operations over the report's window.
	from := clk.Now().Add(-time.Duration(rep.WindowSeconds * float64(time.Second)))
	var n int
	for _, at := range hotTimes {
		if !at.Before(from) {
			n++
		}
	}
	truth := float64(n) / rep.WindowSeconds
	if got := ps[0].EntitiesPerSec; math.Abs(got-truth) > 0.1*truth {
		t.Errorf("hot rate %.0f/s, truth %.0f/s: off by more than 10%%", got, truth)
	}
	if math.Abs(ps[0].EntitiesPerSec-truth) > ps[0].ErrorPerSec+1e-9 {
		t.Errorf("hot rate %.1f/s ± %.1f does not hold the truth %.1f/s", ps[0].EntitiesPerSec, ps[0].ErrorPerSec, truth)
	}
	if math.Abs(rep.EntitiesPerSec-5000) > 1 {
		t.Errorf("total %.1f/s, want 5,000", rep.EntitiesPerSec)
	}
	if ps[1].EntitiesPerSec > ps[0].EntitiesPerSec/10 {
		t.Errorf("second partition %+v is not far behind the hot one", ps[1])
	}
	t.Logf("hot %.0f/s ± %.0f (truth %.0f/s, %.0f%% of target), window %.0fs, %d partitions reported",
		ps[0].EntitiesPerSec, ps[0].ErrorPerSec, truth, 100*ps[0].OfTarget, rep.WindowSeconds, len(ps))
	if got := tr.Report(Filter{Table: "t", Top: 3}); len(got.Tables[0].Partitions) != 3 {
		t.Errorf("top 3: %d partitions", len(got.Tables[0].Partitions))
	}
	if got := tr.Report(Filter{Account: "other"}); len(got.Tables) != 0 {
		t.Errorf("account filter: %+v", got.Tables)
	}
}

// TestMemoryFlat: 1,000,000 distinct partitions (and 10,000 tables) do not grow the
// tracker: its counters are allocated up front and their key buffers reused.
func TestMemoryFlat(t *testing.T) {
	clk := newClock()
	tr := New(Options{Now: clk.Now, Warn: -1})
	feed := func(from, to int) {
		r := &observe.Request{Account: "acct", Status: 204, EntitiesWritten: 1}
		for i := from; i < to; i++ {
			r.Table = "t" + strconv.Itoa(10000+i%10000)
			r.PartitionKey = "p" + strconv.Itoa(10000000+i)
			tr.Observe(r)
			if i%1000 == 0 {
				clk.Advance(time.Second)
			}
		}
	}
	feed(0, 100_000) // every counter of every sub-window has held a key of this length
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before, keyBytes := heap(), tr.keyBytes()
	feed(100_000, 1_100_000)
	after, keyBytesAfter := heap(), tr.keyBytes()
	if keyBytesAfter != keyBytes {
		t.Errorf("key buffers grew from %d to %d bytes", keyBytes, keyBytesAfter)
	}
	if n, most := tr.counters(), 16*6*64; n > most {
		t.Errorf("%d counters in use, want at most %d", n, most)
	}
	// The heap may move a little with the runtime's own bookkeeping, not by the
	// megabytes a map of a million keys would take.
	if after > before+256<<10 {
		t.Errorf("heap grew from %d to %d bytes over 1,000,000 distinct partitions", before, after)
	}
	t.Logf("heap %d → %d bytes; key buffers %d bytes", before, after, keyBytesAfter)
}

// keyBytes is the capacity of every counter's key buffer.
func (t *Tracker) keyBytes() int {
	var n int
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, b := range sh.buckets {
			for _, c := range b.counters {
				n += cap(c.key)
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// counters is how many counters hold a key.
func (t *Tracker) counters() int {
	var n int
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, b := range sh.buckets {
			n += b.n
		}
		sh.mu.Unlock()
	}
	return n
}

// TestExpiry: when the load stops, the partition leaves the report within the window.
func TestExpiry(t *testing.T) {
	clk := newClock()
	tr := New(Options{Now: clk.Now, Warn: -1})
	for range 3000 {
		tr.Observe(insert("a", "t", "hot"))
		clk.Advance(10 * time.Millisecond)
	}
	if ps := tr.Report(Filter{}).Tables[0].Partitions; ps[0].PartitionKey != "hot" || math.Abs(ps[0].EntitiesPerSec-100) > 5 {
		t.Fatalf("while loaded: %+v", ps)
	}
	clk.Advance(30 * time.Second)
	if ps := tr.Report(Filter{}).Tables[0].Partitions; ps[0].EntitiesPerSec > 60 || ps[0].EntitiesPerSec < 20 {
		t.Errorf("30 s after the load stopped: %+v, want about half the rate", ps)
	}
	clk.Advance(31 * time.Second)
	if rep := tr.Report(Filter{}); len(rep.Tables) != 0 || rep.EntitiesPerSec != 0 {
		t.Errorf("a minute after the load stopped: %+v", rep)
	}
}

// TestWarning: a partition above the threshold for WarnAfter is logged once, again
// every WarnEvery while it lasts, and once when it cools; one below it never is.
func TestWarning(t *testing.T) {
	clk := newClock()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	tr := New(Options{Now: clk.Now, Warn: 500, WarnAfter: 30 * time.Second, WarnEvery: 2 * time.Minute, Logger: log})
	// 1,000/s on "hot", 100/s on "warm", for 5 minutes; Check every second.
	for s := range 300 {
		for range 100 {
			for range 10 {
				tr.Observe(insert("a", "t", "hot"))
			}
			tr.Observe(insert("a", "t", "warm"))
			clk.Advance(10 * time.Millisecond)
		}
		tr.Check()
		lines := strings.Count(buf.String(), "msg=\"hot partition\"")
		switch {
		case s < 29 && lines != 0:
			t.Fatalf("warned after %d s: %s", s+1, buf.String())
		case s >= 40 && s < 149 && lines != 1:
			t.Fatalf("%d warnings after %d s, want 1: %s", lines, s+1, buf.String())
		case s >= 160 && s < 269 && lines != 2:
			t.Fatalf("%d warnings after %d s, want 2 (repeated after 2 min): %s", lines, s+1, buf.String())
		}
	}
	if strings.Contains(buf.String(), "warm") || strings.Contains(buf.String(), "cooled") {
		t.Fatalf("log: %s", buf.String())
	}
	if !strings.Contains(buf.String(), "partition_key=hot") || !strings.Contains(buf.String(), "entities_per_sec=1000") {
		t.Errorf("warning line: %s", buf.String())
	}
	clk.Advance(25 * time.Second)
	tr.Check()
	if n := strings.Count(buf.String(), "hot partition cooled"); n != 1 {
		t.Errorf("%d cooled lines after the load stopped: %s", n, buf.String())
	}
	clk.Advance(5 * time.Minute)
	tr.Check()
	if n := strings.Count(buf.String(), "level="); n != 4 {
		t.Errorf("%d lines, want 3 warnings (30 s, 2m30s, 4m30s) and 1 cooled: %s", n, buf.String())
	}
}

// TestSummaryExact: with fewer keys than counters, Space-Saving counts exactly, and
// with more it never underestimates a present key by its err.
func TestSummaryExact(t *testing.T) {
	s := newSummary(8)
	s.reset(0)
	want := map[string]int64{}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		k := strconv.Itoa(rng.IntN(8))
		w := int64(1 + rng.IntN(5))
		s.add(uint64(k[0]), "a", "t", k, w) // a poor hash: collisions on purpose
		want[k] += w
	}
	for _, c := range s.counters[:s.n] {
		if c.count != want[c.partitionKey()] || c.err != 0 {
			t.Errorf("%s: %d (err %d), want %d", c.partitionKey(), c.count, c.err, want[c.partitionKey()])
		}
	}
	// Now 100 keys through 8 counters: the index stays consistent through evictions.
	truth := map[string]int64{}
	s.reset(1)
	for range 100000 {
		k := strconv.Itoa(rng.IntN(100))
		if rng.IntN(4) == 0 {
			k = "hot"
		}
		s.add(uint64(len(k))*7+uint64(k[0]), "a", "t", k, 1)
		truth[k]++
	}
	seen := map[string]bool{}
	for i, c := range s.counters[:s.n] {
		k := c.partitionKey()
		if seen[k] {
			t.Fatalf("%s counted twice", k)
		}
		seen[k] = true
		if c.count < truth[k] || c.count-c.err > truth[k] {
			t.Errorf("%s: count %d err %d, truth %d", k, c.count, c.err, truth[k])
		}
		if j, ok := s.slot(c.hash, "a", "t", k); !ok || s.index[j] != int32(i+1) {
			t.Errorf("%s not found in the index", k)
		}
	}
	if !seen["hot"] {
		t.Errorf("the hot key is not kept")
	}
}

// TestConcurrent runs Observe, Report and Check together (run with -race).
func TestConcurrent(t *testing.T) {
	clk := newClock()
	tr := New(Options{Now: clk.Now, Logger: slog.New(slog.DiscardHandler), Warn: 10})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := &observe.Request{Account: "a", Status: 200}
			for i := range 20000 {
				r.Table = "t" + strconv.Itoa(i%7)
				r.PartitionKey = "p" + strconv.Itoa((i*g)%50)
				r.EntitiesRead = i % 3
				tr.Observe(r)
				if i%100 == 0 {
					clk.Advance(50 * time.Millisecond)
				}
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			tr.Report(Filter{Top: 5})
			tr.Check()
			tr.Top(3)
		}
	})
	wg.Wait()
	if rep := tr.Report(Filter{}); len(rep.Tables) != 7 {
		t.Errorf("%d tables, want 7", len(rep.Tables))
	}
}

// TestWeight: what a request counts for.
func TestWeight(t *testing.T) {
	for _, c := range []struct {
		r    observe.Request
		pk   string
		want int
	}{
		{observe.Request{Table: "t", PartitionKey: "p", Status: 204, EntitiesWritten: 1}, "p", 1},
		{observe.Request{Table: "t", PartitionKey: "p", Status: 202, EntitiesWritten: 100, BatchSize: 100}, "p", 100},
		{observe.Request{Table: "t", PartitionKey: "p", Status: 404}, "p", 1},
		{observe.Request{Table: "t", QueryPartition: "q", Status: 200, EntitiesRead: 1000}, "q", 1000},
		{observe.Request{Table: "t", Status: 200, EntitiesRead: 1000}, "", 0},
		{observe.Request{Table: "t", PartitionKey: "p", Status: 403}, "", 0},
		{observe.Request{Table: "t", PartitionKey: "p", Status: 503}, "", 0},
		{observe.Request{PartitionKey: "p", Status: 200}, "", 0},
	} {
		if pk, w := Weight(&c.r); pk != c.pk || w != c.want {
			t.Errorf("%+v: %q %d, want %q %d", c.r, pk, w, c.pk, c.want)
		}
	}
}

// BenchmarkObserve is the cost on every request's path: steady state over 1,000
// partitions of 10 tables, from parallel goroutines. The requests carry their Start
// and Latency, as the server's do, so Observe reads no clock.
func BenchmarkObserve(b *testing.B) {
	tr := New(Options{Warn: -1})
	reqs := make([]observe.Request, 1000)
	for i := range reqs {
		reqs[i] = observe.Request{Start: time.Now(), Latency: time.Millisecond, Account: "devstoreaccount1", Table: "table" + strconv.Itoa(i%10),
			PartitionKey: "partition-" + strconv.Itoa(i), Status: 204, EntitiesWritten: 1}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(reqs))
		for pb.Next() {
			tr.Observe(&reqs[i])
			i++
			if i == len(reqs) {
				i = 0
			}
		}
	})
}

// BenchmarkObserveDistinct: every request a new partition (the sketch evicts on each).
func BenchmarkObserveDistinct(b *testing.B) {
	tr := New(Options{Warn: -1})
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "partition-" + strconv.Itoa(1e9+i)
	}
	r := observe.Request{Start: time.Now(), Account: "devstoreaccount1", Table: "table", Status: 204, EntitiesWritten: 1}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.PartitionKey = keys[i&(len(keys)-1)]
		tr.Observe(&r)
	}
}
