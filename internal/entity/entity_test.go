package entity

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestTicksRoundTrip(t *testing.T) {
	cases := []string{
		"1601-01-01T00:00:00.0000000Z",
		"1969-12-31T23:59:59.9999999Z",
		"1970-01-01T00:00:00.0000000Z",
		"2024-05-01T10:00:00.1234567Z",
		"9999-12-31T23:59:59.9999999Z",
	}
	for _, s := range cases {
		ticks, err := ParseDateTime(s)
		if err != nil {
			t.Fatalf("ParseDateTime(%q): %v", s, err)
		}
		if got := FormatTicks(ticks); got != s {
			t.Errorf("FormatTicks(ParseDateTime(%q)) = %q", s, got)
		}
	}
	if MinDateTime != mustParse(t, "1601-01-01T00:00:00Z") || MaxDateTime != mustParse(t, "9999-12-31T23:59:59.9999999Z") {
		t.Fatal("DateTime bounds disagree with parser")
	}
}

func mustParse(t *testing.T, s string) int64 {
	t.Helper()
	v, err := ParseDateTime(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestParseDateTimeForms(t *testing.T) {
	want := TimeToTicks(time.Date(2008, 7, 10, 0, 0, 0, 0, time.UTC))
	for _, s := range []string{
		"2008-07-10T00:00:00Z", "2008-07-10T00:00:00.0Z", "2008-07-10T00:00:00.000Z",
		"2008-07-10T00:00:00.0000000Z", "2008-07-10T00:00:00", "2008-07-10T02:00:00+02:00",
		"2008-07-10T00:00Z", "2008-07-10T00:00:00.00000000Z", "2008-07-10", "2008-07-09T22:00:00-02:00",
	} {
		if got := mustParse(t, s); got != want {
			t.Errorf("ParseDateTime(%q) = %d, want %d", s, got, want)
		}
	}
	for _, s := range []string{"", "2008-07-10T00:00:00.Z", "2008-13-10T00:00:00Z", "2008-07-10T00:00:00.00000001Z", "yesterday"} {
		if _, err := ParseDateTime(s); err == nil {
			t.Errorf("ParseDateTime(%q) succeeded", s)
		}
	}
	for _, s := range []string{"2008-07-10T00:00:00.00000001Z", "2024-05-01T10:00:00.123456789Z", "2024-05-01T10:00:00.123456789+02:00"} {
		if _, err := ParseDateTime(s); !errors.Is(err, ErrFractionDigits) {
			t.Errorf("ParseDateTime(%q) = %v, want ErrFractionDigits", s, err)
		}
	}
}

func TestETag(t *testing.T) {
	v := mustParse(t, "2021-04-06T21:03:31.9231271Z")
	et := ETag(v)
	if et != `W/"datetime'2021-04-06T21%3A03%3A31.9231271Z'"` {
		t.Fatalf("ETag = %s", et)
	}
	for _, s := range []string{et, `W/"datetime'2021-04-06T21:03:31.9231271Z'"`} {
		got, ok, err := ParseETag(s)
		if err != nil || !ok || got != v {
			t.Errorf("ParseETag(%s) = %d, %v, %v", s, got, ok, err)
		}
	}
	if _, ok, err := ParseETag(`W/"something-else"`); ok || err != nil {
		t.Errorf("foreign weak etag: ok=%v err=%v", ok, err)
	}
	// A strong ETag is refused (400), as the service refuses it; TestParseETag has the
	// whole grammar.
	if _, ok, err := ParseETag(`"strong"`); ok || !errors.Is(err, ErrBadETag) {
		t.Errorf("strong etag: ok=%v err=%v", ok, err)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	g, _ := ParseGUID("c9da6455-213d-42c9-9a79-3e9149a57833")
	props := []Property{
		{"S", StringValue("héllo 'q' %")},
		{"E", StringValue("")},
		{"B", BoolValue(true)},
		{"I", Int32Value(math.MinInt32)},
		{"L", Int64Value(math.MaxInt64)},
		{"D", DoubleValue(math.NaN())},
		{"Z", DoubleValue(math.Copysign(0, -1))},
		{"T", Value{Type: DateTime, Int: MinDateTime}},
		{"G", Value{Type: GUID, Bytes: g}},
		{"X", BinaryValue([]byte{0, 1, 2, 255})},
		{"Y", BinaryValue(nil)},
	}
	enc := AppendProps(nil, props)
	got, err := DecodeProps(enc)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(props) {
		t.Fatalf("decoded %d props", len(got))
	}
	for i := range props {
		if got[i].Name != props[i].Name || !got[i].Value.Equal(props[i].Value) {
			t.Errorf("prop %d: got %v=%v want %v=%v", i, got[i].Name, got[i].Value, props[i].Name, props[i].Value)
		}
		v, ok, err := FindProperty(enc, props[i].Name)
		if err != nil || !ok || !v.Equal(props[i].Value) {
			t.Errorf("FindProperty(%s) = %v %v %v", props[i].Name, v, ok, err)
		}
	}
	if _, ok, _ := FindProperty(enc, "missing"); ok {
		t.Error("FindProperty found a missing property")
	}
	for i := 0; i < len(enc); i++ {
		if _, err := DecodeProps(enc[:i]); err == nil {
			t.Errorf("truncated encoding (%d bytes) decoded", i)
		}
	}
}

// EncodedSize is the length AppendProps writes, across the uvarint length boundaries.
func TestEncodedSize(t *testing.T) {
	g, _ := ParseGUID("c9da6455-213d-42c9-9a79-3e9149a57833")
	cases := [][]Property{nil, {}, {{"G", Value{Type: GUID, Bytes: g}}, {"T", Value{Type: DateTime}}, {"B", BoolValue(true)}}}
	for _, n := range []int{0, 1, 127, 128, 16383, 16384, 65536, 1 << 21} {
		cases = append(cases, []Property{{stringOf('n', n%300), StringValue(stringOf('s', n))}, {"X", BinaryValue(make([]byte, n))}})
	}
	cases = append(cases, manyProps(200))
	for i, props := range cases {
		if got, want := EncodedSize(props), len(AppendProps(nil, props)); got != want {
			t.Errorf("case %d: EncodedSize = %d, AppendProps wrote %d", i, got, want)
		}
	}
}

func TestMerge(t *testing.T) {
	base := []Property{{"A", Int32Value(1)}, {"B", StringValue("x")}}
	got := Merge(base, []Property{{"B", Int64Value(2)}, {"C", BoolValue(false)}})
	if len(got) != 3 || got[1].Value.Type != Int64 || got[2].Name != "C" || base[1].Value.Type != String {
		t.Fatalf("Merge = %v (base %v)", got, base)
	}
}

// TestMergeSizes checks both of Merge's ways of matching names (a linear search for small
// bags, a map for large ones) against a plain reference, with patches that replace,
// append, and name a property twice.
func TestMergeSizes(t *testing.T) {
	ref := func(base, patch []Property) []Property {
		out := slices.Clone(base)
		for _, p := range patch {
			if i := slices.IndexFunc(out, func(q Property) bool { return q.Name == p.Name }); i >= 0 {
				out[i] = p
			} else {
				out = append(out, p)
			}
		}
		return out
	}
	for _, n := range []int{0, 1, 5, mergeLinearMax / 2, mergeLinearMax, 200} {
		var base, patch []Property
		for i := range n {
			base = append(base, Property{Name: fmt.Sprintf("P%d", i), Value: Int32Value(int32(i))})
		}
		for i := n / 2; i < n+n/2+1; i++ { // half of base's names, then new ones
			patch = append(patch, Property{Name: fmt.Sprintf("P%d", i), Value: StringValue(fmt.Sprint(i))})
		}
		patch = append(patch, Property{Name: fmt.Sprintf("P%d", n), Value: BoolValue(true)}) // twice
		before := slices.Clone(base)
		if got, want := Merge(base, patch), ref(base, patch); !reflect.DeepEqual(got, want) {
			t.Errorf("%d properties: Merge = %v, want %v", n, got, want)
		}
		if !reflect.DeepEqual(base, before) {
			t.Errorf("%d properties: Merge changed base", n)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := &Entity{PartitionKey: "p'%é ", RowKey: ""}
	if err := Validate(ok); err != nil {
		t.Fatalf("valid entity rejected: %v", err)
	}
	bad := []struct {
		e    Entity
		code string
	}{
		{Entity{PartitionKey: "a/b"}, "OutOfRangeInput"},
		{Entity{PartitionKey: "a", RowKey: "x\ty"}, "OutOfRangeInput"},
		{Entity{PartitionKey: "a", RowKey: "\u0085"}, "OutOfRangeInput"},
		{Entity{PartitionKey: string(make([]byte, 513))}, "OutOfRangeInput"},
		{Entity{PartitionKey: stringOf('k', 513)}, "PropertyValueTooLarge"},
		{Entity{Props: []Property{{"1a", Int32Value(1)}}}, "PropertyNameInvalid"},
		{Entity{Props: []Property{{"a-b", Int32Value(1)}}}, "PropertyNameInvalid"},
		{Entity{Props: []Property{{stringOf('n', 256), Int32Value(1)}}}, "PropertyNameTooLong"},
		{Entity{Props: []Property{{"S", StringValue(stringOf('s', 32769))}}}, "PropertyValueTooLarge"},
		{Entity{Props: []Property{{"B", BinaryValue(make([]byte, 65537))}}}, "PropertyValueTooLarge"},
		{Entity{Props: []Property{{"T", Value{Type: DateTime, Int: MinDateTime - 1}}}}, "OutOfRangeInput"},
		{Entity{Props: []Property{{"A", Int32Value(1)}, {"A", Int32Value(2)}}}, "DuplicatePropertiesSpecified"},
		{Entity{Props: manyProps(253)}, "TooManyProperties"},
		{Entity{Props: bigProps(17)}, "EntityTooLarge"},
	}
	for i, c := range bad {
		err := Validate(&c.e)
		if err == nil || !contains(err.Error(), c.code) {
			t.Errorf("case %d: got %v, want %s", i, err, c.code)
		}
	}
	// A key over 1 KiB keeps the service's code but says which key and what the limit is,
	// not the 64 KB property-value text.
	for _, e := range []Entity{{PartitionKey: stringOf('k', 513)}, {RowKey: stringOf('k', 513)}} {
		name := "PartitionKey"
		if e.RowKey != "" {
			name = "RowKey"
		}
		err := Validate(&e)
		if err == nil || !contains(err.Error(), "PropertyValueTooLarge") || !contains(err.Error(), "The "+name+" exceeds") ||
			!contains(err.Error(), "1 KiB") || !contains(err.Error(), "512") || contains(err.Error(), "64KB") {
			t.Errorf("%s of 513 characters: %v", name, err)
		}
	}
	if err := Validate(&Entity{Props: manyProps(252)}); err != nil {
		t.Errorf("252 properties rejected: %v", err)
	}
	if err := Validate(&Entity{Props: []Property{{"S", StringValue(stringOf('s', 32768))}, {"B", BinaryValue(make([]byte, 65536))}}}); err != nil {
		t.Errorf("maximal values rejected: %v", err)
	}
}

// Validate and ValidateProps stay linear however many properties they get: the count
// comes first, and repeated names are found with a set above a few properties. Before,
// ValidateProps compared every name with every earlier one (300,000 properties: minutes).
func TestValidateLinear(t *testing.T) {
	const n = 300_000
	props := manyProps(n)
	start := time.Now()
	if err := Validate(&Entity{Props: props}); err == nil || !contains(err.Error(), "TooManyProperties") {
		t.Fatalf("Validate(%d properties) = %v, want TooManyProperties", n, err)
	}
	props = append(props, Property{Name: "P7", Value: Int32Value(7)})
	if err := ValidateProps(props); err == nil || !contains(err.Error(), "DuplicatePropertiesSpecified") {
		t.Fatalf("ValidateProps(%d properties, last repeats) = %v, want DuplicatePropertiesSpecified", n+1, err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("validating %d properties took %v", n, el)
	}
}

// The first failing property decides the error, in the small (pairwise) and the large
// (set) duplicate checks alike, as before the set was introduced.
func TestValidatePropsOrder(t *testing.T) {
	for _, n := range []int{3, smallProps + 5} {
		dupThenBad := append(manyProps(n), Property{"P1", Int32Value(1)}, Property{"1bad", Int32Value(1)})
		if err := ValidateProps(dupThenBad); err == nil || !contains(err.Error(), "DuplicatePropertiesSpecified") {
			t.Errorf("n=%d: repeat then bad name: %v", n, err)
		}
		badThenDup := append(manyProps(n), Property{"1bad", Int32Value(1)}, Property{"P1", Int32Value(1)})
		if err := ValidateProps(badThenDup); err == nil || !contains(err.Error(), "PropertyNameInvalid") {
			t.Errorf("n=%d: bad name then repeat: %v", n, err)
		}
		tooLargeThenDup := append(manyProps(n), Property{"S", StringValue(stringOf('s', 32769))}, Property{"P1", Int32Value(1)})
		if err := ValidateProps(tooLargeThenDup); err == nil || !contains(err.Error(), "PropertyValueTooLarge") {
			t.Errorf("n=%d: large value then repeat: %v", n, err)
		}
		if err := ValidateProps(manyProps(n)); err != nil {
			t.Errorf("n=%d: distinct names rejected: %v", n, err)
		}
	}
}

func stringOf(c byte, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

func manyProps(n int) []Property {
	ps := make([]Property, n)
	for i := range ps {
		ps[i] = Property{Name: "P" + itoa(i), Value: Int32Value(int32(i))}
	}
	return ps
}

func bigProps(n int) []Property {
	ps := make([]Property, n)
	for i := range ps {
		ps[i] = Property{Name: "B" + itoa(i), Value: BinaryValue(make([]byte, 64*1024))}
	}
	return ps
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	s := ""
	for ; i > 0; i /= 10 {
		s = string(rune('0'+i%10)) + s
	}
	return s
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestParseGUID(t *testing.T) {
	g, err := ParseGUID("C9DA6455-213D-42C9-9A79-3E9149A57833")
	if err != nil || FormatGUID(g) != "c9da6455-213d-42c9-9a79-3e9149a57833" {
		t.Fatalf("ParseGUID = %x, %v", g, err)
	}
	for _, s := range []string{"c9da6455-213d-42c9-9a79--e9149a57833", "c9da6455-213d-42c9-9a79-3e9149a5783-", "c9da6455x213d-42c9-9a79-3e9149a57833", "c9da6455-213d-42c9-9a79-3e9149a5783g", ""} {
		if _, err := ParseGUID(s); err == nil {
			t.Errorf("ParseGUID(%q) succeeded", s)
		}
	}
}

// FuzzAppendTicks checks the hand-made formatting of the service's DateTime range against
// time.Time's.
func FuzzAppendTicks(f *testing.F) {
	for _, v := range []int64{MinDateTime, MaxDateTime, 0, -1, 1, 17640000000000000, 951782400 * ticksPerSecond, 951868800*ticksPerSecond - 1, MinDateTime - 1, MaxDateTime + 1} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, ticks int64) {
		if got, want := string(AppendTicks(nil, ticks)), string(appendTicksTime(nil, ticks)); got != want {
			t.Fatalf("AppendTicks(%d) = %s, want %s", ticks, got, want)
		}
		// Spread the fuzzer's small values over the whole range too.
		spread := MinDateTime + int64(uint64(ticks)%uint64(MaxDateTime-MinDateTime+1))
		if got, want := string(AppendTicks(nil, spread)), string(appendTicksTime(nil, spread)); got != want {
			t.Fatalf("AppendTicks(%d) = %s, want %s", spread, got, want)
		}
	})
}
