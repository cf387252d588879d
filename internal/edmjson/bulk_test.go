package edmjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

func TestDecodeBulk(t *testing.T) {
	body := "\xEF\xBB\xBF" + ` { "operations" : [
		{"op":"insert","entity":{"PartitionKey":"p","RowKey":"r","N@odata.type":"Edm.Int64","N":"5","S":"a}\"]"}},
		{"entity":{"PartitionKey":"p","RowKey":"s"},"ifMatch":"W/\"datetime'x'\"","op":"update"},
		{"op":"delete","entity":{"PartitionKey":"p","RowKey":"t"},"ifMatch":null},
		{"op":"insert","entity":{"PartitionKey":"p","RowKey":"u","X@odata.type":"Edm.Int32","X":"x"}},
		{"op":"insert","entity":{"PartitionKey":"p","Nested":{"a":[1,{"b":"}"}]}}},
		{"op":"any\u0021","entity":{}}
	] } `
	ops, err := DecodeBulk([]byte(body), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 6 {
		t.Fatalf("%d operations", len(ops))
	}
	if o := ops[0]; o.Op != "insert" || o.EntityErr != nil || o.Entity.RowKey != "r" || len(o.Entity.Props) != 2 || o.Entity.Props[1].Value.Str != `a}"]` || !o.Keys.Complete() || o.HasIfMatch {
		t.Errorf("op 0: %+v", o)
	}
	if o := ops[1]; o.Op != "update" || !o.HasIfMatch || o.IfMatch != `W/"datetime'x'"` || o.Entity.RowKey != "s" {
		t.Errorf("op 1: %+v", o)
	}
	if o := ops[2]; o.HasIfMatch || o.Entity.RowKey != "t" {
		t.Errorf("op 2: %+v", o)
	}
	if o := ops[3]; o.EntityErr == nil || !strings.Contains(o.EntityErr.Error(), "Int32") {
		t.Errorf("op 3: %+v", o)
	}
	if o := ops[4]; o.EntityErr == nil || !strings.Contains(o.EntityErr.Error(), "nested") {
		t.Errorf("op 4: %+v", o)
	}
	if o := ops[5]; o.Op != "any!" || o.EntityErr != nil || o.Keys.PartitionKey {
		t.Errorf("op 5: %+v", o)
	}
	if ops, err := DecodeBulk([]byte(`{"operations":[]}`), 10); err != nil || len(ops) != 0 {
		t.Errorf("empty: %v %v", ops, err)
	}
}

func TestDecodeBulkRefused(t *testing.T) {
	for _, c := range bulkRefusedCases(`{"op":"insert","entity":{"PartitionKey":"p","RowKey":"r"}}`) {
		_, err := DecodeBulk([]byte(c.body), 3)
		var ae *azerr.Error
		if !errors.As(err, &ae) || ae.Code != azerr.InvalidInput || !strings.Contains(ae.Error(), c.want) {
			t.Errorf("%s: %v, want InvalidInput with %q", c.body, err, c.want)
		}
	}
}

// bulkRefusedCases are documents refused whole, with what their error says, for at
// most 3 operations.
func bulkRefusedCases(good string) []struct{ body, want string } {
	return []struct{ body, want string }{
		{``, "empty"},
		{`  `, "empty"},
		{`[]`, "expected a JSON object"},
		{`{}`, `no "operations"`},
		{`{"operations":null}`, "must be an array"},
		{`{"operations":{}}`, "must be an array"},
		{`{"operations":[],"operations":[]}`, "twice"},
		{`{"operations":[],"x":1}`, `unknown member "x"`},
		{`{"operations":[]`, "expected"},
		{`{"operations":[]} x`, "data after"},
		{`{"operations":[` + good + `,]}`, "operation 1"},
		{`{"operations":[` + good + ` ` + good + `]}`, "expected ',' or ']'"},
		{`{"operations":[1]}`, "operation 0: malformed JSON at offset 15: an operation must be a JSON object"},
		{`{"operations":[{"entity":{}}]}`, `operation 0: no "op"`},
		{`{"operations":[{"op":"insert"}]}`, `operation 0: no "entity"`},
		{`{"operations":[{"op":1,"entity":{}}]}`, `"op" must be a string`},
		{`{"operations":[{"op":"a","op":"b","entity":{}}]}`, `"op" appears twice`},
		{`{"operations":[{"op":"a","entity":{},"entity":{}}]}`, `"entity" appears twice`},
		{`{"operations":[{"op":"a","entity":"x"}]}`, `"entity" must be a JSON object`},
		{`{"operations":[{"op":"a","entity":null}]}`, `"entity" must be a JSON object`},
		{`{"operations":[{"op":"a","entity":{},"ifMatch":5}]}`, `"ifMatch" must be a string`},
		{`{"operations":[{"op":"a","entity":{},"etag":"*"}]}`, `unknown member "etag"`},
		{`{"operations":[{"op":"a","entity":{"PartitionKey":"p}]}`, "unterminated string"},
		{`{"operations":[{"op":"a","entity":{"A":tru}}]}`, "expected a value"},
		{`{"operations":[{"op":"a","entity":{"A":1.}}]}`, "bad number"},
		{`{"operations":[{"op":"a","entity":{"A" 1}}]}`, "expected ':'"},
		{`{"operations":[{"op":"a","entity":{"A":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}}]}`, "nested too deeply"},
		{`{"operations":[` + strings.Repeat(good+",", 3) + good + `]}`, "more than 3 operations"},
	}
}

// TestScanBulkKeys: ScanBulk finds each entity's span, its members and its keys as
// DecodeEntity reads them — escaped names and values, annotations — and no key where
// the entity can only fail (null, a number, a string DecodeEntity refuses).
func TestScanBulkKeys(t *testing.T) {
	body := `{"operations":[
		{"op":"insert","entity":{"PartitionKey":"p","RowKey":"r","A":1}},
		{"op":"insert","entity":{"Partition\u004bey":"p\u0031","RowKey@odata.type":"Edm.String","RowKey":"r"}},
		{"op":"insert","entity":{"PartitionKey":null,"RowKey":5}},
		{"op":"insert","entity":{"PartitionKey":"bad \q","RowKey":"` + "\xff" + `"}},
		{"op":"insert","entity":{"A":{"PartitionKey":"nested"},"PartitionKey":"x","PartitionKey":"y"}},
		{"op":"delete","entity":{}}
	]}`
	type want struct {
		pk, rk   string
		hasPK    bool
		hasRK    bool
		members  int
		decodeOK bool
	}
	wants := []want{
		{"p", "r", true, true, 3, true},
		{"p1", "r", true, true, 3, true},
		{"", "", false, false, 2, false},
		{"", "", false, false, 2, false},
		{"x", "", true, false, 3, false},
		{"", "", false, false, 0, true},
	}
	n := 0
	err := ScanBulk([]byte(body), 10, func(e *BulkEntry) error {
		w := wants[n]
		if e.HasPartitionKey != w.hasPK || string(e.PartitionKey) != w.pk || e.HasRowKey != w.hasRK || string(e.RowKey) != w.rk || e.Members != w.members {
			t.Errorf("operation %d: %+v, want %+v", n, e, w)
		}
		if _, _, err := DecodeEntity([]byte(body[e.Start:e.End])); (err == nil) != w.decodeOK {
			t.Errorf("operation %d: entity %s decodes with %v", n, body[e.Start:e.End], err)
		}
		n++
		return nil
	})
	if err != nil || n != len(wants) {
		t.Fatalf("%d operations, %v", n, err)
	}
}

// FuzzDecodeBulk: DecodeBulk never panics, fails only with a 400 *azerr.Error, accepts
// only valid JSON, and decodes each entity exactly as DecodeEntity decodes its span; the
// keys ScanBulk notes are those of every entity that decodes.
func FuzzDecodeBulk(f *testing.F) {
	f.Add([]byte(`{"operations":[{"op":"insert","entity":{"PartitionKey":"p","RowKey":"r","N":1.5}},{"op":"delete","entity":{"PartitionKey":"p","RowKey":"s"},"ifMatch":"*"}]}`))
	f.Add([]byte(`{"operations":[{"op":"x","entity":{"a":{"b":[1,"\"}"]}}}]}`))
	f.Add([]byte(`{"operations":[]}`))
	f.Add([]byte(`{"operations":[{"op":"x","entity":{"Partition\u004bey":"p\u00e9","RowKey":null,"PartitionKey@odata.type":"Edm.String"}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var entries []BulkEntry
		scanErr := ScanBulk(body, 100, func(e *BulkEntry) error {
			entries = append(entries, *e)
			return nil
		})
		ops, err := DecodeBulk(body, 100)
		if (err == nil) != (scanErr == nil) || err == nil && len(entries) != len(ops) {
			t.Fatalf("DecodeBulk %v, ScanBulk %v", err, scanErr)
		}
		for i := range ops {
			e, o := &entries[i], &ops[i]
			if o.EntityErr != nil {
				continue
			}
			if e.HasPartitionKey != o.Keys.PartitionKey || string(e.PartitionKey) != o.Entity.PartitionKey ||
				e.HasRowKey != o.Keys.RowKey || string(e.RowKey) != o.Entity.RowKey || e.Members < len(o.Entity.Props) {
				t.Fatalf("operation %d: ScanBulk %+v, DecodeEntity %+v %+v", i, e, o.Entity, o.Keys)
			}
		}
		if err != nil {
			var ae *azerr.Error
			if !errors.As(err, &ae) || ae.Status != 400 {
				t.Fatalf("error %v is not a 400 *azerr.Error", err)
			}
			return
		}
		if !json.Valid(bytes.TrimPrefix(body, []byte("\xEF\xBB\xBF"))) {
			// Strings are skipped, not checked, inside entities: an entity's bad string is
			// the entity's error, and the document otherwise well formed.
			for _, o := range ops {
				if o.EntityErr != nil {
					return
				}
			}
			t.Fatalf("accepted invalid JSON %q", body)
		}
		var doc struct {
			Operations []struct {
				Entity json.RawMessage `json:"entity"`
			} `json:"operations"`
		}
		if err := json.Unmarshal(bytes.TrimPrefix(body, []byte("\xEF\xBB\xBF")), &doc); err != nil || len(doc.Operations) != len(ops) {
			t.Fatalf("encoding/json reads %d operations (%v), DecodeBulk %d", len(doc.Operations), err, len(ops))
		}
		for i, o := range ops {
			e, keys, err := DecodeEntity(doc.Operations[i].Entity)
			if (err == nil) != (o.EntityErr == nil) || err == nil && (!entityEqual(&e, &o.Entity) || keys != o.Keys) {
				t.Fatalf("operation %d: DecodeBulk %+v %v, DecodeEntity %+v %v", i, o.Entity, o.EntityErr, e, err)
			}
		}
	})
}

// scanRecord is what a scan reports: every entry, then the error.
func scanRecord(scan func(each func(*BulkEntry) error) error) string {
	var b strings.Builder
	err := scan(func(e *BulkEntry) error {
		fmt.Fprintf(&b, "%q %q %v %d-%d %q %v %q %v %d\n", e.Op, e.IfMatch, e.HasIfMatch, e.Start, e.End,
			e.PartitionKey, e.HasPartitionKey, e.RowKey, e.HasRowKey, e.Members)
		return nil
	})
	fmt.Fprintf(&b, "error %v", err)
	return b.String()
}

// chunked splits body into chunks of n bytes.
func chunked(body []byte, n int) [][]byte {
	var cs [][]byte
	for len(body) > n {
		cs = append(cs, body[:n:n])
		body = body[n:]
	}
	return append(cs, body)
}

// TestScanBulkChunks: scanned in chunks of any size, a body gives exactly the entries and
// the error it gives whole, for every body of the refused cases and a long valid one.
func TestScanBulkChunks(t *testing.T) {
	good := `{"op":"insert","entity":{"PartitionKey":"p","RowKey":"r"}}`
	bodies := []string{
		"\xEF\xBB\xBF" + ` { "operations" : [ ` + good + ` , {"entity":{"Partition\u004bey":"p\u00e9","RowKey":"\ud83d\ude00","A":[1,{"b":"}"}]},"ifMatch":"W/\"x\"","op":"merge"} ] } `,
		`{"operations":[` + strings.Repeat(good+",", 50) + good + `]}`,
		"\xEF\xBB",
		"\xEF\xBB\xBF",
		`{"operations":[` + good + `]}` + strings.Repeat(" ", 100),
		`{"operations"` + strings.Repeat(" ", 100) + `:` + strings.Repeat("\n", 100) + `[` + good + `]}`,
		`{"operations":[{"op":"a","entity":{"S":"` + "\xe6\x97\xa5" + `\ud800\udc00"}}]}`,
		`{"operations":[{"op":"a","entity":{"A":false,"B":null,"C":true,"D":-1.5e+10}}]}`,
	}
	for _, c := range bulkRefusedCases(good) {
		bodies = append(bodies, c.body)
	}
	for _, body := range bodies {
		whole := scanRecord(func(each func(*BulkEntry) error) error { return ScanBulk([]byte(body), 3, each) })
		for n := 1; n <= len(body)+1; n++ {
			got := scanRecord(func(each func(*BulkEntry) error) error {
				return ScanBulkChunks(chunked([]byte(body), n), 3, nil, each)
			})
			if got != whole {
				t.Fatalf("%q in chunks of %d:\n%s\nwhole:\n%s", body, n, got, whole)
			}
		}
	}
}

// FuzzScanBulkChunks: a body scanned in chunks gives exactly what it gives whole.
func FuzzScanBulkChunks(f *testing.F) {
	f.Add([]byte(`{"operations":[{"op":"insert","entity":{"PartitionKey":"p","RowKey":"r","N":1.5}},{"op":"delete","entity":{"PartitionKey":"p","RowKey":"s"},"ifMatch":"*"}]}`), uint8(7))
	f.Add([]byte(`{"operations":[{"op":"x","entity":{"a":{"b":[1,"\"}"]}}}]}`), uint8(3))
	f.Add([]byte("\xEF\xBB\xBF{\"operations\":[]}"), uint8(1))
	f.Fuzz(func(t *testing.T, body []byte, n uint8) {
		whole := scanRecord(func(each func(*BulkEntry) error) error { return ScanBulk(body, 100, each) })
		got := scanRecord(func(each func(*BulkEntry) error) error {
			return ScanBulkChunks(chunked(body, int(n)%64+1), 100, nil, each)
		})
		if got != whole {
			t.Fatalf("in chunks of %d:\n%s\nwhole:\n%s", int(n)%64+1, got, whole)
		}
	})
}
