package entity

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf16"
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

// sameProps compares bags exactly: a Double by its bits (NaN equals itself), bytes by
// content.
func sameProps(a, b []Property) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i].Value, b[i].Value
		if a[i].Name != b[i].Name || x.Type != y.Type || x.Str != y.Str || x.Int != y.Int ||
			math.Float64bits(x.Float) != math.Float64bits(y.Float) || !bytes.Equal(x.Bytes, y.Bytes) {
			return false
		}
	}
	return true
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
		if got := readAll(b); !sameProps(got, want) {
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
		if !sameProps(got, want) {
			t.Fatalf("PropReader read\n %#v\nDecodeProps\n %#v", got, want)
		}
	})
}

func TestJSONPlain(t *testing.T) {
	naive := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
				return false
			}
		}
		return true
	}
	base := "abcdefghijklmnopqrstuvwxyz0123"
	for c := 0; c < 256; c++ {
		for pos := 0; pos < len(base); pos++ {
			s := []byte(base)
			s[pos] = byte(c)
			if got, want := jsonPlain(string(s)), naive(string(s)); got != want {
				t.Fatalf("byte %#x at %d: jsonPlain %v, want %v", c, pos, got, want)
			}
		}
	}
	for _, s := range []string{"", "a", "\"", "é", "0123456789abcdef\u2028", "\x7f"} {
		if got, want := jsonPlain(s), naive(s); got != want {
			t.Fatalf("%q: jsonPlain %v, want %v", s, got, want)
		}
	}
}

// TestPlainStringTag checks the two stored forms of a String: JSON-plain strings get the
// plainString tag and PropReader reports them Plain; others, and every String of a bag
// written before the tag existed, keep the String tag. Both decode to the same value.
func TestPlainStringTag(t *testing.T) {
	for _, c := range []struct {
		s     string
		plain bool
	}{
		{"", true},
		{"plain text, 0-9 ~!@#$%^&*()[]{}<>/?'", true},
		{"a \"quote\"", false},
		{"back\\slash", false},
		{"new\nline", false},
		{"caf\u00e9", false},
		{"del\x7f", false},
	} {
		props := []Property{{Name: "S", Value: StringValue(c.s)}}
		b := AppendProps(nil, props)
		tag := b[3] // count, name length, "S", tag
		if want := map[bool]byte{true: plainString, false: byte(String)}[c.plain]; tag != want {
			t.Fatalf("%q stored with tag %#x, want %#x", c.s, tag, want)
		}
		legacy := append([]byte{}, b...)
		legacy[3] = byte(String) // as written before the plain tag existed
		for _, bag := range [][]byte{b, legacy} {
			got, err := DecodeProps(bag)
			if err != nil || len(got) != 1 || got[0].Value.Type != String || got[0].Value.Str != c.s {
				t.Fatalf("%q (tag %#x) decodes to %v, %v", c.s, bag[3], got, err)
			}
			if err := CheckProps(bag); err != nil {
				t.Fatalf("%q (tag %#x): CheckProps: %v", c.s, bag[3], err)
			}
			if v, ok, err := FindProperty(bag, "S"); !ok || err != nil || v.Type != String || v.Str != c.s {
				t.Fatalf("%q (tag %#x): FindProperty %v %v %v", c.s, bag[3], v, ok, err)
			}
			r := NewPropReader(bag)
			if !r.Next() || r.Value().Str != c.s || r.Value().Type != String || r.Plain() != (bag[3] == plainString) {
				t.Fatalf("%q (tag %#x): PropReader read %q plain %v", c.s, bag[3], r.Value().Str, r.Plain())
			}
		}
	}
}

