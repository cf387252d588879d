package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// Typed nulls (issue 10, item 5). The JavaScript SDK (@azure/data-tables 13.3.2,
// serialization.js serializePrimitive/serializeObject, then JSON.stringify) sends an
// invalid Date as "d":null,"d@odata.type":"Edm.DateTime", a non-finite number as "n":null
// (NaN, ±Infinity: no annotation), {value: NaN, type: "Double"} as
// "x":null,"x@odata.type":"Edm.Double" and {value: null, type: "Int32"} as
// "x":null,"x@odata.type":"Edm.Int32". The service does not store null properties, typed
// or not: Microsoft's own Java SDK (azure-storage-java TableEntitySerializer.writeJsonEntity)
// writes a null Date, UUID, Long or byte[] as an annotation and a null value, and its
// TableSerializerTests.testNulls inserts and replaces such entities against the service
// and reads the properties back as absent. So a typed null is the same as an absent
// property on every write path: insert and replace store nothing for it, merge leaves
// the stored property as it is.

// jsNullsBody is exactly what the JS SDK sends for an entity with an invalid Date (d),
// NaN (n), Infinity (inf), {value: NaN, type: "Double"} (dd), {value: new Date("x"),
// type: "DateTime"} (ds), null (nul) and {value: null, type: "Int32"} (typedNull), plus
// extra properties given as JSON members.
func jsNullsBody(pk, rk, extra string) []byte {
	b := `{"PartitionKey":"` + pk + `","RowKey":"` + rk + `","d":null,"d@odata.type":"Edm.DateTime","n":null,"inf":null,` +
		`"dd":null,"dd@odata.type":"Edm.Double","ds":null,"ds@odata.type":"Edm.DateTime","nul":null,` +
		`"typedNull":null,"typedNull@odata.type":"Edm.Int32"`
	if extra != "" {
		b += "," + extra
	}
	return []byte(b + "}")
}

var jsNullNames = []string{"d", "n", "inf", "dd", "ds", "nul", "typedNull"}

