package e2e

// An entity's exact expiry on the wire (docs/compatibility.md "An entity's exact expiry"), through raw HTTP and the
// Go SDK: the cerulean.expiry annotation only when Prefer asks for it, on point reads,
// queries (every metadata level, $select) and a $batch retrieve; x-cerulean-expiry on
// every write kind, alone and in a $batch changeset, in place of the computed expiry on
// elastic tables whatever their time-to-live; refusals with the right code.

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/entity"
)

// preferExpiry asks for the expiry annotation.
const preferExpiry = `odata.include-annotations="cerulean.expiry"`

// expiryText is an instant as the annotation and the header write it.
func expiryText(t time.Time) string { return entity.FormatTicks(entity.TimeToTicks(t)) }

// readExpiry reads one entity with the annotation asked for and returns the annotation
// ("" when absent) and the answer's body.
func readExpiry(t testing.TB, srv *server, table, pk, rk string) (string, map[string]json.RawMessage) {
	t.Helper()
	r := srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(srv.Default().Name, table, pk, rk), Header: map[string]string{"Prefer": preferExpiry}})
	requireStatus(t, r, http.StatusOK, "GET "+pk+"/"+rk)
	if got := r.Header.Get("Preference-Applied"); got != preferExpiry {
		t.Errorf("GET %s/%s: Preference-Applied %q, want %q", pk, rk, got, preferExpiry)
	}
	m := rawObject(t, r.Body)
	s, _ := rawString(t, m, "cerulean.expiry")
	return s, m
}

// writeRaw sends one entity write with the headers given and returns the answer.
func writeRaw(t testing.TB, srv *server, method, table, pk, rk, body string, h map[string]string) rawResp {
	t.Helper()
	path := "/" + srv.Default().Name + "/" + table
	if method != http.MethodPost {
		path = entityPath(srv.Default().Name, table, pk, rk)
	}
	return srv.do(t, rawReq{Method: method, Path: path, Header: h, Body: []byte(body)})
}

