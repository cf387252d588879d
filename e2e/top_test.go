package e2e

// $top, black box (issue 10 item 2): MS-ODATA allows any integer >= 0, and Storage
// Explorer sends $top=0 expecting no entities. A $top=0 page is empty and final (no
// continuation), so an SDK pager makes one request and stops; a value above 1,000 is a
// page of 1,000; anything but digits is 400 InvalidQueryParameterValue. The same holds
// for Query Tables.

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// queryPage is a raw query response: its "value" array and continuation headers.
type queryPage struct {
	n                     int
	nextPK, nextRK, nextT string
}

func rawQueryPage(t *testing.T, srv *server, path, query string) queryPage {
	t.Helper()
	r := srv.do(t, rawReq{Method: http.MethodGet, Path: path, Query: query})
	requireStatus(t, r, http.StatusOK, "GET "+path+"?"+query)
	var body struct {
		Value []json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || body.Value == nil {
		t.Fatalf("GET %s?%s: body without a value array (%v): %s", path, query, err, truncate(r.Body))
	}
	return queryPage{n: len(body.Value),
		nextPK: r.Header.Get("x-ms-continuation-NextPartitionKey"), nextRK: r.Header.Get("x-ms-continuation-NextRowKey"),
		nextT: r.Header.Get("x-ms-continuation-NextTableName")}
}

func TestTopZero(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	c, table := newTable(t, svc)
	for _, pk := range []string{"a", "b", "c"} {
		if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": pk, "RowKey": "r"}), nil); err != nil {
			t.Fatal(err)
		}
	}
	newTable(t, svc) // a second table, so Query Tables has more than one to page over
	entities := "/" + acct + "/" + table + "()"
	tables := "/" + acct + "/Tables"

	t.Run("RawEntities", func(t *testing.T) {
		first := rawQueryPage(t, srv, entities, "$top=1")
		if first.n != 1 || first.nextPK == "" || first.nextRK == "" {
			t.Fatalf("$top=1: %+v, want 1 entity and a continuation", first)
		}
		for _, q := range []string{
			"$top=0",
			"$top=0&$filter=" + url.QueryEscape("PartitionKey eq 'a'"),
			"$top=0&$filter=" + url.QueryEscape("PartitionKey eq 'a' and RowKey eq 'r'"),
			"$top=0&$select=RowKey",
			"$top=00",
			"$top=0&NextPartitionKey=" + url.QueryEscape(first.nextPK) + "&NextRowKey=" + url.QueryEscape(first.nextRK),
		} {
			p := rawQueryPage(t, srv, entities, q)
			if p.n != 0 || p.nextPK != "" || p.nextRK != "" {
				t.Errorf("%s: %+v, want an empty page without continuation", q, p)
			}
		}
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/nosuchtable()", Query: "$top=0"})
		requireRawErr(t, r, http.StatusNotFound, "TableNotFound")
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: entities, Query: "$top=0&NextPartitionKey=forged&NextRowKey=forged"})
		requireRawErr(t, r, http.StatusBadRequest, "InvalidInput")
	})

	t.Run("RawTables", func(t *testing.T) {
		first := rawQueryPage(t, srv, tables, "$top=1")
		if first.n != 1 || first.nextT == "" {
			t.Fatalf("Tables $top=1: %+v, want 1 table and a continuation", first)
		}
		for _, q := range []string{"$top=0", "$top=0&NextTableName=" + url.QueryEscape(first.nextT)} {
			if p := rawQueryPage(t, srv, tables, q); p.n != 0 || p.nextT != "" {
				t.Errorf("Tables %s: %+v, want an empty page without continuation", q, p)
			}
		}
	})

	t.Run("SDKPagers", func(t *testing.T) {
		p := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: to.Ptr(int32(0))})
		pages := 0
		for p.More() {
			page, err := p.NextPage(ctx(t))
			if err != nil {
				t.Fatalf("ListEntities Top=0: %v", err)
			}
			if len(page.Entities) != 0 {
				t.Errorf("ListEntities Top=0: page of %d entities", len(page.Entities))
			}
			if pages++; pages > 3 {
				t.Fatal("ListEntities Top=0: the pager does not stop")
			}
		}
		if pages != 1 {
			t.Errorf("ListEntities Top=0: %d pages, want 1", pages)
		}
		tp := svc.NewListTablesPager(&aztables.ListTablesOptions{Top: to.Ptr(int32(0))})
		pages = 0
		for tp.More() {
			page, err := tp.NextPage(ctx(t))
			if err != nil {
				t.Fatalf("ListTables Top=0: %v", err)
			}
			if len(page.Tables) != 0 {
				t.Errorf("ListTables Top=0: page of %d tables", len(page.Tables))
			}
			if pages++; pages > 3 {
				t.Fatal("ListTables Top=0: the pager does not stop")
			}
		}
		if pages != 1 {
			t.Errorf("ListTables Top=0: %d pages, want 1", pages)
		}
	})

	// Above the service's 1,000 per response: a page of (at most) 1,000, never a 400.
	t.Run("AboveMaximum", func(t *testing.T) {
		for _, q := range []string{"$top=1001", "$top=2147483648", "$top=99999999999999999999999"} {
			if p := rawQueryPage(t, srv, entities, q); p.n != 3 || p.nextPK != "" {
				t.Errorf("%s: %+v, want all 3 entities in one page", q, p)
			}
			if p := rawQueryPage(t, srv, tables, q); p.n < 2 || p.nextT != "" {
				t.Errorf("Tables %s: %+v, want every table in one page", q, p)
			}
		}
		all := listAll(t, c, &aztables.ListEntitiesOptions{Top: to.Ptr(int32(5000))})
		if len(all) != 3 {
			t.Errorf("ListEntities Top=5000: %d entities, want 3", len(all))
		}
	})

	t.Run("Malformed", func(t *testing.T) {
		for _, v := range []string{"-1", "-0", "abc", "1.5", "%2B5", "%205", "0x10", "1e3"} {
			for _, path := range []string{entities, tables} {
				r := srv.do(t, rawReq{Method: http.MethodGet, Path: path, Query: "$top=" + v})
				requireRawErr(t, r, http.StatusBadRequest, "InvalidQueryParameterValue")
			}
		}
	})
}
