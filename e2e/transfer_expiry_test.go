package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/client"
)

// tableExpiries reads a whole table with the expiry annotation asked for: entity key (as
// sdkEntities names it) → its cerulean.expiry, "" for an entity that never expires.
func tableExpiries(t testing.TB, srv *server, table string) map[string]string {
	t.Helper()
	out := map[string]string{}
	next := url.Values{}
	for {
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + srv.Default().Name + "/" + table + "()", Query: next.Encode(), Header: map[string]string{"Prefer": preferExpiry}})
		requireStatus(t, r, http.StatusOK, "query "+table)
		if r.Header.Get("Preference-Applied") != preferExpiry {
			t.Fatalf("query %s: Preference-Applied %q", table, r.Header.Get("Preference-Applied"))
		}
		var body struct{ Value []map[string]json.RawMessage }
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		for _, m := range body.Value {
			pk, _ := rawString(t, m, "PartitionKey")
			rk, _ := rawString(t, m, "RowKey")
			exp, _ := rawString(t, m, "cerulean.expiry")
			out[fmt.Sprintf("%q/%q", pk, rk)] = exp
		}
		npk, nrk := r.Header.Get("x-ms-continuation-NextPartitionKey"), r.Header.Get("x-ms-continuation-NextRowKey")
		if npk == "" {
			return out
		}
		next = url.Values{"NextPartitionKey": {npk}, "NextRowKey": {nrk}}
	}
}

// sameExpiries fails unless two tables' entities have exactly the same expiries.
func sameExpiries(t testing.TB, what string, want, got map[string]string) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		keys := make([]string, 0, len(want)+len(got))
		for k := range want {
			keys = append(keys, k)
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			if want[k] != got[k] {
				t.Errorf("%s: entity %s expires at %q on the target, %q at the source", what, k, got[k], want[k])
			}
		}
	}
}

