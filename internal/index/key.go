// Package index encodes property values as the keys of secondary indexes
// (docs/indexes-design.md): byte strings whose order is the $filter evaluator's order of
// the values (internal/odata/eval.go), so that an index answers a comparison with a few
// ranges of keys.
//
// A key is a type tag and the value's bytes. Values the evaluator cannot compare (a
// String and a DateTime, say) have different tags and never share a range. Int32, Int64
// and Double, which it compares by value, share one tag and are keyed as float64: an
// Int64 beyond 2^53 rounds to the nearest float64, which keeps their order weakly (a < b
// gives key(a) ≤ key(b)), so a range of keys holds every match and perhaps a few values
// at its ends that round alike; the evaluator, the final judge of every entity a plan
// reads, removes those. Every other type is keyed exactly.
//
// Keys are prefix-free, so the key of a compound index is the concatenation of its
// values' keys, and it orders by the first value, then the next.
package index

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/ceruleandb/cerulean/internal/entity"
)

// Type tags, in the order the keys of different types sort (which has no meaning: no
// comparison spans two tags but the numbers' and NaN's).
const (
	tagBool byte = 0x10
	tagNum  byte = 0x20 // Int32, Int64, Double but NaN
	tagNaN  byte = 0x21 // Double NaN: ordered against nothing
	tagDate byte = 0x30
	tagGUID byte = 0x40
	tagStr  byte = 0x50
	tagBin  byte = 0x60
)

// AppendValue appends the key of v to b. A value of an unknown type gets no key: the
// caller keeps such a value out of its index (entity values are always of a known type).
func AppendValue(b []byte, v entity.Value) []byte {
	switch v.Type {
	case entity.Boolean:
		if v.Int != 0 {
			return append(b, tagBool, 1)
		}
		return append(b, tagBool, 0)
	case entity.Int32, entity.Int64:
		return appendFloat(b, float64(v.Int))
	case entity.Double:
		if v.Float != v.Float {
			return append(b, tagNaN)
		}
		return appendFloat(b, v.Float)
	case entity.DateTime:
		b = append(b, tagDate)
		return binary.BigEndian.AppendUint64(b, uint64(v.Int)^(1<<63))
	case entity.GUID:
		return appendEscaped(append(b, tagGUID), v.Bytes)
	case entity.String:
		return appendEscaped(append(b, tagStr), []byte(v.Str))
	case entity.Binary:
		return appendEscaped(append(b, tagBin), v.Bytes)
	}
	return b
}

// AppendOffsets appends to k, the concatenated keys of vals, what tells apart the values
// their keys cannot: the Int64s beyond 2^53 that round to one float64. When every Int64
// among vals is held exactly by its key, nothing (so nearly every key is its own exact
// key); otherwise 8 bytes for each number among vals (a NaN is no number here), in order:
// how far an Int64 lies from the float64 its key holds, 0 for the others. The numbers
// among vals are those k's tags name, so the suffix's length follows from k: two exact
// keys are equal exactly when the values are equal by the evaluator's eq (Int32 5, Int64
// 5 and Double 5.0 are one value), and an exact key starts with its key.
func AppendOffsets(k []byte, vals []entity.Value) []byte {
	if !slices.ContainsFunc(vals, func(v entity.Value) bool { return v.Type == entity.Int64 && int64Offset(v.Int) != 0 }) {
		return k
	}
	for _, v := range vals {
		switch {
		case v.Type == entity.Int64:
			k = binary.BigEndian.AppendUint64(k, uint64(int64Offset(v.Int))^(1<<63))
		case v.Type == entity.Int32, v.Type == entity.Double && v.Float == v.Float:
			k = binary.BigEndian.AppendUint64(k, 1<<63)
		}
	}
	return k
}

// int64Offset is i minus the float64 nearest it (as an exact integer), computed without
// overflow: the float64 of an Int64 near MaxInt64 is 2^63, which no Int64 holds.
func int64Offset(i int64) int64 {
	f := float64(i)
	if f >= 1<<63 {
		return i - math.MaxInt64 - 1
	}
	return i - int64(f)
}

// Known reports whether values of type t have keys.
func Known(t entity.Type) bool {
	switch t {
	case entity.Boolean, entity.Int32, entity.Int64, entity.Double, entity.DateTime, entity.GUID, entity.String, entity.Binary:
		return true
	}
	return false
}

// appendFloat keys a number: its float64 bits, the sign bit flipped for positives and all
// bits for negatives, so that byte order is numeric order; −0 is keyed as +0, which the
// evaluator holds equal.
func appendFloat(b []byte, f float64) []byte {
	if f == 0 {
		f = 0
	}
	bits := math.Float64bits(f)
	if bits&(1<<63) != 0 {
		bits = ^bits
	} else {
		bits |= 1 << 63
	}
	return binary.BigEndian.AppendUint64(append(b, tagNum), bits)
}

// appendEscaped appends p so that byte order of the results is byte order of the inputs
// and no result is a prefix of another: 0x00 becomes 0x00 0xFF, and 0x00 0x01 ends it.
func appendEscaped(b, p []byte) []byte {
	for _, c := range p {
		if c == 0 {
			b = append(b, 0, 0xFF)
		} else {
			b = append(b, c)
		}
	}
	return append(b, 0, 1)
}

// PrefixEnd is the least key greater than every key that starts with k (nil if there is
// none: k is empty or all 0xFF), so [k, PrefixEnd(k)) holds exactly the keys that start
// with k.
func PrefixEnd(k []byte) []byte {
	end := append([]byte(nil), k...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// ValueLen returns the length of the key of one value at the start of k, or false if k
// does not start with a whole one.
func ValueLen(k []byte) (int, bool) {
	if len(k) == 0 {
		return 0, false
	}
	switch k[0] {
	case tagNaN:
		return 1, true
	case tagBool:
		return 2, len(k) >= 2
	case tagNum, tagDate:
		return 9, len(k) >= 9
	case tagGUID, tagStr, tagBin:
		for i := 1; i+1 < len(k); i++ {
			if k[i] == 0 {
				switch k[i+1] {
				case 1:
					return i + 2, true
				case 0xFF:
					i++
					continue
				}
				return 0, false
			}
		}
	}
	return 0, false
}
