package index_test

import (
	"bufio"
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/index"
	"github.com/ceruleandb/cerulean/internal/odata"
)

// literal reads an OData literal through the filter parser, so the test's values are
// exactly the ones a query carries.
func literal(t testing.TB, src string) entity.Value {
	t.Helper()
	f, err := odata.Parse("X eq " + src)
	if err != nil {
		t.Fatalf("literal %s: %v", src, err)
	}
	c, ok := f.Expr().(*odata.CompareExpr)
	if !ok || c.Right.IsProperty() {
		t.Fatalf("literal %s parsed as %v", src, f.Expr())
	}
	return c.Right.Literal
}

func key(vs ...entity.Value) []byte {
	var b []byte
	for _, v := range vs {
		b = index.AppendValue(b, v)
	}
	return b
}

// TestKeyOrder: testdata/order.txt lists values in ascending order, in blocks of values
// that compare: keys of one line are equal, keys of later lines greater (numbers: not
// less, and greater when their float64s differ), and keys of different blocks never
// interleave. Compound keys order by their first value, then the second.
func TestKeyOrder(t *testing.T) {
	f, err := os.Open("testdata/order.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type group struct {
		src  string
		vals []entity.Value
	}
	var blocks [][]group
	var cur []group
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "#"):
		case line == "":
			if len(cur) > 0 {
				blocks, cur = append(blocks, cur), nil
			}
		default:
			g := group{src: line}
			for _, s := range strings.Split(line, " = ") {
				g.vals = append(g.vals, literal(t, s))
			}
			cur = append(cur, g)
		}
	}
	if len(cur) > 0 {
		blocks = append(blocks, cur)
	}
	if len(blocks) != 6 {
		t.Fatalf("%d blocks in testdata/order.txt, want 6", len(blocks))
	}
	asFloat := func(v entity.Value) float64 {
		if v.Type == entity.Double {
			return v.Float
		}
		return float64(v.Int)
	}
	var all [][]byte // every key, to check blocks against each other
	for _, b := range blocks {
		for i, g := range b {
			k := key(g.vals[0])
			for _, v := range g.vals[1:] {
				if !bytes.Equal(key(v), k) {
					t.Errorf("%s: keys %x and %x of equal values differ", g.src, k, key(v))
				}
			}
			all = append(all, k)
			if i == 0 {
				continue
			}
			prev := b[i-1]
			pk := key(prev.vals[0])
			c := bytes.Compare(pk, k)
			numeric := g.vals[0].Type == entity.Int64 || g.vals[0].Type == entity.Int32 || g.vals[0].Type == entity.Double
			if c > 0 || (c == 0 && (!numeric || asFloat(prev.vals[0]) != asFloat(g.vals[0]))) {
				t.Errorf("key of %s (%x) not below key of %s (%x)", prev.src, pk, g.src, k)
			}
			// Compound: (prev, big) < (cur, small).
			big, small := entity.StringValue("\xff\xff"), entity.StringValue("")
			if c < 0 && bytes.Compare(key(prev.vals[0], big), key(g.vals[0], small)) >= 0 {
				t.Errorf("compound key of (%s, …) not below (%s, …)", prev.src, g.src)
			}
		}
	}
	// Blocks occupy disjoint ranges: sorting all keys keeps each block together.
	for i := range blocks {
		first, last := key(blocks[i][0].vals[0]), key(blocks[i][len(blocks[i])-1].vals[0])
		for _, k := range all {
			if bytes.Compare(k, first) > 0 && bytes.Compare(k, last) < 0 {
				same := false
				for _, g := range blocks[i] {
					same = same || bytes.Equal(key(g.vals[0]), k)
				}
				if !same {
					t.Errorf("key %x of another block falls inside block %s … %s", k, blocks[i][0].src, blocks[i][len(blocks[i])-1].src)
				}
			}
		}
	}
	// NaN sorts apart from the numbers.
	nan := key(entity.DoubleValue(math.NaN()))
	if bytes.Equal(nan, key(entity.DoubleValue(0))) || bytes.Equal(nan, key(entity.DoubleValue(math.Inf(1)))) {
		t.Errorf("NaN's key %x equals a number's", nan)
	}
}

