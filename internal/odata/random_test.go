package odata

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// The randomized property test: random entities of mixed types, random filters built
// from an AST generator (printed, then parsed), and for every pair:
//
//   - Match agrees with an independent reference evaluator run on the generated tree;
//   - MatchEncoded agrees with Match;
//   - every matching entity's key lies in KeyRanges, and when Exact every entity whose
//     key lies there matches;
//   - KeyRanges is sorted, disjoint, non-adjacent and has no empty range;
//   - the canonical String() parses to an equal tree.

// Small pools so that equalities and key hits are common.
var (
	randKeys  = []string{"", "a", "aa", "ab", "b", "b\x00", "ba", "c", "é"}
	randProps = []string{"A", "B", "C", "D"}
	randStrs  = []string{"", "a", "b", "ab", "O'Neil", "é", "\U0001F600"}
	randInts  = []int64{0, 1, -1, 2, 5, 1 << 40, math.MaxInt64, math.MinInt64, math.MaxInt32, math.MinInt32}
	randFlts  = []float64{0, 1, -1, 0.5, 2.5, 5, 1 << 53, 1<<53 + 2, 0x1p63, math.Inf(1), math.Inf(-1), math.NaN(), math.Copysign(0, -1)}
	randTicks = []int64{0, 1, -1, 637000000000000000, 10_000_000}
	randBytes = [][]byte{{}, {0}, {1, 2}, {1}, {0xff}}
)

func randValue(r *rand.Rand, forLiteral bool) entity.Value {
	for {
		switch r.IntN(8) {
		case 0:
			return entity.StringValue(randStrs[r.IntN(len(randStrs))])
		case 1:
			return entity.BoolValue(r.IntN(2) == 0)
		case 2:
			v := randInts[r.IntN(len(randInts))]
			if v >= math.MinInt32 && v <= math.MaxInt32 {
				return entity.Int32Value(int32(v))
			}
		case 3:
			return entity.Int64Value(randInts[r.IntN(len(randInts))])
		case 4:
			f := randFlts[r.IntN(len(randFlts))]
			if forLiteral && (math.IsNaN(f) || math.IsInf(f, 0)) {
				continue // no literal spells these
			}
			return entity.DoubleValue(f)
		case 5:
			return entity.Value{Type: entity.DateTime, Int: randTicks[r.IntN(len(randTicks))]}
		case 6:
			g := make([]byte, 16)
			g[15] = byte(r.IntN(3))
			return entity.Value{Type: entity.GUID, Bytes: g}
		case 7:
			return entity.BinaryValue(randBytes[r.IntN(len(randBytes))])
		}
	}
}

func randEntity(r *rand.Rand, i int) testEntity {
	te := testEntity{e: entity.Entity{
		PartitionKey: randKeys[r.IntN(len(randKeys))],
		RowKey:       randKeys[r.IntN(len(randKeys))],
	}, ts: randTicks[r.IntN(len(randTicks))]}
	te.name = string(rune('a'+i%26)) + strings.Repeat("'", i/26)
	for _, p := range randProps {
		if r.IntN(3) > 0 {
			te.e.Props = append(te.e.Props, entity.Property{Name: p, Value: randValue(r, false)})
		}
	}
	te.enc = entity.AppendProps(nil, te.e.Props)
	return te
}

// randOperand returns a property (including system ones and one no entity has) or a
// literal, biased toward keys compared with strings.
func randOperand(r *rand.Rand) Operand {
	switch r.IntN(10) {
	case 0, 1:
		return Operand{Property: "PartitionKey"}
	case 2, 3:
		return Operand{Property: "RowKey"}
	case 4:
		return Operand{Property: "Timestamp"}
	case 5:
		return Operand{Property: "Missing"}
	case 6, 7:
		return Operand{Property: randProps[r.IntN(len(randProps))]}
	}
	return Operand{Literal: randValue(r, true)}
}

