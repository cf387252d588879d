package azurite

import (
	"io"
	"math"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
)

// testdata/azurite-3.37.0.json is the database Azurite 3.37.0 wrote for entities the Go
// SDK inserted: each comes back with its type, its Timestamp, a Guid from Azurite's
// base64-of-text form, and its keys as stored — p”1%ü, as aztables.EDMEntity sent the
// key p'1%ü (it doubles quotes in the body) and as Azurite answers it to every client.
func TestReadAzuriteDatabase(t *testing.T) {
	db, err := Open("testdata/azurite-3.37.0.json")
	if err != nil {
		t.Fatal(err)
	}
	if a := db.Accounts(); len(a) != 1 || a[0] != "devstoreaccount1" {
		t.Fatalf("accounts %v", a)
	}
	r, err := db.Reader("devstoreaccount1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Total() != 10 {
		t.Errorf("Total %d", r.Total())
	}
	got := map[string]entity.Entity{}
	var order []string
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Table != "Types" || !rec.HasTimestamp {
			t.Errorf("record %+v: table or Timestamp missing", rec)
		}
		got[rec.Entity.PartitionKey+"/"+rec.Entity.RowKey] = rec.Entity
		order = append(order, rec.Entity.PartitionKey+"/"+rec.Entity.RowKey)
	}
	if strings.Join(order, " ") != "p/B p/Bin p/D p/G p/I32 p/I64 p/S p/T p''1%ü/x q/x" {
		t.Errorf("order %v", order)
	}
	g, _ := entity.ParseGUID("01234567-89ab-cdef-0123-456789abcdef")
	for _, c := range []struct {
		key, prop string
		want      entity.Value
	}{
		{"p/B", "B", entity.BoolValue(true)},
		{"p/Bin", "Bin", entity.BinaryValue([]byte{0, 1, 2, 255})},
		{"p/D", "D", entity.Int32Value(1)}, // the Go SDK sent 1.0 as 1, unannotated
		{"p/G", "G", entity.Value{Type: entity.GUID, Bytes: g}},
		{"p/I32", "I32", entity.Int32Value(-5)},
		{"p/I64", "I64", entity.Int64Value(math.MaxInt64)},
		{"p/S", "S", entity.StringValue("")},
		{"p/T", "T", entity.Value{Type: entity.DateTime, Int: 15779342451234567}},
	} {
		e, ok := got[c.key]
		v, has := e.Get(c.prop)
		if !ok || !has || !v.Equal(c.want) {
			t.Errorf("%s %s = %v (entity %v, property %v), want %v", c.key, c.prop, v, ok, has, c.want)
		}
	}
	if _, ok := got["p''1%ü/x"]; !ok {
		t.Error("the quoted key was not kept as stored")
	}
	if _, err := db.Reader("other"); err == nil || !strings.Contains(err.Error(), "devstoreaccount1") {
		t.Errorf("unknown account: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ name, doc, err string }{
		{"not json", "{", "not a LokiJS database"},
		{"no tables collection", `{"collections":[{"name":"x","data":[]}]}`, "$TABLES_COLLECTION$"},
		{"table entry without account", `{"collections":[{"name":"$TABLES_COLLECTION$","data":[{"table":"t"}]}]}`, "no account"},
	} {
		if _, err := Parse(c.name, []byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		}
	}
	for _, c := range []struct{ name, doc, err string }{
		{"no properties", `{"PartitionKey":"a","RowKey":"b"}`, "no PartitionKey, RowKey or properties"},
		{"bad value", `{"PartitionKey":"a","RowKey":"b","properties":{"PartitionKey":"a","RowKey":"b","N@odata.type":"Edm.Int64","N":"x"}}`, `PartitionKey "a", RowKey "b"`},
		{"nested", `{"PartitionKey":"a","RowKey":"b","properties":{"PartitionKey":"a","RowKey":"b","N":{"x":1}}}`, `RowKey "b"`},
	} {
		if _, err := Entity([]byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		}
	}
}

// FuzzEntity: no entity document panics the converter.
func FuzzEntity(f *testing.F) {
	f.Add(`{"PartitionKey":"p''1","RowKey":"x","properties":{"PartitionKey":"p''1","RowKey":"x","G@odata.type":"Edm.Guid","G":"MDEyMzQ1NjctODlhYi1jZGVmLTAxMjMtNDU2Nzg5YWJjZGVm"}}`)
	f.Fuzz(func(t *testing.T, doc string) {
		_, _ = Entity([]byte(doc))
	})
}

// Azurite 3.20.1 keeps keys and Guids as written.
func TestReadAzurite320(t *testing.T) {
	db, err := Open("testdata/azurite-3.20.1.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := db.Reader("devstoreaccount1")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	g, _ := rec.Entity.Get("G")
	if rec.Table != "Old" || rec.Entity.PartitionKey != "p'1" || entity.FormatGUID(g.Bytes) != "01234567-89ab-cdef-0123-456789abcdef" {
		t.Errorf("record %+v", rec)
	}
	if _, err := r.Read(); err != io.EOF {
		t.Errorf("second Read: %v", err)
	}
}

// Keys are kept as stored whatever quotes they hold: a database in which no key has an
// odd run of quotes (Azurite 3.35.0 and 3.37.0 store keys as their client wrote them,
// doubled quotes included) imports with every key unchanged — the guess that undid
// doubled quotes changed such keys silently (issue 42).
func TestKeysKeptAsStored(t *testing.T) {
	doc := `{"collections":[{"name":"$TABLES_COLLECTION$","data":[{"account":"a","table":"t"}]},{"name":"a$t","data":[` +
		`{"PartitionKey":"it''s","RowKey":"''","properties":{"PartitionKey":"it''s","RowKey":"''"}},` +
		`{"PartitionKey":"x","RowKey":"a''b''''c","properties":{"PartitionKey":"x","RowKey":"a''b''''c"}}]}]}`
	db, err := Parse("doc", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	r, err := db.Reader("a")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, rec.Entity.PartitionKey+"/"+rec.Entity.RowKey)
	}
	if got, want := strings.Join(keys, " "), "it''s/'' x/a''b''''c"; got != want {
		t.Errorf("keys %s, want them as stored: %s", got, want)
	}
}