// TestPrefixEnd: [k, PrefixEnd(k)) holds exactly the keys starting with k.
func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct{ k, want []byte }{
		{[]byte{1, 2}, []byte{1, 3}},
		{[]byte{1, 0xFF}, []byte{2}},
		{[]byte{0xFF, 0xFF}, nil},
		{nil, nil},
	} {
		if got := index.PrefixEnd(c.k); !bytes.Equal(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("PrefixEnd(%x) = %x, want %x", c.k, got, c.want)
		}
	}
}

var ops = []index.Op{index.Eq, index.Ne, index.Lt, index.Le, index.Gt, index.Ge}

// randValue draws a value of any type, near a few others so that comparisons come out
// every way; literal values avoid NaN and infinities, which no literal spells.
func randValue(r *rand.Rand, literal bool) entity.Value {
	ints := []int64{0, 1, -1, 2, 7, math.MaxInt32, math.MinInt32, 1 << 53, 1<<53 + 1, math.MaxInt64, math.MinInt64}
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 7, 1 << 53, 1<<53 + 2, 1e300, -1e300, math.SmallestNonzeroFloat64}
	if !literal {
		floats = append(floats, math.NaN(), math.Inf(1), math.Inf(-1))
	}
	strs := []string{"", "a", "a\x00", "ab", "b", "\xff", "é"}
	switch r.IntN(8) {
	case 0:
		return entity.StringValue(strs[r.IntN(len(strs))])
	case 1:
		return entity.BoolValue(r.IntN(2) == 0)
	case 2:
		return entity.Int32Value(int32(ints[r.IntN(7)]))
	case 3:
		return entity.Int64Value(ints[r.IntN(len(ints))])
	case 4:
		return entity.DoubleValue(floats[r.IntN(len(floats))])
	case 5:
		return entity.Value{Type: entity.DateTime, Int: ints[r.IntN(5)] * 1e9}
	case 6:
		g := make([]byte, 16)
		g[r.IntN(16)] = byte(r.IntN(3))
		return entity.Value{Type: entity.GUID, Bytes: g}
	default:
		bs := [][]byte{{}, {0}, {0, 0}, {0, 1}, {1}, {0xFF}}
		return entity.BinaryValue(bs[r.IntN(len(bs))])
	}
}

func numeric(v entity.Value) bool {
	return v.Type == entity.Int32 || v.Type == entity.Int64 || v.Type == entity.Double
}

// exact reports whether the float64 key of a number holds it exactly.
func exact(v entity.Value) bool {
	switch v.Type {
	case entity.Int64:
		return v.Int >= -(1<<53) && v.Int <= 1<<53
	case entity.Double:
		return v.Float == v.Float
	}
	return true
}