func TestTypedNulls(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	_, table := newTable(t, svc)
	acct := srv.Default().Name
	tablePath := "/" + acct + "/" + table

	// props reads an entity and returns its custom properties (raw JSON values), or nil
	// if it does not exist.
	props := func(t *testing.T, rk string) map[string]string {
		t.Helper()
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "p", rk)})
		if r.Status == http.StatusNotFound {
			return nil
		}
		requireStatus(t, r, http.StatusOK, "get "+rk)
		out := map[string]string{}
		for k, v := range rawObject(t, r.Body) {
			if k == "PartitionKey" || k == "RowKey" || k == "Timestamp" || strings.HasPrefix(k, "odata.") {
				continue
			}
			out[k] = string(v)
		}
		return out
	}
	want := func(t *testing.T, rk string, expect map[string]string) {
		t.Helper()
		got := props(t, rk)
		if fmt.Sprint(got) != fmt.Sprint(expect) {
			t.Errorf("entity %s holds %v, want %v", rk, got, expect)
		}
	}
	// seed stores an entity whose properties have the typed-null names, with values.
	seed := func(t *testing.T, rk string) {
		t.Helper()
		r := srv.do(t, rawReq{Method: http.MethodPut, Path: entityPath(acct, table, "p", rk), Body: []byte(
			`{"d@odata.type":"Edm.DateTime","d":"2024-05-01T10:00:00Z","n":5,"dd":1.5,"typedNull":7,"keep":"k"}`)})
		requireStatus(t, r, http.StatusNoContent, "seed "+rk)
	}
	seeded := map[string]string{"d@odata.type": `"Edm.DateTime"`, "d": `"2024-05-01T10:00:00.0000000Z"`, "n": "5", "dd": "1.5", "typedNull": "7", "keep": `"k"`}

	t.Run("Insert", func(t *testing.T) {
		r := srv.do(t, rawReq{Method: http.MethodPost, Path: tablePath, Header: map[string]string{"Prefer": "return-no-content"},
			Body: jsNullsBody("p", "ins", `"v":"x"`)})
		requireStatus(t, r, http.StatusNoContent, "insert with typed nulls")
		want(t, "ins", map[string]string{"v": `"x"`})
		// With return-content, the echoed entity has no null properties either.
		r = srv.do(t, rawReq{Method: http.MethodPost, Path: tablePath, Body: jsNullsBody("p", "ins2", "")})
		requireStatus(t, r, http.StatusCreated, "insert with typed nulls, return-content")
		for _, name := range jsNullNames {
			if _, ok := rawObject(t, r.Body)[name]; ok {
				t.Errorf("insert response carries %q: %s", name, r.Body)
			}
		}
	})
	for _, c := range []struct {
		name, method, ifMatch string
		merge                 bool
	}{
		{"Update", http.MethodPut, "*", false},
		{"InsertOrReplace", http.MethodPut, "", false},
		{"Merge", http.MethodPatch, "*", true},
		{"MergeVerb", "MERGE", "*", true},
		{"InsertOrMerge", http.MethodPatch, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rk := strings.ToLower(c.name)
			seed(t, rk)
			h := map[string]string{}
			if c.ifMatch != "" {
				h["If-Match"] = c.ifMatch
			}
			r := srv.do(t, rawReq{Method: c.method, Path: entityPath(acct, table, "p", rk), Header: h, Body: jsNullsBody("p", rk, `"v":"x"`)})
			requireStatus(t, r, http.StatusNoContent, c.name+" with typed nulls")
			if c.merge {
				// A null merges like an absent property: the stored value stays.
				expect := map[string]string{"v": `"x"`}
				for k, v := range seeded {
					expect[k] = v
				}
				want(t, rk, expect)
			} else {
				want(t, rk, map[string]string{"v": `"x"`})
			}
			if c.ifMatch == "" {
				// An upsert of a new entity stores only the non-null properties.
				r := srv.do(t, rawReq{Method: c.method, Path: entityPath(acct, table, "p", rk+"new"), Body: jsNullsBody("p", rk+"new", `"v":"y"`)})
				requireStatus(t, r, http.StatusNoContent, c.name+" of a new entity")
				want(t, rk+"new", map[string]string{"v": `"y"`})
			}
		})
	}
	t.Run("Batch", func(t *testing.T) {
		seed(t, "bmerge")
		seed(t, "breplace")
		base := srv.Endpoint(acct) + "/" + table
		// Shaped as the JS SDK frames a transaction (see the capture in compat/js).
		insertHdr := [][2]string{{"Content-Type", "application/json;odata=nometadata"}, {"Accept", "application/json;odata=minimalmetadata"},
			{"DataServiceVersion", "3.0"}, {"Prefer", "return-no-content"}}
		writeHdr := [][2]string{{"Content-Type", "application/json"}, {"DataServiceVersion", "3.0"}, {"Accept", "application/json"}}
		b, boundary := buildBatchBody([]egtPart{
			{Method: http.MethodPost, URL: base, Header: insertHdr, Body: string(jsNullsBody("p", "binsert", `"v":"x"`))},
			{Method: http.MethodPut, URL: base + "(PartitionKey='p',RowKey='bupsert')", Header: writeHdr, Body: string(jsNullsBody("p", "bupsert", `"v":"x"`))},
			{Method: http.MethodPatch, URL: base + "(PartitionKey='p',RowKey='bmerge')", Header: append(writeHdr, [2]string{"If-Match", "*"}), Body: string(jsNullsBody("p", "bmerge", `"v":"x"`))},
			{Method: http.MethodPut, URL: base + "(PartitionKey='p',RowKey='breplace')", Header: append(writeHdr, [2]string{"If-Match", "*"}), Body: string(jsNullsBody("p", "breplace", `"v":"x"`))},
		})
		r := egtPost(t, srv, b, boundary, nil)
		subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
		if len(subs) != 4 || !slices.ContainsFunc(subs, func(s egtSub) bool { return s.Status == http.StatusNoContent }) {
			t.Fatalf("batch with typed nulls: %d sub-responses: %+v", len(subs), subs)
		}
		for i, s := range subs {
			if s.Status != http.StatusNoContent {
				t.Errorf("sub-response %d: %d %s", i, s.Status, s.Body)
			}
		}
		want(t, "binsert", map[string]string{"v": `"x"`})
		want(t, "bupsert", map[string]string{"v": `"x"`})
		merged := map[string]string{"v": `"x"`}
		for k, v := range seeded {
			merged[k] = v
		}
		want(t, "bmerge", merged)
		want(t, "breplace", map[string]string{"v": `"x"`})
	})
	t.Run("QueryShowsNoNulls", func(t *testing.T) {
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: tablePath + "()"})
		requireStatus(t, r, http.StatusOK, "query")
		var doc struct {
			Value []map[string]json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(r.Body, &doc); err != nil {
			t.Fatal(err)
		}
		for _, e := range doc.Value {
			for k, v := range e {
				if string(v) == "null" {
					t.Errorf("entity %s has a null property %q", e["RowKey"], k)
				}
			}
		}
	})
}