func randExpr(r *rand.Rand, depth int) Expr {
	if depth <= 0 || r.IntN(3) == 0 {
		if r.IntN(8) == 0 {
			o := randOperand(r)
			if !o.IsProperty() {
				o.Literal = entity.BoolValue(r.IntN(2) == 0)
			}
			return &BoolExpr{X: o}
		}
		c := &CompareExpr{Op: Op(1 + r.IntN(6)), Left: randOperand(r), Right: randOperand(r)}
		if c.Left.IsProperty() && c.Right.IsProperty() && r.IntN(2) == 0 {
			c.Right = Operand{Literal: entity.StringValue(randKeys[r.IntN(len(randKeys))])}
		}
		return c
	}
	switch r.IntN(5) {
	case 0:
		return &NotExpr{X: randExpr(r, depth-1)}
	case 1, 2:
		return &AndExpr{Terms: []Expr{randExpr(r, depth-1), randExpr(r, depth-1)}}
	}
	terms := make([]Expr, 2+r.IntN(2))
	for i := range terms {
		terms[i] = randExpr(r, depth-1)
	}
	return &OrExpr{Terms: terms}
}

// printRaw renders a generated tree with full parentheses and the operands in generated
// order, so the parser's normalisation (mirroring, flattening) is exercised.
func printRaw(e Expr) string {
	switch x := e.(type) {
	case *OrExpr, *AndExpr:
		terms, or := andOrTerms(x)
		sep := " and "
		if or {
			sep = " or "
		}
		parts := make([]string, len(terms))
		for i, t := range terms {
			parts[i] = "(" + printRaw(t) + ")"
		}
		return strings.Join(parts, sep)
	case *NotExpr:
		return "not (" + printRaw(x.X) + ")"
	case *CompareExpr:
		return x.Left.String() + " " + x.Op.String() + " " + x.Right.String()
	case *BoolExpr:
		return x.X.String()
	}
	panic("unknown node")
}

// refEval is the reference semantics, written independently of eval.go: values from a
// map, numbers compared as exact big.Floats, three-valued logic as a *bool (nil unknown).
func refEval(e Expr, te *testEntity) *bool {
	t, f := true, false
	tvOf := func(b bool) *bool {
		if b {
			return &t
		}
		return &f
	}
	switch x := e.(type) {
	case *AndExpr:
		var res = tvOf(true)
		for _, term := range x.Terms {
			v := refEval(term, te)
			if v != nil && !*v {
				return tvOf(false)
			}
			if v == nil {
				res = nil
			}
		}
		return res
	case *OrExpr:
		var res = tvOf(false)
		for _, term := range x.Terms {
			v := refEval(term, te)
			if v != nil && *v {
				return tvOf(true)
			}
			if v == nil {
				res = nil
			}
		}
		return res
	case *NotExpr:
		v := refEval(x.X, te)
		if v == nil {
			return nil
		}
		return tvOf(!*v)
	case *BoolExpr:
		v, ok := refValue(x.X, te)
		if !ok || v.Type != entity.Boolean {
			return nil
		}
		return tvOf(v.Int != 0)
	case *CompareExpr:
		a, ok1 := refValue(x.Left, te)
		b, ok2 := refValue(x.Right, te)
		if !ok1 || !ok2 {
			return nil
		}
		c, ok := refCompare(a, b)
		if !ok {
			return nil
		}
		if c == 2 { // NaN
			return tvOf(x.Op == Ne)
		}
		switch x.Op {
		case Eq:
			return tvOf(c == 0)
		case Ne:
			return tvOf(c != 0)
		case Gt:
			return tvOf(c > 0)
		case Ge:
			return tvOf(c >= 0)
		case Lt:
			return tvOf(c < 0)
		case Le:
			return tvOf(c <= 0)
		}
	}
	panic("unknown node")
}

func refValue(o Operand, te *testEntity) (entity.Value, bool) {
	switch o.Property {
	case "":
		return o.Literal, true
	case "PartitionKey":
		return entity.StringValue(te.e.PartitionKey), true
	case "RowKey":
		return entity.StringValue(te.e.RowKey), true
	case "Timestamp":
		return entity.Value{Type: entity.DateTime, Int: te.ts}, true
	}
	props := map[string]entity.Value{}
	for _, p := range te.e.Props {
		props[p.Name] = p.Value
	}
	v, ok := props[o.Property]
	return v, ok
}