// checkSpans is TestSpansAgainstTheEvaluator's check of one stored value x, literal v
// and operator.
func checkSpans(t *testing.T, x, v entity.Value, op index.Op) {
	t.Helper()
	lit := odata.Operand{Literal: v}.String()
	for _, want := range []bool{true, false} {
		src := "X " + op.String() + " " + lit
		if !want {
			src = "not (" + src + ")"
		}
		f, err := odata.Parse(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		ent := &entity.Entity{PartitionKey: "p", RowKey: "r", Props: []entity.Property{{Name: "X", Value: x}}}
		holds := f.Match(ent, 1)
		spans := index.Spans(op, v, want)
		in := index.Contains(spans, key(x))
		if holds && !in {
			t.Fatalf("%s holds for X = %v (key %x), not in its spans %x", src, x, key(x), spans)
		}
		if holds && !index.Contains(spans, key(x, entity.StringValue("z"))) {
			t.Fatalf("%s: a compound key led by X = %v is not in its spans", src, x)
		}
		// Numbers keyed alike may differ (an Int64 that rounds), so the spans hold the
		// literal's own key on either side of every comparison.
		if in && !holds && exact(x) && exact(v) && !(numeric(x) && bytes.Equal(key(x), key(v))) {
			t.Fatalf("%s does not hold for X = %v (key %x), but it is in its exact spans %x", src, x, key(x), spans)
		}
	}
}

// TestSpansAgainstTheEvaluator: for random stored values x and literals v, "X op v" (and
// "not (X op v)") holds under the $filter evaluator only for an x whose key — alone, or
// leading a compound key — is in Spans(op, v, true) (false); and where the keys are
// exact, only such x are in the spans.
func TestSpansAgainstTheEvaluator(t *testing.T) {
	r := rand.New(rand.NewPCG(46, 1))
	for range 20000 {
		x, v := randValue(r, false), randValue(r, true)
		o := ops[r.IntN(len(ops))]
		checkSpans(t, x, v, o)
	}
}

// fuzzValue makes a value of type code t (mod 8) from b; lit keeps it to what a literal
// can spell (no NaN or infinity, a GUID of 16 bytes, valid UTF-8 for a string).
func fuzzValue(t uint8, b []byte, lit bool) (entity.Value, bool) {
	u := uint64(0)
	for i := 0; i < 8 && i < len(b); i++ {
		u = u<<8 | uint64(b[i])
	}
	switch t % 8 {
	case 0:
		if lit && !utf8.Valid(b) {
			return entity.Value{}, false
		}
		return entity.StringValue(string(b)), true
	case 1:
		return entity.BoolValue(u&1 == 1), true
	case 2:
		return entity.Int32Value(int32(u)), true
	case 3:
		return entity.Int64Value(int64(u)), true
	case 4:
		f := math.Float64frombits(u)
		if lit && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return entity.Value{}, false
		}
		return entity.DoubleValue(f), true
	case 5:
		// Within the years a DateTime literal spells (0001 … 9999).
		const lo, span = -62135596800 * 10_000_000, 315537897600 * 10_000_000
		return entity.Value{Type: entity.DateTime, Int: lo + int64(u%span)}, true
	case 6:
		g := make([]byte, 16)
		copy(g, b)
		return entity.Value{Type: entity.GUID, Bytes: g}, true
	default:
		return entity.BinaryValue(b), true
	}
}

// FuzzSpans is TestSpansAgainstTheEvaluator's check over values the fuzzer makes up.
func FuzzSpans(f *testing.F) {
	f.Add(uint8(3), []byte{0, 0x20, 0, 0, 0, 0, 0, 1}, uint8(4), []byte{0x43, 0x40, 0, 0, 0, 0, 0, 0}, uint8(0))
	f.Add(uint8(0), []byte("a\x00"), uint8(0), []byte("a"), uint8(3))
	f.Add(uint8(7), []byte{0, 0}, uint8(7), []byte{0}, uint8(5))
	f.Add(uint8(4), []byte{0x80, 0, 0, 0, 0, 0, 0, 0}, uint8(2), []byte{0, 0, 0, 0, 0, 0, 0, 0}, uint8(1))
	f.Fuzz(func(t *testing.T, tx uint8, xb []byte, tv uint8, vb []byte, op uint8) {
		x, _ := fuzzValue(tx, xb, false)
		v, ok := fuzzValue(tv, vb, true)
		if !ok || len(vb) > 64 {
			return
		}
		o := ops[int(op)%len(ops)]
		checkSpans(t, x, v, o)
	})
}

