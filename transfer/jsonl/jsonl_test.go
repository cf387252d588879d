package jsonl

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/entity"
	"github.com/ceruleandb/cerulean/transfer/record"
)

// readAll reads every record, collecting line errors.
func readAll(t *testing.T, in string) ([]record.Record, []*record.LineError) {
	t.Helper()
	rd := NewReader(strings.NewReader(in))
	var recs []record.Record
	var bad []*record.LineError
	for {
		r, err := rd.Read()
		if err == io.EOF {
			return recs, bad
		}
		var le *record.LineError
		if errors.As(err, &le) {
			bad = append(bad, le)
			continue
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		recs = append(recs, r)
	}
}

// The testdata file reads into exactly the values it names, and writing them again
// gives the same bytes: the format's round trip is exact.
func TestRoundTripTestdata(t *testing.T) {
	in, err := os.ReadFile("testdata/edge.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	recs, bad := readAll(t, string(in))
	if len(bad) > 0 || len(recs) != 4 {
		t.Fatalf("%d records, bad %v", len(recs), bad)
	}
	checks := []struct {
		rec  int
		name string
		want entity.Value
	}{
		{0, "I64", entity.Int64Value(math.MaxInt64)},
		{0, "I64min", entity.Int64Value(math.MinInt64)},
		{0, "I32", entity.Int32Value(math.MinInt32)},
		{1, "Dnan", entity.DoubleValue(math.NaN())},
		{1, "Dinf", entity.DoubleValue(math.Inf(1))},
		{1, "Dninf", entity.DoubleValue(math.Inf(-1))},
		{1, "Dz", entity.DoubleValue(math.Copysign(0, -1))},
		{1, "Done", entity.DoubleValue(1)},
		{1, "Dtiny", entity.DoubleValue(5e-324)},
		{2, "T", entity.Value{Type: entity.DateTime, Int: entity.MinDateTime}},
		{2, "T2", entity.Value{Type: entity.DateTime, Int: entity.MaxDateTime}},
		{2, "S", entity.StringValue("")},
		{2, "S2", entity.StringValue("line\nbreak\u2028sep")},
		{2, "B", entity.BoolValue(false)},
		{3, "Bin", entity.BinaryValue([]byte{0, 1, 2, 255})},
		{3, "E", entity.BinaryValue([]byte{})},
	}
	for _, c := range checks {
		got, ok := recs[c.rec].Entity.Get(c.name)
		if !ok || !got.Equal(c.want) {
			t.Errorf("record %d %s = %v (present %v), want %v", c.rec, c.name, got, ok, c.want)
		}
	}
	if r := recs[2]; r.Entity.PartitionKey != "üñí 😀" || r.Entity.RowKey != `a"b\c` {
		t.Errorf("keys %q %q", r.Entity.PartitionKey, r.Entity.RowKey)
	}
	if !recs[0].HasTimestamp || entity.FormatTicks(recs[0].Timestamp) != "2026-11-24T19:00:00.1234567Z" || recs[1].HasTimestamp {
		t.Errorf("timestamps: %+v %+v", recs[0], recs[1])
	}
	if recs[3].Table != "other" || recs[0].Table != "" {
		t.Errorf("tables %q %q", recs[3].Table, recs[0].Table)
	}
	var out bytes.Buffer
	w := NewWriter(&out, true, true)
	for i := range recs {
		if err := w.Write(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if !bytes.Equal(out.Bytes(), in) {
		t.Errorf("written again:\n%s\nwant:\n%s", out.Bytes(), in)
	}
}

// Bad lines are reported with their numbers, and reading goes on after them; blank
// lines count as lines but yield nothing.
func TestBadLines(t *testing.T) {
	for _, c := range []struct {
		name, in  string
		good      int
		badLines  []int
		badDetail string
	}{
		{"syntax", "{\"PartitionKey\":\"a\",\"RowKey\":\"1\"}\n{\"PartitionKey\":\n", 1, []int{2}, ""},
		{"no RowKey", "\n\n{\"PartitionKey\":\"a\"}\n", 0, []int{3}, "RowKey"},
		{"bad Int64", `{"PartitionKey":"a","RowKey":"1","N@odata.type":"Edm.Int64","N":"1.5"}`, 0, []int{1}, "Edm.Int64"},
		{"int32 overflow", `{"PartitionKey":"a","RowKey":"1","N@odata.type":"Edm.Int32","N":2147483648}`, 0, []int{1}, ""},
		{"unknown type", `{"PartitionKey":"a","RowKey":"1","N@odata.type":"Edm.Decimal","N":"1"}`, 0, []int{1}, ""},
		{"nested", `{"PartitionKey":"a","RowKey":"1","N":{"x":1}}`, 0, []int{1}, ""},
		{"table not a string", `{"odata.table":1,"PartitionKey":"a","RowKey":"1"}`, 0, []int{1}, ""},
		{"crlf and trailing line", "{\"PartitionKey\":\"a\",\"RowKey\":\"1\"}\r\n{\"PartitionKey\":\"a\",\"RowKey\":\"2\"}", 2, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			recs, bad := readAll(t, c.in)
			if len(recs) != c.good || len(bad) != len(c.badLines) {
				t.Fatalf("%d good, bad %v", len(recs), bad)
			}
			for i, le := range bad {
				if le.Line != c.badLines[i] || !strings.Contains(le.Error(), c.badDetail) {
					t.Errorf("bad line %v, want line %d with %q", le, c.badLines[i], c.badDetail)
				}
			}
		})
	}
}

// A line over MaxLine is one bad line; the next line reads.
func TestLongLine(t *testing.T) {
	in := `{"PartitionKey":"a","RowKey":"1","S":"` + strings.Repeat("x", MaxLine) + "\"}\n" + `{"PartitionKey":"a","RowKey":"2"}` + "\n"
	recs, bad := readAll(t, in)
	if len(recs) != 1 || len(bad) != 1 || bad[0].Line != 1 || recs[0].Entity.RowKey != "2" {
		t.Fatalf("records %d, bad %v", len(recs), bad)
	}
}

// FuzzReader: any input reads without panicking, and every record read writes back to a
// line that reads into the same record.
func FuzzReader(f *testing.F) {
	if b, err := os.ReadFile("testdata/edge.jsonl"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			f.Add(l)
		}
	}
	f.Add(`{"PartitionKey":"a","RowKey":"b","X":1.5e300}`)
	f.Fuzz(func(t *testing.T, in string) {
		rd := NewReader(strings.NewReader(in))
		for {
			r, err := rd.Read()
			if err == io.EOF {
				return
			}
			if err != nil {
				continue
			}
			line := record.AppendJSON(nil, &r, record.JSONOptions{AnnotateAll: true, Table: true, Timestamp: true})
			back, err := record.FromJSON(line)
			if err != nil {
				t.Fatalf("written line %s does not read: %v", line, err)
			}
			if !sameRecord(r, back) {
				t.Fatalf("round trip changed %+v into %+v", r, back)
			}
		}
	})
}

func sameRecord(a, b record.Record) bool {
	if a.Table != b.Table || a.HasTimestamp != b.HasTimestamp || a.Timestamp != b.Timestamp ||
		a.Entity.PartitionKey != b.Entity.PartitionKey || a.Entity.RowKey != b.Entity.RowKey || len(a.Entity.Props) != len(b.Entity.Props) {
		return false
	}
	for i := range a.Entity.Props {
		if a.Entity.Props[i].Name != b.Entity.Props[i].Name || !a.Entity.Props[i].Value.Equal(b.Entity.Props[i].Value) {
			return false
		}
	}
	return true
}
