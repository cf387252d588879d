package pebble

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/quick"

	"github.com/ceruleandb/cerulean/internal/entity"
)

func TestEscapedEncoding(t *testing.T) {
	cases := []struct {
		in   string
		want []byte
	}{
		{"", []byte{0, 1}},
		{"a", []byte{'a', 0, 1}},
		{"\x00", []byte{0, 0xff, 0, 1}},
		{"a\x00b", []byte{'a', 0, 0xff, 'b', 0, 1}},
		{"\x00\x00", []byte{0, 0xff, 0, 0xff, 0, 1}},
		{"\x01\xff", []byte{1, 0xff, 0, 1}},
		{"é", []byte{0xc3, 0xa9, 0, 1}},
	}
	for _, c := range cases {
		got := appendEscaped(nil, c.in)
		if !bytes.Equal(got, c.want) {
			t.Errorf("appendEscaped(%q) = %x, want %x", c.in, got, c.want)
		}
		dec, enc, rest, err := decodeEscaped(append(got, 'x', 'y'))
		if err != nil || dec != c.in || !bytes.Equal(enc, got) || string(rest) != "xy" {
			t.Errorf("decodeEscaped(%x) = %q, %x, %q, %v", got, dec, enc, rest, err)
		}
	}
	for _, bad := range [][]byte{nil, {}, {'a'}, {0}, {'a', 0}, {0, 2}, {0, 0xff}, {0, 0xff, 0, 0xfe}, {'a', 0, 0x10, 0, 1}} {
		if s, _, _, err := decodeEscaped(bad); err == nil {
			t.Errorf("decodeEscaped(%x) = %q, want an error", bad, s)
		}
	}
}

// keyLess is the order the encoding must preserve.
func keyLess(pk1, rk1, pk2, rk2 string) bool {
	if pk1 != pk2 {
		return pk1 < pk2
	}
	return rk1 < rk2
}

func checkOrder(t *testing.T, pk1, rk1, pk2, rk2 string) {
	t.Helper()
	k1, k2 := dataKey(7, pk1, rk1), dataKey(7, pk2, rk2)
	c := bytes.Compare(k1, k2)
	switch {
	case keyLess(pk1, rk1, pk2, rk2) && c >= 0,
		keyLess(pk2, rk2, pk1, rk1) && c <= 0,
		pk1 == pk2 && rk1 == rk2 && c != 0:
		t.Fatalf("(%q, %q) vs (%q, %q): encoded compare %d disagrees", pk1, rk1, pk2, rk2, c)
	}
	for _, k := range []struct {
		enc    []byte
		pk, rk string
	}{{k1, pk1, rk1}, {k2, pk2, rk2}} {
		id, pk, rk, err := decodeDataKey(k.enc)
		if err != nil || id != 7 || pk != k.pk || rk != k.rk {
			t.Fatalf("decodeDataKey(%x) = %d, %q, %q, %v; want 7, %q, %q", k.enc, id, pk, rk, err, k.pk, k.rk)
		}
		var d keyDecoder
		for range 2 { // the second time through the cached PartitionKey
			pk, rk, err := d.decode(k.enc)
			if err != nil || pk != k.pk || rk != k.rk {
				t.Fatalf("keyDecoder(%x) = %q, %q, %v", k.enc, pk, rk, err)
			}
		}
	}
}

