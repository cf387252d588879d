package csv

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
)

func readAll(t *testing.T, in string) ([]record.Record, []*record.LineError, error) {
	t.Helper()
	rd := NewReader(strings.NewReader(in))
	var recs []record.Record
	var bad []*record.LineError
	for {
		r, err := rd.Read()
		if err == io.EOF {
			return recs, bad, nil
		}
		var le *record.LineError
		if errors.As(err, &le) {
			bad = append(bad, le)
			continue
		}
		if err != nil {
			return recs, bad, err
		}
		recs = append(recs, r)
	}
}

// Storage Explorer's shape reads into exact values: a type per cell ("Edm.Int32" or
// "Int32"), an empty value with Edm.String is an empty string, both cells empty is an
// absent property; quoted cells hold commas, quotes and newlines.
func TestReadExplorerShape(t *testing.T) {
	in, err := os.ReadFile("testdata/explorer.csv")
	if err != nil {
		t.Fatal(err)
	}
	recs, bad, err := readAll(t, string(in))
	if err != nil || len(bad) > 0 || len(recs) != 3 {
		t.Fatalf("records %d, bad %v, err %v", len(recs), bad, err)
	}
	for _, c := range []struct {
		rec  int
		name string
		want entity.Value
	}{
		{0, "Count", entity.Int64Value(math.MaxInt64)},
		{0, "Name", entity.StringValue(`quoted "name", with comma`)},
		{0, "Ratio", entity.DoubleValue(math.NaN())},
		{0, "When", entity.Value{Type: entity.DateTime, Int: 15779342451234567}},
		{0, "Blob", entity.BinaryValue([]byte{0, 1, 2, 255})},
		{0, "On", entity.BoolValue(true)},
		{0, "Small", entity.Int32Value(-5)},
		{1, "Name", entity.StringValue("")},
		{1, "Ratio", entity.DoubleValue(math.Copysign(0, -1))},
		{2, "Name", entity.StringValue("multi\nline")},
		{2, "Small", entity.Int32Value(7)},
	} {
		got, ok := recs[c.rec].Entity.Get(c.name)
		if !ok || !got.Equal(c.want) {
			t.Errorf("row %d %s = %v (present %v), want %v", c.rec, c.name, got, ok, c.want)
		}
	}
	if len(recs[1].Entity.Props) != 2 || recs[1].HasTimestamp {
		t.Errorf("row 2: %+v", recs[1])
	}
	if recs[2].Entity.PartitionKey != "p'1 %ü" {
		t.Errorf("row 3 key %q", recs[2].Entity.PartitionKey)
	}
	if g, _ := recs[0].Entity.Get("Id"); entity.FormatGUID(g.Bytes) != "01234567-89ab-cdef-0123-456789abcdef" {
		t.Errorf("Id %v", g)
	}
}

