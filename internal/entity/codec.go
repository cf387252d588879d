package entity

import (
	"encoding/binary"
	"errors"
	"math"
	"unsafe"
)

// The property codec: how engines store a property bag. Layout:
//
//	uvarint count
//	count × ( uvarint len(name) | name | type byte | payload )
//
// Payloads: String and Binary are uvarint length + bytes; Boolean one byte; Int32, Int64,
// DateTime and Double eight bytes big-endian (Double as its IEEE bits); GUID sixteen bytes.
// Every payload's length is known from its type or prefix, so a reader can skip to one
// property without decoding the others (see FindProperty).
//
// A String is tagged plainString instead of its type byte when every byte of it is
// printable ASCII other than '"' and '\' (jsonPlain): its JSON form is then its bytes
// between quotes, which a response writer copies without examining them (PropReader.Plain).
// The tag is a property of the bytes only, so it costs the writer one pass over the
// string and nothing else changes: readers treat both tags as String, and bags written
// before the tag existed (String tags only) read exactly as before.

// ErrCorrupt reports stored bytes that do not decode.
var ErrCorrupt = errors.New("entity: corrupt encoding")

// AppendProps appends the encoding of props to dst.
func AppendProps(dst []byte, props []Property) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(props)))
	for _, p := range props {
		dst = binary.AppendUvarint(dst, uint64(len(p.Name)))
		dst = append(dst, p.Name...)
		dst = AppendValue(dst, p.Value)
	}
	return dst
}

// EncodedSize is len(AppendProps(nil, props)), computed without encoding.
func EncodedSize(props []Property) int {
	n := uvarintLen(uint64(len(props)))
	for i := range props {
		p := &props[i]
		n += uvarintLen(uint64(len(p.Name))) + len(p.Name) + 1
		switch v := &p.Value; v.Type {
		case String:
			n += uvarintLen(uint64(len(v.Str))) + len(v.Str)
		case Binary:
			n += uvarintLen(uint64(len(v.Bytes))) + len(v.Bytes)
		case Boolean:
			n++
		case Int32, Int64, DateTime, Double:
			n += 8
		case GUID:
			n += 16
		}
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// plainString is the type byte of a String whose bytes are all JSON-plain (see above).
const plainString = 0x80 | byte(String)

// tagType is the Type a stored type byte stands for.
func tagType(tag byte) Type {
	if tag == plainString {
		return String
	}
	return Type(tag)
}

// AppendValue appends one value's type byte and payload.
func AppendValue(dst []byte, v Value) []byte {
	if v.Type == String && jsonPlain(v.Str) {
		dst = append(dst, plainString)
	} else {
		dst = append(dst, byte(v.Type))
	}
	switch v.Type {
	case String:
		dst = binary.AppendUvarint(dst, uint64(len(v.Str)))
		dst = append(dst, v.Str...)
	case Binary:
		dst = binary.AppendUvarint(dst, uint64(len(v.Bytes)))
		dst = append(dst, v.Bytes...)
	case Boolean:
		dst = append(dst, byte(v.Int&1))
	case Int32, Int64, DateTime:
		dst = binary.BigEndian.AppendUint64(dst, uint64(v.Int))
	case Double:
		dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(v.Float))
	case GUID:
		var g [16]byte
		copy(g[:], v.Bytes)
		dst = append(dst, g[:]...)
	}
	return dst
}

// DecodeProps decodes a property bag written by AppendProps. Strings and byte slices are
// copied, so the result does not alias b.
//
// The names and string values are substrings of one copy of b, made once, rather than
// a string each: a ~1 KiB entity of ten properties took some fifteen allocations, most
// of an InsertOrMerge's. The price is that a property kept alone keeps the whole bag's
// copy alive.
func DecodeProps(b []byte) ([]Property, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, ErrCorrupt
	}
	s, c := string(b), cap(b)
	at := func(x []byte) string { // x, a part of b (whose capacity runs to b's), in s
		off := c - cap(x)
		return s[off : off+len(x)]
	}
	b = b[k:]
	props := make([]Property, 0, n)
	for i := uint64(0); i < n; i++ {
		name, rest, err := readBytes(b)
		if err != nil {
			return nil, err
		}
		v, rest, err := decodeValueIn(rest, at)
		if err != nil {
			return nil, err
		}
		props = append(props, Property{Name: at(name), Value: v})
		b = rest
	}
	if len(b) != 0 {
		return nil, ErrCorrupt
	}
	return props, nil
}

