package edmjson

import (
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// benchEntity is a typical ~1 KiB entity: every EDM type, mostly strings.
func benchEntity() entity.Entity {
	g, _ := entity.ParseGUID("c9da6455-213d-42c9-9a79-3e9149a57833")
	created, _ := entity.ParseDateTime("2024-05-01T10:00:00.1234567Z")
	data := make([]byte, 48)
	for i := range data {
		data[i] = byte(i * 7)
	}
	return entity.Entity{
		PartitionKey: "customer-000042",
		RowKey:       "order-2024-05-01-000017",
		Props: []entity.Property{
			{Name: "Name", Value: entity.StringValue("Jane Q. Public")},
			{Name: "Email", Value: entity.StringValue("jane.public@example.com")},
			{Name: "Description", Value: entity.StringValue(strings.Repeat("Lorem ipsum dolor sit amet, consectetur. ", 10))},
			{Name: "Address", Value: entity.StringValue("1234 Some Street, Apt. 5, Springfield")},
			{Name: "Country", Value: entity.StringValue("Zürich, Schweiz")},
			{Name: "Age", Value: entity.Int32Value(42)},
			{Name: "Quantity", Value: entity.Int32Value(17)},
			{Name: "Active", Value: entity.BoolValue(true)},
			{Name: "Score", Value: entity.DoubleValue(98.25)},
			{Name: "Total", Value: entity.DoubleValue(1500)},
			{Name: "Counter", Value: entity.Int64Value(9007199254740993)},
			{Name: "Created", Value: entity.Value{Type: entity.DateTime, Int: created}},
			{Name: "Updated", Value: entity.Value{Type: entity.DateTime, Int: created + 123456789}},
			{Name: "Id", Value: entity.Value{Type: entity.GUID, Bytes: g}},
			{Name: "Blob", Value: entity.BinaryValue(data)},
		},
	}
}

// benchBody is what a .NET-style client sends for benchEntity (annotations first).
func benchBody() []byte {
	e := benchEntity()
	b := AppendEntity(nil, &e, 0, EntityOptions{Level: MinimalMetadata})
	// Drop odata.etag and Timestamp as .NET does; the decoder ignores them anyway.
	s := string(b)
	s = s[:1] + s[strings.Index(s, `"PartitionKey"`):]
	i := strings.Index(s, `,"Timestamp"`)
	j := strings.Index(s, `,"Name"`)
	return []byte(s[:i] + s[j:])
}

func BenchmarkDecodeEntity(b *testing.B) {
	body := benchBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeEntity(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeEntityGoStyle(b *testing.B) {
	// Annotations after values, as encoding/json's sorted map output has them.
	body := []byte(`{"Active":true,"Address":"1234 Some Street, Apt. 5, Springfield","Age":42,"Blob":"AAcOFRwjKjE4P0ZNVFtiaXB3foWMk5qhqK+2vcTL0tnf5u30+wIJEBceJSwzOkFITw==","Blob@odata.type":"Edm.Binary","Counter":"9007199254740993","Counter@odata.type":"Edm.Int64","Country":"Zürich, Schweiz","Created":"2024-05-01T10:00:00.1234567Z","Created@odata.type":"Edm.DateTime","Description":"` +
		strings.Repeat("Lorem ipsum dolor sit amet, consectetur. ", 10) + `","Email":"jane.public@example.com","Id":"c9da6455-213d-42c9-9a79-3e9149a57833","Id@odata.type":"Edm.Guid","Name":"Jane Q. Public","PartitionKey":"customer-000042","Quantity":17,"RowKey":"order-2024-05-01-000017","Score":98.25,"Total":1500,"Updated":"2024-05-01T10:00:12.4691356Z","Updated@odata.type":"Edm.DateTime"}`)
	if _, _, err := DecodeEntity(body); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeEntity(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendEntity(b *testing.B) {
	e := benchEntity()
	ver, _ := entity.ParseDateTime("2024-05-01T10:00:01.0000001Z")
	for _, l := range []Level{MinimalMetadata, NoMetadata, FullMetadata} {
		b.Run(l.String(), func(b *testing.B) {
			o := EntityOptions{Level: l, ServiceRoot: "http://127.0.0.1:10002/devstoreaccount1", Account: "devstoreaccount1", Table: "orders"}
			buf := AppendEntity(nil, &e, ver, o)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendEntity(buf[:0], &e, ver, o)
			}
		})
	}
}

func BenchmarkDecodeEntity1MiB(b *testing.B) {
	body := []byte(`{"PartitionKey":"p","RowKey":"r","s":"` + strings.Repeat("abcdefgh", 1<<17) + `"}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeEntity(body); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBenchBodySize(t *testing.T) {
	body := benchBody()
	if len(body) < 900 || len(body) > 1300 {
		t.Fatalf("bench body is %d bytes", len(body))
	}
	e, keys, err := DecodeEntity(body)
	want := benchEntity()
	if err != nil || !keys.Complete() || !entityEqual(&e, &want) {
		t.Fatalf("%v %s", err, body)
	}
}

// BenchmarkDecodeTooManyProperties: a 3 MB body of 300,000 properties is refused after
// the 253rd, so its cost does not grow with the body.
func BenchmarkDecodeTooManyProperties(b *testing.B) {
	body := compactProps(300_000)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := DecodeEntity(body); err == nil {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkDecodeManyNulls: members that do not count as properties (here null values)
// are not limited by number, only by the body size; they cost linear time and no
// allocation per member.
func BenchmarkDecodeManyNulls(b *testing.B) {
	body := []byte(manyMembers(400_000, `"n%d":null`))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeEntity(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendRecordStored writes benchEntity from its stored form, as a query page
// does (AppendRecord over storage.Record.Encoded); BenchmarkAppendRecordDecoded from
// decoded properties, as before the stored form was kept.
func BenchmarkAppendRecordStored(b *testing.B) {
	e := benchEntity()
	rec := storage.Record{Entity: entity.Entity{PartitionKey: e.PartitionKey, RowKey: e.RowKey}, Version: 638_000_000_000_000_000, Encoded: entity.AppendProps(nil, e.Props)}
	benchAppendRecord(b, &rec)
}

func BenchmarkAppendRecordDecoded(b *testing.B) {
	e := benchEntity()
	enc := entity.AppendProps(nil, e.Props)
	rec := storage.Record{Entity: e, Version: 638_000_000_000_000_000}
	o := EntityOptions{Level: MinimalMetadata}
	buf := AppendRecord(nil, &rec, o)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		props, err := entity.DecodeProps(enc) // what the scan did per record
		if err != nil {
			b.Fatal(err)
		}
		rec.Entity.Props = props
		buf = AppendRecord(buf[:0], &rec, o)
	}
}

func benchAppendRecord(b *testing.B, rec *storage.Record) {
	o := EntityOptions{Level: MinimalMetadata}
	buf := AppendRecord(nil, rec, o)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendRecord(buf[:0], rec, o)
	}
}

// BenchmarkDecodeEntityBench decodes the entity `cerulean bench` writes: a 1 KiB string
// payload among six small typed properties, as its 100-entity batches carry them.
func BenchmarkDecodeEntityBench(b *testing.B) {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = alnum[(i*7919)%len(alnum)]
	}
	body := []byte(`{"PartitionKey":"bb0007","RowKey":"r1abc-0-5-123456","Payload":"` + string(payload) +
		`","Worker":5,"Seq@odata.type":"Edm.Int64","Seq":"123456","Ratio@odata.type":"Edm.Double","Ratio":0.4565,` +
		`"Flag":true,"Created@odata.type":"Edm.DateTime","Created":"2026-11-28T11:00:00.1234567Z"}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeEntity(body); err != nil {
			b.Fatal(err)
		}
	}
}
