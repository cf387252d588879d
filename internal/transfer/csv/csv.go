// Package csv reads and writes table entities as CSV in the shape Azure Storage Explorer
// exports and imports: a header of PartitionKey, RowKey, Timestamp, then for each
// property a column "<name>" and a column "<name>@type" holding its EDM type
// ("Edm.Int64"). A row leaves both cells of a property it lacks empty; an empty string
// property has the empty value and the type Edm.String, so absent and empty differ.
//
// Values: String as is; Boolean true/false; Int32 and Int64 in decimal; Double in the
// shortest exact form, or NaN, Infinity, -Infinity; DateTime ISO 8601 with seven fraction
// digits; Guid canonical; Binary base64. On reading, a type may also be written without
// "Edm." (as Storage Explorer 1.40 does), and a value with no type is a String.
//
// A CSV file holds one table. The header must list every property before the first row,
// so the writer spools rows to a temporary file and writes the file on Close: memory
// stays bounded by the set of property names, not the rows.
package csv

import (
	"bufio"
	"encoding/base64"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/transfer/jsonl"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
)

// Writer writes one table's records as Storage Explorer CSV.
type Writer struct {
	out       io.Writer
	timestamp bool
	spool     *os.File
	sw        *jsonl.Writer
	cols      []string
	seen      map[string]bool
}

// NewWriter writes to out on Close; withTimestamp fills the Timestamp column.
func NewWriter(out io.Writer, withTimestamp bool) (*Writer, error) {
	f, err := os.CreateTemp("", "cerulean-csv-*.jsonl")
	if err != nil {
		return nil, fmt.Errorf("csv spool: %w", err)
	}
	_ = os.Remove(f.Name()) // unlinked: gone when closed, whatever happens
	return &Writer{out: out, timestamp: withTimestamp, spool: f, sw: jsonl.NewWriter(f, false, true), seen: map[string]bool{}}, nil
}

// Write spools a record and notes its property names.
func (w *Writer) Write(r *record.Record) error {
	for i := range r.Entity.Props {
		if n := r.Entity.Props[i].Name; !w.seen[n] {
			w.seen[n] = true
			w.cols = append(w.cols, n)
		}
	}
	return w.sw.Write(r)
}

// Close writes the header and every spooled row, then removes the spool.
func (w *Writer) Close() error {
	defer w.spool.Close()
	if err := w.sw.Close(); err != nil {
		return fmt.Errorf("csv spool: %w", err)
	}
	if _, err := w.spool.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("csv spool: %w", err)
	}
	bw := bufio.NewWriterSize(w.out, 256<<10)
	cw := csv.NewWriter(bw)
	header := []string{"PartitionKey", "RowKey", "Timestamp"}
	index := make(map[string]int, len(w.cols))
	for _, c := range w.cols {
		index[c] = len(header)
		header = append(header, c, c+"@type")
	}
	if err := cw.Write(header); err != nil {
		return err
	}
	row := make([]string, len(header))
	rd := jsonl.NewReader(w.spool)
	for {
		r, err := rd.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("csv spool: %w", err)
		}
		clear(row)
		row[0], row[1] = r.Entity.PartitionKey, r.Entity.RowKey
		if w.timestamp && r.HasTimestamp {
			row[2] = entity.FormatTicks(r.Timestamp)
		}
		for _, p := range r.Entity.Props {
			i := index[p.Name]
			row[i], row[i+1] = FormatValue(p.Value), p.Value.Type.EDMName()
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return err
	}
	return bw.Flush()
}

// FormatValue is a value's text in a cell.
func FormatValue(v entity.Value) string {
	switch v.Type {
	case entity.String:
		return v.Str
	case entity.Boolean:
		return strconv.FormatBool(v.Bool())
	case entity.Int32, entity.Int64:
		return strconv.FormatInt(v.Int, 10)
	case entity.Double:
		if s, ok := record.SpecialDouble(v.Float); ok {
			return s
		}
		return string(record.AppendDouble(nil, v.Float))
	case entity.DateTime:
		return entity.FormatTicks(v.Int)
	case entity.GUID:
		return entity.FormatGUID(v.Bytes)
	case entity.Binary:
		return base64.StdEncoding.EncodeToString(v.Bytes)
	}
	return ""
}