func TestKeyOrderTable(t *testing.T) {
	// Every pair of these, as PartitionKey and as RowKey.
	ss := []string{"", "\x00", "\x00\x00", "\x00\x01", "\x01", "\xff", "\xff\x00", "a", "a\x00", "a\x00\x00",
		"a\x00\x01", "a\x00\xff", "a\x01", "a\xff", "ab", "b", "%", "'", " ", "é", "\U0001F600"}
	for _, pk1 := range ss {
		for _, pk2 := range ss {
			checkOrder(t, pk1, "", pk2, "")
			checkOrder(t, pk1, "x", pk2, "")
			checkOrder(t, pk1, "\x00", pk2, "\xff")
			checkOrder(t, "p", pk1, "p", pk2)
		}
	}
	// Table ids order before keys, so a table's span is contiguous.
	if bytes.Compare(dataKey(1, "\xff\xff", "\xff"), dataKey(2, "", "")) >= 0 {
		t.Fatal("table 1's keys do not all sort before table 2's")
	}
	if k := dataKey(1, "\xff\xff\xff", "\xff"); bytes.Compare(k, tablePrefix(2)) >= 0 || bytes.Compare(k, tablePrefix(1)) < 0 {
		t.Fatal("a key falls outside its table span")
	}
}

// TestKeyOrderRandom draws keys from a small alphabet rich in the bytes that matter
// (0x00, 0x01, 0xFF), so prefixes and escapes collide often.
func TestKeyOrderRandom(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0x00, 0x01, 0x02, 'a', 0xfe, 0xff}
	gen := func() string {
		var b strings.Builder
		for range rnd.IntN(5) {
			b.WriteByte(alphabet[rnd.IntN(len(alphabet))])
		}
		return b.String()
	}
	for range 200_000 {
		checkOrder(t, gen(), gen(), gen(), gen())
	}
}

func TestKeyOrderQuick(t *testing.T) {
	f := func(pk1, rk1, pk2, rk2 string) bool {
		c := bytes.Compare(dataKey(3, pk1, rk1), dataKey(3, pk2, rk2))
		switch {
		case keyLess(pk1, rk1, pk2, rk2):
			return c < 0
		case keyLess(pk2, rk2, pk1, rk1):
			return c > 0
		}
		return c == 0
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 20_000}); err != nil {
		t.Fatal(err)
	}
}

func TestCatalogKeys(t *testing.T) {
	// An account's catalogue span holds its own tables and no other account's.
	p := catalogPrefix("acct")
	end := prefixEnd(p)
	for _, c := range []struct {
		account, key string
		in           bool
	}{
		{"acct", "", true}, {"acct", "t", true}, {"acct", "\xff\xff", true},
		{"acc", "t", false}, {"acctx", "t", false}, {"acct\x00", "t", false}, {"acct\x01", "", false}, {"b", "", false},
	} {
		k := catalogKey(c.account, c.key)
		in := bytes.Compare(k, p) >= 0 && bytes.Compare(k, end) < 0
		if in != c.in {
			t.Errorf("catalogKey(%q, %q) in acct's span = %v, want %v", c.account, c.key, in, c.in)
		}
	}
	id, name, err := decodeCatalogValue(catalogValue(42, "MyTable"))
	if err != nil || id != 42 || name != "MyTable" {
		t.Fatalf("catalogue value round trip = %d, %q, %v", id, name, err)
	}
}

func TestValueEncoding(t *testing.T) {
	props := []entity.Property{{Name: "A", Value: entity.Int64Value(-5)}, {Name: "B", Value: entity.StringValue("x")}}
	for _, expiry := range []int64{0, 98765432109} {
		v := appendValue(nil, 1234567, expiry, props)
		wantTag, header := valueTag, valueHeader
		if expiry != 0 {
			wantTag, header = valueTagExpiry, valueHeaderExpiry
		}
		if v[0] != wantTag {
			t.Fatalf("expiry %d: tag %d, want %d", expiry, v[0], wantTag)
		}
		ver, exp, got, err := decodeValue(v)
		if err != nil || ver != 1234567 || exp != expiry || len(got) != 2 || !got[0].Value.Equal(props[0].Value) || !got[1].Value.Equal(props[1].Value) {
			t.Fatalf("decodeValue = %d, %d, %v, %v", ver, exp, got, err)
		}
		ver, exp, enc, err := parseValue(v)
		if err != nil || ver != 1234567 || exp != expiry || len(enc) != len(v)-header {
			t.Fatalf("parseValue = %d, %d, %d bytes, %v", ver, exp, len(enc), err)
		}
		// A filter can read one property straight from the stored value.
		if b, ok, err := entity.FindProperty(enc, "B"); err != nil || !ok || b.Str != "x" {
			t.Fatalf("FindProperty = %v, %v, %v", b, ok, err)
		}
		for _, bad := range [][]byte{nil, {valueTag}, {valueTagExpiry, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0}, append(v[:len(v):len(v)], 1)} {
			if _, _, _, err := decodeValue(bad); err == nil {
				t.Errorf("decodeValue(%x) succeeded", bad)
			}
		}
	}
	// A format-1 row (tag 1, no expiry) reads as one that never expires.
	v1 := append([]byte{valueTag, 0, 0, 0, 0, 0, 0, 0, 9}, entity.AppendProps(nil, props)...)
	if ver, exp, got, err := decodeValue(v1); err != nil || ver != 9 || exp != 0 || len(got) != 2 {
		t.Fatalf("format-1 value = %d, %d, %v, %v", ver, exp, got, err)
	}
}

