// Package entity holds the table data model: the eight EDM types, typed property values,
// entities, the service's limits, and the compact binary codec engines store.
//
// Nothing here knows about JSON or HTTP; the codec keeps every EDM type exact (Int64 as
// int64, DateTime at 100 ns, Double as its IEEE bits, Binary as bytes).
package entity

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Type is an EDM property type.
type Type uint8

// The eight EDM types. Their numeric values are part of the storage format: never reorder.
const (
	String Type = 1 + iota
	Boolean
	Int32
	Int64
	Double
	DateTime
	GUID
	Binary
)

var typeNames = [...]string{
	String:   "Edm.String",
	Boolean:  "Edm.Boolean",
	Int32:    "Edm.Int32",
	Int64:    "Edm.Int64",
	Double:   "Edm.Double",
	DateTime: "Edm.DateTime",
	GUID:     "Edm.Guid",
	Binary:   "Edm.Binary",
}

// EDMName returns the OData type name, e.g. "Edm.Int64".
func (t Type) EDMName() string {
	if t >= String && t <= Binary {
		return typeNames[t]
	}
	return "Edm.Unknown(" + strconv.Itoa(int(t)) + ")"
}

func (t Type) String() string { return t.EDMName() }

// ParseType maps an OData type name ("Edm.Int64") to its Type.
func ParseType(name string) (Type, bool) {
	for t := String; t <= Binary; t++ {
		if typeNames[t] == name {
			return t, true
		}
	}
	return 0, false
}

// Value is one typed property value. Which field holds the value depends on Type:
//
//	String            Str
//	Boolean           Int (0 or 1)
//	Int32, Int64      Int
//	DateTime          Int (100 ns ticks since the Unix epoch, UTC; negative before 1970)
//	Double            Float
//	GUID              Bytes (16 bytes, RFC 4122 order)
//	Binary            Bytes
type Value struct {
	Type  Type
	Str   string
	Int   int64
	Float float64
	Bytes []byte
}

// Constructors, for readable tests and callers.

func StringValue(s string) Value  { return Value{Type: String, Str: s} }
func Int32Value(v int32) Value    { return Value{Type: Int32, Int: int64(v)} }
func Int64Value(v int64) Value    { return Value{Type: Int64, Int: v} }
func DoubleValue(v float64) Value { return Value{Type: Double, Float: v} }
func BinaryValue(b []byte) Value  { return Value{Type: Binary, Bytes: b} }
func TimeValue(t time.Time) Value { return Value{Type: DateTime, Int: TimeToTicks(t)} }
func GUIDValue(g [16]byte) Value  { return Value{Type: GUID, Bytes: g[:]} }
func BoolValue(b bool) Value {
	v := Value{Type: Boolean}
	if b {
		v.Int = 1
	}
	return v
}

// Bool reports a Boolean value.
func (v Value) Bool() bool { return v.Int != 0 }

// Equal reports whether two values have the same type and exactly the same content
// (Double compares bits, so NaN equals NaN and -0 differs from +0).
func (v Value) Equal(w Value) bool {
	if v.Type != w.Type {
		return false
	}
	switch v.Type {
	case String:
		return v.Str == w.Str
	case Double:
		return math.Float64bits(v.Float) == math.Float64bits(w.Float)
	case GUID, Binary:
		return string(v.Bytes) == string(w.Bytes)
	default:
		return v.Int == w.Int
	}
}

func (v Value) String() string {
	switch v.Type {
	case String:
		return strconv.Quote(v.Str)
	case Boolean:
		return strconv.FormatBool(v.Bool())
	case Int32, Int64:
		return strconv.FormatInt(v.Int, 10)
	case Double:
		return strconv.FormatFloat(v.Float, 'g', -1, 64)
	case DateTime:
		return FormatTicks(v.Int)
	case GUID:
		return FormatGUID(v.Bytes)
	case Binary:
		return fmt.Sprintf("X'%x'", v.Bytes)
	}
	return "<invalid>"
}

// Property is a named value.
type Property struct {
	Name  string
	Value Value
}

// Entity is a property bag addressed by its keys. Props holds only custom properties (no
// PartitionKey, RowKey or Timestamp), each name at most once, in the order they were given.
type Entity struct {
	PartitionKey string
	RowKey       string
	Props        []Property
}