// Writing gives the header of every property (in first-seen order) and reads back to
// the same records.
func TestWriteReadBack(t *testing.T) {
	in, _ := os.ReadFile("testdata/explorer.csv")
	recs, _, err := readAll(t, string(in))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w, err := NewWriter(&out, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if err := w.Write(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "PartitionKey,RowKey,Timestamp,Count,Count@type,Name,Name@type,Ratio,Ratio@type,") {
		t.Errorf("header: %s", strings.SplitN(out.String(), "\n", 2)[0])
	}
	back, bad, err := readAll(t, out.String())
	if err != nil || len(bad) > 0 || len(back) != len(recs) {
		t.Fatalf("read back: %d, %v, %v\n%s", len(back), bad, err, out.String())
	}
	for i := range recs {
		if !sameRecord(recs[i], back[i]) {
			t.Errorf("row %d: %+v, read back %+v", i, recs[i], back[i])
		}
	}
}

// Bad rows are reported with their line and skipped; a bad header stops reading.
func TestBadRows(t *testing.T) {
	for _, c := range []struct {
		name, in string
		good     int
		bad      []int
		detail   string
		fatal    string
	}{
		{"bad int32", "PartitionKey,RowKey,X,X@type\na,1,1,Edm.Int32\na,2,x,Edm.Int32\n", 1, []int{3}, `"x" is not a valid Edm.Int32`, ""},
		{"int32 overflow", "PartitionKey,RowKey,X,X@type\na,1,2147483648,Edm.Int32\n", 0, []int{2}, "Edm.Int32", ""},
		{"unknown type", "PartitionKey,RowKey,X,X@type\na,1,1,Edm.Decimal\n", 0, []int{2}, "unknown type", ""},
		{"bad datetime", "PartitionKey,RowKey,X,X@type\na,1,yesterday,Edm.DateTime\n", 0, []int{2}, "Edm.DateTime", ""},
		{"bad key", "PartitionKey,RowKey\na/b,1\n", 0, []int{2}, "", ""},
		{"field count", "PartitionKey,RowKey\na,1,extra\n", 0, []int{2}, "", ""},
		{"after a multi-line cell", "PartitionKey,RowKey,S\na,1,\"x\ny\"\na,2,3\n", 2, nil, "", ""},
		{"no keys", "Name\nx\n", 0, nil, "", "PartitionKey and RowKey"},
		{"bad property name", "PartitionKey,RowKey,a b\n", 0, nil, "", "a b"},
		{"type without column", "PartitionKey,RowKey,X@type\n", 0, nil, "", "has no column"},
	} {
		t.Run(c.name, func(t *testing.T) {
			recs, bad, err := readAll(t, c.in)
			if c.fatal != "" {
				if err == nil || !strings.Contains(err.Error(), c.fatal) {
					t.Fatalf("err %v, want %q", err, c.fatal)
				}
				return
			}
			if err != nil || len(recs) != c.good || len(bad) != len(c.bad) {
				t.Fatalf("good %d, bad %v, err %v", len(recs), bad, err)
			}
			for i, le := range bad {
				if le.Line != c.bad[i] || !strings.Contains(le.Error(), c.detail) {
					t.Errorf("bad %v, want line %d with %q", le, c.bad[i], c.detail)
				}
			}
		})
	}
}

// FuzzReader: no input panics the reader, and every record it yields writes and reads
// back the same.
func FuzzReader(f *testing.F) {
	if b, err := os.ReadFile("testdata/explorer.csv"); err == nil {
		f.Add(string(b))
	}
	f.Add("PartitionKey,RowKey,X,X@type\na,1,1.5,Double\n")
	f.Fuzz(func(t *testing.T, in string) {
		recs, _, _ := readAll(t, in)
		if len(recs) == 0 {
			return
		}
		var out bytes.Buffer
		w, err := NewWriter(&out, true)
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			w.Write(&recs[i])
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		back, bad, err := readAll(t, out.String())
		if err != nil || len(bad) > 0 || len(back) != len(recs) {
			t.Fatalf("written CSV reads %d of %d, bad %v, err %v:\n%s", len(back), len(recs), bad, err, out.String())
		}
		for i := range recs {
			if !sameRecord(recs[i], back[i]) {
				t.Fatalf("row %d: %+v became %+v", i, recs[i], back[i])
			}
		}
	})
}

// sameRecord compares records, properties by name (a CSV orders columns by header).
func sameRecord(a, b record.Record) bool {
	if a.HasTimestamp != b.HasTimestamp || a.Timestamp != b.Timestamp || a.Entity.PartitionKey != b.Entity.PartitionKey ||
		a.Entity.RowKey != b.Entity.RowKey || len(a.Entity.Props) != len(b.Entity.Props) {
		return false
	}
	for _, p := range a.Entity.Props {
		v, ok := b.Entity.Get(p.Name)
		if !ok || !v.Equal(p.Value) {
			return false
		}
	}
	return true
}
