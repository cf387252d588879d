package edmjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// randString returns valid UTF-8 mixing ASCII, JSON-special characters, control
// characters, U+2028/2029 and multi-byte runes.
func randString(r *rand.Rand, max int) string {
	pool := []rune{'a', 'Z', '0', ' ', '"', '\\', '/', '\'', '<', '>', '&', '\n', '\r', '\t', 0, 0x1f, 0x7f,
		0x80, 0x9f, 'é', '中', 0x2028, 0x2029, 0xFEFF, 0xFFFD, 0x1F600, 0x10FFFF}
	n := r.IntN(max + 1)
	var sb strings.Builder
	for i := 0; i < n; i++ {
		if r.IntN(3) == 0 {
			sb.WriteRune(pool[r.IntN(len(pool))])
		} else {
			rn := rune(r.IntN(0x10FFFF))
			if !utf8.ValidRune(rn) {
				rn = 'x'
			}
			sb.WriteRune(rn)
		}
	}
	return sb.String()
}

var specialDoubles = []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1), 1e21, 1e20, 5e-324,
	-5e-324, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 2.2250738585072014e-308, 1e-7, 1e-6,
	0.1, 5, -5, 1 << 53, 1<<53 + 2, 123456789, 9007199254740993, 0.30000000000000004, 1e300, 1.5e-300}

func randValue(r *rand.Rand) entity.Value {
	switch entity.Type(1 + r.IntN(8)) {
	case entity.String:
		return entity.StringValue(randString(r, 20))
	case entity.Boolean:
		return entity.BoolValue(r.IntN(2) == 0)
	case entity.Int32:
		switch r.IntN(4) {
		case 0:
			return entity.Int32Value(math.MinInt32)
		case 1:
			return entity.Int32Value(math.MaxInt32)
		}
		return entity.Int32Value(int32(r.Uint32()))
	case entity.Int64:
		switch r.IntN(4) {
		case 0:
			return entity.Int64Value(math.MinInt64)
		case 1:
			return entity.Int64Value(math.MaxInt64)
		}
		return entity.Int64Value(int64(r.Uint64()) >> r.IntN(64))
	case entity.Double:
		if r.IntN(2) == 0 {
			return entity.DoubleValue(specialDoubles[r.IntN(len(specialDoubles))])
		}
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) {
			f = math.NaN() // the decoder produces the canonical NaN only
		}
		return entity.DoubleValue(f)
	case entity.DateTime:
		return entity.Value{Type: entity.DateTime, Int: entity.MinDateTime + r.Int64N(entity.MaxDateTime-entity.MinDateTime+1)}
	case entity.GUID:
		g := make([]byte, 16)
		for i := range g {
			g[i] = byte(r.Uint32())
		}
		return entity.Value{Type: entity.GUID, Bytes: g}
	default:
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return entity.BinaryValue(b)
	}
}

// randEntity builds an entity whose property names the decoder treats as properties
// (not odata.*, system names or annotations), all distinct.
func randEntity(r *rand.Rand) entity.Entity {
	e := entity.Entity{PartitionKey: randString(r, 10), RowKey: randString(r, 10)}
	n := r.IntN(20)
	seen := map[string]bool{}
	for len(e.Props) < n {
		name := fmt.Sprintf("P%d", r.IntN(1000))
		if r.IntN(4) == 0 {
			name = randString(r, 6)
		}
		if seen[name] || entity.IsReservedName(name) || strings.HasPrefix(name, "odata.") || strings.HasSuffix(name, annotSuffix) {
			continue
		}
		seen[name] = true
		e.Props = append(e.Props, entity.Property{Name: name, Value: randValue(r)})
	}
	return e
}

func TestRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var buf []byte
	for i := 0; i < 5000; i++ {
		e := randEntity(r)
		ver := entity.MinDateTime + r.Int64N(entity.MaxDateTime-entity.MinDateTime)
		for _, l := range []Level{MinimalMetadata, FullMetadata} {
			o := opts(l)
			o.Element = r.IntN(2) == 0
			buf = AppendEntity(buf[:0], &e, ver, o)
			got, keys, err := DecodeEntity(buf)
			if err != nil {
				t.Fatalf("decode(encode(%s)) at %s: %v\n%s", describe(&e), l, err, buf)
			}
			if !keys.Complete() || !entityEqual(&got, &e) {
				t.Fatalf("round trip at %s:\n in %s\nout %s\n%s", l, describe(&e), describe(&got), buf)
			}
		}
	}
}