// ParseValue reads a cell of type t.
func ParseValue(t entity.Type, s string) (entity.Value, error) {
	switch t {
	case entity.String:
		return entity.StringValue(s), nil
	case entity.Boolean:
		b, err := strconv.ParseBool(strings.ToLower(s))
		if err != nil || (s != "true" && s != "false" && !strings.EqualFold(s, "true") && !strings.EqualFold(s, "false")) {
			return entity.Value{}, fmt.Errorf("%q is not a valid Edm.Boolean", s)
		}
		return entity.BoolValue(b), nil
	case entity.Int32:
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return entity.Value{}, fmt.Errorf("%q is not a valid Edm.Int32", s)
		}
		return entity.Int32Value(int32(n)), nil
	case entity.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return entity.Value{}, fmt.Errorf("%q is not a valid Edm.Int64", s)
		}
		return entity.Int64Value(n), nil
	case entity.Double:
		switch s {
		case "NaN", "Infinity", "-Infinity":
			f, _ := strconv.ParseFloat(s, 64)
			return entity.DoubleValue(f), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || strings.ContainsAny(strings.ToLower(s), "in_x") {
			return entity.Value{}, fmt.Errorf("%q is not a valid Edm.Double", s)
		}
		return entity.DoubleValue(f), nil
	case entity.DateTime:
		ticks, err := entity.ParseDateTime(s)
		if err != nil {
			return entity.Value{}, fmt.Errorf("%q is not a valid Edm.DateTime", s)
		}
		if ticks < entity.MinDateTime || ticks > entity.MaxDateTime {
			return entity.Value{}, fmt.Errorf("%q is outside the Edm.DateTime range 1601..9999", s)
		}
		return entity.Value{Type: entity.DateTime, Int: ticks}, nil
	case entity.GUID:
		g, err := entity.ParseGUID(s)
		if err != nil {
			return entity.Value{}, fmt.Errorf("%q is not a valid Edm.Guid", s)
		}
		return entity.Value{Type: entity.GUID, Bytes: g}, nil
	case entity.Binary:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return entity.Value{}, fmt.Errorf("%q is not valid base64 for Edm.Binary", s)
		}
		return entity.BinaryValue(b), nil
	}
	return entity.Value{}, fmt.Errorf("unknown type %v", t)
}

// parseType reads a type cell: "Edm.Int64" or "Int64", any case.
func parseType(s string) (entity.Type, bool) {
	if len(s) >= 4 && strings.EqualFold(s[:4], "edm.") {
		s = s[4:]
	}
	for t := entity.String; t <= entity.Binary; t++ {
		if strings.EqualFold(t.EDMName()[4:], s) {
			return t, true
		}
	}
	return 0, false
}

// column is one property of the header: its value column and its type column (-1 when
// the header has none: the values are Strings).
type column struct {
	name     string
	val, typ int
}

// Reader reads Storage Explorer CSV. A row that is not a valid entity gives a
// *record.LineError naming the row's line, after which Read goes on.
type Reader struct {
	cr      *csv.Reader
	cols    []column
	pk, rk  int
	ts      int
	width   int // header cells
	started bool
	// Rows is the number of data rows read.
	Rows int
}

// NewReader reads from r.
func NewReader(r io.Reader) *Reader {
	cr := csv.NewReader(bufio.NewReaderSize(r, 256<<10))
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	return &Reader{cr: cr, pk: -1, rk: -1, ts: -1}
}

