package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

func etagPtr(e azcore.ETag) *azcore.ETag { return &e }

var star = azcore.ETag("*")

func TestEntities(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name

	t.Run("AddAndGet", func(t *testing.T) {
		c, _ := newTable(t, svc)
		before := time.Now().UTC().Add(-time.Minute)
		add, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "pk", "RowKey": "rk", "Name": "x", "N": 7}), nil)
		if err != nil {
			t.Fatalf("AddEntity: %v", err)
		}
		if add.ETag == "" {
			t.Fatal("AddEntity: no ETag header")
		}
		etagTime := checkETag(t, string(add.ETag))
		// AddEntity sends no Prefer: the answer is 201 with the entity (docs/protocol.md §3.6).
		body := rawObject(t, add.Value)
		if pk, _ := rawString(t, body, "PartitionKey"); pk != "pk" {
			t.Errorf("AddEntity body PartitionKey = %q (body %s)", pk, add.Value)
		}
		if rk, _ := rawString(t, body, "RowKey"); rk != "rk" {
			t.Errorf("AddEntity body RowKey = %q", rk)
		}
		if et, _ := rawString(t, body, "odata.etag"); et != string(add.ETag) {
			t.Errorf("AddEntity body odata.etag = %q, header ETag = %q", et, add.ETag)
		}
		ts, ok := rawString(t, body, "Timestamp")
		if !ok {
			t.Errorf("AddEntity body has no Timestamp: %s", add.Value)
		} else {
			tsTime := checkTimestamp(t, ts)
			if tsTime.Before(before) || tsTime.After(time.Now().UTC().Add(time.Minute)) {
				t.Errorf("Timestamp %s is not close to now", ts)
			}
			if !etagTime.Equal(tsTime) {
				t.Errorf("ETag %s does not encode the Timestamp %s", add.ETag, ts)
			}
		}
		if string(body["Name"]) != `"x"` || string(body["N"]) != `7` {
			t.Errorf("AddEntity body properties wrong: %s", add.Value)
		}

		e, get := getEDM(t, c, "pk", "rk")
		if get.ETag != add.ETag {
			t.Errorf("GetEntity ETag %q != AddEntity ETag %q", get.ETag, add.ETag)
		}
		if e.PartitionKey != "pk" || e.RowKey != "rk" || e.Properties["Name"] != "x" || e.Properties["N"] != int32(7) {
			t.Errorf("GetEntity = %+v", e)
		}
		if e.ETag != string(get.ETag) {
			t.Errorf("GetEntity odata.etag %q != ETag header %q", e.ETag, get.ETag)
		}
	})

	t.Run("AddExisting", func(t *testing.T) {
		c, _ := newTable(t, svc)
		ent := marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "V": 1})
		if _, err := c.AddEntity(ctx(t), ent, nil); err != nil {
			t.Fatal(err)
		}
		_, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "V": 2}), nil)
		requireRespErr(t, err, http.StatusConflict, "EntityAlreadyExists")
		e, _ := getEDM(t, c, "p", "r")
		if e.Properties["V"] != int32(1) {
			t.Errorf("failed insert changed the entity: V = %v", e.Properties["V"])
		}
	})

	t.Run("DeleteWithoutIfMatchRefused", func(t *testing.T) {
		// Delete Entity requires If-Match (docs/protocol.md §3.11); the exact code is unverified.
		c, table := newTable(t, svc)
		if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r"}), nil); err != nil {
			t.Fatal(err)
		}
		r := srv.do(t, rawReq{Method: http.MethodDelete, Path: entityPath(acct, table, "p", "r")})
		if r.Status < 400 || r.Status >= 500 {
			t.Errorf("DELETE without If-Match: status %d, want 4xx", r.Status)
		} else {
			requireRawErrStatus(t, r, r.Status)
		}
		if _, err := c.GetEntity(ctx(t), "p", "r", nil); err != nil {
			t.Errorf("DELETE without If-Match deleted the entity: %v", err)
		}
	})

	t.Run("XHTTPMethodTunnelling", func(t *testing.T) {
		c, table := newTable(t, svc)
		if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "A": "a", "B": "b"}), nil); err != nil {
			t.Fatal(err)
		}
		path := entityPath(acct, table, "p", "r")
		// POST + X-HTTP-Method: PUT is a replace.
		r := srv.do(t, rawReq{Method: http.MethodPost, Path: path,
			Header: map[string]string{"If-Match": "*", "X-HTTP-Method": "PUT"},
			Body:   []byte(`{"PartitionKey":"p","RowKey":"r","C":"c"}`)})
		requireStatus(t, r, http.StatusNoContent, "POST + X-HTTP-Method: PUT")
		e, _ := getEDM(t, c, "p", "r")
		if len(e.Properties) != 1 || e.Properties["C"] != "c" {
			t.Errorf("after tunnelled PUT: %v", e.Properties)
		}
		// An unknown X-HTTP-Method value.
		r = srv.do(t, rawReq{Method: http.MethodPost, Path: path,
			Header: map[string]string{"If-Match": "*", "X-HTTP-Method": "FROB"},
			Body:   []byte(`{"PartitionKey":"p","RowKey":"r","D":"d"}`)})
		requireRawErr(t, r, http.StatusBadRequest, "XMethodIncorrectValue")
		// POST + X-HTTP-Method: DELETE deletes.
		r = srv.do(t, rawReq{Method: http.MethodPost, Path: path,
			Header: map[string]string{"If-Match": "*", "X-HTTP-Method": "DELETE"}})
		requireStatus(t, r, http.StatusNoContent, "POST + X-HTTP-Method: DELETE")
		_, err := c.GetEntity(ctx(t), "p", "r", nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
	})

	t.Run("InsertPreferAndConflict", func(t *testing.T) {
		_, table := newTable(t, svc)
		path := "/" + acct + "/" + table
		body := []byte(`{"PartitionKey":"p","RowKey":"r","V":1}`)
		r := srv.do(t, rawReq{Method: http.MethodPost, Path: path, Body: body,
			Header: map[string]string{"Prefer": "return-content", "Content-Type": "application/json;odata=nometadata"}})
		requireStatus(t, r, http.StatusCreated, "insert with Prefer: return-content")
		if r.Header.Get("Preference-Applied") != "return-content" {
			t.Errorf("Preference-Applied = %q, want return-content", r.Header.Get("Preference-Applied"))
		}
		if et, _ := rawString(t, rawObject(t, r.Body), "odata.etag"); et != r.Header.Get("ETag") || et == "" {
			t.Errorf("insert body odata.etag %q vs ETag header %q", et, r.Header.Get("ETag"))
		}
		r = srv.do(t, rawReq{Method: http.MethodPost, Path: path, Body: body,
			Header: map[string]string{"Prefer": "return-no-content"}})
		requireRawErr(t, r, http.StatusConflict, "EntityAlreadyExists")
		// no Prefer: 201 without Preference-Applied
		r = srv.do(t, rawReq{Method: http.MethodPost, Path: path, Body: []byte(`{"PartitionKey":"p","RowKey":"r2"}`)})
		requireStatus(t, r, http.StatusCreated, "insert without Prefer")
		if got := r.Header.Get("Preference-Applied"); got != "" {
			t.Errorf("insert without Prefer: Preference-Applied = %q", got)
		}
		// the table's query forms: /table, /table()
		for _, p := range []string{path, path + "()"} {
			r = srv.do(t, rawReq{Method: http.MethodGet, Path: p})
			requireStatus(t, r, http.StatusOK, "GET "+p)
			if r.Header.Get("ETag") != "" {
				t.Errorf("query response carries an ETag header")
			}
		}
		// Empty $filter= and $select= (Storage Explorer) mean "none".
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: path + "()", Query: "$filter=&$select="})
		requireStatus(t, r, http.StatusOK, "query with empty $filter and $select")
		var q struct {
			Value []map[string]json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(r.Body, &q); err != nil || len(q.Value) != 2 || string(q.Value[0]["V"]) != "1" {
			t.Errorf("query with empty $filter/$select: %s", truncate(r.Body))
		}
	})

	t.Run("QueryPaging", func(t *testing.T) {
		c, table := newTable(t, svc)
		var want []string
		for _, pk := range []string{"a", "b", "c"} {
			for i := 0; i < 9; i++ {
				rk := string(rune('a' + i))
				want = append(want, pk+"/"+rk)
				if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": pk, "RowKey": rk}), nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		top := int32(4)
		p := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: &top})
		var got []string
		for pages := 0; p.More(); pages++ {
			page, err := p.NextPage(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Entities) > 4 {
				t.Errorf("page %d has %d entities with $top=4", pages, len(page.Entities))
			}
			for _, b := range page.Entities {
				e := decodeEDM(t, b)
				got = append(got, e.PartitionKey+"/"+e.RowKey)
			}
			if pages > 100 {
				t.Fatal("runaway paging")
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("paged query = %v, want %v", got, want)
		}
		// Continuation headers come in pairs, both non-empty (docs/protocol.md §5.6).
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/" + table + "()", Query: "$top=4"})
		requireStatus(t, r, http.StatusOK, "query $top=4")
		npk, nrk := r.Header.Get("x-ms-continuation-NextPartitionKey"), r.Header.Get("x-ms-continuation-NextRowKey")
		if npk == "" || nrk == "" {
			t.Errorf("continuation headers NextPartitionKey=%q NextRowKey=%q, want both non-empty", npk, nrk)
		}
	})

	t.Run("GetMissing", func(t *testing.T) {
		c, _ := newTable(t, svc)
		_, err := c.GetEntity(ctx(t), "p", "nope", nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
	})

	t.Run("UpdateReplaceAndMerge", func(t *testing.T) {
		c, _ := newTable(t, svc)
		add, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "A": "a", "B": "b"}), nil)
		if err != nil {
			t.Fatal(err)
		}
		// Merge with *: keeps B, changes A, adds C.
		m, err := c.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "A": "a2", "C": 3}),
			&aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge, IfMatch: &star})
		if err != nil {
			t.Fatalf("merge *: %v", err)
		}
		if m.ETag == "" || m.ETag == add.ETag {
			t.Errorf("merge ETag %q must be new (was %q)", m.ETag, add.ETag)
		}
		checkETag(t, string(m.ETag))
		e, get := getEDM(t, c, "p", "r")
		if e.Properties["A"] != "a2" || e.Properties["B"] != "b" || e.Properties["C"] != int32(3) || len(e.Properties) != 3 {
			t.Errorf("after merge: %v", e.Properties)
		}
		if get.ETag != m.ETag {
			t.Errorf("GetEntity ETag %q != merge ETag %q", get.ETag, m.ETag)
		}

		// Replace with the exact ETag: drops A, B, C.
		r, err := c.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "D": true}),
			&aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeReplace, IfMatch: etagPtr(m.ETag)})
		if err != nil {
			t.Fatalf("replace with exact etag: %v", err)
		}
		e, _ = getEDM(t, c, "p", "r")
		if len(e.Properties) != 1 || e.Properties["D"] != true {
			t.Errorf("after replace: %v", e.Properties)
		}

		// Stale ETags: both modes fail with 412 and change nothing.
		for _, mode := range []aztables.UpdateMode{aztables.UpdateModeReplace, aztables.UpdateModeMerge} {
			_, err = c.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "X": 1}),
				&aztables.UpdateEntityOptions{UpdateMode: mode, IfMatch: etagPtr(m.ETag)})
			requireRespErr(t, err, http.StatusPreconditionFailed, "UpdateConditionNotSatisfied")
		}
		e, get = getEDM(t, c, "p", "r")
		if len(e.Properties) != 1 || get.ETag != r.ETag {
			t.Errorf("failed updates changed the entity: %v etag %q (want %q)", e.Properties, get.ETag, r.ETag)
		}

		// Merge with the exact current ETag works.
		if _, err := c.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "E": "e"}),
			&aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge, IfMatch: etagPtr(r.ETag)}); err != nil {
			t.Fatalf("merge with exact etag: %v", err)
		}
		e, _ = getEDM(t, c, "p", "r")
		if e.Properties["D"] != true || e.Properties["E"] != "e" {
			t.Errorf("after exact merge: %v", e.Properties)
		}
	})

	t.Run("UpdateMissing", func(t *testing.T) {
		c, _ := newTable(t, svc)
		ent := marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "missing", "V": 1})
		for _, mode := range []aztables.UpdateMode{aztables.UpdateModeReplace, aztables.UpdateModeMerge} {
			_, err := c.UpdateEntity(ctx(t), ent, &aztables.UpdateEntityOptions{UpdateMode: mode, IfMatch: &star})
			requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
			etag := azcore.ETag(`W/"datetime'2024-05-01T10%3A00%3A01.0000001Z'"`)
			_, err = c.UpdateEntity(ctx(t), ent, &aztables.UpdateEntityOptions{UpdateMode: mode, IfMatch: &etag})
			requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
		}
		_, err := c.GetEntity(ctx(t), "p", "missing", nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
	})

	t.Run("Upsert", func(t *testing.T) {
		c, _ := newTable(t, svc)
		// Upsert on a missing entity inserts, in both modes.
		for i, mode := range []aztables.UpdateMode{aztables.UpdateModeReplace, aztables.UpdateModeMerge} {
			rk := []string{"replace", "merge"}[i]
			u, err := c.UpsertEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": rk, "A": "a", "B": "b"}),
				&aztables.UpsertEntityOptions{UpdateMode: mode})
			if err != nil {
				t.Fatalf("upsert %s (insert): %v", rk, err)
			}
			checkETag(t, string(u.ETag))
			e, _ := getEDM(t, c, "p", rk)
			if e.Properties["A"] != "a" || e.Properties["B"] != "b" {
				t.Errorf("upsert %s insert: %v", rk, e.Properties)
			}
		}
		// Upsert-replace drops B; upsert-merge keeps it.
		if _, err := c.UpsertEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "replace", "A": "a2"}),
			&aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
			t.Fatal(err)
		}
		e, _ := getEDM(t, c, "p", "replace")
		if len(e.Properties) != 1 || e.Properties["A"] != "a2" {
			t.Errorf("upsert replace should drop B: %v", e.Properties)
		}
		if _, err := c.UpsertEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "merge", "A": "a2"}),
			&aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
			t.Fatal(err)
		}
		e, _ = getEDM(t, c, "p", "merge")
		if len(e.Properties) != 2 || e.Properties["A"] != "a2" || e.Properties["B"] != "b" {
			t.Errorf("upsert merge should keep B: %v", e.Properties)
		}
		// Merge can change a property's type.
		if _, err := c.UpsertEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "merge", "A": 5}),
			&aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
			t.Fatal(err)
		}
		e, _ = getEDM(t, c, "p", "merge")
		if e.Properties["A"] != int32(5) {
			t.Errorf("merge type change: A = %#v", e.Properties["A"])
		}
	})

	t.Run("NullPropertyIsAbsent", func(t *testing.T) {
		c, _ := newTable(t, svc)
		if _, err := c.AddEntity(ctx(t), []byte(`{"PartitionKey":"p","RowKey":"r","A":"a","N":null}`), nil); err != nil {
			t.Fatal(err)
		}
		e, _ := getEDM(t, c, "p", "r")
		if _, ok := e.Properties["N"]; ok || len(e.Properties) != 1 {
			t.Errorf("null property stored on insert: %v", e.Properties)
		}
		// On merge a null does not delete the property (docs/protocol.md §3.9).
		if _, err := c.UpdateEntity(ctx(t), []byte(`{"PartitionKey":"p","RowKey":"r","A":null,"B":"b"}`),
			&aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge, IfMatch: &star}); err != nil {
			t.Fatal(err)
		}
		e, _ = getEDM(t, c, "p", "r")
		if e.Properties["A"] != "a" || e.Properties["B"] != "b" || len(e.Properties) != 2 {
			t.Errorf("merge with null: %v", e.Properties)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		c, _ := newTable(t, svc)
		add := func(rk string) azcore.ETag {
			r, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": rk}), nil)
			if err != nil {
				t.Fatal(err)
			}
			return r.ETag
		}
		add("star")
		if _, err := c.DeleteEntity(ctx(t), "p", "star", &aztables.DeleteEntityOptions{IfMatch: &star}); err != nil {
			t.Fatalf("delete *: %v", err)
		}
		_, err := c.GetEntity(ctx(t), "p", "star", nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")

		et := add("exact")
		if _, err := c.DeleteEntity(ctx(t), "p", "exact", &aztables.DeleteEntityOptions{IfMatch: &et}); err != nil {
			t.Fatalf("delete exact etag: %v", err)
		}
		_, err = c.GetEntity(ctx(t), "p", "exact", nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")

		stale := add("stale")
		if _, err := c.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "stale", "V": 1}), nil); err != nil {
			t.Fatal(err)
		}
		_, err = c.DeleteEntity(ctx(t), "p", "stale", &aztables.DeleteEntityOptions{IfMatch: &stale})
		requireRespErr(t, err, http.StatusPreconditionFailed, "UpdateConditionNotSatisfied")
		if _, err := c.GetEntity(ctx(t), "p", "stale", nil); err != nil {
			t.Errorf("entity gone after a failed conditional delete: %v", err)
		}

		_, err = c.DeleteEntity(ctx(t), "p", "never", nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
		_, err = c.DeleteEntity(ctx(t), "p", "star", nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
	})

	t.Run("RawMergeVerbs", func(t *testing.T) {
		c, table := newTable(t, svc)
		add, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "A": "a", "B": "b"}), nil)
		if err != nil {
			t.Fatal(err)
		}
		path := entityPath(acct, table, "p", "r")
		prev := add.ETag

		check := func(what string, r rawResp, wantProps map[string]any) {
			t.Helper()
			requireStatus(t, r, http.StatusNoContent, what)
			et := r.Header.Get("ETag")
			checkETag(t, et)
			if azcore.ETag(et) == prev {
				t.Errorf("%s: ETag did not change", what)
			}
			prev = azcore.ETag(et)
			e, get := getEDM(t, c, "p", "r")
			if string(get.ETag) != et {
				t.Errorf("%s: response ETag %q != stored %q", what, et, get.ETag)
			}
			for k, v := range wantProps {
				if e.Properties[k] != v {
					t.Errorf("%s: %s = %#v, want %#v (all %v)", what, k, e.Properties[k], v, e.Properties)
				}
			}
			if len(e.Properties) != len(wantProps) {
				t.Errorf("%s: properties %v, want %v", what, e.Properties, wantProps)
			}
		}

		r := srv.do(t, rawReq{Method: "MERGE", Path: path, Header: map[string]string{"If-Match": "*"},
			Body: []byte(`{"PartitionKey":"p","RowKey":"r","C":"c"}`)})
		check("MERGE verb", r, map[string]any{"A": "a", "B": "b", "C": "c"})

		r = srv.do(t, rawReq{Method: http.MethodPost, Path: path,
			Header: map[string]string{"If-Match": string(prev), "X-HTTP-Method": "MERGE"},
			Body:   []byte(`{"PartitionKey":"p","RowKey":"r","D":"d"}`)})
		check("POST + X-HTTP-Method: MERGE", r, map[string]any{"A": "a", "B": "b", "C": "c", "D": "d"})

		r = srv.do(t, rawReq{Method: http.MethodPatch, Path: path, Header: map[string]string{"If-Match": "*"},
			Body: []byte(`{"PartitionKey":"p","RowKey":"r","E":"e"}`)})
		check("PATCH", r, map[string]any{"A": "a", "B": "b", "C": "c", "D": "d", "E": "e"})

		// If-Match compared tolerantly: ':' instead of '%3A' matches (docs/protocol.md §2.4).
		colon := strings.ReplaceAll(string(prev), "%3A", ":")
		r = srv.do(t, rawReq{Method: "MERGE", Path: path, Header: map[string]string{"If-Match": colon},
			Body: []byte(`{"PartitionKey":"p","RowKey":"r","F":"f"}`)})
		check("MERGE with If-Match using ':'", r, map[string]any{"A": "a", "B": "b", "C": "c", "D": "d", "E": "e", "F": "f"})

		// Stale ETag on the MERGE verb.
		r = srv.do(t, rawReq{Method: "MERGE", Path: path, Header: map[string]string{"If-Match": string(add.ETag)},
			Body: []byte(`{"PartitionKey":"p","RowKey":"r","G":"g"}`)})
		requireRawErr(t, r, http.StatusPreconditionFailed, "UpdateConditionNotSatisfied")

		// MERGE without If-Match on a missing entity is insert-or-merge.
		r = srv.do(t, rawReq{Method: "MERGE", Path: entityPath(acct, table, "p", "new"),
			Body: []byte(`{"PartitionKey":"p","RowKey":"new","N":1}`)})
		requireStatus(t, r, http.StatusNoContent, "MERGE upsert")
		e, _ := getEDM(t, c, "p", "new")
		if e.Properties["N"] != int32(1) {
			t.Errorf("MERGE upsert: %v", e.Properties)
		}
		// MERGE with If-Match: * on a missing entity is 404.
		r = srv.do(t, rawReq{Method: "MERGE", Path: entityPath(acct, table, "p", "absent"),
			Header: map[string]string{"If-Match": "*"}, Body: []byte(`{"PartitionKey":"p","RowKey":"absent","N":1}`)})
		requireRawErr(t, r, http.StatusNotFound, "ResourceNotFound")

		// X-HTTP-Method on a verb other than POST.
		r = srv.do(t, rawReq{Method: http.MethodPut, Path: path,
			Header: map[string]string{"If-Match": "*", "X-HTTP-Method": "MERGE"}, Body: []byte(`{"PartitionKey":"p","RowKey":"r","Z":1}`)})
		requireRawErr(t, r, http.StatusBadRequest, "XMethodNotUsingPost")
	})

	t.Run("TimestampStrictlyIncreases", func(t *testing.T) {
		c, _ := newTable(t, svc)
		add, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "N": 0}), nil)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[azcore.ETag]bool{add.ETag: true}
		e, _ := getEDM(t, c, "p", "r")
		prevTS := time.Time(e.Timestamp)
		prevETagTime := checkETag(t, string(add.ETag))
		for i := 1; i <= 40; i++ {
			mode := aztables.UpdateModeMerge
			if i%2 == 0 {
				mode = aztables.UpdateModeReplace
			}
			u, err := c.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "N": i}),
				&aztables.UpdateEntityOptions{UpdateMode: mode, IfMatch: &star})
			if err != nil {
				t.Fatalf("update %d: %v", i, err)
			}
			if seen[u.ETag] {
				t.Fatalf("update %d: ETag %q repeated", i, u.ETag)
			}
			seen[u.ETag] = true
			et := checkETag(t, string(u.ETag))
			if !et.After(prevETagTime) {
				t.Errorf("update %d: ETag time %v not after %v", i, et, prevETagTime)
			}
			prevETagTime = et
			e, _ := getEDM(t, c, "p", "r")
			ts := time.Time(e.Timestamp)
			if !ts.After(prevTS) {
				t.Errorf("update %d: Timestamp %v not after %v", i, ts.Format(time.RFC3339Nano), prevTS.Format(time.RFC3339Nano))
			}
			prevTS = ts
			if e.Properties["N"] != int32(i) {
				t.Fatalf("update %d: N = %v", i, e.Properties["N"])
			}
		}
	})

	t.Run("SystemPropertiesInBodyIgnored", func(t *testing.T) {
		c, _ := newTable(t, svc)
		// A queried entity re-sent as-is (odata.etag, Timestamp and their annotations).
		body := `{"odata.etag":"W/\"datetime'2000-01-01T00%3A00%3A00.0000000Z'\"","odata.metadata":"x",` +
			`"PartitionKey":"p","RowKey":"r","Timestamp@odata.type":"Edm.DateTime","Timestamp":"2000-01-01T00:00:00Z","V":1}`
		add, err := c.AddEntity(ctx(t), []byte(body), nil)
		if err != nil {
			t.Fatalf("insert with system properties: %v", err)
		}
		e, _ := getEDM(t, c, "p", "r")
		if time.Time(e.Timestamp).Year() == 2000 {
			t.Errorf("client-supplied Timestamp was stored: %v", time.Time(e.Timestamp))
		}
		if len(e.Properties) != 1 || e.Properties["V"] != int32(1) {
			t.Errorf("properties %v, want only V", e.Properties)
		}
		if strings.Contains(string(add.ETag), "2000-01-01") {
			t.Errorf("client-supplied odata.etag used: %s", add.ETag)
		}
	})
}