// TestRoundTripExactDoubles checks the values called out in the brief explicitly.
func TestRoundTripExactDoubles(t *testing.T) {
	ver := testVersion(t)
	for _, f := range specialDoubles {
		e := entity.Entity{PartitionKey: "p", RowKey: "r", Props: []entity.Property{{Name: "D", Value: entity.DoubleValue(f)}}}
		b := AppendEntity(nil, &e, ver, opts(MinimalMetadata))
		got, _, err := DecodeEntity(b)
		if err != nil || !entityEqual(&got, &e) {
			t.Errorf("%v: %s -> %s %v", f, b, describe(&got), err)
		}
	}
	// Type stability across a round trip: 5.0 stays Double, 5 stays Int32.
	e := entity.Entity{Props: []entity.Property{{Name: "D", Value: entity.DoubleValue(5)}, {Name: "I", Value: entity.Int32Value(5)}}}
	b := AppendEntity(nil, &e, ver, opts(NoMetadata))
	got, _, err := DecodeEntity(b)
	if err != nil || got.Props[0].Value.Type != entity.Double || got.Props[1].Value.Type != entity.Int32 {
		t.Fatalf("%s -> %s %v", b, describe(&got), err)
	}
}

// TestEncoderOutputIsValidJSON parses the encoder's output with encoding/json and checks
// the wire rules a client relies on: doubles always have '.' or an exponent, Int32 never
// has, annotations only where §4.2 allows them, odata keys first.
func TestEncoderOutputIsValidJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	var buf []byte
	for i := 0; i < 3000; i++ {
		e := randEntity(r)
		ver := entity.MinDateTime + r.Int64N(entity.MaxDateTime-entity.MinDateTime)
		for _, l := range []Level{NoMetadata, MinimalMetadata, FullMetadata} {
			o := opts(l)
			o.Element = r.IntN(2) == 0
			if r.IntN(4) == 0 {
				o.Select = NewSelection([]string{"PartitionKey", "Missing", "P1", "P2", "Timestamp"})
			}
			buf = AppendCollectionStart(buf[:0], o)
			buf = AppendEntity(buf, &e, ver, o)
			buf = append(buf, ',')
			buf = AppendEntity(buf, &e, ver, o)
			buf = AppendCollectionEnd(buf)
			if !json.Valid(buf) {
				t.Fatalf("invalid JSON at %s: %s", l, buf)
			}
			var doc struct {
				Value []map[string]json.RawMessage `json:"value"`
			}
			dec := json.NewDecoder(bytes.NewReader(buf))
			if err := dec.Decode(&doc); err != nil || len(doc.Value) != 2 {
				t.Fatalf("%v: %s", err, buf)
			}
			obj := doc.Value[0]
			for _, p := range e.Props {
				raw, ok := obj[p.Name]
				if !ok {
					if o.Select == nil {
						t.Fatalf("property %q missing: %s", p.Name, buf)
					}
					continue
				}
				annot, annotated := obj[p.Name+annotSuffix]
				if l == NoMetadata && annotated {
					t.Fatalf("annotation at nometadata: %s", buf)
				}
				switch v := p.Value; v.Type {
				case entity.Double:
					special := math.IsNaN(v.Float) || math.IsInf(v.Float, 0)
					if special != (raw[0] == '"') || (!special && !bytes.ContainsAny(raw, ".eE")) {
						t.Fatalf("double %v written as %s", v.Float, raw)
					}
					if l != NoMetadata && annotated != special {
						t.Fatalf("double %v annotation %s", v.Float, annot)
					}
				case entity.Int32:
					if bytes.ContainsAny(raw, `."eE`) || annotated {
						t.Fatalf("int32 written as %s (annotated %v)", raw, annotated)
					}
				case entity.String, entity.Boolean:
					if annotated {
						t.Fatalf("%s annotated", v.Type)
					}
				default:
					if l != NoMetadata && string(annot) != `"`+v.Type.EDMName()+`"` {
						t.Fatalf("%s annotated %s", v.Type, annot)
					}
					if raw[0] != '"' {
						t.Fatalf("%s not a string: %s", v.Type, raw)
					}
				}
				// Strings survive encoding/json's reading too.
				if p.Value.Type == entity.String {
					var s string
					if err := json.Unmarshal(raw, &s); err != nil || s != p.Value.Str {
						t.Fatalf("string %q read back as %q (%v)", p.Value.Str, s, err)
					}
				}
			}
			_, hasEtag := obj["odata.etag"]
			if hasEtag != (l != NoMetadata) {
				t.Fatalf("odata.etag presence wrong at %s: %s", l, buf)
			}
		}
	}
}

