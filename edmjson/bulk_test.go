package edmjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/azerr"
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
	good := `{"op":"insert","entity":{"PartitionKey":"p","RowKey":"r"}}`
	for _, c := range []struct{ body, want string }{
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
	} {
		_, err := DecodeBulk([]byte(c.body), 3)
		var ae *azerr.Error
		if !errors.As(err, &ae) || ae.Code != azerr.InvalidInput || !strings.Contains(ae.Error(), c.want) {
			t.Errorf("%s: %v, want InvalidInput with %q", c.body, err, c.want)
		}
	}
}

// FuzzDecodeBulk: DecodeBulk never panics, fails only with a 400 *azerr.Error, accepts
// only valid JSON, and decodes each entity exactly as DecodeEntity decodes its span.
func FuzzDecodeBulk(f *testing.F) {
	f.Add([]byte(`{"operations":[{"op":"insert","entity":{"PartitionKey":"p","RowKey":"r","N":1.5}},{"op":"delete","entity":{"PartitionKey":"p","RowKey":"s"},"ifMatch":"*"}]}`))
	f.Add([]byte(`{"operations":[{"op":"x","entity":{"a":{"b":[1,"\"}"]}}}]}`))
	f.Add([]byte(`{"operations":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ops, err := DecodeBulk(body, 100)
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
