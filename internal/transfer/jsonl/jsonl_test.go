package jsonl

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
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
	f.Add(`{"odata.table":"t","odata.settings":{"Elastic":true,"DefaultTimeToLive":-1,"TimeToLiveProperty":"L"}}`)
	f.Add(`{"PartitionKey":"a","RowKey":"b","odata.expiry":"2030-01-02T03:04:05.0000000Z","TTLInSeconds":5}`)
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
			if r.Settings != nil {
				line := record.AppendSettings(nil, &r, true)
				back, err := record.SettingsFromJSON(line)
				if err != nil || back.Table != r.Table || !reflect.DeepEqual(*back.Settings, normal(*r.Settings)) {
					t.Fatalf("settings line %s reads back as %+v, %v; want %+v", line, back, err, r)
				}
				continue
			}
			line := record.AppendJSON(nil, &r, record.JSONOptions{AnnotateAll: true, Table: true, Timestamp: true, Expiry: true})
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
	if a.Table != b.Table || a.HasTimestamp != b.HasTimestamp || a.Timestamp != b.Timestamp || a.Expiry != b.Expiry ||
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

// normal is a settings value as AppendSettings writes it: a standard table has nothing
// but Elastic.
func normal(s client.TableSettings) client.TableSettings {
	if !s.Elastic {
		return client.TableSettings{}
	}
	return s
}

// A table's settings are a line of their own, read back as a settings record; an
// entity's expiry is its "odata.expiry" member, read back exactly; a settings line with
// an unknown member or TTL on a standard table is a bad line.
func TestSettingsAndExpiry(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, true, false)
	exp := entity.TimeToTicks(time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC))
	for _, r := range []record.Record{
		{Table: "ev", Settings: &client.TableSettings{Elastic: true, DefaultTimeToLive: 60, TimeToLiveProperty: "TTLInSeconds"}},
		{Table: "ev", Entity: entity.Entity{PartitionKey: "p", RowKey: "r", Props: []entity.Property{{Name: "TTLInSeconds", Value: entity.Int32Value(5)}}}, Expiry: exp},
		{Table: "std", Settings: &client.TableSettings{}},
		{Table: "std", Entity: entity.Entity{PartitionKey: "p", RowKey: "odata.settings"}},
	} {
		if err := w.Write(&r); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	want := `{"odata.table":"ev","odata.settings":{"Elastic":true,"DefaultTimeToLive":60,"TimeToLiveProperty":"TTLInSeconds"}}
{"odata.table":"ev","PartitionKey":"p","RowKey":"r","odata.expiry":"2030-01-02T03:04:05.0000006Z","TTLInSeconds@odata.type":"Edm.Int32","TTLInSeconds":5}
{"odata.table":"std","odata.settings":{"Elastic":false}}
{"odata.table":"std","PartitionKey":"p","RowKey":"odata.settings"}
`
	if buf.String() != want {
		t.Fatalf("written:\n%s\nwant:\n%s", buf.String(), want)
	}
	recs, bad := readAll(t, buf.String()+`{"odata.settings":{"Elastic":true,"Default":1}}`+"\n"+`{"odata.settings":{"DefaultTimeToLive":5}}`+"\n")
	if len(recs) != 4 || len(bad) != 2 {
		t.Fatalf("%d records, bad lines %v", len(recs), bad)
	}
	if s := recs[0].Settings; s == nil || recs[0].Table != "ev" || s.DefaultTimeToLive != 60 || !s.Elastic {
		t.Errorf("settings record %+v", recs[0])
	}
	if recs[1].Settings != nil || recs[1].Expiry != exp {
		t.Errorf("entity record %+v, want expiry %d", recs[1], exp)
	}
	if recs[2].Settings == nil || recs[2].Settings.Elastic || recs[3].Settings != nil || recs[3].Entity.RowKey != "odata.settings" {
		t.Errorf("records %+v, %+v", recs[2], recs[3])
	}
}