// FindProperty returns the named property from an encoded bag without decoding the others.
func FindProperty(b []byte, name string) (Value, bool, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return Value{}, false, ErrCorrupt
	}
	b = b[k:]
	for i := uint64(0); i < n; i++ {
		pn, rest, err := readBytes(b)
		if err != nil {
			return Value{}, false, err
		}
		if string(pn) == name {
			v, _, err := decodeValue(rest)
			return v, err == nil, err
		}
		if b, err = skipValue(rest); err != nil {
			return Value{}, false, err
		}
	}
	return Value{}, false, nil
}

func readBytes(b []byte) ([]byte, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, ErrCorrupt
	}
	return b[k : k+int(n)], b[k+int(n):], nil
}

func fixedLen(t Type) int {
	switch t {
	case Boolean:
		return 1
	case Int32, Int64, DateTime, Double:
		return 8
	case GUID:
		return 16
	}
	return -1
}

func skipValue(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, ErrCorrupt
	}
	t := tagType(b[0])
	b = b[1:]
	if t == String || t == Binary {
		_, rest, err := readBytes(b)
		return rest, err
	}
	n := fixedLen(t)
	if n < 0 || len(b) < n {
		return nil, ErrCorrupt
	}
	return b[n:], nil
}

func decodeValue(b []byte) (Value, []byte, error) {
	return decodeValueIn(b, func(x []byte) string { return string(x) })
}

// decodeValueIn is decodeValue with a String's value made by str from its bytes in b.
func decodeValueIn(b []byte, str func([]byte) string) (Value, []byte, error) {
	if len(b) == 0 {
		return Value{}, nil, ErrCorrupt
	}
	v := Value{Type: tagType(b[0])}
	b = b[1:]
	switch v.Type {
	case String:
		s, rest, err := readBytes(b)
		if err != nil {
			return Value{}, nil, err
		}
		v.Str = str(s)
		return v, rest, nil
	case Binary:
		s, rest, err := readBytes(b)
		if err != nil {
			return Value{}, nil, err
		}
		v.Bytes = append([]byte{}, s...)
		return v, rest, nil
	}
	rest, ok := readFixed(&v, b)
	if !ok {
		return Value{}, nil, ErrCorrupt
	}
	if v.Type == GUID {
		v.Bytes = append([]byte{}, v.Bytes...)
	}
	return v, rest, nil
}

// readFixed reads the fixed-size value of v.Type (every type but String and Binary) from
// the front of b into v, a GUID's bytes aliasing b, and returns the rest of b; false if b
// is too short or the type has no fixed size.
func readFixed(v *Value, b []byte) ([]byte, bool) {
	n := fixedLen(v.Type)
	if n < 0 || len(b) < n {
		return nil, false
	}
	switch v.Type {
	case Boolean:
		v.Int = int64(b[0] & 1)
	case Int32, Int64, DateTime:
		v.Int = int64(binary.BigEndian.Uint64(b))
	case Double:
		v.Float = math.Float64frombits(binary.BigEndian.Uint64(b))
	case GUID:
		v.Bytes = b[:16:16]
	}
	return b[n:], true
}

