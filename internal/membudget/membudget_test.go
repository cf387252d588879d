package membudget

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

const mib = 1 << 20

func TestDerive(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit int64
		e     Engine
		o     Overrides
		want  Budget // GoLimit as with cgo; checked apart
		err   string
	}{
		{name: "default", limit: DefaultLimit,
			// R = 512 − 64 − 64 = 384 MiB; R/12 = 32 MiB: the budgets before the limit.
			want: Budget{BlockCache: 32 * mib, MemTableSize: 32 * mib, RowCache: 32 * mib, Bodies: 64 * mib, GCHeadroom: 64 * mib}},
		{name: "smallest", limit: MinLimit,
			// R = 160 − 64 − 48 = 48 MiB; R/12 = 4 MiB.
			want: Budget{BlockCache: 4 * mib, MemTableSize: 4 * mib, RowCache: 4 * mib, Bodies: 48 * mib, GCHeadroom: 12 * mib}},
		{name: "rounded down to MiB", limit: 200 * mib,
			// R = 200 − 64 − 48 = 88 MiB; R/12 = 7.3 MiB.
			want: Budget{BlockCache: 7 * mib, MemTableSize: 7 * mib, RowCache: 7 * mib, Bodies: 48 * mib, GCHeadroom: 22 * mib}},
		{name: "1GiB", limit: 1 << 30,
			// R = 1024 − 64 − 128 = 832 MiB; R/12 = 69.3 MiB.
			want: Budget{BlockCache: 69 * mib, MemTableSize: 69 * mib, RowCache: 69 * mib, Bodies: 128 * mib, GCHeadroom: 64 * mib}},
		{name: "large memtables capped, the rest to the block cache", limit: 8 << 30,
			// R = 8192 − 64 − 1024 = 7104 MiB; R/12 = 592 MiB; 2 × (592 − 256) more for blocks.
			want: Budget{BlockCache: (592 + 2*(592-256)) * mib, MemTableSize: 256 * mib, RowCache: 592 * mib, Bodies: 1024 * mib, GCHeadroom: 64 * mib}},
		{name: "overrides", limit: DefaultLimit, o: Overrides{MemTableSize: 64 * mib, RowCache: 8 * mib, Bodies: 96 * mib},
			// R = 512 − 64 − 96 = 352; R/12 = 29.3.
			want: Budget{BlockCache: 29 * mib, MemTableSize: 64 * mib, RowCache: 8 * mib, Bodies: 96 * mib, GCHeadroom: 64 * mib}},
		{name: "row cache off", limit: DefaultLimit, o: Overrides{RowCache: Off},
			want: Budget{BlockCache: 32 * mib, MemTableSize: 32 * mib, Bodies: 64 * mib, GCHeadroom: 64 * mib}},
		{name: "external engine", limit: DefaultLimit, e: External,
			want: Budget{Bodies: 64 * mib, GCHeadroom: 64 * mib}},
		{name: "under the minimum", limit: MinLimit - 1, err: "want at least 160MiB"},
		{name: "overrides too large", limit: 256 * mib, o: Overrides{MemTableSize: 64 * mib},
			err: "memory limit 256MiB is too small for a block cache of 12MiB, 2 memtables of 64MiB, a row cache of 12MiB and 48MiB of request bodies"},
		{name: "bodies too large", limit: 256 * mib, o: Overrides{Bodies: 200 * mib}, err: "too small"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := Derive(c.limit, c.e, c.o)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Derive(%s) = %+v, %v; want an error containing %q", Size(c.limit), b, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Derive(%s): %v", Size(c.limit), err)
			}
			c.want.Limit = c.limit
			c.want.GoLimit = c.limit - Base
			if pebbleOffHeap {
				c.want.GoLimit -= c.want.Pebble()
			}
			if b != c.want {
				t.Errorf("Derive(%s, %+v) =\n %+v, want\n %+v", Size(c.limit), c.o, b, c.want)
			}
		})
	}
}

// TestDeriveBounds: for every limit, the holders' caps and Base leave at least half of R
// (and at least minWorking) to the rest of the Go heap, under both the limit and the Go
// runtime's limit, and the memtables stay within their range.
func TestDeriveBounds(t *testing.T) {
	for limit := int64(MinLimit); limit <= 64<<30; limit += limit / 7 {
		b, err := Derive(limit, Pebble, Overrides{})
		if err != nil {
			t.Fatalf("Derive(%s): %v", Size(limit), err)
		}
		r := limit - Base - b.Bodies
		held := Base + b.Pebble() + b.RowCache + b.Bodies
		if spare := limit - held; spare < r/2 || spare < minWorking {
			t.Errorf("Derive(%s): %s held, %s spare, want at least %s", Size(limit), Size(held), Size(spare), Size(max(r/2, minWorking)))
		}
		if b.MemTableSize < MinMemTableSize || b.MemTableSize > MaxMemTableSize {
			t.Errorf("Derive(%s): memtables of %s", Size(limit), Size(b.MemTableSize))
		}
		goHeld := b.RowCache + b.Bodies
		if !pebbleOffHeap {
			goHeld += b.Pebble()
		}
		if b.GoLimit-goHeld < minWorking || b.GoLimit+Base > limit {
			t.Errorf("Derive(%s): Go limit %s for %s of caches in the heap", Size(limit), Size(b.GoLimit), Size(goHeld))
		}
		if b.GCHeadroom <= 0 || b.GCHeadroom > DefaultGCHeadroom {
			t.Errorf("Derive(%s): GC headroom %s", Size(limit), Size(b.GCHeadroom))
		}
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{512 * mib: "512MiB", 1 << 30: "1GiB", 4 << 10: "4KiB", 100: "100", 0: "0", 3*mib + 1: "3.0MiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestCollector(t *testing.T) {
	b, err := Derive(DefaultLimit, Pebble, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(b.Collector()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gathered %d families, %v", len(mfs), err)
	}
	got := map[string]float64{}
	for _, m := range mfs[0].GetMetric() {
		got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	for name, want := range map[string]int64{"limit": DefaultLimit, "block_cache": 32 * mib, "memtables": 64 * mib, "row_cache": 32 * mib, "request_bodies": 64 * mib, "go_limit": b.GoLimit, "base": Base, "gc_headroom": 64 * mib} {
		if got[name] != float64(want) {
			t.Errorf("cerulean_memory_budget_bytes{holder=%q} = %v, want %d", name, got[name], want)
		}
	}
}