// Get returns the named custom property.
func (e *Entity) Get(name string) (Value, bool) {
	for i := range e.Props {
		if e.Props[i].Name == name {
			return e.Props[i].Value, true
		}
	}
	return Value{}, false
}

// Merge returns base's properties overlaid with patch's: a property in patch replaces the
// one of the same name (including its type); others are kept; new ones are appended.
// Neither input is modified.
//
// Bags of up to mergeLinearMax properties (nearly all) are matched by name with a linear
// search instead of a map: building the map cost more than the comparisons, and was
// most of the allocations of an InsertOrMerge of a ~1 KiB entity.
func Merge(base, patch []Property) []Property {
	out := make([]Property, len(base), len(base)+len(patch))
	copy(out, base)
	if len(base)+len(patch) <= mergeLinearMax {
	next:
		for _, p := range patch {
			for i := range out {
				if out[i].Name == p.Name {
					out[i] = p
					continue next
				}
			}
			out = append(out, p)
		}
		return out
	}
	idx := make(map[string]int, len(out))
	for i, p := range out {
		idx[p.Name] = i
	}
	for _, p := range patch {
		if i, ok := idx[p.Name]; ok {
			out[i] = p
			continue
		}
		idx[p.Name] = len(out)
		out = append(out, p)
	}
	return out
}

// mergeLinearMax is the most properties, base and patch together, Merge matches without
// a map: at most (mergeLinearMax/2)² short string comparisons.
const mergeLinearMax = 64

// ticksPerSecond is the DateTime resolution: 100 ns.
const ticksPerSecond = 10_000_000

// TimeToTicks converts t to 100 ns ticks since the Unix epoch, truncating below 100 ns.
func TimeToTicks(t time.Time) int64 {
	return t.Unix()*ticksPerSecond + int64(t.Nanosecond()/100)
}

// TicksToTime is the inverse of TimeToTicks, in UTC.
func TicksToTime(ticks int64) time.Time {
	sec := ticks / ticksPerSecond
	rem := ticks % ticksPerSecond
	if rem < 0 {
		sec--
		rem += ticksPerSecond
	}
	return time.Unix(sec, rem*100).UTC()
}

// MinDateTime and MaxDateTime bound the DateTime values the service accepts
// (1601-01-01T00:00:00Z to 9999-12-31T23:59:59.9999999Z).
var (
	MinDateTime = TimeToTicks(time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC))
	MaxDateTime = TimeToTicks(time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC))
)

// FormatTicks renders ticks as the service does: UTC, seven fraction digits, "Z".
func FormatTicks(ticks int64) string {
	return string(AppendTicks(nil, ticks))
}

// AppendTicks appends FormatTicks(ticks) to dst. Values in MinDateTime..MaxDateTime (all
// that valid entities hold, and every version) are formatted arithmetically, without
// time.Time, since a query page formats two or three per entity and a batch response one
// per operation; others go through time formatting (appendTicksTime).
func AppendTicks(dst []byte, ticks int64) []byte {
	if ticks < MinDateTime || ticks > MaxDateTime {
		return appendTicksTime(dst, ticks)
	}
	secs := ticks / ticksPerSecond
	frac := ticks % ticksPerSecond
	if frac < 0 {
		secs--
		frac += ticksPerSecond
	}
	days := secs / 86400
	sod := secs % 86400
	if sod < 0 {
		days--
		sod += 86400
	}
	y, m, d := civilFromDays(days)
	var b [28]byte
	put2(b[0:], y/100)
	put2(b[2:], y%100)
	b[4] = '-'
	put2(b[5:], m)
	b[7] = '-'
	put2(b[8:], d)
	b[10] = 'T'
	put2(b[11:], sod/3600)
	b[13] = ':'
	put2(b[14:], sod/60%60)
	b[16] = ':'
	put2(b[17:], sod%60)
	b[19] = '.'
	put2(b[20:], frac/100_000)
	put2(b[22:], frac/1000%100)
	put2(b[24:], frac/10%100)
	b[26] = byte('0' + frac%10)
	b[27] = 'Z'
	return append(dst, b[:]...)
}