// CheckProps reports whether b is a well-formed property bag, exactly when DecodeProps
// would succeed on it, without decoding or allocating. A reader that checks a bag once
// may then walk it with a PropReader, which assumes a well-formed bag.
func CheckProps(b []byte) error {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return ErrCorrupt
	}
	b = b[k:]
	for i := uint64(0); i < n; i++ {
		_, rest, err := readBytes(b)
		if err != nil {
			return err
		}
		if len(rest) == 0 {
			return ErrCorrupt
		}
		switch t := tagType(rest[0]); t {
		case String, Binary, Boolean, Int32, Int64, DateTime, Double, GUID:
		default:
			return ErrCorrupt
		}
		if b, err = skipValue(rest); err != nil {
			return err
		}
	}
	if len(b) != 0 {
		return ErrCorrupt
	}
	return nil
}

// PropReader walks an encoded property bag in stored order without copying: the name and
// the value it yields alias the bag (strings point into its bytes), so they are valid only
// while the bag's bytes are neither modified nor reused. It is how a response is written
// straight from stored bytes, with no allocation per property. The bag must be well formed
// (CheckProps); on malformed bytes Next stops early rather than panicking.
type PropReader struct {
	b     []byte
	n     uint64
	name  string
	val   Value
	plain bool
}

// NewPropReader starts a walk over bag b.
func NewPropReader(b []byte) PropReader {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return PropReader{}
	}
	return PropReader{b: b[k:], n: n}
}

// Next moves to the next property and reports whether there is one.
func (r *PropReader) Next() bool {
	if r.n == 0 {
		return false
	}
	r.n--
	name, rest, err := readBytes(r.b)
	if err != nil || len(rest) == 0 {
		r.n = 0
		return false
	}
	r.name = unsafeString(name)
	r.plain = rest[0] == plainString
	v := Value{Type: tagType(rest[0])}
	rest = rest[1:]
	switch v.Type {
	case String, Binary:
		s, tail, err := readBytes(rest)
		if err != nil {
			r.n = 0
			return false
		}
		if v.Type == String {
			v.Str = unsafeString(s)
		} else {
			v.Bytes = s[:len(s):len(s)]
		}
		rest = tail
	default:
		var ok bool
		if rest, ok = readFixed(&v, rest); !ok {
			r.n = 0
			return false
		}
	}
	r.val = v
	r.b = rest
	return true
}

// Name is the current property's name (aliasing the bag).
func (r *PropReader) Name() string { return r.name }

// Value is the current property's value (aliasing the bag).
func (r *PropReader) Value() *Value { return &r.val }

// Plain reports that the current property is a String stored as JSON-plain: every byte
// printable ASCII other than '"' and '\', so its JSON string is its bytes in quotes.
func (r *PropReader) Plain() bool { return r.plain }

// jsonPlain reports whether every byte of s is printable ASCII (0x20–0x7E) other than
// '"' and '\': the strings JSON writes verbatim. Sixteen bytes at a time, as most are.
func jsonPlain(s string) bool {
	i := 0
	for ; i+16 <= len(s); i += 16 {
		if !plainWords(load64(s, i), load64(s, i+8)) {
			return false
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// load64 reads s[i:i+8] little-endian in one load: slicing first leaves no bounds checks
// on the eight reads (see edmjson's load8).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// plainWords reports whether all sixteen bytes of x and y are JSON-plain. Each term is
// the exact "has a byte below n" (or "equal to n") test: a byte ≥ 0x80, < 0x20, '"',
// '\' or 0x7F sets a high bit.
func plainWords(x, y uint64) bool {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	m := x | y
	m |= ((x - 0x20*lsb) &^ x) | ((y - 0x20*lsb) &^ y)
	qx, qy := x^('"'*lsb), y^('"'*lsb)
	m |= ((qx - lsb) &^ qx) | ((qy - lsb) &^ qy)
	bx, by := x^('\\'*lsb), y^('\\'*lsb)
	m |= ((bx - lsb) &^ bx) | ((by - lsb) &^ by)
	dx, dy := x^(0x7f*lsb), y^(0x7f*lsb)
	m |= ((dx - lsb) &^ dx) | ((dy - lsb) &^ dy)
	return m&msb == 0
}

// unsafeString views b as a string without copying; b must not change while it is used.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
