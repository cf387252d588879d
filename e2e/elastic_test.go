package e2e

// Elastic tables and time-to-live (issue 11) through the official Go SDK against the real
// binary, on whichever engine CERULEAN_TEST_ENGINE_ARGS selects: a table made elastic by
// the --elastic-tables rules, by the Create Table body (sent with package client, since the
// SDKs cannot add members to it) and by the settings endpoint; entities with table-default
// and per-entity TTLs visible before and invisible after their expiry on every path, while
// neighbours without a TTL remain; background removal and a restart in between.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/ceruleandb/cerulean/client"
)

// ttlMargin is how long after an entity's expiry a test looks for it to be gone. Expiry
// is the write's Timestamp plus the TTL on the engine's one clock (this machine's for both
// engines here), and a Timestamp is at most a few ticks ahead of the wall clock; the
// margin covers that and the request itself.
const ttlMargin = 250 * time.Millisecond

// settingsClient is a package client for the server's default account.
func settingsClient(t testing.TB, srv *server) *client.Client {
	t.Helper()
	a := srv.Default()
	c, err := client.New(srv.Endpoint(a.Name), a.Name, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sleepUntil sleeps until the wall clock reaches at.
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// addEntity inserts a map entity and fails the test on error.
func addEntity(t testing.TB, c *aztables.Client, e map[string]any) {
	t.Helper()
	if _, err := c.AddEntity(ctx(t), marshal(t, e), nil); err != nil {
		t.Fatalf("AddEntity(%v): %v", e, err)
	}
}

// requireAbsent asserts that GetEntity answers 404 ResourceNotFound, as for an entity that
// never existed.
func requireAbsent(t testing.TB, c *aztables.Client, pk, rk string) {
	t.Helper()
	_, err := c.GetEntity(ctx(t), pk, rk, nil)
	if err == nil {
		t.Errorf("GetEntity(%q,%q) found an entity that should have expired", pk, rk)
		return
	}
	requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
}

// requirePresent asserts that GetEntity finds the entity.
func requirePresent(t testing.TB, c *aztables.Client, pk, rk string) {
	t.Helper()
	if _, err := c.GetEntity(ctx(t), pk, rk, nil); err != nil {
		t.Errorf("GetEntity(%q,%q): %v", pk, rk, err)
	}
}

// rowKeysOf returns the RowKeys of entity payloads, in order.
func rowKeysOf(t testing.TB, ents [][]byte) []string {
	t.Helper()
	out := make([]string, len(ents))
	for i, b := range ents {
		out[i] = decodeEDM(t, b).RowKey
	}
	return out
}

// visibleBefore reports whether the "before expiry" checks of entities written at or after
// start with ttl can still run; on a machine so slow that they cannot, the test says so
// and checks only what follows expiry.
func visibleBefore(t testing.TB, start time.Time, ttl time.Duration) bool {
	t.Helper()
	if time.Since(start) > ttl-ttlMargin {
		t.Logf("%v passed since the writes: too late to check them before their %v time-to-live", time.Since(start), ttl)
		return false
	}
	return true
}

func TestElasticTables(t *testing.T) {
	srv := startServer(t, withArgs("--elastic-tables", "ttlpat*:2,ttlnever*:-1:Expiry"))
	svc := newServiceClient(t, srv)
	sc := settingsClient(t, srv)

	// A table named by a rule is elastic with the rule's settings when the SDK creates it;
	// a Create Table body that gives settings wins over the rules.
	t.Run("ByPattern", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			name string
			want client.TableSettings
		}{
			{"ttlpat" + runID + "a", client.TableSettings{Elastic: true, DefaultTimeToLive: 2, TimeToLiveProperty: "TTLInSeconds"}},
			{"TTLNever" + runID + "b", client.TableSettings{Elastic: true, DefaultTimeToLive: -1, TimeToLiveProperty: "Expiry"}},
			{"other" + runID + "c", client.TableSettings{}},
		} {
			if _, err := svc.CreateTable(ctx(t), c.name, nil); err != nil {
				t.Fatalf("CreateTable(%s): %v", c.name, err)
			}
			got, err := sc.GetTableSettings(ctx(t), c.name)
			if err != nil || got.Name != c.name || !reflect.DeepEqual(got.TableSettings, c.want) {
				t.Errorf("settings of %s = %+v, %v; want %+v", c.name, got, err, c.want)
			}
		}
		name := "ttlpat" + runID + "d"
		if err := sc.CreateTable(ctx(t), name, &client.TableSettings{}); err != nil {
			t.Fatal(err)
		}
		if got, err := sc.GetTableSettings(ctx(t), name); err != nil || !reflect.DeepEqual(got.TableSettings, client.TableSettings{}) {
			t.Errorf("settings of %s created standard by its body: %+v, %v", name, got, err)
		}
		// The SDK's listing sees table names only; $select shows the settings.
		p := svc.NewListTablesPager(&aztables.ListTablesOptions{Filter: to.Ptr("TableName eq '" + "ttlpat" + runID + "a'")})
		for p.More() {
			page, err := p.NextPage(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Tables) != 1 || *page.Tables[0].Name != "ttlpat"+runID+"a" {
				t.Errorf("ListTables: %+v", page.Tables)
			}
		}
		filter := "$filter=" + url.QueryEscape("TableName eq 'ttlpat"+runID+"a'")
		r := srv.do(t, rawReq{Method: "GET", Path: "/" + srv.Default().Name + "/Tables", Query: filter,
			Header: map[string]string{"Accept": "application/json;odata=nometadata"}})
		if want := `{"value":[{"TableName":"ttlpat` + runID + `a"}]}`; string(r.Body) != want {
			t.Errorf("Query Tables without $select: %s; want %s", r.Body, want)
		}
		r = srv.do(t, rawReq{Method: "GET", Path: "/" + srv.Default().Name + "/Tables", Query: "$select=TableName,Elastic,DefaultTimeToLive&" + filter,
			Header: map[string]string{"Accept": "application/json;odata=nometadata"}})
		if want := `{"value":[{"TableName":"ttlpat` + runID + `a","Elastic":true,"DefaultTimeToLive":2}]}`; string(r.Body) != want {
			t.Errorf("Query Tables with $select: %s; want %s", r.Body, want)
		}
	})

	// Table default and per-entity TTLs on Get, filtered and paged queries, while
	// neighbours without a TTL remain; an update restarts the clock.
	t.Run("Visibility", func(t *testing.T) {
		t.Parallel()
		name := "ttlpat" + runID + "vis"
		if _, err := svc.CreateTable(ctx(t), name, nil); err != nil {
			t.Fatal(err)
		}
		c := svc.NewClient(name)
		const ttl = 2 * time.Second
		start := time.Now()
		// r00…r09: the even ones live 600 s (their own TTL), the odd ones the table's 2 s.
		for i := range 10 {
			e := map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprintf("r%02d", i), "Kind": "page"}
			if i%2 == 0 {
				e["TTLInSeconds"] = 600
			}
			addEntity(t, c, e)
		}
		addEntity(t, c, map[string]any{"PartitionKey": "q", "RowKey": "never", "Kind": "x", "TTLInSeconds": -1})
		addEntity(t, c, map[string]any{"PartitionKey": "q", "RowKey": "short", "Kind": "x", "TTLInSeconds": 1})
		addEntity(t, c, map[string]any{"PartitionKey": "q", "RowKey": "default", "Kind": "x"})
		addEntity(t, c, map[string]any{"PartitionKey": "q", "RowKey": "renewed", "Kind": "x"})
		addEntity(t, c, map[string]any{"PartitionKey": "q", "RowKey": "int64", "Kind": "x",
			"TTLInSeconds@odata.type": "Edm.Int64", "TTLInSeconds": "1"})
		// A query paged 3 at a time: the first page before the expiry, the rest after.
		pager := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: to.Ptr("Kind eq 'page'"), Top: to.Ptr(int32(3))})
		var paged [][]byte
		before := visibleBefore(t, start, time.Second)
		if before {
			for _, rk := range []string{"never", "short", "default", "renewed", "int64"} {
				requirePresent(t, c, "q", rk)
			}
			f := "PartitionKey eq 'q' and Kind eq 'x'"
			if got := rowKeysOf(t, listAll(t, c, &aztables.ListEntitiesOptions{Filter: &f})); len(got) != 5 {
				t.Errorf("filtered query before expiry: %v", got)
			}
			page, err := pager.NextPage(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			paged = append(paged, page.Entities...)
			if got := rowKeysOf(t, page.Entities); !slices.Equal(got, []string{"r00", "r01", "r02"}) {
				t.Errorf("first page before expiry: %v", got)
			}
		}
		// Restart the clock of "renewed" half-way: a merge that changes nothing else.
		sleepUntil(start.Add(ttl / 2))
		renewed := time.Now()
		if _, err := c.UpsertEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "q", "RowKey": "renewed"}),
			&aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
			t.Fatal(err)
		}

		sleepUntil(time.Now().Add(ttl/2 + ttlMargin)) // start+ttl+margin at the latest
		for _, rk := range []string{"short", "default", "int64"} {
			requireAbsent(t, c, "q", rk)
		}
		requirePresent(t, c, "q", "never")
		if time.Since(renewed) < ttl-ttlMargin {
			requirePresent(t, c, "q", "renewed")
		}
		for pager.More() {
			page, err := pager.NextPage(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			paged = append(paged, page.Entities...)
		}
		// The continuation after r02 points at r03, expired by now: it is skipped, and
		// no page returns an expired entity.
		wantPaged := []string{"r00", "r02", "r04", "r06", "r08"}
		if before {
			wantPaged = []string{"r00", "r01", "r02", "r04", "r06", "r08"}
		}
		if got := rowKeysOf(t, paged); !slices.Equal(got, wantPaged) {
			t.Errorf("query paged across the expiry: %v; want %v", got, wantPaged)
		}
		all := slices.DeleteFunc(rowKeysOf(t, listAll(t, c, nil)), func(s string) bool { return s == "renewed" })
		sort.Strings(all)
		if want := []string{"never", "r00", "r02", "r04", "r06", "r08"}; !slices.Equal(all, want) {
			t.Errorf("all entities after the expiry: %v; want %v", all, want)
		}
		f := "Kind eq 'x'"
		got := rowKeysOf(t, listAll(t, c, &aztables.ListEntitiesOptions{Filter: &f}))
		if !slices.Contains(got, "never") || slices.Contains(got, "short") || slices.Contains(got, "default") {
			t.Errorf("filtered query after the expiry: %v", got)
		}

		// The renewed entity expires its TTL after the merge.
		sleepUntil(renewed.Add(ttl + ttlMargin))
		requireAbsent(t, c, "q", "renewed")
		requirePresent(t, c, "q", "never")
	})

	// Batches and single writes treat an expired entity as absent: an insert over it
	// succeeds, a write with If-Match fails as on a missing entity.
	t.Run("Preconditions", func(t *testing.T) {
		t.Parallel()
		name := tableName(t)
		if err := sc.CreateTable(ctx(t), name, &client.TableSettings{Elastic: true, DefaultTimeToLive: -1}); err != nil {
			t.Fatal(err)
		}
		c, rec := egtClient(t, srv, name)
		start := time.Now()
		etags := map[string]*azcore.ETag{}
		for _, rk := range []string{"x1", "x2", "x3", "x4", "x5", "x6"} {
			resp, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "b", "RowKey": rk, "V": 1, "TTLInSeconds": 1}), nil)
			if err != nil {
				t.Fatal(err)
			}
			etags[rk] = &resp.ETag
		}
		addEntity(t, c, map[string]any{"PartitionKey": "b", "RowKey": "keep", "V": 1})
		keepTag := egtCurrentETag(t, c, "b", "keep")
		if visibleBefore(t, start, time.Second) {
			_, err := c.SubmitTransaction(ctx(t), []aztables.TransactionAction{
				egtAct(t, aztables.TransactionTypeAdd, egtEnt("b", "x1", "V", 2), nil),
			}, nil)
			egtRequireFailure(t, err, rec, http.StatusConflict, "EntityAlreadyExists", 0)
		}
		sleepUntil(start.Add(time.Second + ttlMargin))

		// An insert over an expired entity succeeds, in a batch with a neighbour's
		// conditional update.
		_, err := c.SubmitTransaction(ctx(t), []aztables.TransactionAction{
			egtAct(t, aztables.TransactionTypeAdd, egtEnt("b", "x1", "V", 2), nil),
			egtAct(t, aztables.TransactionTypeUpdateMerge, egtEnt("b", "keep", "V", 2), keepTag),
		}, nil)
		egtRequireSuccess(t, err, rec, 2)
		egtRequireProps(t, c, "b", "x1", map[string]any{"V": int32(2)}, "")
		// Updates with If-Match — its old ETag or * — fail as on a missing entity, and
		// the whole changeset with them.
		for _, tag := range []*azcore.ETag{etags["x2"], egtETag("*")} {
			_, err = c.SubmitTransaction(ctx(t), []aztables.TransactionAction{
				egtAct(t, aztables.TransactionTypeInsertMerge, egtEnt("b", "new1", "V", 1), nil),
				egtAct(t, aztables.TransactionTypeUpdateReplace, egtEnt("b", "x2", "V", 3), tag),
			}, nil)
			egtRequireFailure(t, err, rec, http.StatusNotFound, "ResourceNotFound", 1)
			requireAbsent(t, c, "b", "new1")
		}
		_, err = c.SubmitTransaction(ctx(t), []aztables.TransactionAction{
			egtAct(t, aztables.TransactionTypeDelete, egtEnt("b", "x3"), etags["x3"]),
		}, nil)
		egtRequireFailure(t, err, rec, http.StatusNotFound, "ResourceNotFound", 0)

		// Single writes: If-Match fails, an upsert and an insert create the entity anew.
		_, err = c.UpdateEntity(ctx(t), marshal(t, egtEnt("b", "x4", "V", 3)), &aztables.UpdateEntityOptions{IfMatch: etags["x4"], UpdateMode: aztables.UpdateModeReplace})
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
		_, err = c.UpdateEntity(ctx(t), marshal(t, egtEnt("b", "x4", "V", 3)), &aztables.UpdateEntityOptions{IfMatch: egtETag("*"), UpdateMode: aztables.UpdateModeMerge})
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
		_, err = c.DeleteEntity(ctx(t), "b", "x4", &aztables.DeleteEntityOptions{IfMatch: etags["x4"]})
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
		if _, err := c.UpsertEntity(ctx(t), marshal(t, egtEnt("b", "x5", "V", 4)), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
			t.Fatalf("upsert over an expired entity: %v", err)
		}
		// A merge over an expired entity starts from nothing: the old TTL is gone.
		egtRequireProps(t, c, "b", "x5", map[string]any{"V": int32(4)}, "")
		addEntity(t, c, egtEnt("b", "x6", "V", 5))
		egtRequireProps(t, c, "b", "x6", map[string]any{"V": int32(5)}, "")
		egtRequireProps(t, c, "b", "keep", map[string]any{"V": int32(2)}, "")
	})

	// A table made elastic by the settings endpoint: entities written before keep the
	// expiry they were written with (none), entities written after get the new default.
	t.Run("BySettingsEndpoint", func(t *testing.T) {
		t.Parallel()
		c, name := newTable(t, svc)
		addEntity(t, c, map[string]any{"PartitionKey": "s", "RowKey": "before", "TTLInSeconds": 1})
		if err := sc.SetTableSettings(ctx(t), name, client.TableSettings{Elastic: true, DefaultTimeToLive: 1}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		addEntity(t, c, map[string]any{"PartitionKey": "s", "RowKey": "after"})
		addEntity(t, c, map[string]any{"PartitionKey": "s", "RowKey": "afterNever", "TTLInSeconds": -1})
		if visibleBefore(t, start, time.Second) {
			requirePresent(t, c, "s", "after")
		}
		sleepUntil(start.Add(time.Second + ttlMargin))
		requireAbsent(t, c, "s", "after")
		requirePresent(t, c, "s", "afterNever")
		e, _ := getEDM(t, c, "s", "before")
		if e.Properties["TTLInSeconds"] != int32(1) {
			t.Errorf("entity written before the table became elastic: %v", e.Properties)
		}
		// Back to standard: TTLInSeconds is an ordinary property again.
		if err := sc.SetTableSettings(ctx(t), name, client.TableSettings{}); err != nil {
			t.Fatal(err)
		}
		addEntity(t, c, map[string]any{"PartitionKey": "s", "RowKey": "standard", "TTLInSeconds": 0})
	})

	// Invalid TTL values are refused with 400 naming the property, on single writes and in
	// batches, with the table's configured property name too.
	t.Run("InvalidTTL", func(t *testing.T) {
		t.Parallel()
		name := tableName(t)
		if err := sc.CreateTable(ctx(t), name, &client.TableSettings{Elastic: true, DefaultTimeToLive: 60}); err != nil {
			t.Fatal(err)
		}
		c, rec := egtClient(t, srv, name)
		for i, v := range []map[string]any{
			{"TTLInSeconds": 0},
			{"TTLInSeconds": -2},
			{"TTLInSeconds": "60"},
			{"TTLInSeconds": 1.5},
			{"TTLInSeconds": true},
			{"TTLInSeconds@odata.type": "Edm.Int64", "TTLInSeconds": "2147483648"},
			{"TTLInSeconds@odata.type": "Edm.Double", "TTLInSeconds": 60},
		} {
			e := map[string]any{"PartitionKey": "i", "RowKey": fmt.Sprint(i)}
			for k, x := range v {
				e[k] = x
			}
			_, err := c.AddEntity(ctx(t), marshal(t, e), nil)
			re := requireRespErr(t, err, http.StatusBadRequest, "InvalidInput")
			if body, _ := readErrorMessage(re); !strings.Contains(body, "'TTLInSeconds'") {
				t.Errorf("%v: message %q does not name the property", v, body)
			}
			_, err = c.UpsertEntity(ctx(t), marshal(t, e), nil)
			requireRespErr(t, err, http.StatusBadRequest, "InvalidInput")
		}
		_, err := c.SubmitTransaction(ctx(t), []aztables.TransactionAction{
			egtAct(t, aztables.TransactionTypeAdd, egtEnt("i", "ok", "TTLInSeconds", 5), nil),
			egtAct(t, aztables.TransactionTypeAdd, egtEnt("i", "bad", "TTLInSeconds", 0), nil),
		}, nil)
		egtRequireFailure(t, err, rec, http.StatusBadRequest, "InvalidInput", 1)
		requireAbsent(t, c, "i", "ok")
		if ex, _ := rec.Last(); !strings.Contains(string(ex.Body), "'TTLInSeconds'") {
			t.Errorf("batch failure does not name the property: %s", ex.Body)
		}
		// Another property name: the configured one is checked, TTLInSeconds is ordinary.
		if err := sc.SetTableSettings(ctx(t), name, client.TableSettings{Elastic: true, DefaultTimeToLive: 60, TimeToLiveProperty: "Expiry"}); err != nil {
			t.Fatal(err)
		}
		_, err = c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "i", "RowKey": "e", "Expiry": 0}), nil)
		re := requireRespErr(t, err, http.StatusBadRequest, "InvalidInput")
		if body, _ := readErrorMessage(re); !strings.Contains(body, "'Expiry'") {
			t.Errorf("message %q does not name the property Expiry", body)
		}
		addEntity(t, c, map[string]any{"PartitionKey": "i", "RowKey": "t", "TTLInSeconds": "any"})
	})

	// On a standard table TTLInSeconds is an ordinary property of any type and value, and
	// nothing expires.
	t.Run("StandardTable", func(t *testing.T) {
		t.Parallel()
		c, _ := newTable(t, svc)
		vals := []any{0, -5, 1, "soon", 2.5, true}
		for i, v := range vals {
			addEntity(t, c, map[string]any{"PartitionKey": "std", "RowKey": fmt.Sprint(i), "TTLInSeconds": v})
		}
		time.Sleep(time.Second + ttlMargin)
		for i, v := range vals {
			e, _ := getEDM(t, c, "std", fmt.Sprint(i))
			got, _ := json.Marshal(e.Properties["TTLInSeconds"])
			want, _ := json.Marshal(v)
			if string(got) != string(want) {
				t.Errorf("TTLInSeconds %v on a standard table read back as %s", v, got)
			}
		}
	})
}

// readErrorMessage returns the OData error message of an SDK error response.
func readErrorMessage(re *azcore.ResponseError) (string, error) {
	if re.RawResponse == nil {
		return "", fmt.Errorf("no response")
	}
	var body struct {
		OData struct {
			Message struct{ Value string } `json:"message"`
		} `json:"odata.error"`
	}
	b, err := runtime.Payload(re.RawResponse)
	if err != nil {
		return "", err
	}
	err = json.Unmarshal(b, &body)
	return body.OData.Message.Value, err
}
