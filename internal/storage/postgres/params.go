package postgres

import (
	"database/sql"
	"encoding/binary"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Statement parameters.
//
// A pipeline's statements carry the keys and properties of every read or write of a
// group: arrays of byte strings (mergeGets, mergeSingles) or one entity's keys and
// properties. pgx's ExtendedQueryBuilder encodes each argument by appending it to a
// buffer that starts at 128 bytes and doubles, so a group's kilobytes of properties were
// copied and cleared several times over, and each array element went through reflection;
// in profiles of the server under `cerulean bench --client raw`, that was about a third
// of the CPU the engine spent sending a group of single inserts. encodeParams encodes the
// argument types the engine's hot statements use — int64, []byte (or a *[]byte), []int64
// and [][]byte for the parameter types BIGINT, BYTEA, BIGINT[] and BYTEA[] — straight
// into one buffer sized for all of a pipeline's statements, byte for byte as pgx would
// in the binary format (a nil slice is NULL, a nil element of a [][]byte a NULL
// element). A statement with any other argument, or a parameter of another type, is
// encoded by pgx's ExtendedQueryBuilder, as before.

// Type OIDs of the parameters encodeParams encodes itself.
const (
	oidInt8       = 20
	oidBytea      = 17
	oidInt8Array  = 1016
	oidByteaArray = 1001
)

// params are one statement's encoded parameters and result formats, for
// pgconn.Pipeline.SendQueryPrepared.
type params struct {
	values  [][]byte
	formats []int16
	results []int16
}

// encodeParams encodes the arguments of each statement, args(i) for sds[i], for the
// extended protocol. It fails before anything is sent if an argument cannot be encoded.
func encodeParams(m *pgtype.Map, sds []*pgconn.StatementDescription, args func(i int) []any) ([]params, error) {
	ps := make([]params, len(sds))
	size, fast := 0, 0
	for i, sd := range sds {
		n, ok := directSize(sd, args(i))
		if !ok {
			continue
		}
		size += n
		fast += len(sd.ParamOIDs)
		ps[i].formats = binaryFormats(len(sd.ParamOIDs)) // marks the statement as direct
	}
	// One buffer for every directly encoded value and one slice for their headers.
	buf := make([]byte, 0, size)
	values := make([][]byte, 0, fast)
	for i, sd := range sds {
		p := &ps[i]
		if p.formats == nil {
			var eqb pgx.ExtendedQueryBuilder
			if err := eqb.Build(m, sd, args(i)); err != nil {
				return nil, fmt.Errorf("encode arguments: %w", err)
			}
			p.values, p.formats, p.results = eqb.ParamValues, eqb.ParamFormats, eqb.ResultFormats
			continue
		}
		start := len(values)
		for _, a := range args(i) {
			var v []byte
			buf, v = appendDirect(buf, a)
			values = append(values, v)
		}
		p.values = values[start:len(values):len(values)]
		if len(sd.Fields) > 0 {
			p.results = make([]int16, len(sd.Fields))
			for j := range sd.Fields {
				p.results[j] = m.FormatCodeForOID(sd.Fields[j].DataTypeOID)
			}
		}
	}
	return ps, nil
}

// binaryFormats returns n binary format codes (shared: never written to).
func binaryFormats(n int) []int16 {
	if n <= len(allBinary) {
		return allBinary[:n:n]
	}
	f := make([]int16, n)
	for i := range f {
		f[i] = pgtype.BinaryFormatCode
	}
	return f
}

var allBinary = [16]int16{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}

// directSize reports whether appendDirect encodes every argument of sd (each of a type
// it knows for a parameter of the matching type), and how many bytes they take.
func directSize(sd *pgconn.StatementDescription, args []any) (int, bool) {
	if len(args) != len(sd.ParamOIDs) {
		return 0, false // pgx's builder reports the mismatch
	}
	n := 0
	for i, a := range args {
		switch v := a.(type) {
		case int64:
			if sd.ParamOIDs[i] != oidInt8 {
				return 0, false
			}
			n += 8
		case []byte:
			if sd.ParamOIDs[i] != oidBytea {
				return 0, false
			}
			n += len(v)
		case *[]byte:
			if sd.ParamOIDs[i] != oidBytea || v == nil {
				return 0, false
			}
			n += len(*v)
		case []int64:
			if sd.ParamOIDs[i] != oidInt8Array {
				return 0, false
			}
			n += arrayHeaderSize + 12*len(v)
		case [][]byte:
			if sd.ParamOIDs[i] != oidByteaArray {
				return 0, false
			}
			n += arrayHeaderSize
			for _, b := range v {
				n += 4 + len(b)
			}
		default:
			return 0, false
		}
	}
	return n, true
}

// arrayHeaderSize is the binary header of a one-dimensional array: dimensions, the
// has-nulls flag, the element type, and the dimension's length and lower bound.
const arrayHeaderSize = 20

// appendDirect appends a's binary encoding (a is of a type directSize accepts) to buf,
// returning buf and the encoded value (nil for NULL).
func appendDirect(buf []byte, a any) ([]byte, []byte) {
	start := len(buf)
	switch v := a.(type) {
	case int64:
		buf = binary.BigEndian.AppendUint64(buf, uint64(v))
	case []byte:
		if v == nil {
			return buf, nil
		}
		buf = append(buf, v...)
	case *[]byte:
		if *v == nil {
			return buf, nil
		}
		buf = append(buf, *v...)
	case []int64:
		if v == nil {
			return buf, nil
		}
		buf = appendArrayHeader(buf, oidInt8, len(v), false)
		for _, x := range v {
			buf = binary.BigEndian.AppendUint32(buf, 8)
			buf = binary.BigEndian.AppendUint64(buf, uint64(x))
		}
	case [][]byte:
		if v == nil {
			return buf, nil
		}
		nulls := false
		for _, b := range v {
			nulls = nulls || b == nil
		}
		buf = appendArrayHeader(buf, oidBytea, len(v), nulls)
		for _, b := range v {
			if b == nil {
				buf = binary.BigEndian.AppendUint32(buf, 0xFFFFFFFF) // -1: NULL
				continue
			}
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)))
			buf = append(buf, b...)
		}
	}
	return buf, buf[start:len(buf):len(buf)]
}

