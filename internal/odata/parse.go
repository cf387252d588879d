package odata

import (
	"strings"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Limits that keep a hostile filter from exhausting the stack or the CPU. Both are far
// beyond anything a client builds by hand or through an SDK.
const (
	// MaxDepth is the deepest nesting of parentheses and not operators.
	MaxDepth = 100
	// MaxPredicates is the most comparisons and bare boolean operands in one filter.
	MaxPredicates = 1000
)

// Filter is a parsed $filter. It is immutable, so one Filter may serve many goroutines.
// A nil *Filter is the absent filter: it matches everything and plans a full scan.
type Filter struct {
	root Expr
	// props are the custom property names the filter reads, in first-use order; an
	// Operand's slot indexes them.
	props []string
	// tableSlot is the slot of "TableName" (for MatchTableName), or -1.
	tableSlot int

	ranges []KeyRange
	exact  bool

	tableFrom string
	tableTo   *string
}

// Parse parses a $filter expression. An empty or all-blank filter is no filter: Parse
// returns nil, nil (the service treats "$filter=" as absent, docs/protocol.md §5.1). Errors are
// *azerr.Error with code InvalidInput.
func Parse(src string) (*Filter, error) {
	if strings.TrimLeft(src, " \t\r\n") == "" {
		return nil, nil
	}
	p := parser{src: src, lx: lexer{src: src}}
	if err := p.advance(); err != nil {
		return nil, err
	}
	root, err := p.parseOr(0)
	if err != nil {
		return nil, err
	}
	if t := p.tok; t.kind != tEOF {
		return nil, syntaxError(t.pos, "unexpected %s; expected 'and', 'or' or the end of the filter", t.describe(src))
	}
	f := &Filter{root: root, tableSlot: -1}
	f.assignSlots(root)
	f.ranges, f.exact = planEntities(f)
	f.tableFrom, f.tableTo = planTables(f)
	return f, nil
}

// MustParse is Parse for filters known to be valid (tests, constants); it panics on error.
func MustParse(src string) *Filter {
	f, err := Parse(src)
	if err != nil {
		panic(err)
	}
	return f
}

// parser is a recursive-descent parser over the lexer's tokens: tok is the current one,
// and ahead, when hasAhead, the one after it (only "not" needs to look that far).
type parser struct {
	src      string
	lx       lexer
	tok      token
	ahead    token
	hasAhead bool
	preds    int
}

// advance moves to the next token.
func (p *parser) advance() error {
	if p.hasAhead {
		p.tok, p.hasAhead = p.ahead, false
		return nil
	}
	t, err := p.lx.scan()
	p.tok = t
	return err
}

// lookahead returns the token after the current one.
func (p *parser) lookahead() (token, error) {
	if !p.hasAhead {
		t, err := p.lx.scan()
		if err != nil {
			return token{}, err
		}
		p.ahead, p.hasAhead = t, true
	}
	return p.ahead, nil
}

// isWord reports whether t is the identifier w in any case.
func isWord(t token, w string) bool { return t.kind == tIdent && strings.EqualFold(t.text, w) }

// cmpOp returns the comparison operator t spells, if any.
func cmpOp(t token) (Op, bool) {
	if t.kind != tIdent || len(t.text) != 2 {
		return 0, false
	}
	for o := Eq; o <= Le; o++ {
		if strings.EqualFold(t.text, opNames[o]) {
			return o, true
		}
	}
	return 0, false
}

func (p *parser) parseOr(depth int) (Expr, error) {
	x, err := p.parseAnd(depth)
	if err != nil {
		return nil, err
	}
	if !isWord(p.tok, "or") {
		return x, nil
	}
	terms := appendFlat(nil, x, true)
	for isWord(p.tok, "or") {
		if err := p.advance(); err != nil {
			return nil, err
		}
		y, err := p.parseAnd(depth)
		if err != nil {
			return nil, err
		}
		terms = appendFlat(terms, y, true)
	}
	return &OrExpr{Terms: terms}, nil
}

func (p *parser) parseAnd(depth int) (Expr, error) {
	x, err := p.parseUnary(depth)
	if err != nil {
		return nil, err
	}
	if !isWord(p.tok, "and") {
		return x, nil
	}
	terms := appendFlat(nil, x, false)
	for isWord(p.tok, "and") {
		if err := p.advance(); err != nil {
			return nil, err
		}
		y, err := p.parseUnary(depth)
		if err != nil {
			return nil, err
		}
		terms = appendFlat(terms, y, false)
	}
	return &AndExpr{Terms: terms}, nil
}

// appendFlat appends x to terms, splicing in its terms when it is of the kind being
// built (a parenthesised and inside an and), so the tree has one canonical shape.
func appendFlat(terms []Expr, x Expr, or bool) []Expr {
	switch y := x.(type) {
	case *OrExpr:
		if or {
			return append(terms, y.Terms...)
		}
	case *AndExpr:
		if !or {
			return append(terms, y.Terms...)
		}
	}
	return append(terms, x)
}

func (p *parser) parseUnary(depth int) (Expr, error) {
	t := p.tok
	if isWord(t, "not") {
		isOp, err := p.notIsOperator()
		if err != nil {
			return nil, err
		}
		if isOp {
			if depth >= MaxDepth {
				return nil, syntaxError(t.pos, "nesting deeper than %d", MaxDepth)
			}
			if err := p.advance(); err != nil {
				return nil, err
			}
			x, err := p.parseUnary(depth + 1)
			if err != nil {
				return nil, err
			}
			return &NotExpr{X: x}, nil
		}
	}
	return p.parsePrimary(depth)
}

// notIsOperator decides whether the "not" at the cursor is the operator or a property of
// that name: it is a property when what follows can only follow an operand.
func (p *parser) notIsOperator() (bool, error) {
	n, err := p.lookahead()
	if err != nil {
		return false, err
	}
	switch {
	case n.kind == tEOF || n.kind == tRParen:
		return false, nil
	case isWord(n, "and") || isWord(n, "or"):
		return false, nil
	}
	_, isOp := cmpOp(n)
	return !isOp, nil
}

func (p *parser) parsePrimary(depth int) (Expr, error) {
	t := p.tok
	if t.kind == tLParen {
		if depth >= MaxDepth {
			return nil, syntaxError(t.pos, "nesting deeper than %d", MaxDepth)
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		x, err := p.parseOr(depth + 1)
		if err != nil {
			return nil, err
		}
		if c := p.tok; c.kind != tRParen {
			return nil, syntaxError(c.pos, "unexpected %s; expected ')' to close the '(' at position %d", c.describe(p.src), t.pos)
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		return x, nil
	}
	left, err := p.parseOperand()
	if err != nil {
		return nil, err
	}
	if p.preds++; p.preds > MaxPredicates {
		return nil, syntaxError(t.pos, "more than %d comparisons", MaxPredicates)
	}
	op, ok := cmpOp(p.tok)
	if !ok {
		if !left.IsProperty() && left.Literal.Type != entity.Boolean {
			n := p.tok
			return nil, syntaxError(n.pos, "unexpected %s; expected a comparison operator after %s", n.describe(p.src), t.describe(p.src))
		}
		return &BoolExpr{X: left}, nil
	}
	if err := p.advance(); err != nil {
		return nil, err
	}
	right, err := p.parseOperand()
	if err != nil {
		return nil, err
	}
	if !left.IsProperty() && right.IsProperty() {
		left, right, op = right, left, op.Mirror()
	}
	return &CompareExpr{Op: op, Left: left, Right: right}, nil
}

// parseOperand consumes a property name or a literal.
func (p *parser) parseOperand() (Operand, error) {
	t := p.tok
	var o Operand
	switch {
	case t.kind == tLiteral:
		o.Literal = t.val
	case t.kind != tIdent:
		return Operand{}, syntaxError(t.pos, "unexpected %s; expected a property name or a literal", t.describe(p.src))
	case strings.EqualFold(t.text, "true"):
		o.Literal = entity.BoolValue(true)
	case strings.EqualFold(t.text, "false"):
		o.Literal = entity.BoolValue(false)
	default:
		o.Property = t.text
	}
	return o, p.advance()
}

// assignSlots walks the tree in canonical order and gives every property operand its
// slot, collecting the custom names once so evaluation looks each up at most once.
func (f *Filter) assignSlots(e Expr) {
	switch x := e.(type) {
	case *OrExpr:
		for _, t := range x.Terms {
			f.assignSlots(t)
		}
	case *AndExpr:
		for _, t := range x.Terms {
			f.assignSlots(t)
		}
	case *NotExpr:
		f.assignSlots(x.X)
	case *CompareExpr:
		f.slot(&x.Left)
		f.slot(&x.Right)
	case *BoolExpr:
		f.slot(&x.X)
	}
}

func (f *Filter) slot(o *Operand) {
	switch o.Property {
	case "":
		return
	case "PartitionKey":
		o.slot = slotPartitionKey
		return
	case "RowKey":
		o.slot = slotRowKey
		return
	case "Timestamp":
		o.slot = slotTimestamp
		return
	}
	for i, n := range f.props {
		if n == o.Property {
			o.slot = i
			return
		}
	}
	o.slot = len(f.props)
	if o.Property == "TableName" {
		f.tableSlot = o.slot
	}
	f.props = append(f.props, o.Property)
}

// Expr returns the filter's syntax tree (nil for the nil Filter). It shares memory with
// the Filter: do not modify it.
func (f *Filter) Expr() Expr {
	if f == nil {
		return nil
	}
	return f.root
}

// String returns the canonical text of the filter: keywords lower-case, single spaces,
// the property on the left of a comparison, literals in one spelling, parentheses only
// where needed (and around the operand of not). Parsing it yields an equal tree.
func (f *Filter) String() string {
	if f == nil {
		return ""
	}
	return f.root.String()
}

// Properties returns the custom property names the filter reads (not PartitionKey,
// RowKey or Timestamp), each once, in order of first use. Callers must not modify it.
func (f *Filter) Properties() []string {
	if f == nil {
		return nil
	}
	return f.props
}

// KeyRange is a half-open range of entity keys, [Start, End), with End nil meaning
// "to the end of the table": exactly the bounds of a storage.ScanRequest.
type KeyRange struct {
	Start storage.Key
	End   *storage.Key
}

// Contains reports whether k lies in the range.
func (r KeyRange) Contains(k storage.Key) bool {
	return !k.Less(r.Start) && (r.End == nil || k.Less(*r.End))
}

func (r KeyRange) String() string {
	var b strings.Builder
	b.WriteString("[")
	b.WriteString(quoteKey(r.Start))
	b.WriteString(", ")
	if r.End == nil {
		b.WriteString("end")
	} else {
		b.WriteString(quoteKey(*r.End))
	}
	b.WriteString(")")
	return b.String()
}