// TestAppendTicksFastPath holds the arithmetic formatting of in-range ticks to time.Time
// formatting, and AppendETag's fast path to escaping every ':' of the formatted value.
func TestAppendTicksFastPath(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	ticks := []int64{MinDateTime, MaxDateTime, MinDateTime - 1, MaxDateTime + 1, 0, -1, 1, 9_999_999,
		10_000_000, -10_000_000, -10_000_001, 951_868_799_999_999_9, 638_000_000_000_000_000}
	for i := 0; i < 200_000; i++ {
		ticks = append(ticks, MinDateTime+r.Int64N(MaxDateTime-MinDateTime+1))
	}
	for _, tk := range ticks {
		got, want := string(AppendTicks(nil, tk)), string(appendTicksTime(nil, tk))
		if got != want {
			t.Fatalf("AppendTicks(%d) = %s, want %s", tk, got, want)
		}
		etag := `W/"datetime'` + strings.ReplaceAll(want, ":", "%3A") + `'"`
		if got := string(AppendETag(nil, tk)); got != etag {
			t.Fatalf("AppendETag(%d) = %s, want %s", tk, got, etag)
		}
	}
}

// TestUTF16Len holds the ASCII fast path to counting rune by rune: every byte value at
// every position of a 40-byte string (both sides of the sixteen-byte blocks), and
// multi-byte and invalid text.
func TestUTF16Len(t *testing.T) {
	naive := func(s string) int {
		n := 0
		for _, r := range s {
			n += len(utf16.Encode([]rune{r}))
		}
		return n
	}
	base := strings.Repeat("abcdefghij", 4)
	for c := 0; c < 256; c++ {
		for pos := 0; pos < len(base); pos++ {
			s := []byte(base)
			s[pos] = byte(c)
			if got, want := utf16Len(string(s)), naive(string(s)); got != want {
				t.Fatalf("byte %#x at %d: utf16Len %d, want %d", c, pos, got, want)
			}
		}
	}
	for _, s := range []string{"", "é", strings.Repeat("x", 17) + "\U0001F600" + strings.Repeat("é", 9), "\xff\xfe" + base} {
		if got, want := utf16Len(s), naive(s); got != want {
			t.Fatalf("%q: utf16Len %d, want %d", s, got, want)
		}
	}
}

// benchBag is the bench's entity shape: a 1 KiB alphanumeric payload and one property of
// each common type.
func benchBag() []Property {
	return []Property{
		{Name: "Payload", Value: StringValue(strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", 17)[:1024])},
		{Name: "Worker", Value: Int32Value(7)},
		{Name: "Seq", Value: Int64Value(1_000_000_007)},
		{Name: "Ratio", Value: DoubleValue(0.5)},
		{Name: "Flag", Value: BoolValue(true)},
		{Name: "Created", Value: Value{Type: DateTime, Int: 638_000_000_000_000_000}},
	}
}

// BenchmarkAppendProps is the write path's encoding, the JSON-plain check included.
func BenchmarkAppendProps(b *testing.B) {
	props := benchBag()
	buf := AppendProps(nil, props)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendProps(buf[:0], props)
	}
}

// BenchmarkDecodeProps and BenchmarkCheckAndReadProps compare decoding a stored bag with
// checking it and walking it in place, as an Encoded scan and AppendRecord do.
func BenchmarkDecodeProps(b *testing.B) {
	bag := AppendProps(nil, benchBag())
	b.SetBytes(int64(len(bag)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeProps(bag); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckAndReadProps(b *testing.B) {
	bag := AppendProps(nil, benchBag())
	b.SetBytes(int64(len(bag)))
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckProps(bag); err != nil {
			b.Fatal(err)
		}
		for r := NewPropReader(bag); r.Next(); {
		}
	}
}

// BenchmarkMerge is an InsertOrMerge's merge of a patch (half the properties new
// values, a quarter new properties) into a stored bag: decoded, then merged.
func BenchmarkMerge(b *testing.B) {
	bag := AppendProps(nil, benchBag())
	base := benchBag()
	var patch []Property
	for i, p := range base {
		if i%2 == 0 {
			patch = append(patch, Property{Name: p.Name, Value: StringValue("new")})
		}
	}
	for i := range len(base) / 4 {
		patch = append(patch, Property{Name: fmt.Sprintf("New%d", i), Value: Int32Value(int32(i))})
	}
	b.ReportAllocs()
	for b.Loop() {
		stored, err := DecodeProps(bag)
		if err != nil {
			b.Fatal(err)
		}
		if got := Merge(stored, patch); len(got) != len(base)+len(base)/4 {
			b.Fatalf("merged %d properties", len(got))
		}
	}
}