// TestSpansShape: spans are sorted, disjoint and non-empty, and an entity without the
// property (no key) or a value of another type is in none.
func TestSpansShape(t *testing.T) {
	r := rand.New(rand.NewPCG(46, 2))
	for range 5000 {
		v := randValue(r, false)
		for _, o := range ops {
			for _, want := range []bool{true, false} {
				s := index.Spans(o, v, want)
				for i := range s {
					if s[i].Hi != nil && bytes.Compare(s[i].Lo, s[i].Hi) >= 0 {
						t.Fatalf("Spans(%v %v, %v): empty span %x", o, v, want, s[i])
					}
					if i > 0 && (s[i-1].Hi == nil || bytes.Compare(s[i-1].Hi, s[i].Lo) >= 0) {
						t.Fatalf("Spans(%v %v, %v): spans %x not sorted and apart", o, v, want, s)
					}
				}
			}
		}
	}
	if s := index.Spans(index.Eq, entity.Value{}, true); s != nil {
		t.Fatalf("Spans of a value of no type = %x", s)
	}
}

// TestValueLen: the key of every value, alone or followed by more, has the length
// ValueLen reads; a cut or unknown key is refused.
func TestValueLen(t *testing.T) {
	r := rand.New(rand.NewPCG(46, 4))
	for range 5000 {
		v := randValue(r, false)
		k := key(v)
		for _, more := range [][]byte{nil, key(randValue(r, false))} {
			if n, ok := index.ValueLen(append(append([]byte(nil), k...), more...)); !ok || n != len(k) {
				t.Fatalf("ValueLen(key of %v followed by %x) = %d, %v; want %d", v, more, n, ok, len(k))
			}
		}
		if n, ok := index.ValueLen(k[:len(k)-1]); ok {
			t.Fatalf("ValueLen of a cut key of %v = %d, true", v, n)
		}
	}
	if _, ok := index.ValueLen([]byte{0x99, 1, 2}); ok {
		t.Fatal("ValueLen of an unknown tag succeeded")
	}
}

// TestUnionIntersect: over a small universe of keys, Union and Intersect hold exactly the
// keys of the set operations, and stay sorted and disjoint.
func TestUnionIntersect(t *testing.T) {
	r := rand.New(rand.NewPCG(46, 6))
	universe := [][]byte{{}, {1}, {1, 0}, {1, 5}, {2}, {2, 9}, {3}, {4}, {4, 4}, {5}, {0xFF}}
	randSpans := func() []index.Span {
		var out []index.Span
		for range r.IntN(3) {
			lo := universe[r.IntN(len(universe))]
			var hi []byte
			if r.IntN(5) > 0 {
				hi = universe[r.IntN(len(universe))]
			}
			if hi != nil && bytes.Compare(lo, hi) >= 0 {
				continue
			}
			out = index.Union(out, []index.Span{{Lo: lo, Hi: hi}})
		}
		return out
	}
	sorted := func(s []index.Span) bool {
		for i := range s {
			if s[i].Hi != nil && bytes.Compare(s[i].Lo, s[i].Hi) >= 0 {
				return false
			}
			if i > 0 && (s[i-1].Hi == nil || bytes.Compare(s[i-1].Hi, s[i].Lo) > 0) {
				return false
			}
		}
		return true
	}
	for range 3000 {
		a, b := randSpans(), randSpans()
		u, n := index.Union(a, b), index.Intersect(a, b)
		if !sorted(u) || !sorted(n) {
			t.Fatalf("Union %x or Intersect %x of %x and %x not sorted and disjoint", u, n, a, b)
		}
		for _, k := range universe {
			ina, inb := index.Contains(a, k), index.Contains(b, k)
			if index.Contains(u, k) != (ina || inb) || index.Contains(n, k) != (ina && inb) {
				t.Fatalf("key %x: in %x %v, in %x %v; union %x, intersection %x", k, a, ina, b, inb, u, n)
			}
		}
	}
}