// refCompare returns -1, 0, 1, or 2 for unordered; ok false for a type mismatch.
func refCompare(a, b entity.Value) (int, bool) {
	num := func(v entity.Value) (*big.Float, bool, bool) { // value, is numeric, is NaN
		switch v.Type {
		case entity.Int32, entity.Int64:
			return new(big.Float).SetInt64(v.Int), true, false
		case entity.Double:
			if math.IsNaN(v.Float) {
				return nil, true, true
			}
			return new(big.Float).SetFloat64(v.Float), true, false
		}
		return nil, false, false
	}
	if x, isNum, nan1 := num(a); isNum {
		y, isNum2, nan2 := num(b)
		if !isNum2 {
			return 0, false
		}
		if nan1 || nan2 {
			return 2, true
		}
		return x.Cmp(y), true
	}
	if a.Type != b.Type {
		return 0, false
	}
	switch a.Type {
	case entity.String:
		return bytes.Compare([]byte(a.Str), []byte(b.Str)), true
	case entity.GUID:
		return strings.Compare(entity.FormatGUID(a.Bytes), entity.FormatGUID(b.Bytes)), true
	case entity.Binary:
		return bytes.Compare(a.Bytes, b.Bytes), true
	default: // Boolean, DateTime
		switch {
		case a.Int < b.Int:
			return -1, true
		case a.Int > b.Int:
			return 1, true
		}
		return 0, true
	}
}

// checkRanges asserts KeyRanges' shape: sorted, disjoint, non-adjacent, non-empty.
func checkRanges(t *testing.T, where string, rs []KeyRange) {
	t.Helper()
	for i, r := range rs {
		if r.End != nil && !r.Start.Less(*r.End) {
			t.Errorf("%s: empty range %v", where, r)
		}
		if i > 0 {
			prev := rs[i-1]
			if prev.End == nil || !prev.End.Less(r.Start) {
				t.Errorf("%s: ranges %v and %v overlap or touch", where, prev, r)
			}
		}
	}
}

func TestRandomFilters(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	iterations := 4000
	if testing.Short() {
		iterations = 500
	}
	for it := 0; it < iterations; it++ {
		set := make([]testEntity, 40)
		for i := range set {
			set[i] = randEntity(r, i)
		}
		for range 5 {
			gen := randExpr(r, 4)
			src := printRaw(gen)
			f, err := Parse(src)
			if err != nil {
				t.Fatalf("%s: %v", src, err)
			}
			checkRanges(t, src, f.KeyRanges())
			checkRoundTrip(t, src, f)
			exact := f.Exact()
			for i := range set {
				te := &set[i]
				want := refEval(gen, te)
				got := f.Match(&te.e, te.ts)
				if got != (want != nil && *want) {
					t.Fatalf("%s\nentity %q/%q ts %d %v: Match = %v; reference %v", src, te.e.PartitionKey, te.e.RowKey, te.ts, te.e.Props, got, want)
				}
				enc, err := f.MatchEncoded(te.e.PartitionKey, te.e.RowKey, te.ts, te.enc)
				if err != nil || enc != got {
					t.Fatalf("%s\nentity %v: MatchEncoded = %v, %v; Match %v", src, te.e, enc, err, got)
				}
				in := inRanges(f.KeyRanges(), keyOf(*te))
				if got && !in {
					t.Fatalf("%s\nentity %q/%q matches outside %v", src, te.e.PartitionKey, te.e.RowKey, f.KeyRanges())
				}
				if exact && in && !got {
					t.Fatalf("%s\nExact, but entity %q/%q in %v does not match", src, te.e.PartitionKey, te.e.RowKey, f.KeyRanges())
				}
			}
			if pk, rk, ok := f.IsPoint(); ok {
				k := storage.Key{PartitionKey: pk, RowKey: rk}
				if rs := f.KeyRanges(); len(rs) != 1 || !rs[0].Contains(k) || rs[0].Contains(storage.Key{PartitionKey: pk, RowKey: rk + "\x00"}) {
					t.Fatalf("%s: IsPoint %v vs %v", src, k, rs)
				}
			}
		}
	}
}

