package postgres

import (
	"bytes"
	"database/sql"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// TestEncodeParamsAsPgx checks that encodeParams encodes each statement's arguments
// byte for byte as pgx's ExtendedQueryBuilder does (values, NULLs, formats and result
// formats), both for the types it encodes itself and for those it leaves to pgx.
func TestEncodeParamsAsPgx(t *testing.T) {
	m := pgtype.NewMap()
	fields := []pgconn.FieldDescription{{DataTypeOID: pgtype.Int8OID}, {DataTypeOID: pgtype.ByteaOID}, {DataTypeOID: pgtype.TextOID}}
	cases := []struct {
		name string
		oids []uint32
		args []any
	}{
		{"scalars", []uint32{oidInt8, oidBytea, oidBytea, oidBytea, oidInt8},
			[]any{int64(-7), []byte("acct"), []byte{}, []byte(nil), int64(1) << 40}},
		{"arrays", []uint32{oidInt8Array, oidByteaArray, oidByteaArray, oidByteaArray, oidInt8Array, oidInt8Array},
			[]any{[]int64{0, -1, 1 << 62}, [][]byte{[]byte("a"), {}, []byte("ccc")}, [][]byte{nil, []byte("x")}, [][]byte{}, []int64(nil), []int64{}}},
		{"null array", []uint32{oidByteaArray}, []any{[][]byte(nil)}},
		{"pointers", []uint32{oidBytea, oidBytea, oidBytea, oidInt8}, func() []any {
			a, e, n := []byte("key"), []byte{}, []byte(nil)
			return []any{&a, &e, &n, int64(2)}
		}()},
		{"no parameters", nil, nil},
		// Left to pgx: a string, an int64 for an INT4 parameter, a []byte for TEXT.
		{"string", []uint32{pgtype.TextOID, oidBytea}, []any{"text", []byte("b")}},
		{"int64 as int4", []uint32{pgtype.Int4OID}, []any{int64(5)}},
		{"bytes as text", []uint32{pgtype.TextOID}, []any{[]byte("t")}},
		{"int32", []uint32{oidInt8}, []any{int32(3)}},
	}
	var sds []*pgconn.StatementDescription
	var args [][]any
	for i, c := range cases {
		sds = append(sds, &pgconn.StatementDescription{Name: fmt.Sprint(i), ParamOIDs: c.oids, Fields: fields[:i%4]})
		args = append(args, c.args)
	}
	ps, err := encodeParams(m, sds, func(i int) []any { return args[i] })
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		var eqb pgx.ExtendedQueryBuilder
		if err := eqb.Build(m, sds[i], c.args); err != nil {
			t.Fatalf("%s: pgx: %v", c.name, err)
		}
		got := ps[i]
		if len(got.values) != len(eqb.ParamValues) {
			t.Fatalf("%s: %d values, pgx %d", c.name, len(got.values), len(eqb.ParamValues))
		}
		for j := range got.values {
			if (got.values[j] == nil) != (eqb.ParamValues[j] == nil) || !bytes.Equal(got.values[j], eqb.ParamValues[j]) {
				t.Errorf("%s: value %d = %x (nil %v), pgx %x (nil %v)", c.name, j,
					got.values[j], got.values[j] == nil, eqb.ParamValues[j], eqb.ParamValues[j] == nil)
			}
		}
		if !slices.Equal(got.formats, eqb.ParamFormats) {
			t.Errorf("%s: formats %v, pgx %v", c.name, got.formats, eqb.ParamFormats)
		}
		if !slices.Equal(got.results, eqb.ResultFormats) {
			t.Errorf("%s: result formats %v, pgx %v", c.name, got.results, eqb.ResultFormats)
		}
	}

	// An argument pgx cannot encode fails the whole encoding.
	bad := []*pgconn.StatementDescription{{ParamOIDs: []uint32{oidInt8}}}
	if _, err := encodeParams(m, bad, func(int) []any { return []any{struct{}{}} }); err == nil {
		t.Error("encoding a struct as BIGINT succeeded")
	}
	// So does a count of arguments that does not match the statement's.
	if _, err := encodeParams(m, bad, func(int) []any { return []any{int64(1), int64(2)} }); err == nil {
		t.Error("two arguments for one parameter encoded")
	}
}