// The two defects of carrying a computed expiry (issue 42, item 7, second round), through
// copy and through export then import, on whichever engine the servers run:
//
//   - Grown: written while time-to-live was off, then given a default TTL of 3 s. Its old
//     entities never expire at the source (they keep the expiry they were written with:
//     none), but Timestamp + 3 s is past: a copy that computes the expiry did not copy
//     them (silent loss), and one with a TTL property written while time-to-live was off
//     ("not a ttl") was refused by the target. Every one must arrive, without an expiry,
//     its properties unchanged (no TTL property added or rewritten).
//   - Shrunk: written with a default TTL of an hour (and one entity with its own 2 h),
//     then time-to-live turned off. Its entities still expire at the source; a computing
//     copy wrote them as never expiring. They must arrive with the source's expiry.
//
// And the entity written after the change in each table moves exactly too.
func TestTransferExactExpiry(t *testing.T) {
	src := startOwnServer(t)
	sc := settingsClient(t, src)
	svc := newServiceClient(t, src)
	if err := sc.CreateTable(ctx(t), "Grown", &client.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	if err := sc.CreateTable(ctx(t), "Shrunk", &client.TableSettings{Elastic: true, DefaultTimeToLive: 3600}); err != nil {
		t.Fatal(err)
	}
	fillEntities(t, svc.NewClient("Grown"), []string{
		`{"PartitionKey":"old","RowKey":"1","V":1}`,
		`{"PartitionKey":"old","RowKey":"2","TTLInSeconds":5,"V":2}`,
		`{"PartitionKey":"old","RowKey":"3","TTLInSeconds":"not a ttl"}`,
	})
	fillEntities(t, svc.NewClient("Shrunk"), []string{
		`{"PartitionKey":"old","RowKey":"1","V":1}`,
		`{"PartitionKey":"old","RowKey":"2","TTLInSeconds@odata.type":"Edm.Int64","TTLInSeconds":"7200"}`,
	})
	if err := sc.SetTableSettings(ctx(t), "Grown", client.TableSettings{Elastic: true, DefaultTimeToLive: 3}); err != nil {
		t.Fatal(err)
	}
	if err := sc.SetTableSettings(ctx(t), "Shrunk", client.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	fillEntities(t, svc.NewClient("Grown"), []string{`{"PartitionKey":"new","RowKey":"1","TTLInSeconds":3600}`})
	fillEntities(t, svc.NewClient("Shrunk"), []string{`{"PartitionKey":"new","RowKey":"1","TTLInSeconds":1}`})
	time.Sleep(4 * time.Second) // past Timestamp + 3 s for Grown's old entities

	// The source as it is: Grown's old entities never expire, Shrunk's do.
	srcExp := map[string]map[string]string{"Grown": tableExpiries(t, src, "Grown"), "Shrunk": tableExpiries(t, src, "Shrunk")}
	for _, k := range []string{`"old"/"1"`, `"old"/"2"`, `"old"/"3"`} {
		if e, ok := srcExp["Grown"][k]; !ok || e != "" {
			t.Fatalf("source Grown %s: present %v, expiry %q; want present without one", k, ok, e)
		}
	}
	for _, k := range []string{`"old"/"1"`, `"old"/"2"`} {
		if srcExp["Shrunk"][k] == "" {
			t.Fatalf("source Shrunk %s has no expiry", k)
		}
	}
	if srcExp["Grown"][`"new"/"1"`] == "" || srcExp["Shrunk"][`"new"/"1"`] != "" {
		t.Fatalf("source entities written after the change: %v", srcExp)
	}

	check := func(t *testing.T, dst *server) {
		t.Helper()
		for _, name := range []string{"Grown", "Shrunk"} {
			want, got := sdkEntities(t, svc.NewClient(name)), sdkEntities(t, newServiceClient(t, dst).NewClient(name))
			if len(got) != len(want) {
				t.Errorf("%s: %d entities on the target, %d at the source", name, len(got), len(want))
			}
			sameEntities(t, name, want, got)
			sameExpiries(t, name, srcExp[name], tableExpiries(t, dst, name))
		}
	}
	t.Run("copy", func(t *testing.T) {
		dst := startOwnServer(t)
		st, _, errOut := runTool(t, time.Minute, nil, "copy", "--from", connString(src), "--to", connString(dst))
		if st != 0 || !strings.Contains(errOut, "7 entities") {
			t.Fatalf("copy: status %d: %s", st, errOut)
		}
		check(t, dst)
	})
	t.Run("export and import", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "tables.jsonl")
		if st, _, errOut := runTool(t, time.Minute, nil, "export", "--from", connString(src), "--out", file, "--quiet"); st != 0 {
			t.Fatalf("export: status %d: %s", st, errOut)
		}
		b, _ := os.ReadFile(file)
		if n := strings.Count(string(b), `"odata.expiry"`); n != 3 {
			t.Errorf("%d entities carry an expiry in the file, want 3 (Grown new, Shrunk old 1 and 2):\n%s", n, b)
		}
		if strings.Contains(string(b), `"RowKey":"1","V@odata.type":"Edm.Int32","V":1,"TTLInSeconds"`) {
			t.Errorf("the export added a TTL property:\n%s", b)
		}
		dst := startOwnServer(t)
		st, _, errOut := runTool(t, time.Minute, nil, "import", "--to", connString(dst), "--in", file)
		if st != 0 || !strings.Contains(errOut, "7 entities") {
			t.Fatalf("import: status %d: %s", st, errOut)
		}
		check(t, dst)
	})
	// A table made standard again keeps its entities' expiries; a standard target table
	// cannot be given them, so the run stops and says why.
	t.Run("standard table keeping expiries", func(t *testing.T) {
		if err := sc.CreateTable(ctx(t), "Was", &client.TableSettings{Elastic: true, DefaultTimeToLive: 3600}); err != nil {
			t.Fatal(err)
		}
		fillEntities(t, svc.NewClient("Was"), []string{`{"PartitionKey":"p","RowKey":"1"}`})
		if err := sc.SetTableSettings(ctx(t), "Was", client.TableSettings{}); err != nil {
			t.Fatal(err)
		}
		dst := startOwnServer(t)
		st, _, errOut := runTool(t, time.Minute, nil, "copy", "--from", connString(src), "--to", connString(dst), "--table", "Was", "--quiet", "--checkpoint", filepath.Join(t.TempDir(), "was.checkpoint"))
		if st != 1 || !strings.Contains(errOut, "keeps an expiry") || !strings.Contains(errOut, "--settings=false") {
			t.Errorf("copy of a standard table keeping an expiry: status %d: %s", st, errOut)
		}
		st, _, errOut = runTool(t, time.Minute, nil, "copy", "--from", connString(src), "--to", connString(dst), "--table", "Was", "--settings=false", "--quiet")
		if st != 0 {
			t.Errorf("copy --settings=false: status %d: %s", st, errOut)
		}
	})
}