func TestEntityExpiryWire(t *testing.T) {
	srv := startServer(t)
	sc := settingsClient(t, srv)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	on, off, std := tableName(t), tableName(t), tableName(t)
	for name, s := range map[string]*client.TableSettings{
		on:  {Elastic: true, DefaultTimeToLive: 3600},
		off: {Elastic: true},
		std: nil,
	} {
		if err := sc.CreateTable(ctx(t), name, s); err != nil {
			t.Fatal(err)
		}
	}
	t1 := time.Now().Add(48 * time.Hour).Truncate(time.Second).Add(1234567 * 100)
	at := func(d time.Duration) string { return expiryText(t1.Add(d)) }

	// Every write kind through raw HTTP: insert, update (PUT If-Match), merge (MERGE
	// If-Match), insert-or-replace, insert-or-merge; "never" on a table whose default
	// would give one; the TTL property left as it is, even a value time-to-live refuses.
	t.Run("single writes", func(t *testing.T) {
		h := func(v string) map[string]string { return map[string]string{"x-cerulean-expiry": v} }
		requireStatus(t, writeRaw(t, srv, http.MethodPost, on, "w", "insert", `{"PartitionKey":"w","RowKey":"insert","TTLInSeconds":"not a ttl"}`, h(at(0))), http.StatusCreated, "insert")
		requireStatus(t, writeRaw(t, srv, http.MethodPut, on, "w", "upsert", `{"TTLInSeconds":60}`, h("never")), http.StatusNoContent, "insert-or-replace")
		requireStatus(t, writeRaw(t, srv, "MERGE", on, "w", "upsertMerge", `{"X":1}`, h(at(time.Second))), http.StatusNoContent, "insert-or-merge")
		requireStatus(t, writeRaw(t, srv, http.MethodPost, on, "w", "computed", `{"PartitionKey":"w","RowKey":"computed"}`, nil), http.StatusCreated, "insert without")
		star := func(v string) map[string]string { return map[string]string{"x-cerulean-expiry": v, "If-Match": "*"} }
		requireStatus(t, writeRaw(t, srv, http.MethodPut, on, "w", "upsert", `{"Y":2}`, star(at(2*time.Second))), http.StatusNoContent, "update")
		requireStatus(t, writeRaw(t, srv, "MERGE", on, "w", "upsertMerge", `{"Y":3}`, star("never")), http.StatusNoContent, "merge")
		requireStatus(t, writeRaw(t, srv, http.MethodPatch, on, "w", "computed", `{"Y":4}`, star(at(3*time.Second))), http.StatusNoContent, "merge (PATCH)")
		for rk, want := range map[string]string{"insert": at(0), "upsert": at(2 * time.Second), "upsertMerge": "", "computed": at(3 * time.Second)} {
			if got, _ := readExpiry(t, srv, on, "w", rk); got != want {
				t.Errorf("%s: cerulean.expiry %q, want %q", rk, got, want)
			}
		}
		// The properties are what was written: the TTL property is not rewritten.
		_, m := readExpiry(t, srv, on, "w", "insert")
		if s, _ := rawString(t, m, "TTLInSeconds"); s != "not a ttl" {
			t.Errorf("insert: TTLInSeconds %q", s)
		}
		// A later write without the header computes the expiry again (Timestamp + 3600 s).
		requireStatus(t, writeRaw(t, srv, "MERGE", on, "w", "insert", `{"TTLInSeconds":120}`, map[string]string{"If-Match": "*"}), http.StatusNoContent, "merge without")
		got, m := readExpiry(t, srv, on, "w", "insert")
		ts, _ := rawString(t, m, "Timestamp")
		tsTicks, _ := entity.ParseDateTime(ts)
		if want := entity.FormatTicks(tsTicks + 120*10_000_000); got != want {
			t.Errorf("after a merge without the header: cerulean.expiry %q, want Timestamp + 120 s = %q", got, want)
		}
	})

	// Through the Go SDK: the header rides on the request (runtime.WithHTTPHeader), the
	// annotation comes back in the entity's JSON only when Prefer asks for it.
	t.Run("Go SDK", func(t *testing.T) {
		c := svc.NewClient(on)
		wctx := runtime.WithHTTPHeader(ctx(t), http.Header{"x-cerulean-expiry": {at(10 * time.Second)}})
		if _, err := c.AddEntity(wctx, []byte(`{"PartitionKey":"sdk","RowKey":"add"}`), nil); err != nil {
			t.Fatalf("AddEntity with x-cerulean-expiry: %v", err)
		}
		wctx = runtime.WithHTTPHeader(ctx(t), http.Header{"x-cerulean-expiry": {"never"}})
		if _, err := c.UpsertEntity(wctx, []byte(`{"PartitionKey":"sdk","RowKey":"upsert"}`), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
			t.Fatalf("UpsertEntity with x-cerulean-expiry: %v", err)
		}
		wctx = runtime.WithHTTPHeader(ctx(t), http.Header{"x-cerulean-expiry": {at(11 * time.Second)}})
		if _, err := c.UpdateEntity(wctx, []byte(`{"PartitionKey":"sdk","RowKey":"upsert","Z":1}`), &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
			t.Fatalf("UpdateEntity with x-cerulean-expiry: %v", err)
		}
		plain, err := c.GetEntity(ctx(t), "sdk", "add", nil)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(plain.Value), "cerulean.expiry") {
			t.Errorf("GetEntity without Prefer shows the annotation: %s", plain.Value)
		}
		rctx := runtime.WithHTTPHeader(ctx(t), http.Header{"Prefer": {preferExpiry}})
		got, err := c.GetEntity(rctx, "sdk", "add", nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := `"cerulean.expiry":"` + at(10*time.Second) + `"`; !strings.Contains(string(got.Value), want) {
			t.Errorf("GetEntity with Prefer: %s, want %s", got.Value, want)
		}
		seen := map[string]string{}
		pager := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: ptr("PartitionKey eq 'sdk'")})
		for pager.More() {
			page, err := pager.NextPage(rctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page.Entities {
				m := rawObject(t, e)
				rk, _ := rawString(t, m, "RowKey")
				seen[rk], _ = rawString(t, m, "cerulean.expiry")
			}
		}
		if seen["add"] != at(10*time.Second) || seen["upsert"] != at(11*time.Second) {
			t.Errorf("ListEntities with Prefer: %v", seen)
		}
		// The SDK reads such an entity back and writes it again: the annotation in a body is
		// refused as any invalid property name is (the SDK user asked for it).
		if _, err := c.UpsertEntity(ctx(t), got.Value, nil); statusOf(err) != http.StatusBadRequest {
			t.Errorf("writing back an entity with the annotation: %v, want 400", err)
		}
	})

	// Query Entities: the annotation on each entity with an expiry, at every metadata
	// level and with $select; none on one that never expires; nothing without Prefer or
	// when the preference excludes it.
	t.Run("queries", func(t *testing.T) {
		for _, e := range []struct{ rk, exp string }{{"a", at(20 * time.Second)}, {"b", "never"}} {
			requireStatus(t, writeRaw(t, srv, http.MethodPost, on, "q", e.rk, `{"PartitionKey":"q","RowKey":"`+e.rk+`","V":1}`, map[string]string{"x-cerulean-expiry": e.exp}), http.StatusCreated, "insert "+e.rk)
		}
		query := func(accept, prefer, sel string) rawResp {
			q := "$filter=" + url.QueryEscape("PartitionKey eq 'q'")
			if sel != "" {
				q += "&$select=" + sel
			}
			h := map[string]string{"Accept": accept}
			if prefer != "" {
				h["Prefer"] = prefer
			}
			r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/" + on + "()", Query: q, Header: h})
			requireStatus(t, r, http.StatusOK, "query")
			return r
		}
		for _, level := range []string{"nometadata", "minimalmetadata", "fullmetadata"} {
			for _, sel := range []string{"", "V"} {
				r := query("application/json;odata="+level, preferExpiry, sel)
				var body struct{ Value []map[string]json.RawMessage }
				if err := json.Unmarshal(r.Body, &body); err != nil || len(body.Value) != 2 {
					t.Fatalf("%s $select=%q: %s (%v)", level, sel, r.Body, err)
				}
				if a, _ := rawString(t, body.Value[0], "cerulean.expiry"); a != at(20*time.Second) {
					t.Errorf("%s $select=%q: a's annotation %q, want %q: %s", level, sel, a, at(20*time.Second), r.Body)
				}
				if _, has := body.Value[1]["cerulean.expiry"]; has {
					t.Errorf("%s $select=%q: b never expires and has the annotation: %s", level, sel, r.Body)
				}
				if got := r.Header.Get("Preference-Applied"); got != preferExpiry {
					t.Errorf("%s: Preference-Applied %q", level, got)
				}
			}
		}
		for prefer, want := range map[string]bool{
			"":                                     false,
			"return-no-content":                    false,
			`odata.include-annotations="*"`:        true,
			`odata.include-annotations=cerulean.*`: true,
			`return-content, odata.include-annotations="odata.*,cerulean.expiry"`: true,
			`odata.include-annotations="*,-cerulean.*"`:                           false,
			`odata.include-annotations="-*,cerulean.expiry"`:                      true,
			`odata.include-annotations="odata.*"`:                                 false,
			`Include-Annotations="cerulean.expiry"`:                               true,
		} {
			r := query("application/json;odata=minimalmetadata", prefer, "")
			if got := strings.Contains(string(r.Body), `"cerulean.expiry"`); got != want {
				t.Errorf("Prefer %q: annotation %v, want %v: %s", prefer, got, want, r.Body)
			}
			if got := r.Header.Get("Preference-Applied") != ""; got != want {
				t.Errorf("Prefer %q: Preference-Applied %q", prefer, r.Header.Get("Preference-Applied"))
			}
		}
		// A $batch retrieve answers the annotation its part asks for.
		bb := "batch_expiry_retrieve"
		body := "--" + bb + "\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nGET " + egtKeyURL(srv, on, "q", "a") +
			" HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\nPrefer: " + preferExpiry + "\r\n\r\n--" + bb + "--\r\n"
		r := egtPost(t, srv, []byte(body), bb, nil)
		if !strings.Contains(string(r.Body), `"cerulean.expiry":"`+at(20*time.Second)+`"`) || !strings.Contains(string(r.Body), "Preference-Applied: "+preferExpiry) {
			t.Errorf("$batch retrieve with Prefer: %s", r.Body)
		}
	})

	// $batch: the header on each changeset operation; one bad value fails the changeset
	// naming its operation, with nothing written.
	t.Run("batch", func(t *testing.T) {
		u := srv.BaseURL() + "/" + acct + "/" + on
		jsonH := [2]string{"Content-Type", "application/json"}
		exp := func(v string) [2]string { return [2]string{"x-cerulean-expiry", v} }
		parts := []egtPart{
			{Method: "POST", URL: u, Header: [][2]string{jsonH, exp(at(30 * time.Second)), {"Prefer", "return-no-content"}}, Body: `{"PartitionKey":"b","RowKey":"insert"}`},
			{Method: "PUT", URL: egtKeyURL(srv, on, "b", "upsert"), Header: [][2]string{jsonH, exp("never")}, Body: `{"V":1}`},
			{Method: "MERGE", URL: egtKeyURL(srv, on, "b", "merge"), Header: [][2]string{jsonH, exp(at(31 * time.Second))}, Body: `{"V":1}`},
			{Method: "PUT", URL: egtKeyURL(srv, on, "b", "computed"), Header: [][2]string{jsonH}, Body: `{"V":1}`},
		}
		bad := append(append([]egtPart(nil), parts...), egtPart{Method: "PUT", URL: egtKeyURL(srv, on, "b", "bad"), Header: [][2]string{jsonH, exp("tomorrow")}, Body: `{}`})
		b, bb := buildBatchBody(bad)
		r := egtPost(t, srv, b, bb, nil)
		subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
		if len(subs) != 1 || subs[0].Status != http.StatusBadRequest || !strings.Contains(string(subs[0].Body), `"InvalidHeaderValue"`) || !strings.Contains(string(subs[0].Body), `"4:`) {
			t.Fatalf("a changeset with a bad x-cerulean-expiry on operation 4: %s", r.Body)
		}
		requireAbsent(t, svc.NewClient(on), "b", "insert")
		b, bb = buildBatchBody(parts)
		r = egtPost(t, srv, b, bb, nil)
		for i, s := range parseBatchResponse(t, r.Status, r.Header, r.Body, false) {
			if s.Status/100 != 2 {
				t.Fatalf("operation %d: %d %s", i, s.Status, s.Body)
			}
		}
		for rk, want := range map[string]string{"insert": at(30 * time.Second), "upsert": "", "merge": at(31 * time.Second)} {
			if got, _ := readExpiry(t, srv, on, "b", rk); got != want {
				t.Errorf("batch %s: cerulean.expiry %q, want %q", rk, got, want)
			}
		}
		if got, _ := readExpiry(t, srv, on, "b", "computed"); got == "" {
			t.Error("batch computed: no expiry on a table with a default")
		}
		// The data tools' client sends it the same way.
		if err := sc.Batch(ctx(t), on, client.Replace, []client.BatchEntity{
			{PartitionKey: "c", RowKey: "1", Body: []byte(`{"PartitionKey":"c","RowKey":"1"}`), Expiry: entity.TimeToTicks(t1)},
			{PartitionKey: "c", RowKey: "2", Body: []byte(`{"PartitionKey":"c","RowKey":"2"}`), Expiry: client.ExpiryNever},
		}); err != nil {
			t.Fatal(err)
		}
		if got, _ := readExpiry(t, srv, on, "c", "1"); got != at(0) {
			t.Errorf("client.Batch: %q, want %q", got, at(0))
		}
		if got, _ := readExpiry(t, srv, on, "c", "2"); got != "" {
			t.Errorf("client.Batch never: %q", got)
		}
	})

	// Refusals: the header on a standard table (400 InvalidInput), alone and in a $batch;
	// malformed values (400 InvalidHeaderValue naming the header); on a delete (400
	// UnsupportedHeader). Nothing is written.
	t.Run("refusals", func(t *testing.T) {
		r := writeRaw(t, srv, http.MethodPost, std, "r", "1", `{"PartitionKey":"r","RowKey":"1"}`, map[string]string{"x-cerulean-expiry": at(0)})
		requireRawErr(t, r, http.StatusBadRequest, "InvalidInput")
		if !strings.Contains(string(r.Body), "elastic table only") {
			t.Errorf("standard table: %s", r.Body)
		}
		r = writeRaw(t, srv, http.MethodPut, std, "r", "1", `{}`, map[string]string{"x-cerulean-expiry": "never"})
		requireRawErr(t, r, http.StatusBadRequest, "InvalidInput")
		requireAbsent(t, svc.NewClient(std), "r", "1")
		b, bb := buildBatchBody([]egtPart{
			{Method: "PUT", URL: egtKeyURL(srv, std, "r", "0"), Header: [][2]string{{"Content-Type", "application/json"}}, Body: `{}`},
			{Method: "PUT", URL: egtKeyURL(srv, std, "r", "1"), Header: [][2]string{{"Content-Type", "application/json"}, {"x-cerulean-expiry", "never"}}, Body: `{}`},
		})
		rb := egtPost(t, srv, b, bb, nil)
		subs := parseBatchResponse(t, rb.Status, rb.Header, rb.Body, false)
		if len(subs) != 1 || subs[0].Status != 400 || !strings.Contains(string(subs[0].Body), `"InvalidInput"`) || !strings.Contains(string(subs[0].Body), `"1:`) {
			t.Errorf("standard table in a $batch: %s", rb.Body)
		}
		requireAbsent(t, svc.NewClient(std), "r", "0")

		for _, v := range []string{
			"tomorrow", "", "Never", "2026-12-05", "2026-12-05T10:00:00", "2026-12-05T10:00:00+01:00", "2026-12-05T10:00:00+00:00",
			"2026-12-05T10:00:00.12345678Z", "10000-01-01T00:00:00Z", "1600-12-31T23:59:59Z", "2026-13-05T10:00:00Z", "1765000000",
		} {
			r := writeRaw(t, srv, http.MethodPut, on, "r", "bad", `{}`, map[string]string{"x-cerulean-expiry": v})
			if v == "" {
				// An empty value is sent as no header by the raw client: an upsert.
				requireStatus(t, r, http.StatusNoContent, "empty value")
				continue
			}
			requireRawErr(t, r, http.StatusBadRequest, "InvalidHeaderValue")
			if !strings.Contains(string(r.Body), "x-cerulean-expiry") {
				t.Errorf("%q: the error does not name the header: %s", v, r.Body)
			}
		}
		// Two values.
		req, _ := http.NewRequest(http.MethodPut, srv.BaseURL()+entityPath(acct, on, "r", "two"), strings.NewReader(`{}`))
		req.Header["X-Cerulean-Expiry"] = []string{at(0), "never"}
		resp := signedDo(t, srv, req)
		if resp.StatusCode != 400 || resp.Header.Get("x-ms-error-code") != "InvalidHeaderValue" {
			t.Errorf("two values: %d %s", resp.StatusCode, resp.Header.Get("x-ms-error-code"))
		}
		r = srv.do(t, rawReq{Method: http.MethodDelete, Path: entityPath(acct, on, "r", "bad"), Header: map[string]string{"If-Match": "*", "x-cerulean-expiry": "never"}})
		requireRawErr(t, r, http.StatusBadRequest, "UnsupportedHeader")
		requirePresent(t, svc.NewClient(on), "r", "bad")
		// A bulk request's operations compute their expiry: the header is refused, not
		// ignored, and nothing is written.
		r = srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/" + on, Query: "comp=bulk",
			Body:   []byte(`{"operations":[{"op":"insert","entity":{"PartitionKey":"r","RowKey":"bulk"}}]}`),
			Header: map[string]string{"Content-Type": "application/json", "x-cerulean-expiry": "never"}})
		requireRawErr(t, r, http.StatusBadRequest, "UnsupportedHeader")
		requireAbsent(t, svc.NewClient(on), "r", "bulk")
	})

	// An instant already past is accepted, and the entity is gone at once (it replaced the
	// live one); on a table with time-to-live off an instant is kept and the entity expires
	// at it.
	t.Run("past and TTL off", func(t *testing.T) {
		c := svc.NewClient(on)
		addEntity(t, c, map[string]any{"PartitionKey": "p", "RowKey": "live"})
		r := writeRaw(t, srv, http.MethodPut, on, "p", "live", `{"V":1}`, map[string]string{"x-cerulean-expiry": expiryText(time.Now().Add(-time.Minute))})
		requireStatus(t, r, http.StatusNoContent, "an upsert already expired")
		requireAbsent(t, c, "p", "live")
		r = writeRaw(t, srv, http.MethodPost, on, "p", "new", `{"PartitionKey":"p","RowKey":"new"}`, map[string]string{"x-cerulean-expiry": "1970-01-01T00:00:00Z"})
		requireStatus(t, r, http.StatusCreated, "an insert already expired")
		requireAbsent(t, c, "p", "new")

		soon := time.Now().Add(2 * time.Second)
		requireStatus(t, writeRaw(t, srv, http.MethodPost, off, "p", "soon", `{"PartitionKey":"p","RowKey":"soon","TTLInSeconds":1}`, map[string]string{"x-cerulean-expiry": expiryText(soon)}), http.StatusCreated, "insert with TTL off")
		requireStatus(t, writeRaw(t, srv, http.MethodPost, off, "p", "plain", `{"PartitionKey":"p","RowKey":"plain","TTLInSeconds":1}`, nil), http.StatusCreated, "plain insert with TTL off")
		if time.Now().Before(soon.Add(-time.Second)) {
			if got, _ := readExpiry(t, srv, off, "p", "soon"); got != expiryText(soon) {
				t.Errorf("TTL off: cerulean.expiry %q, want %q", got, expiryText(soon))
			}
		}
		sleepUntil(soon.Add(ttlMargin))
		requireAbsent(t, svc.NewClient(off), "p", "soon")
		requirePresent(t, svc.NewClient(off), "p", "plain")
	})
}

