package index

import (
	"bytes"
	"fmt"

	"github.com/ceruleandb/cerulean/internal/entity"
)

// Op is a comparison operator of $filter.
type Op uint8

// The comparison operators.
const (
	Eq Op = iota
	Ne
	Lt
	Le
	Gt
	Ge
)

func (o Op) String() string {
	switch o {
	case Eq:
		return "eq"
	case Ne:
		return "ne"
	case Lt:
		return "lt"
	case Le:
		return "le"
	case Gt:
		return "gt"
	case Ge:
		return "ge"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Span is the range [Lo, Hi) of keys; Hi nil is no upper bound.
type Span struct{ Lo, Hi []byte }

// contains reports whether key k is in s.
func (s Span) contains(k []byte) bool {
	return bytes.Compare(k, s.Lo) >= 0 && (s.Hi == nil || bytes.Compare(k, s.Hi) < 0)
}

// Contains reports whether key k, or a compound key that starts with it, is in one of
// spans.
func Contains(spans []Span, k []byte) bool {
	for _, s := range spans {
		if s.contains(k) {
			return true
		}
	}
	return false
}

// Spans returns the keys of the values x for which the comparison "x op v" is want (true,
// or false), as sorted, disjoint spans: a superset, exact but for numbers that round to
// the same float64 as v (see the package comment), and each span holds every compound key
// that starts with a key it holds. Values the evaluator cannot compare with v make the
// comparison unknown, neither true nor false, so they are in neither answer; nor is a
// missing value, which has no key. v of an unknown type gives no spans.
func Spans(op Op, v entity.Value, want bool) []Span {
	if !Known(v.Type) {
		return nil
	}
	numeric := v.Type == entity.Int32 || v.Type == entity.Int64 || v.Type == entity.Double
	var tag byte
	k := AppendValue(nil, v)
	if numeric {
		tag = tagNum
	} else {
		tag = k[0]
	}
	domain := Span{Lo: []byte{tag}, Hi: []byte{tag + 1}}
	nan := Span{Lo: []byte{tagNaN}, Hi: []byte{tagNaN + 1}}
	if numeric && k[0] == tagNaN {
		// A NaN is unordered against every number: only ne holds.
		if (op == Ne) == want {
			return []Span{{Lo: domain.Lo, Hi: nan.Hi}} // the two tags are adjacent
		}
		return nil
	}
	// below: keys of values less than v; at: the keys that start with v's (equal values,
	// and for numbers those that round alike, of either side); above: greater ones.
	at := Span{Lo: k, Hi: PrefixEnd(k)}
	below := Span{Lo: domain.Lo, Hi: k}
	above := Span{Lo: at.Hi, Hi: domain.Hi}
	var lt, eq, gt bool // which sides the answer takes
	switch op {
	case Eq:
		eq, lt, gt = want, !want, !want
	case Ne:
		eq, lt, gt = !want, want, want
	case Lt:
		lt, eq, gt = want, !want, !want
	case Le:
		lt, eq, gt = want, want, !want
	case Gt:
		gt, eq, lt = want, !want, !want
	case Ge:
		gt, eq, lt = want, want, !want
	default:
		return nil
	}
	if numeric {
		// The keys at v hold values on either side of it.
		eq = eq || lt || gt
	}
	var out []Span
	add := func(s Span) {
		if s.Hi != nil && bytes.Compare(s.Lo, s.Hi) >= 0 {
			return
		}
		if n := len(out); n > 0 && bytes.Equal(out[n-1].Hi, s.Lo) {
			out[n-1].Hi = s.Hi
			return
		}
		out = append(out, s)
	}
	if lt {
		add(below)
	}
	if eq {
		add(at)
	}
	if gt {
		add(above)
	}
	// A NaN compares unordered with v: true under ne, false under the others.
	if numeric && (op == Ne) == want {
		add(nan)
	}
	return out
}

// hiLess reports whether upper bound a is below upper bound b (nil: unbounded).
func hiLess(a, b []byte) bool {
	if a == nil {
		return false
	}
	return b == nil || bytes.Compare(a, b) < 0
}

// Union returns the spans of keys in a or b, sorted, disjoint and non-adjacent.
func Union(a, b []Span) []Span {
	all := make([]Span, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || i < len(a) && bytes.Compare(a[i].Lo, b[j].Lo) <= 0 {
			all = append(all, a[i])
			i++
		} else {
			all = append(all, b[j])
			j++
		}
	}
	var out []Span
	for _, s := range all {
		if n := len(out); n > 0 && (out[n-1].Hi == nil || bytes.Compare(s.Lo, out[n-1].Hi) <= 0) {
			if hiLess(out[n-1].Hi, s.Hi) {
				out[n-1].Hi = s.Hi
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// Intersect returns the spans of keys in both a and b, sorted and disjoint.
func Intersect(a, b []Span) []Span {
	var out []Span
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		lo := a[i].Lo
		if bytes.Compare(b[j].Lo, lo) > 0 {
			lo = b[j].Lo
		}
		hi := a[i].Hi
		if hiLess(b[j].Hi, hi) {
			hi = b[j].Hi
		}
		if hi == nil || bytes.Compare(lo, hi) < 0 {
			out = append(out, Span{Lo: lo, Hi: hi})
		}
		if hiLess(a[i].Hi, b[j].Hi) || (a[i].Hi != nil && b[j].Hi != nil && bytes.Equal(a[i].Hi, b[j].Hi)) {
			i++
		} else {
			j++
		}
	}
	return out
}
