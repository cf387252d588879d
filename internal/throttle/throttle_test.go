package throttle

import (
	"fmt"
	"testing"
	"time"
)

// clock is a manual clock for the buckets.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_700_000_000, 0)} }
func admitted(l *Limiter, n int, pk string) (ok int) {
	for range n {
		if l.Admit("acct", "t", pk, 1) == None {
			ok++
		}
	}
	return ok
}

func TestPartitionTargetOverTime(t *testing.T) {
	c := newClock()
	l := New(Options{Partition: 100, Account: 1000, Now: c.now})
	// A full bucket lets one second's worth through at once, then 100/s.
	if got := admitted(l, 500, "p"); got != 100 {
		t.Fatalf("burst admitted %d, want 100", got)
	}
	total := 0
	for range 50 { // 5 s driven at 400/s in 100 ms steps
		c.advance(100 * time.Millisecond)
		total += admitted(l, 40, "p")
	}
	if total < 495 || total > 505 {
		t.Fatalf("5 s at 400/s admitted %d, want ~500 (100/s)", total)
	}
}

func TestSpreadPartitionsAllAdmitted(t *testing.T) {
	c := newClock()
	l := New(Options{Partition: 100, Account: 1000, Now: c.now})
	total := 0
	for range 50 {
		c.advance(100 * time.Millisecond)
		for p := range 10 {
			total += admitted(l, 5, fmt.Sprint("p", p)) // 50/s each
		}
	}
	if total != 2500 {
		t.Fatalf("admitted %d of 2500 spread over 10 partitions under their targets", total)
	}
}

func TestAccountTargetCapsTheSum(t *testing.T) {
	c := newClock()
	l := New(Options{Partition: 100, Account: 300, Now: c.now})
	c.advance(0)
	admitted(l, 1000, "") // spend the account's burst
	total, refusedBy := 0, map[Scope]int{}
	for range 50 {
		c.advance(100 * time.Millisecond)
		for p := range 10 {
			for range 5 {
				s := l.Admit("acct", "t", fmt.Sprint("p", p), 1)
				if s == None {
					total++
				}
				refusedBy[s]++
			}
		}
	}
	if total < 1490 || total > 1510 {
		t.Fatalf("admitted %d in 5 s, want ~1500 (300/s)", total)
	}
	if refusedBy[Partition] != 0 || refusedBy[Account] == 0 {
		t.Fatalf("refusals %v: want the account's only", refusedBy)
	}
	// Another account is not affected.
	if l.Admit("other", "t", "p0", 1) != None {
		t.Fatal("another account refused")
	}
}

func TestDebtFromCharges(t *testing.T) {
	c := newClock()
	l := New(Options{Partition: 100, Account: 10000, Now: c.now})
	if l.Admit("a", "t", "p", 1) != None {
		t.Fatal("first request refused")
	}
	l.Charge("a", "t", "p", 299) // a query that scanned 300 entities: 2 s of debt
	c.advance(1900 * time.Millisecond)
	if s := l.Admit("a", "t", "p", 1); s != Partition {
		t.Fatalf("in debt: got %v, want partition", s)
	}
	c.advance(200 * time.Millisecond)
	if s := l.Admit("a", "t", "p", 1); s != None {
		t.Fatalf("debt repaid: got %v", s)
	}
}

func TestRefusedPartitionReturnsAccountTokens(t *testing.T) {
	c := newClock()
	l := New(Options{Partition: 10, Account: 20, Now: c.now})
	admitted(l, 10, "hot")
	for range 100 {
		if l.Admit("acct", "t", "hot", 1) != Partition {
			t.Fatal("hot partition admitted past its burst")
		}
	}
	// The refused requests took nothing from the account: 10 remain.
	if got := admitted(l, 20, "cold"); got != 10 {
		t.Fatalf("cold partition admitted %d, want the account's 10 left", got)
	}
}

func TestOffLimits(t *testing.T) {
	l := New(Options{Partition: -1, Account: -1})
	if got := admitted(l, 100000, "p"); got != 100000 {
		t.Fatalf("limits off admitted %d", got)
	}
	if l.Partitions() != 0 {
		t.Fatal("limits off held buckets")
	}
}

func TestBoundedBuckets(t *testing.T) {
	c := newClock()
	l := New(Options{Account: -1, MaxPartitions: 1024, Now: c.now})
	for i := range 100000 {
		l.Admit("a", "t", fmt.Sprint(i), 1)
	}
	if n := l.Partitions(); n > 1024 {
		t.Fatalf("%d buckets held, bound 1024", n)
	}
	// A partition in use survives the churn of others (least recently used goes first).
	admitted(l, 2000, "hot")
	for i := range 10 {
		l.Admit("a", "t", fmt.Sprint("churn", i), 1)
		if l.Admit("acct", "t", "hot", 1) != Partition {
			t.Fatal("hot partition's debt forgotten while it was in use")
		}
	}
}

func TestCost(t *testing.T) {
	for _, c := range []struct {
		entities int
		bytes    int64
		want     int
	}{
		{0, 0, 1}, {1, 0, 1}, {1, 1100, 1}, {1, 2048, 2}, {1, 10 << 10, 10}, {100, 100 << 10, 100}, {100, 500 << 10, 500}, {1000, 0, 1000},
	} {
		if got := Cost(c.entities, c.bytes); got != c.want {
			t.Errorf("Cost(%d, %d) = %d, want %d", c.entities, c.bytes, got, c.want)
		}
	}
}

func BenchmarkAdmit(b *testing.B) {
	l := New(Options{Partition: 1e12, Account: 1e12})
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprint("pk", i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Admit("acct", "table", keys[i%len(keys)], 1)
			i++
		}
	})
}