// appendArrayHeader appends the binary header of a one-dimensional array of n elements
// of type elem, as pgtype's array codec writes it.
func appendArrayHeader(buf []byte, elem uint32, n int, nulls bool) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	var flag uint32
	if nulls {
		flag = 1
	}
	buf = binary.BigEndian.AppendUint32(buf, flag)
	buf = binary.BigEndian.AppendUint32(buf, elem)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1) // lower bound
}

// scanValue decodes one column value into dst as m.Scan does. The columns every point
// read and single write answers — BIGINT into *int64, **int64 or *sql.NullInt64, BYTEA
// into *[]byte, in the binary format — are decoded here, without m.Scan's plan lookup
// and interface calls; anything else (a NULL into *int64, which m.Scan refuses,
// included) goes to m.
func scanValue(m valueScanner, oid uint32, format int16, src []byte, dst any) error {
	if format == pgtype.BinaryFormatCode {
		switch d := dst.(type) {
		case *int64:
			if oid == oidInt8 && len(src) == 8 {
				*d = int64(binary.BigEndian.Uint64(src))
				return nil
			}
		case **int64:
			if oid == oidInt8 && src == nil {
				*d = nil
				return nil
			}
			if oid == oidInt8 && len(src) == 8 {
				v := int64(binary.BigEndian.Uint64(src))
				*d = &v
				return nil
			}
		case *sql.NullInt64:
			if oid == oidInt8 && src == nil {
				*d = sql.NullInt64{}
				return nil
			}
			if oid == oidInt8 && len(src) == 8 {
				*d = sql.NullInt64{Int64: int64(binary.BigEndian.Uint64(src)), Valid: true}
				return nil
			}
		case *[]byte:
			if oid == oidBytea {
				if src == nil {
					*d = nil
				} else {
					// A copy: src is the connection's read buffer.
					*d = append(make([]byte, 0, len(src)), src...)
				}
				return nil
			}
		}
	}
	return m.Scan(oid, format, src, dst)
}