// groupArgs are the arguments of a merged group of n single inserts (mergeSingles) of
// ~1 KiB entities, with their statement's parameter types.
func groupArgs(n int) (*pgconn.StatementDescription, []any) {
	ids := make([]int64, n)
	var bs [5][][]byte
	for j := range bs {
		bs[j] = make([][]byte, n)
	}
	for i := range n {
		ids[i] = 42
		bs[0][i], bs[1][i] = []byte("devstoreaccount1"), []byte("bench12345")
		bs[2][i], bs[3][i] = fmt.Appendf(nil, "w%03d", i), fmt.Appendf(nil, "r%08d", i)
		bs[4][i] = bytes.Repeat([]byte{byte(i)}, 1000)
	}
	sd := &pgconn.StatementDescription{
		ParamOIDs: []uint32{oidInt8Array, oidByteaArray, oidByteaArray, oidByteaArray, oidByteaArray, oidByteaArray, oidInt8Array, oidInt8Array},
		Fields:    []pgconn.FieldDescription{{DataTypeOID: pgtype.Int8OID}, {DataTypeOID: pgtype.ByteaOID}, {DataTypeOID: pgtype.ByteaOID}, {DataTypeOID: pgtype.Int8OID}},
	}
	return sd, []any{ids, bs[0], bs[1], bs[2], bs[3], bs[4], ids, ids}
}

// BenchmarkEncodeParams prices encoding a group of 16 single inserts' arguments: pgx's
// ExtendedQueryBuilder (what the pipeline used) against encodeParams.
func BenchmarkEncodeParams(b *testing.B) {
	m := pgtype.NewMap()
	sd, args := groupArgs(16)
	b.Run("pgx", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var eqb pgx.ExtendedQueryBuilder
			if err := eqb.Build(m, sd, args); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		sds := []*pgconn.StatementDescription{sd}
		for b.Loop() {
			if _, err := encodeParams(m, sds, func(int) []any { return args }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestScanValueAsPgx checks that scanValue decodes as pgtype.Map's Scan does, errors
// included, for the columns it decodes itself and for others.
func TestScanValueAsPgx(t *testing.T) {
	m := pgtype.NewMap()
	i8 := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe} // -2
	cases := []struct {
		name   string
		oid    uint32
		format int16
		src    []byte
		dst    func() any
	}{
		{"int8", oidInt8, 1, i8, func() any { return new(int64) }},
		{"int8 null", oidInt8, 1, nil, func() any { return new(int64) }},
		{"int8 short", oidInt8, 1, []byte{1, 2}, func() any { return new(int64) }},
		{"nullable int8", oidInt8, 1, i8, func() any { return new(*int64) }},
		{"nullable int8 null", oidInt8, 1, nil, func() any { v := int64(3); p := &v; return &p }},
		{"null int8", oidInt8, 1, i8, func() any { return new(sql.NullInt64) }},
		{"null int8 null", oidInt8, 1, nil, func() any { return &sql.NullInt64{Int64: 3, Valid: true} }},
		{"null int8 short", oidInt8, 1, []byte{1}, func() any { return new(sql.NullInt64) }},
		{"bytea", oidBytea, 1, []byte("props"), func() any { return new([]byte) }},
		{"bytea empty", oidBytea, 1, []byte{}, func() any { return new([]byte) }},
		{"bytea null", oidBytea, 1, nil, func() any { b := []byte("x"); return &b }},
		{"int8 text", oidInt8, 0, []byte("42"), func() any { return new(int64) }},
		{"int4", pgtype.Int4OID, 1, []byte{0, 0, 0, 9}, func() any { return new(int64) }},
		{"text", pgtype.TextOID, 1, []byte("s"), func() any { return new(string) }},
	}
	for _, c := range cases {
		got, want := c.dst(), c.dst()
		gerr := scanValue(m, c.oid, c.format, c.src, got)
		werr := m.Scan(c.oid, c.format, c.src, want)
		if (gerr == nil) != (werr == nil) {
			t.Errorf("%s: error %v, pgx %v", c.name, gerr, werr)
			continue
		}
		if g, w := fmt.Sprintf("%#v", deref(got)), fmt.Sprintf("%#v", deref(want)); g != w {
			t.Errorf("%s: %s, pgx %s", c.name, g, w)
		}
	}
	// A []byte scanned is a copy, not the connection's buffer.
	src := []byte("abc")
	var b []byte
	if err := scanValue(m, oidBytea, 1, src, &b); err != nil {
		t.Fatal(err)
	}
	src[0] = 'x'
	if string(b) != "abc" {
		t.Errorf("scanned bytes share the source: %q", b)
	}
}

// deref is what dst points to, and for a **int64 the value it points to (or nil).
func deref(dst any) any {
	switch d := dst.(type) {
	case *int64:
		return *d
	case **int64:
		if *d == nil {
			return nil
		}
		return **d
	case *[]byte:
		return *d
	case *string:
		return *d
	}
	return dst
}
