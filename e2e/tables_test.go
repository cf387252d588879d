package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

func TestTables(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name

	t.Run("CreateListDelete", func(t *testing.T) {
		name := tableName(t)
		resp, err := svc.CreateTable(ctx(t), name, nil)
		if err != nil {
			t.Fatalf("CreateTable: %v", err)
		}
		if resp.TableName == nil || *resp.TableName != name {
			t.Errorf("CreateTable response TableName = %v, want %q", resp.TableName, name)
		}
		if names := listTableNames(t, svc); !contains(names, name) {
			t.Fatalf("ListTables does not show %q: %v", name, names)
		}
		if _, err := svc.DeleteTable(ctx(t), name, nil); err != nil {
			t.Fatalf("DeleteTable: %v", err)
		}
		if names := listTableNames(t, svc); contains(names, name) {
			t.Fatalf("ListTables still shows deleted %q", name)
		}
		_, err = svc.DeleteTable(ctx(t), name, nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
		_, err = svc.NewClient(name).GetEntity(ctx(t), "p", "r", nil)
		requireRespErr(t, err, http.StatusNotFound, "TableNotFound")
	})

	t.Run("CreateRawStatusAndPrefer", func(t *testing.T) {
		for _, tc := range []struct {
			prefer      string
			status      int
			applied     string
			wantContent bool
		}{
			{"return-no-content", http.StatusNoContent, "return-no-content", false},
			{"return-content", http.StatusCreated, "return-content", true},
			{"", http.StatusCreated, "", true},
		} {
			name := tableName(t)
			hdr := map[string]string{}
			if tc.prefer != "" {
				hdr["Prefer"] = tc.prefer
			}
			r := srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/Tables", Header: hdr,
				Body: marshal(t, map[string]string{"TableName": name})})
			requireStatus(t, r, tc.status, "create table, Prefer="+tc.prefer)
			if got := r.Header.Get("Preference-Applied"); got != tc.applied {
				t.Errorf("Prefer %q: Preference-Applied = %q, want %q", tc.prefer, got, tc.applied)
			}
			if tc.wantContent {
				m := rawObject(t, r.Body)
				if got, _ := rawString(t, m, "TableName"); got != name {
					t.Errorf("Prefer %q: body TableName = %q, want %q", tc.prefer, got, name)
				}
				if md, _ := rawString(t, m, "odata.metadata"); !strings.HasSuffix(md, "$metadata#Tables/@Element") {
					t.Errorf("Prefer %q: odata.metadata = %q, want ...$metadata#Tables/@Element (body %s)", tc.prefer, md, r.Body)
				}
				if ct := r.Header.Get("Content-Type"); mediaLevel(t, ct) != "minimalmetadata" {
					t.Errorf("Prefer %q: Content-Type %q", tc.prefer, ct)
				}
			} else if len(strings.TrimSpace(string(r.Body))) != 0 {
				t.Errorf("Prefer %q: 204 with a body: %s", tc.prefer, r.Body)
			}
			if !contains(listTableNames(t, svc), name) {
				t.Errorf("table %q created with Prefer %q not listed", name, tc.prefer)
			}
		}
	})

	t.Run("TablesParenthesesForm", func(t *testing.T) {
		// "Tables()" is accepted like "Tables"; JS sends a nometadata Content-Type.
		name := tableName(t)
		r := srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/Tables()",
			Header: map[string]string{"Content-Type": "application/json;odata=nometadata"},
			Body:   marshal(t, map[string]string{"TableName": name})})
		requireStatus(t, r, http.StatusCreated, "POST Tables()")
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables()"})
		requireStatus(t, r, http.StatusOK, "GET Tables()")
		if !strings.Contains(string(r.Body), `"TableName":"`+name+`"`) {
			t.Errorf("GET Tables() lacks %s: %s", name, truncate(r.Body))
		}
		r = srv.do(t, rawReq{Method: http.MethodDelete, Path: "/" + acct + "/Tables('" + name + "')",
			Header: map[string]string{"Accept": "application/json"}})
		requireStatus(t, r, http.StatusNoContent, "DELETE Tables('name')")
	})

	t.Run("CreateExisting", func(t *testing.T) {
		name := tableName(t)
		if _, err := svc.CreateTable(ctx(t), name, nil); err != nil {
			t.Fatal(err)
		}
		_, err := svc.CreateTable(ctx(t), name, nil)
		requireRespErr(t, err, http.StatusConflict, "TableAlreadyExists")
		_, err = svc.CreateTable(ctx(t), strings.ToUpper(name), nil)
		requireRespErr(t, err, http.StatusConflict, "TableAlreadyExists")
		// the table is untouched: still listed once, in its original case
		n := 0
		for _, x := range listTableNames(t, svc) {
			if strings.EqualFold(x, name) {
				n++
				if x != name {
					t.Errorf("listed as %q, want original case %q", x, name)
				}
			}
		}
		if n != 1 {
			t.Errorf("table listed %d times, want 1", n)
		}
	})

	t.Run("CasePreservedAndInsensitive", func(t *testing.T) {
		name := "MixedCase" + strings.ToUpper(tableName(t)[1:])
		if _, err := svc.CreateTable(ctx(t), name, nil); err != nil {
			t.Fatal(err)
		}
		if names := listTableNames(t, svc); !contains(names, name) {
			t.Fatalf("ListTables does not show %q in its original case: %v", name, names)
		}
		// Entity operations through another case reach the same table.
		lower := svc.NewClient(strings.ToLower(name))
		if _, err := lower.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "V": 1}), nil); err != nil {
			t.Fatalf("AddEntity via lower-case name: %v", err)
		}
		e, _ := getEDM(t, svc.NewClient(name), "p", "r")
		if e.Properties["V"] != int32(1) {
			t.Errorf("entity via original-case name: V = %v", e.Properties["V"])
		}
		if _, err := svc.DeleteTable(ctx(t), strings.ToLower(name), nil); err != nil {
			t.Fatalf("DeleteTable via lower-case name: %v", err)
		}
		for _, x := range listTableNames(t, svc) {
			if strings.EqualFold(x, name) {
				t.Errorf("table still listed after delete: %q", x)
			}
		}
	})

	t.Run("ListTablesMetadata", func(t *testing.T) {
		name := tableName(t)
		if _, err := svc.CreateTable(ctx(t), name, nil); err != nil {
			t.Fatal(err)
		}
		for _, level := range []string{"nometadata", "minimalmetadata", "fullmetadata"} {
			r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables",
				Header: map[string]string{"Accept": "application/json;odata=" + level}})
			requireStatus(t, r, http.StatusOK, "query tables "+level)
			var body struct {
				Metadata *string                      `json:"odata.metadata"`
				Value    []map[string]json.RawMessage `json:"value"`
			}
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatalf("%s: %v: %s", level, err, r.Body)
			}
			var v map[string]json.RawMessage
			for _, x := range body.Value {
				if got, _ := rawString(t, x, "TableName"); got == name {
					v = x
				}
			}
			if v == nil {
				t.Fatalf("%s: table %s not listed: %s", level, name, truncate(r.Body))
			}
			switch level {
			case "nometadata":
				if body.Metadata != nil || len(v) != 1 {
					t.Errorf("nometadata: unexpected metadata: %s", r.Body)
				}
			case "minimalmetadata":
				if body.Metadata == nil || !strings.HasSuffix(*body.Metadata, "$metadata#Tables") {
					t.Errorf("minimal: odata.metadata = %v", body.Metadata)
				}
			case "fullmetadata":
				if got, _ := rawString(t, v, "odata.editLink"); got != "Tables('"+name+"')" {
					t.Errorf("full: odata.editLink = %q", got)
				}
				if got, _ := rawString(t, v, "odata.id"); !strings.HasSuffix(got, "/Tables('"+name+"')") {
					t.Errorf("full: odata.id = %q", got)
				}
				if got, _ := rawString(t, v, "odata.type"); got != acct+".Tables" {
					t.Errorf("full: odata.type = %q, want %q", got, acct+".Tables")
				}
			}
		}
	})

	t.Run("ListTablesPaging", func(t *testing.T) {
		for i := 0; i < 5; i++ {
			if _, err := svc.CreateTable(ctx(t), tableName(t), nil); err != nil {
				t.Fatal(err)
			}
		}
		all := listTableNames(t, svc)
		top := int32(2)
		p := svc.NewListTablesPager(&aztables.ListTablesOptions{Top: &top})
		var got []string
		pages := 0
		for p.More() {
			page, err := p.NextPage(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(page.Tables) > 2 {
				t.Errorf("page of %d tables with $top=2", len(page.Tables))
			}
			for _, tb := range page.Tables {
				got = append(got, *tb.Name)
			}
			if pages > 1000 {
				t.Fatal("runaway paging")
			}
		}
		if strings.Join(got, ",") != strings.Join(all, ",") {
			t.Errorf("paged tables = %v, want %v", got, all)
		}
		if pages < (len(all)+1)/2 {
			t.Errorf("%d tables with $top=2 came in %d pages", len(all), pages)
		}
		// stable, sorted order
		if !sort.SliceIsSorted(all, func(i, j int) bool { return all[i] < all[j] }) &&
			!sort.SliceIsSorted(all, func(i, j int) bool { return strings.ToLower(all[i]) < strings.ToLower(all[j]) }) {
			t.Errorf("tables not listed in sorted order: %v", all)
		}
	})

	t.Run("ListTablesFilter", func(t *testing.T) {
		prefix := "flt" + runID + "x"
		var want []string
		for i := 0; i < 5; i++ {
			n := prefix + string(rune('a'+i))
			want = append(want, n)
			if _, err := svc.CreateTable(ctx(t), n, nil); err != nil {
				t.Fatal(err)
			}
		}
		filter := "TableName ge '" + prefix + "' and TableName lt '" + prefix + "z'"
		top := int32(2)
		p := svc.NewListTablesPager(&aztables.ListTablesOptions{Filter: &filter, Top: &top})
		var got []string
		for pages := 0; p.More(); pages++ {
			page, err := p.NextPage(ctx(t))
			if err != nil {
				t.Fatalf("ListTables $filter=%s: %v", filter, err)
			}
			for _, tb := range page.Tables {
				got = append(got, *tb.Name)
			}
			if pages > 10 {
				t.Fatal("runaway paging")
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("filtered tables = %v, want %v", got, want)
		}
		eq := "TableName eq '" + want[2] + "'"
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables", Query: "$filter=" + urlQueryEscape(eq)})
		requireStatus(t, r, http.StatusOK, "query tables "+eq)
		if !strings.Contains(string(r.Body), want[2]) || strings.Contains(string(r.Body), want[1]) {
			t.Errorf("%s: %s", eq, r.Body)
		}
	})

	t.Run("InvalidNames", func(t *testing.T) {
		for _, tc := range []struct{ name, code string }{
			{"1abc", "InvalidResourceName"},
			{"a-b" + runID, "InvalidResourceName"},
			{"ab", "OutOfRangeInput"},
			{"a" + strings.Repeat("b", 63), "OutOfRangeInput"},
			{"tables", "InvalidResourceName"},
			{"Tables", "InvalidResourceName"},
			{"abc_def", "InvalidResourceName"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := svc.CreateTable(ctx(t), tc.name, nil)
				requireRespErr(t, err, http.StatusBadRequest, tc.code)
			})
		}
		// boundary: 3 and 63 characters are valid
		for _, n := range []string{"a" + runID[:2], "a" + strings.Repeat("b", 56) + runID} {
			if len(n) != 3 && len(n) != 63 {
				t.Fatalf("bad test name length %d", len(n))
			}
			_, err := svc.CreateTable(ctx(t), n, nil)
			if statusOf(err) == http.StatusConflict {
				continue // left over from an earlier run on a shared engine: still a valid name
			}
			if err != nil {
				t.Errorf("CreateTable(%q) (len %d) should succeed: %v", n, len(n), err)
			} else {
				_, _ = svc.DeleteTable(ctx(t), n, nil)
			}
		}
	})

	t.Run("EntityOpsOnMissingTable", func(t *testing.T) {
		c := svc.NewClient(tableName(t))
		ent := marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "V": 1})
		_, err := c.AddEntity(ctx(t), ent, nil)
		requireRespErr(t, err, http.StatusNotFound, "TableNotFound")
		_, err = c.GetEntity(ctx(t), "p", "r", nil)
		requireRespErr(t, err, http.StatusNotFound, "TableNotFound")
		_, err = c.NewListEntitiesPager(nil).NextPage(ctx(t))
		requireRespErr(t, err, http.StatusNotFound, "TableNotFound")
		_, err = c.UpdateEntity(ctx(t), ent, &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeReplace})
		requireRespErr(t, err, http.StatusNotFound, "TableNotFound")
		_, err = c.UpsertEntity(ctx(t), ent, nil)
		requireRespErr(t, err, http.StatusNotFound, "TableNotFound")
		_, err = c.DeleteEntity(ctx(t), "p", "r", nil)
		requireRespErr(t, err, http.StatusNotFound, "TableNotFound")
	})

	t.Run("DeleteThenRecreateIsEmpty", func(t *testing.T) {
		c, name := newTable(t, svc)
		for i := 0; i < 3; i++ {
			if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": string(rune('a' + i))}), nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := svc.DeleteTable(ctx(t), name, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.CreateTable(ctx(t), name, nil); err != nil {
			t.Fatalf("re-create after delete: %v", err)
		}
		if got := listAll(t, c, nil); len(got) != 0 {
			t.Errorf("re-created table shows %d old entities: %s", len(got), got[0])
		}
		_, err := c.GetEntity(ctx(t), "p", "a", nil)
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
		// and the old key can be inserted again
		if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "a"}), nil); err != nil {
			t.Errorf("insert into re-created table: %v", err)
		}
	})
}

// urlQueryEscape escapes a query value with %20 for spaces (the SDK's url.Values writes
// '+'; both must work, and the SDK paths exercise '+').
func urlQueryEscape(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