func TestExpiryKey(t *testing.T) {
	for _, c := range []struct {
		pk, rk string
	}{{"", ""}, {"a\x00b", "c"}, {"p", "\x00\xff"}} {
		k := appendExpiryKey(nil, 7, 1<<60+3, c.pk, c.rk)
		id, exp, pk, rk, err := decodeExpiryKey(k)
		if err != nil || id != 7 || exp != 1<<60+3 || pk != c.pk || rk != c.rk {
			t.Fatalf("decodeExpiryKey = %d, %d, %q, %q, %v", id, exp, pk, rk, err)
		}
		if !bytes.HasPrefix(k, expiryPrefix(7)) || bytes.Compare(k, expiryPrefix(8)) >= 0 {
			t.Fatalf("key %x is outside table 7's index span", k)
		}
		// Keys expired at now sort below expiryBound(id, now), later ones at or above it.
		if bytes.Compare(k, expiryBound(7, 1<<60+3)) >= 0 || bytes.Compare(k, expiryBound(7, 1<<60+2)) < 0 {
			t.Fatalf("key %x is on the wrong side of the bounds", k)
		}
	}
	// Within a table, index keys sort by expiry first.
	a := appendExpiryKey(nil, 1, 100, "z", "z")
	b := appendExpiryKey(nil, 1, 101, "a", "a")
	if bytes.Compare(a, b) >= 0 {
		t.Fatal("index keys do not sort by expiry")
	}
	if _, _, _, _, err := decodeExpiryKey(a[:20]); err == nil {
		t.Fatal("decodeExpiryKey of a truncated key succeeded")
	}
}

// FuzzDataKey checks the key encoding's two promises on arbitrary bytes: decoding returns
// what was encoded, and byte order of encodings is (PartitionKey, RowKey) order.
func FuzzDataKey(f *testing.F) {
	f.Add("a", "", "a\x00", "")
	f.Add("", "\x00", "", "\x01")
	f.Add("a\x00\xff", "b", "a\x00", "\xff\x00")
	f.Fuzz(func(t *testing.T, pk1, rk1, pk2, rk2 string) {
		checkOrder(t, pk1, rk1, pk2, rk2)
	})
}

// FuzzDecodeDataKey feeds arbitrary bytes to the key decoder: it must not panic, and what
// it accepts must encode back to the same bytes.
func FuzzDecodeDataKey(f *testing.F) {
	f.Add(dataKey(1, "a\x00b", ""))
	f.Add([]byte{kindData, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xff, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, k []byte) {
		id, pk, rk, err := decodeDataKey(k)
		if err != nil {
			return
		}
		if got := dataKey(id, pk, rk); !bytes.Equal(got, k) {
			t.Fatalf("decodeDataKey(%x) = %d, %q, %q, which encodes to %x", k, id, pk, rk, got)
		}
	})
}