// signedDo signs req with SharedKeyLite for the server's default account and sends it.
func signedDo(t testing.TB, srv *server, req *http.Request) *http.Response {
	t.Helper()
	a := srv.Default()
	c, err := client.New(srv.Endpoint(a.Name), a.Name, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-ms-version", client.Version)
	req.Header.Set("Content-Type", "application/json")
	c.Sign(req)
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func ptr[T any](v T) *T { return &v }

// Through CORS and a SAS: a browser's preflight for x-cerulean-expiry passes when the
// account's rule allows it (as for any request header), an answer with the annotation
// exposes Preference-Applied to the script, and a table SAS that allows the write and the
// read allows the header and the annotation (neither is signed, as bodies are not).
func TestEntityExpiryCORSAndSAS(t *testing.T) {
	srv := freshAccountServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	table := tableName(t)
	if err := settingsClient(t, srv).CreateTable(ctx(t), table, &client.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	setProps(t, svc, aztables.ServiceProperties{Cors: []*aztables.CorsRule{{
		AllowedOrigins: ptr("http://app.example"), AllowedMethods: ptr("GET,POST,PUT,MERGE"),
		AllowedHeaders: ptr("x-ms-*,x-cerulean-*,content-type,prefer,accept,dataserviceversion"), ExposedHeaders: ptr("x-ms-*"), MaxAgeInSeconds: ptr[int32](60),
	}}})
	path := entityPath(acct, table, "p", "1")
	r := preflight(t, srv, path, "http://app.example", "PUT", "x-cerulean-expiry,x-ms-version,content-type")
	requireStatus(t, r, http.StatusOK, "preflight")
	if !hasToken(r.Header, "Access-Control-Allow-Headers", "x-cerulean-expiry") {
		t.Errorf("preflight: Access-Control-Allow-Headers %q", r.Header.Get("Access-Control-Allow-Headers"))
	}
	exp := expiryText(time.Now().Add(time.Hour))
	r = srv.do(t, rawReq{Method: http.MethodPut, Path: path, Body: []byte(`{"V":1}`), Header: map[string]string{"Origin": "http://app.example", "x-cerulean-expiry": exp}})
	requireStatus(t, r, http.StatusNoContent, "upsert from a browser")
	r = srv.do(t, rawReq{Method: http.MethodGet, Path: path, Header: map[string]string{"Origin": "http://app.example", "Prefer": preferExpiry}})
	requireStatus(t, r, http.StatusOK, "read from a browser")
	if !hasToken(r.Header, "Access-Control-Expose-Headers", "Preference-Applied") || !strings.Contains(string(r.Body), exp) {
		t.Errorf("read from a browser: Access-Control-Expose-Headers %q, body %s", r.Header.Get("Access-Control-Expose-Headers"), r.Body)
	}

	a := srv.Default()
	cred, err := aztables.NewSharedKeyCredential(a.Name, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := aztables.SASSignatureValues{
		Protocol: aztables.SASProtocolHTTPSandHTTP, StartTime: time.Now().Add(-time.Minute), ExpiryTime: time.Now().Add(time.Hour),
		Permissions: aztables.SASPermissions{Read: true, Add: true, Update: true}.String(), TableName: table,
	}.Sign(cred)
	if err != nil {
		t.Fatal(err)
	}
	c, err := aztables.NewClientWithNoCredential(srv.Endpoint(a.Name)+"/"+table+"?"+qs, clientOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	wctx := runtime.WithHTTPHeader(ctx(t), http.Header{"x-cerulean-expiry": {exp}})
	if _, err := c.UpsertEntity(wctx, []byte(`{"PartitionKey":"p","RowKey":"sas"}`), nil); err != nil {
		t.Fatalf("upsert with x-cerulean-expiry through a table SAS: %v", err)
	}
	got, err := c.GetEntity(runtime.WithHTTPHeader(ctx(t), http.Header{"Prefer": {preferExpiry}}), "p", "sas", nil)
	if err != nil || !strings.Contains(string(got.Value), `"cerulean.expiry":"`+exp+`"`) {
		t.Errorf("read through a table SAS: %s, %v", got.Value, err)
	}
}
