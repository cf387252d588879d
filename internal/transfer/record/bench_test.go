package record

import (
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
)

var benchLine = []byte(`{"PartitionKey":"p0001","RowKey":"r000000001","Timestamp@odata.type":"Edm.DateTime","Timestamp":"2026-11-24T19:00:00.1234567Z","N@odata.type":"Edm.Int64","N":"123456789","Pad@odata.type":"Edm.String","Pad":"abcdefghijklmnopqrstuvwxyz0123456789","Ratio@odata.type":"Edm.Double","Ratio":0.25,"When@odata.type":"Edm.DateTime","When":"2024-05-06T07:08:09.0000001Z"}`)

// FromJSON is what export, import and copy spend per entity read.
func BenchmarkFromJSON(b *testing.B) {
	b.SetBytes(int64(len(benchLine)))
	for b.Loop() {
		if _, err := FromJSON(benchLine); err != nil {
			b.Fatal(err)
		}
	}
}

// AppendJSON is what they spend per entity written (a line, or a batch body).
func BenchmarkAppendJSON(b *testing.B) {
	r, err := FromJSON(benchLine)
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	b.SetBytes(int64(len(benchLine)))
	for b.Loop() {
		buf = AppendJSON(buf[:0], &r, JSONOptions{AnnotateAll: true, Timestamp: true})
	}
}

func TestAppendJSONForms(t *testing.T) {
	r := Record{Table: "t", Entity: entity.Entity{PartitionKey: "a", RowKey: "b", Props: []entity.Property{
		{Name: "S", Value: entity.StringValue("x\u2028\x01")}, {Name: "I", Value: entity.Int32Value(1)}, {Name: "D", Value: entity.DoubleValue(2)},
	}}, Timestamp: 0, HasTimestamp: true}
	for _, c := range []struct {
		o    JSONOptions
		want string
	}{
		{JSONOptions{}, `{"PartitionKey":"a","RowKey":"b","S":"x\u2028\u0001","I":1,"D@odata.type":"Edm.Double","D":2.0}`},
		{JSONOptions{AnnotateAll: true, Table: true, Timestamp: true}, `{"odata.table":"t","PartitionKey":"a","RowKey":"b","Timestamp@odata.type":"Edm.DateTime","Timestamp":"1970-01-01T00:00:00.0000000Z","S@odata.type":"Edm.String","S":"x\u2028\u0001","I@odata.type":"Edm.Int32","I":1,"D@odata.type":"Edm.Double","D":2.0}`},
	} {
		if got := string(AppendJSON(nil, &r, c.o)); got != c.want {
			t.Errorf("%+v:\n got  %s\n want %s", c.o, got, c.want)
		}
	}
}