// A Cerulean that does not answer the expiry annotation (an older build; simulated by a
// proxy that drops Prefer) cannot show or take exact expiries: an elastic table is
// refused from it and to it, with a message that says so and what to do; a standard
// table still moves, and --settings=false moves the entities alone.
func TestTransferExpiryOlderServer(t *testing.T) {
	real := startOwnServer(t)
	sc := settingsClient(t, real)
	if err := sc.CreateTable(ctx(t), "Events", &client.TableSettings{Elastic: true, DefaultTimeToLive: 3600}); err != nil {
		t.Fatal(err)
	}
	if err := sc.CreateTable(ctx(t), "Plain", nil); err != nil {
		t.Fatal(err)
	}
	fillEntities(t, newServiceClient(t, real).NewClient("Events"), []string{`{"PartitionKey":"p","RowKey":"1"}`})
	fillEntities(t, newServiceClient(t, real).NewClient("Plain"), []string{`{"PartitionKey":"p","RowKey":"1"}`})
	old := func(srv *server) string {
		u, _ := url.Parse(srv.BaseURL())
		p := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host
			r.Out.Header.Del("Prefer") // an older Cerulean knows no include-annotations
		}}
		ps := httptest.NewServer(p)
		t.Cleanup(ps.Close)
		a := srv.Default()
		return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=%s/%s", a.Name, a.Key, ps.URL, a.Name)
	}
	oldSrc := old(real)
	for _, args := range [][]string{
		{"copy", "--from", oldSrc, "--to", connString(startOwnServer(t)), "--table", "Events", "--checkpoint", filepath.Join(t.TempDir(), "c.checkpoint")},
		{"export", "--from", oldSrc, "--table", "Events", "--out", filepath.Join(t.TempDir(), "e.jsonl")},
	} {
		st, _, errOut := runTool(t, time.Minute, nil, append(args, "--quiet")...)
		if st != 1 || !strings.Contains(errOut, "does not show entities' exact expiries") || !strings.Contains(errOut, "--settings=false") {
			t.Errorf("%s from an older Cerulean: status %d: %s", args[0], st, errOut)
		}
	}
	dst := startOwnServer(t)
	st, _, errOut := runTool(t, time.Minute, nil, "copy", "--from", oldSrc, "--to", connString(dst), "--table", "Plain", "--quiet")
	if st != 0 {
		t.Errorf("copy of a standard table from an older Cerulean: status %d: %s", st, errOut)
	}
	st, _, errOut = runTool(t, time.Minute, nil, "copy", "--from", oldSrc, "--to", connString(dst), "--table", "Events", "--settings=false", "--quiet")
	if st != 0 {
		t.Errorf("copy --settings=false from an older Cerulean: status %d: %s", st, errOut)
	}
	oldDst := old(startOwnServer(t))
	st, _, errOut = runTool(t, time.Minute, nil, "copy", "--from", connString(real), "--to", oldDst, "--table", "Events", "--quiet", "--checkpoint", filepath.Join(t.TempDir(), "d.checkpoint"))
	if st != 1 || !strings.Contains(errOut, "the target "+oldCerulean) {
		t.Errorf("copy to an older Cerulean: status %d: %s", st, errOut)
	}
}

// oldCerulean is the tools' wording for a Cerulean without the extension.
const oldCerulean = "does not show entities' exact expiries"
