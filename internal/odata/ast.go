package odata

import (
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/ceruleandb/cerulean/internal/entity"
)

// Op is a comparison operator.
type Op uint8

// The six comparison operators.
const (
	Eq Op = 1 + iota
	Ne
	Gt
	Ge
	Lt
	Le
)

var opNames = [...]string{Eq: "eq", Ne: "ne", Gt: "gt", Ge: "ge", Lt: "lt", Le: "le"}

func (o Op) String() string {
	if o >= Eq && o <= Le {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Mirror returns the operator that gives the same result with the operands swapped:
// a lt b ⇔ b gt a.
func (o Op) Mirror() Op {
	switch o {
	case Gt:
		return Lt
	case Ge:
		return Le
	case Lt:
		return Gt
	case Le:
		return Ge
	}
	return o
}

// Negate returns the complementary operator on ordered, comparable values:
// not (a lt b) ⇔ a ge b. It is not the complement where a comparison is unknown or
// unordered (NaN), which is why evaluation never rewrites not; the planner uses it only
// on keys, which are always present strings.
func (o Op) Negate() Op {
	switch o {
	case Eq:
		return Ne
	case Ne:
		return Eq
	case Gt:
		return Le
	case Ge:
		return Lt
	case Lt:
		return Ge
	case Le:
		return Gt
	}
	return o
}

// holds reports whether the operator accepts a three-way comparison result c (-1, 0, 1).
func (o Op) holds(c int) bool {
	switch o {
	case Eq:
		return c == 0
	case Ne:
		return c != 0
	case Gt:
		return c > 0
	case Ge:
		return c >= 0
	case Lt:
		return c < 0
	case Le:
		return c <= 0
	}
	return false
}

// Expr is a node of a parsed filter: *OrExpr, *AndExpr, *NotExpr, *CompareExpr or
// *BoolExpr; only Parse builds them. String renders the canonical text, which parses
// back to an equal tree.
type Expr interface {
	String() string
	appendTo(b *strings.Builder)
}

// OrExpr is a disjunction of two or more terms, none of them an *OrExpr (the parser
// flattens nested ones).
type OrExpr struct{ Terms []Expr }

// AndExpr is a conjunction of two or more terms, none of them an *AndExpr.
type AndExpr struct{ Terms []Expr }

// NotExpr is a negation.
type NotExpr struct{ X Expr }

// CompareExpr compares two operands. When exactly one side is a property it is Left.
type CompareExpr struct {
	Op          Op
	Left, Right Operand
}

// BoolExpr is an operand standing alone as a predicate: a Boolean property or literal.
type BoolExpr struct{ X Operand }

// Operand is a property reference (Property non-empty) or a literal (Literal).
type Operand struct {
	Property string
	Literal  entity.Value
	// slot locates the property's value during evaluation: one of the slot* constants
	// for system properties, or an index into Filter.props.
	slot int
}

// Slots of the system properties; custom properties have slots ≥ 0.
const (
	slotPartitionKey = -1 - iota
	slotRowKey
	slotTimestamp
)

// IsProperty reports whether o names a property.
func (o Operand) IsProperty() bool { return o.Property != "" }

func (o Operand) String() string {
	var b strings.Builder
	o.appendTo(&b)
	return b.String()
}

func (o Operand) appendTo(b *strings.Builder) {
	if o.IsProperty() {
		b.WriteString(o.Property)
		return
	}
	appendLiteral(b, o.Literal)
}

// appendLiteral writes v in the form the lexer reads back to exactly v.
func appendLiteral(b *strings.Builder, v entity.Value) {
	switch v.Type {
	case entity.String:
		b.WriteByte('\'')
		b.WriteString(strings.ReplaceAll(v.Str, "'", "''"))
		b.WriteByte('\'')
	case entity.Boolean:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case entity.Int32:
		b.WriteString(strconv.FormatInt(v.Int, 10))
	case entity.Int64:
		b.WriteString(strconv.FormatInt(v.Int, 10))
		b.WriteByte('L')
	case entity.Double:
		s := strconv.FormatFloat(v.Float, 'g', -1, 64)
		b.WriteString(s)
		if !strings.ContainsAny(s, ".eIN") { // keep it a Double: "2" would read as Int32
			b.WriteString(".0")
		}
	case entity.DateTime:
		b.WriteString("datetime'")
		b.WriteString(entity.FormatTicks(v.Int))
		b.WriteByte('\'')
	case entity.GUID:
		b.WriteString("guid'")
		b.WriteString(entity.FormatGUID(v.Bytes))
		b.WriteByte('\'')
	case entity.Binary:
		b.WriteString("X'")
		b.WriteString(hex.EncodeToString(v.Bytes))
		b.WriteByte('\'')
	default:
		b.WriteString("<invalid>")
	}
}

func exprString(e Expr) string {
	var b strings.Builder
	e.appendTo(&b)
	return b.String()
}

func (e *OrExpr) String() string      { return exprString(e) }
func (e *AndExpr) String() string     { return exprString(e) }
func (e *NotExpr) String() string     { return exprString(e) }
func (e *CompareExpr) String() string { return exprString(e) }
func (e *BoolExpr) String() string    { return exprString(e) }

func (e *OrExpr) appendTo(b *strings.Builder) {
	for i, t := range e.Terms {
		if i > 0 {
			b.WriteString(" or ")
		}
		t.appendTo(b) // an and binds tighter; an or term cannot occur (flattened)
	}
}

func (e *AndExpr) appendTo(b *strings.Builder) {
	for i, t := range e.Terms {
		if i > 0 {
			b.WriteString(" and ")
		}
		if _, ok := t.(*OrExpr); ok {
			b.WriteByte('(')
			t.appendTo(b)
			b.WriteByte(')')
			continue
		}
		t.appendTo(b)
	}
}

// appendTo parenthesises everything but a bare operand or another not, so the canonical
// text never depends on the reader knowing that not covers a whole comparison.
func (e *NotExpr) appendTo(b *strings.Builder) {
	b.WriteString("not ")
	switch e.X.(type) {
	case *BoolExpr, *NotExpr:
		e.X.appendTo(b)
	default:
		b.WriteByte('(')
		e.X.appendTo(b)
		b.WriteByte(')')
	}
}

func (e *CompareExpr) appendTo(b *strings.Builder) {
	e.Left.appendTo(b)
	b.WriteByte(' ')
	b.WriteString(e.Op.String())
	b.WriteByte(' ')
	e.Right.appendTo(b)
}

func (e *BoolExpr) appendTo(b *strings.Builder) { e.X.appendTo(b) }
