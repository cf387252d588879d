package entity

import (
	"encoding/binary"
	"reflect"
	"testing"
)

// codecBags are property bags covering every type, empty names and values, and
// multi-byte text.
func codecBags() [][]Property {
	return [][]Property{
		nil,
		{{Name: "S", Value: StringValue("text")}},
		{
			{Name: "", Value: StringValue("")},
			{Name: "é\u4e16", Value: StringValue("a \"quoted\"\n\u2028 é")},
			{Name: "B", Value: BinaryValue([]byte{0, 1, 0xff})},
			{Name: "E", Value: BinaryValue([]byte{})},
			{Name: "T", Value: BoolValue(true)},
			{Name: "F", Value: BoolValue(false)},
			{Name: "I", Value: Int32Value(-5)},
			{Name: "L", Value: Int64Value(1 << 60)},
			{Name: "D", Value: DoubleValue(-0.25)},
			{Name: "W", Value: Value{Type: DateTime, Int: 638_000_000_000_000_000}},
			{Name: "G", Value: GUIDValue([16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})},
		},
	}
}

// readAll walks b with a PropReader, copying what it yields.
func readAll(b []byte) []Property {
	var out []Property
	r := NewPropReader(b)
	for r.Next() {
		v := *r.Value()
		if v.Bytes != nil {
			v.Bytes = append([]byte{}, v.Bytes...)
		}
		out = append(out, Property{Name: r.Name(), Value: v})
	}
	return out
}

func TestPropReaderMatchesDecodeProps(t *testing.T) {
	for _, props := range codecBags() {
		b := AppendProps(nil, props)
		if err := CheckProps(b); err != nil {
			t.Fatalf("CheckProps(%v): %v", props, err)
		}
		want, err := DecodeProps(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(b); len(got) != len(want) || len(want) > 0 && !reflect.DeepEqual(got, want) {
			t.Fatalf("PropReader read\n %#v\nDecodeProps\n %#v", got, want)
		}
	}
}

func TestCheckPropsRefusesWhatDecodePropsRefuses(t *testing.T) {
	good := AppendProps(nil, codecBags()[2])
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"count past the end", []byte{5, 1, 'a', byte(Boolean), 1}},
		{"truncated value", good[:len(good)-1]},
		{"trailing byte", append(append([]byte{}, good...), 0)},
		{"unknown type", []byte{1, 1, 'a', 99, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"type zero", []byte{1, 1, 'a', 0}},
		{"name past the end", []byte{1, 9, 'a'}},
		{"huge varint", binary.AppendUvarint([]byte{1}, 1<<62)},
	} {
		_, derr := DecodeProps(c.b)
		if derr == nil {
			t.Fatalf("%s: DecodeProps accepts it", c.name)
		}
		if err := CheckProps(c.b); err == nil {
			t.Fatalf("%s: CheckProps accepts what DecodeProps refuses (%v)", c.name, derr)
		}
	}
}

// FuzzCheckProps holds CheckProps to DecodeProps on any bytes, and PropReader to
// DecodeProps on every bag they accept; on the rest PropReader must not panic.
func FuzzCheckProps(f *testing.F) {
	for _, props := range codecBags() {
		f.Add(AppendProps(nil, props))
	}
	f.Add([]byte{2, 1, 'a', byte(String), 200, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		want, derr := DecodeProps(b)
		cerr := CheckProps(b)
		if (derr == nil) != (cerr == nil) {
			t.Fatalf("DecodeProps: %v, CheckProps: %v", derr, cerr)
		}
		got := readAll(b)
		if derr != nil {
			return
		}
		if len(got) != len(want) || len(want) > 0 && !reflect.DeepEqual(got, want) {
			t.Fatalf("PropReader read\n %#v\nDecodeProps\n %#v", got, want)
		}
	})
}
