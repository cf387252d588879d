package faults

import (
	"bufio"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseSpecs(t *testing.T) {
	f, err := os.Open("testdata/specs.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		in, want, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("testdata line without a tab: %q", line)
		}
		n++
		spec, err := Parse(in)
		if msg, isErr := strings.CutPrefix(want, "error: "); isErr {
			if err == nil || !strings.Contains(err.Error(), msg) {
				t.Errorf("Parse(%q) = %v, %v; want error containing %q", in, spec, err, msg)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", in, err)
			continue
		}
		if got := spec.String(); got != want {
			t.Errorf("Parse(%q) = %q, want %q", in, got, want)
		}
		// The canonical form parses to itself.
		again, err := Parse(spec.String())
		if err != nil || again.String() != want {
			t.Errorf("canonical %q reparsed to %q, %v", want, again.String(), err)
		}
	}
	if n < 20 {
		t.Fatalf("only %d cases read", n)
	}
}

func TestTooManyRules(t *testing.T) {
	if _, err := Parse(strings.Repeat("insert:503,", maxRules) + "insert:503"); err == nil {
		t.Fatal("a spec of more than maxRules rules was accepted")
	}
}

func mustParse(t *testing.T, s string) Spec {
	t.Helper()
	spec, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func TestDecideRatesAndSeed(t *testing.T) {
	spec := mustParse(t, "insert:503:10%,insert:reset-after:5%,query:timeout:1%,*:latency:20ms±10ms:50%")
	const n = 100000
	run := func(seed uint64) ([]Decision, map[Kind]int, int) {
		in := New(spec, seed)
		ds := make([]Decision, 0, n)
		kinds, delayed := map[Kind]int{}, 0
		for i := range n {
			op := "InsertEntity"
			if i%2 == 1 {
				op = "QueryEntities"
			}
			d := in.Decide(op)
			ds = append(ds, d)
			kinds[d.Kind]++
			if d.Delay > 0 {
				delayed++
				if d.Delay < 10*time.Millisecond || d.Delay > 30*time.Millisecond {
					t.Fatalf("delay %v outside 20ms±10ms", d.Delay)
				}
			}
		}
		return ds, kinds, delayed
	}
	a, kinds, delayed := run(42)
	near := func(name string, got int, want float64) {
		if math.Abs(float64(got)-want) > 0.1*want+50 {
			t.Errorf("%s: %d, want about %.0f", name, got, want)
		}
	}
	near("503", kinds[Busy], n/2*0.10)
	// reset-after fires only when the 503 rule did not: the first failure drawn wins.
	near("reset-after", kinds[ResetAfter], n/2*0.90*0.05)
	near("timeout", kinds[Timeout], n/2*0.01)
	near("latency", delayed, n*0.5)
	b, _, _ := run(42)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, decision %d differs: %+v vs %+v", i, a[i], b[i])
		}
	}
	c, _, _ := run(43)
	same := 0
	for i := range a {
		if a[i] == c[i] {
			same++
		}
	}
	if same == n {
		t.Fatal("another seed drew the same decisions")
	}
}

func TestDecideOperations(t *testing.T) {
	in := New(mustParse(t, "*:cut,insert:500,*:503:100%"), 1)
	for _, c := range []struct {
		op   string
		want Kind
	}{
		{"InsertEntity", Internal}, // *:cut does not shadow the failures of other operations
		{"QueryEntities", Cut},
		{"DeleteEntity", Busy},
		{"SomethingNew", Busy},
	} {
		if got := in.Decide(c.op).Kind; got != c.want {
			t.Errorf("Decide(%s) = %v, want %v", c.op, got, c.want)
		}
	}
	if d := New(mustParse(t, "insert:500"), 1).Decide("QueryEntities"); d != (Decision{}) {
		t.Errorf("a rule for inserts decided %+v for a query", d)
	}
}

func TestCutAt(t *testing.T) {
	in := New(nil, 7)
	seen := map[int]bool{}
	for range 1000 {
		k := in.CutAt(5)
		if k < 0 || k >= 5 {
			t.Fatalf("CutAt(5) = %d", k)
		}
		seen[k] = true
	}
	if len(seen) != 5 {
		t.Fatalf("CutAt(5) drew only %v", seen)
	}
	if in.CutAt(1) != 0 || in.CutAt(0) != 0 {
		t.Fatal("CutAt of a page of one or none must keep none")
	}
}

func TestDeletions(t *testing.T) {
	now := time.Unix(1000, 0)
	d := NewDeletions(40*time.Second, func() time.Time { return now })
	d.Deleted("acct", "Orders")
	if !d.BeingDeleted("acct", "orders") {
		t.Fatal("a deleted table's name (any case) is not being deleted")
	}
	if d.BeingDeleted("other", "orders") || d.BeingDeleted("acct", "orders2") {
		t.Fatal("another account's or table's name is taken")
	}
	now = now.Add(39 * time.Second)
	if !d.BeingDeleted("acct", "Orders") {
		t.Fatal("freed before the delay")
	}
	now = now.Add(time.Second)
	if d.BeingDeleted("acct", "Orders") {
		t.Fatal("still taken after the delay")
	}
	for i := range 100 {
		d.Deleted("acct", "t"+string(rune('a'+i%26))+time.Duration(i).String())
		now = now.Add(time.Second)
	}
	if len(d.names) > 41 {
		t.Fatalf("%d names held; expired ones must go", len(d.names))
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"insert:503:1%", "*:latency:20ms±10ms", "query:cut:0.5", "a:b:c:d:e", "*:latency:1h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := Parse(s)
		if err != nil {
			return
		}
		for _, r := range spec {
			if !(r.Rate > 0 && r.Rate <= 1) || r.Jitter > r.Delay || r.Delay+r.Jitter > time.Minute || r.Kind == None {
				t.Fatalf("Parse(%q) accepted a bad rule %+v", s, r)
			}
		}
		again, err := Parse(spec.String())
		if err != nil || again.String() != spec.String() {
			t.Fatalf("Parse(%q): canonical %q reparsed to %q, %v", s, spec.String(), again.String(), err)
		}
		New(spec, 1).Decide("InsertEntity")
	})
}
