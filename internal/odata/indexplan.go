package odata

import (
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/index"
)

// Index plans (docs/indexes-design.md §4). IndexSpans computes, for the property that
// leads an index, a superset of the index keys of the entities the filter can accept,
// with the three-valued algebra of the key planner (plan.go): T(a and b) = T(a) ∩ T(b),
// T(a or b) = T(a) ∪ T(b), T(not a) = F(a), and the same with T and F swapped.
//
// An index holds only the entities that have its properties, so a plan on it must never
// need an entity without them. A comparison of the property with a literal is unknown
// for an entity without the property, which is therefore in neither its T nor its F set:
// those sets are spans of the index. Any other predicate can hold for entities without
// the property: its sets are "anything" (all), which no span list stands for. all is the
// identity of ∩ and absorbs ∪, so a filter plans on the index exactly when, through its
// ands and ors, every way to accept an entity passes through a comparison of the
// property.

// ixSet is a set of entities for an index plan: all (any entity, with the property or
// not), or the entities whose index keys lie in spans (nil: none).
type ixSet struct {
	all   bool
	spans []index.Span
}

var ixAll = ixSet{all: true}

func ixUnion(a, b ixSet) ixSet {
	if a.all || b.all {
		return ixAll
	}
	return ixSet{spans: index.Union(a.spans, b.spans)}
}

func ixIntersect(a, b ixSet) ixSet {
	switch {
	case a.all:
		return b
	case b.all:
		return a
	}
	return ixSet{spans: index.Intersect(a.spans, b.spans)}
}

// indexOps maps the filter's operators onto the index package's.
var indexOps = [...]index.Op{Eq: index.Eq, Ne: index.Ne, Gt: index.Gt, Ge: index.Ge, Lt: index.Lt, Le: index.Le}

// IndexSpans returns the spans of the keys of property prop's values that an entity the
// filter accepts can have, and whether there are such bounds: false means an accepted
// entity may lack prop, or have any value of it, and an index led by prop cannot answer
// the filter. Spans may hold entities the filter does not accept (the evaluator judges
// every entity a plan reads), never miss one it accepts.
func (f *Filter) IndexSpans(prop string) ([]index.Span, bool) {
	if f == nil || f.root == nil {
		return nil, false
	}
	s := ixPlan(f.root, prop, true)
	return s.spans, !s.all
}

func ixPlan(e Expr, prop string, want bool) ixSet {
	switch x := e.(type) {
	case *AndExpr, *OrExpr:
		terms, or := andOrTerms(x)
		union := or == want // T(or) and F(and) unite; T(and) and F(or) intersect
		var acc ixSet
		for i, t := range terms {
			s := ixPlan(t, prop, want)
			switch {
			case i == 0:
				acc = s
			case union:
				acc = ixUnion(acc, s)
			default:
				acc = ixIntersect(acc, s)
			}
		}
		return acc
	case *NotExpr:
		return ixPlan(x.X, prop, !want)
	case *CompareExpr:
		if x.Left.Property == prop && !x.Right.IsProperty() {
			return ixSet{spans: index.Spans(indexOps[x.Op], x.Right.Literal, want)}
		}
	case *BoolExpr:
		if !x.X.IsProperty() {
			if x.X.Literal.Bool() == want {
				return ixAll // true (or false, wanted false): anything
			}
			return ixSet{} // nothing
		}
		if x.X.Property == prop {
			// The property standing alone holds when it is Boolean true.
			return ixSet{spans: index.Spans(index.Eq, entity.BoolValue(true), want)}
		}
	}
	return ixAll
}