func (rd *Reader) header() error {
	h, err := rd.cr.Read()
	if err == io.EOF {
		return io.EOF
	}
	if err != nil {
		return fmt.Errorf("csv header: %w", err)
	}
	h = append([]string(nil), h...)
	if len(h) > 0 {
		h[0] = strings.TrimPrefix(h[0], "\ufeff") // a BOM, as Excel writes
	}
	rd.width = len(h)
	byName := map[string]int{}
	for i, n := range h {
		if _, dup := byName[n]; dup {
			return fmt.Errorf("csv header: column %q twice", n)
		}
		byName[n] = i
	}
	for i, n := range h {
		switch {
		case n == "PartitionKey":
			rd.pk = i
		case n == "RowKey":
			rd.rk = i
		case n == "Timestamp":
			rd.ts = i
		case n == "PartitionKey@type" || n == "RowKey@type" || n == "Timestamp@type":
		case strings.HasSuffix(n, "@type"):
			if _, ok := byName[strings.TrimSuffix(n, "@type")]; !ok {
				return fmt.Errorf("csv header: %q has no column %q", n, strings.TrimSuffix(n, "@type"))
			}
		default:
			if err := entity.ValidatePropertyName(n); err != nil {
				return fmt.Errorf("csv header: column %q: %s", n, record.Detail(err))
			}
			c := column{name: n, val: i, typ: -1}
			if j, ok := byName[n+"@type"]; ok {
				c.typ = j
			}
			rd.cols = append(rd.cols, c)
		}
	}
	if rd.pk < 0 || rd.rk < 0 {
		return errors.New("csv header: needs PartitionKey and RowKey columns")
	}
	return nil
}

// Read returns the next record, io.EOF at the end.
func (rd *Reader) Read() (record.Record, error) {
	if !rd.started {
		rd.started = true
		if err := rd.header(); err != nil {
			return record.Record{}, err
		}
	}
	row, err := rd.cr.Read()
	if err == io.EOF {
		return record.Record{}, io.EOF
	}
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			if pe.Err == csv.ErrFieldCount {
				return record.Record{}, &record.LineError{Line: pe.StartLine, Err: pe.Err}
			}
			// A syntax error leaves the reader where it cannot go on reliably.
			return record.Record{}, fmt.Errorf("csv line %d: %w", pe.Line, pe.Err)
		}
		return record.Record{}, err
	}
	rd.Rows++
	line, _ := rd.cr.FieldPos(0)
	r, err := rd.record(row)
	if err != nil {
		return record.Record{}, &record.LineError{Line: line, Err: err}
	}
	return r, nil
}

func (rd *Reader) record(row []string) (record.Record, error) {
	cell := func(i int) string {
		if i < 0 || i >= len(row) {
			return ""
		}
		return row[i]
	}
	var r record.Record
	if len(row) > rd.width {
		return r, fmt.Errorf("%d cells; the header has %d", len(row), rd.width)
	}
	r.Entity.PartitionKey, r.Entity.RowKey = cell(rd.pk), cell(rd.rk)
	if err := entity.ValidateKey("PartitionKey", r.Entity.PartitionKey); err != nil {
		return r, errors.New(record.Detail(err))
	}
	if err := entity.ValidateKey("RowKey", r.Entity.RowKey); err != nil {
		return r, errors.New(record.Detail(err))
	}
	if ts := cell(rd.ts); ts != "" {
		ticks, err := entity.ParseDateTime(ts)
		if err != nil {
			return r, fmt.Errorf("the Timestamp %q is not a valid Edm.DateTime", ts)
		}
		r.Timestamp, r.HasTimestamp = ticks, true
	}
	for _, c := range rd.cols {
		v, ts := cell(c.val), cell(c.typ)
		if ts == "" {
			if v == "" {
				continue // absent
			}
			r.Entity.Props = append(r.Entity.Props, entity.Property{Name: c.name, Value: entity.StringValue(v)})
			continue
		}
		t, ok := parseType(ts)
		if !ok {
			return r, fmt.Errorf("property %q: unknown type %q", c.name, ts)
		}
		val, err := ParseValue(t, v)
		if err != nil {
			return r, fmt.Errorf("property %q: %w", c.name, err)
		}
		r.Entity.Props = append(r.Entity.Props, entity.Property{Name: c.name, Value: val})
	}
	if err := entity.Validate(&r.Entity); err != nil {
		return r, errors.New(record.Detail(err))
	}
	return r, nil
}
