package odata

import (
	"slices"
	"strconv"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// The planner computes, for a filter, a superset of the keys of the entities it can
// match. It works on the truth sets of three-valued logic: plan(e, true) is (a superset
// of) the keys for which e can be true, plan(e, false) those for which it can be false.
// Under Kleene logic these compose exactly:
//
//	T(a and b) = T(a) ∩ T(b)    F(a and b) = F(a) ∪ F(b)
//	T(a or b)  = T(a) ∪ T(b)    F(a or b)  = F(a) ∩ F(b)
//	T(not a)   = F(a)           F(not a)   = T(a)
//
// so not never needs a complement of a computed set — only of a key comparison, which is
// exact because keys are always present strings. Unions and intersections are monotone,
// so replacing any intermediate set by a superset (a predicate the planner cannot
// analyse, or the coarsening that bounds the plan's size) keeps the result a superset.

// maxPlanSpans bounds the size of an intermediate key set; beyond it the set is coarsened.
const maxPlanSpans = 4096

// span is a range [lo, hi) of strings in byte order; open means hi is +∞.
type span struct {
	lo, hi string
	open   bool
}

// spans is a sorted list of non-empty, disjoint, non-adjacent spans.
type spans []span

var allStrings = spans{{open: true}}

func isAll(s spans) bool { return len(s) == 1 && s[0].lo == "" && s[0].open }

// endsNoLater reports whether s ends at or before t ends.
func endsNoLater(s, t span) bool {
	if s.open {
		return t.open
	}
	return t.open || s.hi <= t.hi
}

func unionSpans(a, b spans) spans {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make(spans, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var s span
		if j == len(b) || i < len(a) && a[i].lo <= b[j].lo {
			s, i = a[i], i+1
		} else {
			s, j = b[j], j+1
		}
		if n := len(out); n > 0 && (out[n-1].open || s.lo <= out[n-1].hi) {
			if !endsNoLater(s, out[n-1]) {
				out[n-1].hi, out[n-1].open = s.hi, s.open
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

func intersectSpans(a, b spans) spans {
	var out spans
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		lo := max(a[i].lo, b[j].lo)
		first := endsNoLater(a[i], b[j])
		end := b[j]
		if first {
			end = a[i]
		}
		if end.open || lo < end.hi {
			out = append(out, span{lo: lo, hi: end.hi, open: end.open})
		}
		if first {
			i++
		} else {
			j++
		}
	}
	return out
}

// opSpans is the set of strings s with "s op v".
func opSpans(op Op, v string) spans {
	switch op {
	case Eq:
		return spans{{lo: v, hi: v + "\x00"}}
	case Ne:
		if v == "" {
			return spans{{lo: "\x00", open: true}}
		}
		return spans{{lo: "", hi: v}, {lo: v + "\x00", open: true}}
	case Gt:
		return spans{{lo: v + "\x00", open: true}} // v+"\x00" is the least string > v
	case Ge:
		return spans{{lo: v, open: true}}
	case Lt:
		if v == "" {
			return nil
		}
		return spans{{lo: "", hi: v}}
	case Le:
		return spans{{lo: "", hi: v + "\x00"}}
	}
	return allStrings
}

// seg is the keys whose PartitionKey lies in pk and whose RowKey lies in rk.
type seg struct {
	pk span
	rk spans // never empty
}

// keySet is a set of keys as segments with sorted, disjoint PartitionKey spans.
type keySet []seg

var allKeys = keySet{{pk: span{open: true}, rk: allStrings}}

func (k keySet) isAll() bool { return len(k) == 1 && isAll(spans{k[0].pk}) && isAll(k[0].rk) }

func (k keySet) size() int {
	n := 0
	for _, s := range k {
		n += len(s.rk)
	}
	return n
}

// combine returns a ∪ b or a ∩ b. It cuts the PartitionKey axis at every segment
// boundary of either side, combines the RowKey sets on each piece, and joins adjacent
// pieces whose RowKey sets are equal, so the result is canonical.
func combine(a, b keySet, union bool) keySet {
	if union {
		switch {
		case len(a) == 0:
			return b
		case len(b) == 0:
			return a
		case a.isAll() || b.isAll():
			return allKeys
		}
	} else {
		switch {
		case len(a) == 0 || len(b) == 0:
			return nil
		case a.isAll():
			return b
		case b.isAll():
			return a
		}
	}
	pts := make([]string, 0, 2*(len(a)+len(b)))
	open := false
	for _, k := range [2]keySet{a, b} {
		for _, s := range k {
			pts = append(pts, s.pk.lo)
			if s.pk.open {
				open = true
			} else {
				pts = append(pts, s.pk.hi)
			}
		}
	}
	slices.Sort(pts)
	pts = slices.Compact(pts)
	var out keySet
	ia, ib := 0, 0
	for n, x := range pts {
		piece := span{lo: x}
		if n+1 < len(pts) {
			piece.hi = pts[n+1]
		} else if open {
			piece.open = true
		} else {
			break
		}
		ra, rb := rowsAt(a, &ia, x), rowsAt(b, &ib, x)
		var r spans
		if union {
			r = unionSpans(ra, rb)
		} else {
			r = intersectSpans(ra, rb)
		}
		if len(r) == 0 {
			continue
		}
		if m := len(out); m > 0 && !out[m-1].pk.open && out[m-1].pk.hi == x && slices.Equal(out[m-1].rk, r) {
			out[m-1].pk.hi, out[m-1].pk.open = piece.hi, piece.open
			continue
		}
		out = append(out, seg{pk: piece, rk: r})
	}
	return out
}

// rowsAt returns the RowKey set of k's segment containing PartitionKey x, or nil. Calls
// must come with increasing x; *i remembers the position.
func rowsAt(k keySet, i *int, x string) spans {
	for *i < len(k) && !k[*i].pk.open && k[*i].pk.hi <= x {
		*i++
	}
	if *i < len(k) && k[*i].pk.lo <= x {
		return k[*i].rk
	}
	return nil
}

// coarsen returns a small superset of k: first forgetting RowKey constraints, then, if
// that is not enough, the hull of the PartitionKey spans.
func coarsen(k keySet) keySet {
	var out keySet
	for _, s := range k {
		if m := len(out); m > 0 && !out[m-1].pk.open && out[m-1].pk.hi == s.pk.lo {
			out[m-1].pk.hi, out[m-1].pk.open = s.pk.hi, s.pk.open
			continue
		}
		out = append(out, seg{pk: s.pk, rk: allStrings})
	}
	if len(out) <= maxPlanSpans {
		return out
	}
	last := out[len(out)-1].pk
	return keySet{{pk: span{lo: out[0].pk.lo, hi: last.hi, open: last.open}, rk: allStrings}}
}

// planner plans one filter for entity keys. exact turns false as soon as any step
// over-approximates.
type planner struct {
	exact bool
}

func (pl *planner) plan(e Expr, want bool) keySet {
	switch x := e.(type) {
	case *AndExpr:
		return pl.reduce(x.Terms, want, !want)
	case *OrExpr:
		return pl.reduce(x.Terms, want, want)
	case *NotExpr:
		return pl.plan(x.X, !want)
	case *CompareExpr:
		return pl.compare(x, want)
	case *BoolExpr:
		if !x.X.IsProperty() {
			return constant(truth(x.X.Literal.Bool()), want)
		}
		if _, known := staticType(x.X); known {
			return nil // PartitionKey, RowKey, Timestamp are never Boolean: always unknown
		}
	}
	pl.exact = false
	return allKeys
}

// reduce combines the terms' sets pairwise, as a balanced tree, so a long or-chain costs
// O(n log n) set work rather than O(n²).
func (pl *planner) reduce(terms []Expr, want, union bool) keySet {
	sets := make([]keySet, 0, len(terms))
	for _, t := range terms {
		k := pl.plan(t, want)
		switch {
		case !union && len(k) == 0:
			return nil
		case union && k.isAll():
			return allKeys
		}
		sets = append(sets, k)
	}
	for len(sets) > 1 {
		next := sets[:0]
		for i := 0; i < len(sets); i += 2 {
			if i+1 == len(sets) {
				next = append(next, sets[i])
				continue
			}
			k := combine(sets[i], sets[i+1], union)
			if k.size() > maxPlanSpans {
				k = coarsen(k)
				pl.exact = false
			}
			next = append(next, k)
		}
		sets = next
	}
	return sets[0]
}

// constant is the truth set of a predicate whose value v does not depend on the entity.
func constant(v tv, want bool) keySet {
	if v == truth(want) {
		return allKeys
	}
	return nil
}

// staticType returns the type an operand always has: a literal's, or a system
// property's. Custom properties have no static type.
func staticType(o Operand) (entity.Type, bool) {
	if !o.IsProperty() {
		return o.Literal.Type, true
	}
	switch o.slot {
	case slotPartitionKey, slotRowKey:
		return entity.String, true
	case slotTimestamp:
		return entity.DateTime, true
	}
	return 0, false
}

func (pl *planner) compare(x *CompareExpr, want bool) keySet {
	if !x.Left.IsProperty() && !x.Right.IsProperty() {
		return constant(apply(x.Op, compareValues(&x.Left.Literal, &x.Right.Literal)), want)
	}
	lt, lknown := staticType(x.Left)
	rt, rknown := staticType(x.Right)
	if lknown && rknown && !comparableTypes(lt, rt) {
		return nil // always unknown, true for no entity and false for none
	}
	if x.Left.IsProperty() && !x.Right.IsProperty() && lt == entity.String && lknown {
		op := x.Op
		if !want {
			op = op.Negate() // exact: a key is a present string, never unknown or NaN
		}
		s := opSpans(op, x.Right.Literal.Str)
		if len(s) == 0 {
			return nil
		}
		if x.Left.slot == slotPartitionKey {
			k := make(keySet, len(s))
			for i, p := range s {
				k[i] = seg{pk: p, rk: allStrings}
			}
			return k
		}
		return keySet{{pk: span{open: true}, rk: s}}
	}
	pl.exact = false
	return allKeys
}

// isPoint reports whether s holds exactly one string.
func (s span) isPoint() bool { return !s.open && s.hi == s.lo+"\x00" }

// planEntities derives the filter's key ranges and whether they are exact.
func planEntities(f *Filter) ([]KeyRange, bool) {
	pl := planner{exact: true}
	k := pl.plan(f.root, true)
	ranges := make([]KeyRange, 0, k.size())
	for _, s := range k {
		if s.pk.isPoint() {
			p := s.pk.lo
			for _, r := range s.rk {
				kr := KeyRange{Start: storage.Key{PartitionKey: p, RowKey: r.lo}}
				if r.open {
					kr.End = &storage.Key{PartitionKey: p + "\x00"}
				} else {
					kr.End = &storage.Key{PartitionKey: p, RowKey: r.hi}
				}
				ranges = append(ranges, kr)
			}
			continue
		}
		// Several partitions: one range from the first row of the first partition to the
		// end of the last; RowKey limits inside it cannot be expressed.
		if !isAll(s.rk) {
			pl.exact = false
		}
		kr := KeyRange{Start: storage.Key{PartitionKey: s.pk.lo, RowKey: s.rk[0].lo}}
		if !s.pk.open {
			kr.End = &storage.Key{PartitionKey: s.pk.hi}
		}
		ranges = append(ranges, kr)
	}
	return mergeRanges(ranges), pl.exact
}

// mergeRanges joins overlapping and adjacent ranges of a list sorted by Start.
func mergeRanges(rs []KeyRange) []KeyRange {
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.End == nil {
				continue
			}
			if !last.End.Less(r.Start) {
				if r.End == nil || last.End.Less(*r.End) {
					last.End = r.End
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// KeyRanges returns the sorted, disjoint, non-adjacent key ranges that hold every entity
// the filter can match: one storage scan each, merged in order, with the filter still
// evaluated on what they return unless Exact. An empty result means no entity can match
// (for example "PartitionKey eq 1", a type mismatch). The nil Filter gives one range over
// the whole table. Callers must not modify the result.
func (f *Filter) KeyRanges() []KeyRange {
	if f == nil {
		return []KeyRange{{}}
	}
	return f.ranges
}

// Exact reports whether an entity matches the filter exactly when its key lies in
// KeyRanges, whatever its other properties — a filter on keys alone — so the residual
// evaluation can be skipped. False is always safe; the planner errs toward it.
func (f *Filter) Exact() bool { return f == nil || f.exact }

// IsPoint reports whether KeyRanges is the single key (pk, rk) — the Get fast path. The
// filter may still test other properties: evaluate it on the entity unless Exact.
func (f *Filter) IsPoint() (pk, rk string, ok bool) {
	if f == nil || len(f.ranges) != 1 {
		return "", "", false
	}
	r := f.ranges[0]
	if r.End == nil || r.End.PartitionKey != r.Start.PartitionKey || r.End.RowKey != r.Start.RowKey+"\x00" {
		return "", "", false
	}
	return r.Start.PartitionKey, r.Start.RowKey, true
}

// ClipRanges returns the part of rs at or after from — what is left to scan when a query
// resumes from a continuation key. rs must be sorted and disjoint, as KeyRanges returns.
func ClipRanges(rs []KeyRange, from storage.Key) []KeyRange {
	var out []KeyRange
	for _, r := range rs {
		if r.End != nil && !from.Less(*r.End) {
			continue // ends at or before from
		}
		if r.Start.Less(from) {
			r.Start = from
		}
		out = append(out, r)
	}
	return out
}

// Query Tables planning. The catalogue is ordered by storage.TableKey (the lower-cased
// name) while the filter compares the names as written, so a TableName range becomes a
// range of TableKeys only where that is sound for valid table names (ASCII letters and
// digits): "eq 'v'" is exactly TableKey lower(v); a lower bound survives up to its first
// upper-case letter (for such names, s ≥ lo implies lower(s) ≥ lo when lo has no
// upper-case letters); an upper bound survives only when it has no lower-case letters
// and none of [ \ ] ^ _ ` (then s < hi implies lower(s) < lower(hi)). Anything else
// becomes unbounded on that side.

func (f *Filter) tablePlan(e Expr, want bool) spans {
	switch x := e.(type) {
	case *AndExpr, *OrExpr:
		terms, or := andOrTerms(x)
		var acc spans
		for i, t := range terms {
			s := f.tablePlan(t, want)
			switch {
			case i == 0:
				acc = s
			case or == want:
				acc = unionSpans(acc, s)
			default:
				acc = intersectSpans(acc, s)
			}
		}
		return acc
	case *NotExpr:
		return f.tablePlan(x.X, !want)
	case *BoolExpr:
		if !x.X.IsProperty() && truth(x.X.Literal.Bool()) == truth(want) {
			return allStrings
		}
		return nil // a property alone is never Boolean here: TableName is a String
	case *CompareExpr:
		isName := func(o Operand) bool { return o.IsProperty() && o.slot >= 0 && o.slot == f.tableSlot }
		l, r := x.Left, x.Right
		switch {
		case !l.IsProperty() && !r.IsProperty():
			if apply(x.Op, compareValues(&l.Literal, &r.Literal)) == truth(want) {
				return allStrings
			}
			return nil
		case l.IsProperty() && !isName(l), r.IsProperty() && !isName(r):
			return nil // any other property is missing: always unknown
		case r.IsProperty():
			return allStrings // TableName against itself
		case r.Literal.Type != entity.String:
			return nil
		}
		op := x.Op
		if !want {
			op = op.Negate()
		}
		return foldSpans(op, r.Literal.Str)
	}
	return allStrings
}

func andOrTerms(e Expr) ([]Expr, bool) {
	if x, ok := e.(*OrExpr); ok {
		return x.Terms, true
	}
	return e.(*AndExpr).Terms, false
}

// foldSpans is a superset, in TableKey space, of the TableKeys of names s with "s op v".
func foldSpans(op Op, v string) spans {
	switch op {
	case Eq:
		k := foldASCII(v)
		return spans{{lo: k, hi: k + "\x00"}}
	case Ge:
		return spans{{lo: foldLower(v), open: true}}
	case Gt:
		return spans{{lo: foldLower(v + "\x00"), open: true}}
	case Lt:
		return foldUpper(v)
	case Le:
		return foldUpper(v + "\x00")
	}
	return allStrings
}

func foldASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

func foldLower(lo string) string {
	for i := 0; i < len(lo); i++ {
		if c := lo[i]; 'A' <= c && c <= 'Z' {
			return lo[:i]
		}
	}
	return lo
}

func foldUpper(hi string) spans {
	if hi == "" {
		return nil
	}
	for i := 0; i < len(hi); i++ {
		if c := hi[i]; '[' <= c && c <= 'z' {
			return allStrings
		}
	}
	return spans{{lo: "", hi: foldASCII(hi)}}
}

func planTables(f *Filter) (string, *string) {
	s := f.tablePlan(f.root, true)
	if len(s) == 0 {
		empty := ""
		return "", &empty
	}
	last := s[len(s)-1]
	if last.open {
		return s[0].lo, nil
	}
	return s[0].lo, &last.hi
}

// TableKeyRange bounds the catalogue scan of Query Tables: every table the filter can
// match has from ≤ storage.TableKey(name) and, when to is non-nil, TableKey(name) < *to
// (for valid table names: ASCII letters and digits). A non-nil to with *to ≤ from means
// no table can match. MatchTableName must still be applied to each table in the range.
func (f *Filter) TableKeyRange() (from string, to *string) {
	if f == nil {
		return "", nil
	}
	return f.tableFrom, f.tableTo
}

func quoteKey(k storage.Key) string {
	return "(" + strconv.Quote(k.PartitionKey) + ", " + strconv.Quote(k.RowKey) + ")"
}
