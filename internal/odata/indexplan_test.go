package odata

import (
	"math/rand/v2"
	"testing"

	"github.com/ceruleandb/cerulean/internal/index"
)

// TestRandomIndexPlans: for random filters and entities, every entity a filter accepts
// has the index's leading property, with a key inside the filter's IndexSpans, whenever
// those are bounded; and a comparison of the property, alone or and-ed with anything,
// is bounded.
func TestRandomIndexPlans(t *testing.T) {
	r := rand.New(rand.NewPCG(46, 7))
	iterations := 3000
	if testing.Short() {
		iterations = 400
	}
	bounded := 0
	for range iterations {
		set := make([]testEntity, 30)
		for i := range set {
			set[i] = randEntity(r, i)
		}
		for range 5 {
			gen := randExpr(r, 4)
			if r.IntN(3) == 0 {
				// Lead with a comparison of A often enough for bounded plans to be common.
				gen = &AndExpr{Terms: []Expr{&CompareExpr{Op: Op(1 + r.IntN(6)), Left: Operand{Property: "A"}, Right: Operand{Literal: randValue(r, true)}}, gen}}
			}
			src := printRaw(gen)
			f, err := Parse(src)
			if err != nil {
				t.Fatalf("%s: %v", src, err)
			}
			spans, ok := f.IndexSpans("A")
			if !ok {
				if and, isAnd := gen.(*AndExpr); isAnd {
					if c, lead := and.Terms[0].(*CompareExpr); lead && c.Left.Property == "A" && !c.Right.IsProperty() {
						t.Fatalf("%s: a comparison of A and-ed with anything is unbounded", src)
					}
				}
				continue
			}
			bounded++
			for i := range set {
				te := &set[i]
				if !f.Match(&te.e, te.ts) {
					continue
				}
				v, has := te.e.Get("A")
				if !has {
					t.Fatalf("%s: bounded on A, but accepts %q/%q, which has no A", src, te.e.PartitionKey, te.e.RowKey)
				}
				if k := index.AppendValue(nil, v); !index.Contains(spans, k) {
					t.Fatalf("%s: accepts %q/%q with A = %v (key %x), outside %x", src, te.e.PartitionKey, te.e.RowKey, v, k, spans)
				}
			}
		}
	}
	if bounded < iterations {
		t.Fatalf("only %d of %d filters planned on A: the test tests little", bounded, iterations*5)
	}
}
