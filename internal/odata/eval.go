package odata

import (
	"bytes"
	"math"
	"strings"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// tv is a three-valued truth value.
type tv uint8

const (
	vFalse tv = iota
	vTrue
	vUnknown
)

func truth(b bool) tv {
	if b {
		return vTrue
	}
	return vFalse
}

// Results of comparing two values beyond -1, 0, 1.
const (
	cmpUnordered = 2 // a NaN is involved: only ne holds
	cmpMismatch  = 3 // the types cannot be compared: unknown
)

// isNumeric reports the types that compare as one numeric domain.
func isNumeric(t entity.Type) bool {
	return t == entity.Int32 || t == entity.Int64 || t == entity.Double
}

// comparableTypes reports whether values of types a and b can be compared at all.
func comparableTypes(a, b entity.Type) bool {
	return a == b || isNumeric(a) && isNumeric(b)
}

// compareValues orders a against b: -1, 0, 1, cmpUnordered or cmpMismatch.
func compareValues(a, b *entity.Value) int {
	if a.Type != b.Type {
		if !isNumeric(a.Type) || !isNumeric(b.Type) {
			return cmpMismatch
		}
		switch { // the types differ, so at most one is Double
		case a.Type == entity.Double:
			if c := cmpIntFloat(b.Int, a.Float); c != cmpUnordered {
				return -c
			}
			return cmpUnordered
		case b.Type == entity.Double:
			return cmpIntFloat(a.Int, b.Float)
		}
		return cmpInt(a.Int, b.Int) // Int32 against Int64
	}
	switch a.Type {
	case entity.String:
		return strings.Compare(a.Str, b.Str)
	case entity.Double:
		switch {
		case a.Float < b.Float:
			return -1
		case a.Float > b.Float:
			return 1
		case a.Float == b.Float:
			return 0
		}
		return cmpUnordered
	case entity.GUID, entity.Binary:
		return bytes.Compare(a.Bytes, b.Bytes)
	case entity.Boolean, entity.Int32, entity.Int64, entity.DateTime:
		return cmpInt(a.Int, b.Int)
	}
	return cmpMismatch
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// cmpIntFloat orders the integer i against f exactly, with no rounding of i
// (cmpUnordered when f is NaN).
func cmpIntFloat(i int64, f float64) int {
	switch {
	case f != f:
		return cmpUnordered
	case f >= 0x1p63:
		return -1
	case f < -0x1p63:
		return 1
	}
	t := math.Trunc(f) // within int64 now
	if c := cmpInt(i, int64(t)); c != 0 {
		return c
	}
	switch {
	case f > t:
		return -1
	case f < t:
		return 1
	}
	return 0
}

// apply turns a comparison result into a truth value under op.
func apply(op Op, c int) tv {
	switch c {
	case cmpMismatch:
		return vUnknown
	case cmpUnordered:
		return truth(op == Ne)
	}
	return truth(op.holds(c))
}

// source is where an evaluation reads property values from.
type source uint8

const (
	fromEntity  source = iota // an *entity.Entity
	fromEncoded               // an encoded property bag (entity.AppendProps)
	fromTable                 // a table name: TableName is the only property
)

// evaluator evaluates one filter against one entity. Property values are looked up at
// most once each, on first use, so properties behind a short-circuit are never read. The
// first inlineSlots values live in the evaluator itself, which stays on the stack.
type evaluator struct {
	f      *Filter
	src    source
	pk, rk string // fromEntity, fromEncoded: the keys; fromTable: pk is the table name
	ts     int64
	ent    *entity.Entity
	enc    []byte
	err    error
	state  [inlineSlots]uint8 // per slot: 0 not looked up, 1 present, 2 absent
	vals   [inlineSlots]entity.Value
	// more holds slots from inlineSlots on, allocated only for filters that read more
	// properties than that.
	more []lookup
}

type lookup struct {
	state uint8
	val   entity.Value
}

const inlineSlots = 6

func (f *Filter) run(ev *evaluator) bool {
	if n := len(f.props); n > inlineSlots {
		ev.more = make([]lookup, n-inlineSlots)
	}
	return ev.eval(f.root) == vTrue
}

// Match reports whether the filter matches e, whose version (its Timestamp, in 100 ns
// ticks) is timestamp. A nil Filter matches everything.
func (f *Filter) Match(e *entity.Entity, timestamp int64) bool {
	if f == nil {
		return true
	}
	ev := evaluator{f: f, src: fromEntity, pk: e.PartitionKey, rk: e.RowKey, ts: timestamp, ent: e}
	return f.run(&ev)
}

// MatchRecord is Match for a stored record; it fits storage.ScanRequest.Filter.
func (f *Filter) MatchRecord(r *storage.Record) bool { return f.Match(&r.Entity, r.Version) }

// MatchEncoded is Match for an entity whose properties are still encoded (as
// entity.AppendProps writes them): it decodes only the properties the filter reads, and
// only when evaluation reaches them. The error is entity.ErrCorrupt when a property it
// reads does not decode; the match result is then false.
func (f *Filter) MatchEncoded(pk, rk string, timestamp int64, props []byte) (bool, error) {
	if f == nil {
		return true, nil
	}
	ev := evaluator{f: f, src: fromEncoded, pk: pk, rk: rk, ts: timestamp, enc: props}
	ok := f.run(&ev)
	if ev.err != nil {
		return false, ev.err
	}
	return ok, nil
}

// MatchTableName evaluates the filter for Query Tables, where a table is an entity with
// the one String property TableName (compared case-sensitively, as any string); every
// other property, PartitionKey and RowKey included, is missing.
func (f *Filter) MatchTableName(name string) bool {
	if f == nil {
		return true
	}
	ev := evaluator{f: f, src: fromTable, pk: name}
	return f.run(&ev)
}

// value resolves an operand; ok is false for a missing property.
func (ev *evaluator) value(o *Operand) (entity.Value, bool) {
	if o.Property == "" {
		return o.Literal, true
	}
	if ev.src == fromTable {
		if o.slot >= 0 && o.slot == ev.f.tableSlot {
			return entity.StringValue(ev.pk), true
		}
		return entity.Value{}, false
	}
	switch o.slot {
	case slotPartitionKey:
		return entity.StringValue(ev.pk), true
	case slotRowKey:
		return entity.StringValue(ev.rk), true
	case slotTimestamp:
		return entity.Value{Type: entity.DateTime, Int: ev.ts}, true
	}
	var st *uint8
	var val *entity.Value
	if o.slot < inlineSlots {
		st, val = &ev.state[o.slot], &ev.vals[o.slot]
	} else {
		l := &ev.more[o.slot-inlineSlots]
		st, val = &l.state, &l.val
	}
	switch *st {
	case 1:
		return *val, true
	case 2:
		return entity.Value{}, false
	}
	var v entity.Value
	var ok bool
	if ev.src == fromEntity {
		v, ok = ev.ent.Get(o.Property)
	} else {
		var err error
		v, ok, err = entity.FindProperty(ev.enc, o.Property)
		if err != nil && ev.err == nil {
			ev.err = err
		}
	}
	if ok {
		*val, *st = v, 1
	} else {
		*st = 2
	}
	return v, ok
}

func (ev *evaluator) eval(e Expr) tv {
	switch x := e.(type) {
	case *CompareExpr:
		a, ok := ev.value(&x.Left)
		if !ok {
			return vUnknown
		}
		b, ok := ev.value(&x.Right)
		if !ok {
			return vUnknown
		}
		return apply(x.Op, compareValues(&a, &b))
	case *AndExpr:
		r := vTrue
		for _, t := range x.Terms {
			switch ev.eval(t) {
			case vFalse:
				return vFalse
			case vUnknown:
				r = vUnknown
			}
		}
		return r
	case *OrExpr:
		r := vFalse
		for _, t := range x.Terms {
			switch ev.eval(t) {
			case vTrue:
				return vTrue
			case vUnknown:
				r = vUnknown
			}
		}
		return r
	case *NotExpr:
		switch ev.eval(x.X) {
		case vTrue:
			return vFalse
		case vFalse:
			return vTrue
		}
		return vUnknown
	case *BoolExpr:
		v, ok := ev.value(&x.X)
		if !ok || v.Type != entity.Boolean {
			return vUnknown
		}
		return truth(v.Bool())
	}
	return vUnknown
}
