package enginetest

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// allTypes is one entity's worth of edge values of every EDM type.
func allTypes() []entity.Property {
	blob := make([]byte, entity.MaxBinaryBytes)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	var ones [16]byte
	for i := range ones {
		ones[i] = 0xff
	}
	return []entity.Property{
		str("StrEmpty", ""),
		str("StrASCII", "plain text with 'quotes' and \"double\" and %25"),
		str("StrMax", strings.Repeat("x", entity.MaxStringUnits)),
		str("StrMaxTwoByte", strings.Repeat("é", entity.MaxStringUnits)),
		str("StrSurrogates", strings.Repeat("\U0001F600", entity.MaxStringUnits/2)),
		str("StrNUL", "a\x00b"),
		prop("BoolTrue", entity.BoolValue(true)),
		prop("BoolFalse", entity.BoolValue(false)),
		prop("I32Min", entity.Int32Value(math.MinInt32)),
		prop("I32Max", entity.Int32Value(math.MaxInt32)),
		prop("I32Zero", entity.Int32Value(0)),
		prop("I64Min", entity.Int64Value(math.MinInt64)),
		prop("I64Max", entity.Int64Value(math.MaxInt64)),
		prop("I64Neg", entity.Int64Value(-1)),
		prop("DNaN", entity.DoubleValue(math.NaN())),
		prop("DNegZero", entity.DoubleValue(math.Copysign(0, -1))),
		prop("DZero", entity.DoubleValue(0)),
		prop("DInf", entity.DoubleValue(math.Inf(1))),
		prop("DNegInf", entity.DoubleValue(math.Inf(-1))),
		prop("DMax", entity.DoubleValue(math.MaxFloat64)),
		prop("DTiny", entity.DoubleValue(math.SmallestNonzeroFloat64)),
		prop("DNegTiny", entity.DoubleValue(-math.SmallestNonzeroFloat64)),
		prop("DTenth", entity.DoubleValue(0.1)),
		prop("DTMin", entity.Value{Type: entity.DateTime, Int: entity.MinDateTime}),
		prop("DTMax", entity.Value{Type: entity.DateTime, Int: entity.MaxDateTime}),
		prop("DTEpoch", entity.Value{Type: entity.DateTime, Int: 0}),
		prop("DTBeforeEpoch", entity.Value{Type: entity.DateTime, Int: -1}),
		prop("DTNow", entity.TimeValue(time.Date(2024, 2, 29, 23, 59, 59, 123456700, time.UTC))),
		prop("GuidZero", entity.GUIDValue([16]byte{})),
		prop("GuidOnes", entity.GUIDValue(ones)),
		prop("Guid", entity.GUIDValue([16]byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0, 1, 2, 3, 4, 5, 6, 7})),
		prop("BinEmpty", entity.BinaryValue([]byte{})),
		prop("BinNUL", entity.BinaryValue([]byte{0})),
		prop("BinMax", entity.BinaryValue(blob)),
		// Property names are case-sensitive.
		str("Case", "upper"),
		str("case", "lower"),
		str("Ünïcödé_名前", "non-ASCII name"),
	}
}

func testTypesRoundTrip(t *testing.T, x *env) {
	tbl := x.createTable("Types")
	props := allTypes()
	x.apply(tbl, "p", mut(storage.Insert, "r", props...))
	x.sameProps("Get", x.get(tbl, "p", "r").Entity.Props, props)
	recs := x.snapshot(tbl)
	if len(recs) != 1 {
		t.Fatalf("Scan returned %d records, want 1", len(recs))
	}
	x.sameProps("Scan", recs[0].Entity.Props, props)

	// A merge rewrites the stored entity: the untouched values must survive it exactly.
	x.apply(tbl, "p", mut(storage.Merge, "r", i64("Extra", 1)))
	x.sameProps("after merge", x.get(tbl, "p", "r").Entity.Props, append(append([]entity.Property{}, props...), i64("Extra", 1)))
	// And each value survives a merge that sets it.
	x.apply(tbl, "p", mut(storage.InsertOrMerge, "r2", i64("Extra", 1)))
	x.apply(tbl, "p", mut(storage.InsertOrMerge, "r2", props...))
	x.sameProps("merged in", x.get(tbl, "p", "r2").Entity.Props, append(append([]entity.Property{}, props...), i64("Extra", 1)))

	// An entity without properties.
	x.apply(tbl, "p", mut(storage.Insert, "empty"))
	if got := x.get(tbl, "p", "empty").Entity.Props; len(got) != 0 {
		t.Fatalf("entity without properties reads back %v", got)
	}
}