// appendTicksTime is AppendTicks through time.Time, for any value.
func appendTicksTime(dst []byte, ticks int64) []byte {
	t := TicksToTime(ticks)
	dst = t.AppendFormat(dst, "2006-01-02T15:04:05")
	frac := ticks % ticksPerSecond
	if frac < 0 {
		frac += ticksPerSecond
	}
	dst = append(dst, '.')
	var buf [7]byte
	for i := 6; i >= 0; i-- {
		buf[i] = byte('0' + frac%10)
		frac /= 10
	}
	dst = append(dst, buf[:]...)
	return append(dst, 'Z')
}

// digitPairs holds "00" to "99", so two decimal digits are written with one lookup.
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

// put2 writes v (0–99) as two digits at b[0:2].
func put2(b []byte, v int64) {
	b[0], b[1] = digitPairs[2*v], digitPairs[2*v+1]
}

// civilFromDays is the proleptic Gregorian date of a day count from 1970-01-01
// (H. Hinnant's algorithm).
func civilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	if mp < 10 {
		m = mp + 3
	} else {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

// ErrFractionDigits is what ParseDateTime's error wraps when the value has more than
// seven significant fraction digits: DateTime resolution is 100 ns, and Go's time.Time
// marshals nanoseconds (nine digits).
var ErrFractionDigits = errors.New("more than 7 fraction digits; 7 (100 ns) is the most")

// ParseDateTime parses an ISO 8601 date-time with 0–7 fraction digits and a "Z", a numeric
// offset, or no zone (taken as UTC), and returns 100 ns ticks. It rejects more than seven
// fraction digits only when they are not zeros, so no precision is silently lost; that
// error wraps ErrFractionDigits.
func ParseDateTime(s string) (int64, error) {
	// Split off the fraction so that any number of digits up to 7 is exact.
	var frac int64
	digits := 0
	base := s
	if i := indexByte(s, '.'); i >= 0 {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			if digits < 7 {
				frac = frac*10 + int64(s[j]-'0')
			} else if s[j] != '0' {
				return 0, fmt.Errorf("datetime %q: %w", s, ErrFractionDigits)
			}
			digits++
			j++
		}
		if digits == 0 {
			return 0, fmt.Errorf("datetime %q: empty fraction", s)
		}
		for k := digits; k < 7; k++ {
			frac *= 10
		}
		base = s[:i] + s[j:]
	}
	var t time.Time
	var err error
	switch {
	case len(base) > 0 && (base[len(base)-1] == 'Z' || base[len(base)-1] == 'z'):
		t, err = time.Parse("2006-01-02T15:04:05", base[:len(base)-1])
		if err != nil {
			t, err = time.Parse("2006-01-02T15:04", base[:len(base)-1])
		}
	case hasOffset(base):
		t, err = time.Parse("2006-01-02T15:04:05-07:00", base)
		if err != nil {
			t, err = time.Parse("2006-01-02T15:04-07:00", base)
		}
	default:
		t, err = time.Parse("2006-01-02T15:04:05", base)
		if err != nil {
			t, err = time.Parse("2006-01-02T15:04", base)
		}
		if err != nil {
			t, err = time.Parse("2006-01-02", base)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("datetime %q: %w", s, err)
	}
	return t.Unix()*ticksPerSecond + frac, nil
}

// hasOffset reports a "±hh:mm" zone after the time part (not a date's hyphen).
func hasOffset(s string) bool {
	t := indexByte(s, 'T')
	n := len(s)
	return t >= 0 && n-6 > t && (s[n-6] == '+' || s[n-6] == '-')
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// ParseGUID parses the 36-character hyphenated form (any hex case; braces allowed).
func ParseGUID(s string) ([]byte, error) {
	if len(s) == 38 && s[0] == '{' && s[37] == '}' {
		s = s[1:37]
	}
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return nil, fmt.Errorf("guid %q: not in xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx form", s)
	}
	out := make([]byte, 16)
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("guid %q: bad hex digit", s)
		}
		out[j] = hi<<4 | lo
		j++
		i += 2
	}
	return out, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// FormatGUID renders 16 bytes in lower-case hyphenated form.
func FormatGUID(b []byte) string {
	if len(b) != 16 {
		return ""
	}
	const hexd = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hexd[c>>4], hexd[c&15])
	}
	return string(out)
}