// TestAppendOffsets: exact keys are equal exactly when the numbers are (across Int32,
// Int64 and Double), tell apart the Int64s a float64 cannot, keep the numbers' order,
// start with their index key, and are that key whenever every Int64 is held exactly.
func TestAppendOffsets(t *testing.T) {
	const big = 1 << 53
	exact := func(vs ...entity.Value) []byte {
		var k []byte
		for _, v := range vs {
			k = index.AppendValue(k, v)
		}
		return index.AppendOffsets(k, vs)
	}
	ordered := []entity.Value{
		entity.DoubleValue(-1e300), entity.Int64Value(math.MinInt64), entity.Int64Value(math.MinInt64 + 1),
		entity.Int32Value(-1), entity.Int64Value(0), entity.DoubleValue(0.5), entity.Int32Value(5),
		entity.Int64Value(big - 1), entity.Int64Value(big), entity.Int64Value(big + 1), entity.Int64Value(big + 2),
		entity.Int64Value(math.MaxInt64 - 1), entity.Int64Value(math.MaxInt64), entity.DoubleValue(1e300),
	}
	for i := 1; i < len(ordered); i++ {
		a, b := exact(ordered[i-1]), exact(ordered[i])
		if bytes.Compare(a, b) >= 0 {
			t.Errorf("exact key of %v is not below that of %v: %x, %x", ordered[i-1], ordered[i], a, b)
		}
	}
	for _, same := range [][]entity.Value{
		{entity.Int32Value(5), entity.Int64Value(5), entity.DoubleValue(5)},
		{entity.Int64Value(big), entity.DoubleValue(big)},
		{entity.Int64Value(0), entity.DoubleValue(math.Copysign(0, -1))},
	} {
		for _, v := range same[1:] {
			if a, b := exact(same[0]), exact(v); !bytes.Equal(a, b) {
				t.Errorf("exact keys of %v and %v differ: %x, %x", same[0], v, a, b)
			}
		}
	}
	// Every value a float64 holds exactly, and every other type: the index key itself.
	for _, v := range []entity.Value{entity.StringValue("a"), entity.BoolValue(true), entity.DoubleValue(math.NaN()),
		entity.BinaryValue([]byte{0, 1}), entity.Int64Value(big), entity.Int64Value(-big), entity.Int64Value(math.MinInt64), entity.Int32Value(3)} {
		if a, b := exact(v), index.AppendValue(nil, v); !bytes.Equal(a, b) {
			t.Errorf("exact key of %v is not its key: %x, %x", v, a, b)
		}
	}
	// Compound values: distinct when one number differs only beyond a float64's precision,
	// equal across the numeric types, and each starts with its index key.
	s := entity.StringValue("x")
	pairs := []struct {
		a, b []entity.Value
		same bool
	}{
		{[]entity.Value{entity.Int64Value(big + 1), s}, []entity.Value{entity.Int64Value(big), s}, false},
		{[]entity.Value{s, entity.Int64Value(big + 1)}, []entity.Value{s, entity.DoubleValue(big)}, false},
		{[]entity.Value{entity.Int32Value(7), entity.Int64Value(big + 1)}, []entity.Value{entity.DoubleValue(7), entity.Int64Value(big + 1)}, true},
		{[]entity.Value{entity.Int64Value(big + 1), entity.Int64Value(big)}, []entity.Value{entity.Int64Value(big), entity.Int64Value(big + 1)}, false},
		{[]entity.Value{entity.DoubleValue(math.NaN()), entity.Int64Value(big + 1)}, []entity.Value{entity.DoubleValue(math.NaN()), entity.Int64Value(big + 1)}, true},
	}
	for _, p := range pairs {
		a, b := exact(p.a...), exact(p.b...)
		if bytes.Equal(a, b) != p.same {
			t.Errorf("exact keys of %v and %v: %x, %x; want equal %v", p.a, p.b, a, b, p.same)
		}
		for _, vs := range [][]entity.Value{p.a, p.b} {
			var k []byte
			for _, v := range vs {
				k = index.AppendValue(k, v)
			}
			nan := vs[0].Type == entity.Double && math.IsNaN(vs[0].Float) // equal to nothing
			if k2 := exact(vs...); !bytes.HasPrefix(k2, k) || !nan && !index.Contains(index.Spans(index.Eq, vs[0], true), k2) {
				t.Errorf("exact key %x of %v does not start with its key %x, or is outside its value's span", k2, vs, k)
			}
		}
	}
}