// TestRandomKeyFilters concentrates on key-only filters, where Exact should usually
// hold, and checks it against every key of a small universe rather than sampled entities.
func TestRandomKeyFilters(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var universe []storage.Key
	for _, pk := range randKeys {
		for _, rk := range randKeys {
			universe = append(universe, storage.Key{PartitionKey: pk, RowKey: rk})
		}
	}
	var gen func(depth int) Expr
	gen = func(depth int) Expr {
		if depth <= 0 || r.IntN(3) == 0 {
			prop := "PartitionKey"
			if r.IntN(2) == 0 {
				prop = "RowKey"
			}
			return &CompareExpr{Op: Op(1 + r.IntN(6)), Left: Operand{Property: prop},
				Right: Operand{Literal: entity.StringValue(randKeys[r.IntN(len(randKeys))])}}
		}
		switch r.IntN(4) {
		case 0:
			return &NotExpr{X: gen(depth - 1)}
		case 1:
			return &AndExpr{Terms: []Expr{gen(depth - 1), gen(depth - 1)}}
		}
		return &OrExpr{Terms: []Expr{gen(depth - 1), gen(depth - 1)}}
	}
	exactCount, iterations := 0, 20000
	if testing.Short() {
		iterations = 2000
	}
	for range iterations {
		g := gen(4)
		src := printRaw(g)
		f := MustParse(src)
		checkRanges(t, src, f.KeyRanges())
		if f.Exact() {
			exactCount++
		}
		for _, k := range universe {
			te := testEntity{e: entity.Entity{PartitionKey: k.PartitionKey, RowKey: k.RowKey}}
			m := f.Match(&te.e, 0)
			in := inRanges(f.KeyRanges(), k)
			if m && !in || f.Exact() && in != m {
				t.Fatalf("%s: key %v: match %v, in ranges %v, exact %v; ranges %v", src, k, m, in, f.Exact(), f.KeyRanges())
			}
		}
	}
	// Pure key filters are exact unless a RowKey limit spans several partitions.
	if exactCount < iterations/3 {
		t.Errorf("only %d of %d key-only filters were exact", exactCount, iterations)
	}
	t.Logf("%d of %d key-only filters exact", exactCount, iterations)
}

// TestPlanCoarsening drives the planner past maxPlanSpans and checks it stays a
// superset.
func TestPlanCoarsening(t *testing.T) {
	product := func(n int) *Filter {
		var pks, rks []string
		for i := range n {
			pks = append(pks, fmt.Sprintf("PartitionKey eq 'p%03d'", i))
			rks = append(rks, fmt.Sprintf("RowKey eq 'r%03d'", i))
		}
		return MustParse("(" + strings.Join(pks, " or ") + ") and (" + strings.Join(rks, " or ") + ")")
	}
	// 30 partitions × 30 row keys: 900 points, exact.
	f := product(30)
	if n := len(f.KeyRanges()); n != 900 || !f.Exact() {
		t.Errorf("900 points: %d ranges, exact %v", n, f.Exact())
	}
	// 70 × 70 = 4900 spans is past the limit: the plan coarsens to whole partitions and
	// says it is no longer exact.
	f = product(70)
	if n := len(f.KeyRanges()); n != 70 || f.Exact() {
		t.Errorf("coarsened: %d ranges, exact %v", n, f.Exact())
	}
	e := entity.Entity{PartitionKey: "p042", RowKey: "r017"}
	if !f.Match(&e, 0) || !inRanges(f.KeyRanges(), storage.Key{PartitionKey: e.PartitionKey, RowKey: e.RowKey}) {
		t.Error("coarsened plan lost a matching key")
	}
	checkRanges(t, "coarsened", f.KeyRanges())
	if !reflect.DeepEqual(f.KeyRanges(), mergeRanges(append([]KeyRange(nil), f.KeyRanges()...))) {
		t.Error("coarsened ranges are not merged")
	}
}