func TestAppendDoesNotAllocate(t *testing.T) {
	e := benchEntity()
	buf := make([]byte, 0, 8192)
	ver := testVersion(t)
	for _, l := range []Level{NoMetadata, MinimalMetadata, FullMetadata} {
		o := opts(l)
		o.Element = true
		if n := testing.AllocsPerRun(100, func() { buf = AppendEntity(buf[:0], &e, ver, o) }); n != 0 {
			t.Errorf("AppendEntity at %s: %v allocs", l, n)
		}
	}
}

// TestAppendRecordMatchesAppendEntity checks that a record whose properties are still in
// the stored form is written byte for byte as its decoded entity: random entities, every
// metadata level, with and without $select lists (names present, absent and repeated),
// versions in and out of the formatted range.
func TestAppendRecordMatchesAppendEntity(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	var want, got []byte
	// Strings stored JSON-plain (copied as they are) and not, side by side.
	fixed := []entity.Entity{{PartitionKey: "p", RowKey: "r", Props: []entity.Property{
		{Name: "Payload", Value: entity.StringValue(strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyz", 30))},
		{Name: "Empty", Value: entity.StringValue("")},
		{Name: "Quoted", Value: entity.StringValue(`say "hi"`)},
		{Name: "Del", Value: entity.StringValue("\x7f")},
		{Name: "Line", Value: entity.StringValue("a b")},
		{Name: "Näme", Value: entity.StringValue("plain")},
	}}}
	for i := 0; i < 3000; i++ {
		e := randEntity(r)
		if i < len(fixed) {
			e = fixed[i]
		}
		ver := entity.MinDateTime + r.Int64N(entity.MaxDateTime-entity.MinDateTime)
		if i%100 == 0 {
			ver = entity.MaxDateTime + int64(i)
		}
		rec := storage.Record{Entity: entity.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey}, Version: ver, Encoded: entity.AppendProps(nil, e.Props)}
		var sel *Selection
		if i%3 > 0 && len(e.Props) > 0 {
			names := []string{e.Props[r.IntN(len(e.Props))].Name, "Absent", "RowKey"}
			if i%3 == 2 {
				names = append(names, "Timestamp", names[0])
			}
			sel = NewSelection(names)
		}
		for _, l := range []Level{NoMetadata, MinimalMetadata, FullMetadata} {
			o := opts(l)
			o.Element = r.IntN(2) == 0
			o.Select = sel
			want = AppendEntity(want[:0], &e, ver, o)
			got = AppendRecord(got[:0], &rec, o)
			if string(got) != string(want) {
				t.Fatalf("%s at %s:\nAppendRecord %s\nAppendEntity %s", describe(&e), l, got, want)
			}
			decoded := storage.Record{Entity: e, Version: ver}
			if got = AppendRecord(got[:0], &decoded, o); string(got) != string(want) {
				t.Fatalf("decoded %s at %s:\nAppendRecord %s\nAppendEntity %s", describe(&e), l, got, want)
			}
		}
	}
}

func TestAppendRecordDoesNotAllocate(t *testing.T) {
	e := benchEntity()
	rec := storage.Record{Entity: entity.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey}, Version: testVersion(t), Encoded: entity.AppendProps(nil, e.Props)}
	buf := make([]byte, 0, 8192)
	for _, l := range []Level{NoMetadata, MinimalMetadata, FullMetadata} {
		o := opts(l)
		if n := testing.AllocsPerRun(100, func() { buf = AppendRecord(buf[:0], &rec, o) }); n != 0 {
			t.Errorf("AppendRecord at %s: %v allocs", l, n)
		}
	}
}
