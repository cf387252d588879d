package e2e

// Protocol decisions of issue 42 (items 13, 15, 16, 17; item 14 is in ifmatch_test.go),
// docs/compatibility.md "Decisions and their sources".

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// A table-level comp the service does not know (a typo such as comp=bulkk, or comp=bulk on
// a standard table) is 400 InvalidQueryParameterValue with a SAS as with the account key —
// not 403 "only allowed for the account owner", as if it were Get Table ACL — and the access
// log names it Unknown (BulkWrite for comp=bulk), not GetTableACL or SetTableACL.
func TestUnknownCompWithSAS(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	srv := startServer(t, withArgs("--access-log", path))
	svc := newServiceClient(t, srv)
	owner, name := newTable(t, svc)
	acct := srv.Default().Name
	tu, err := owner.GetTableSASURL(aztables.SASPermissions{Read: true, Add: true, Update: true, Delete: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, tableSAS, _ := strings.Cut(tu, "?")
	au, err := svc.GetAccountSASURL(aztables.AccountSASResourceTypes{Service: true, Container: true, Object: true},
		aztables.AccountSASPermissions{Read: true, Write: true, Delete: true, List: true, Add: true, Create: true, Update: true, Process: true},
		time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, acctSAS, _ := strings.Cut(au, "?")
	ids := map[string]string{} // request id → the comp it sent
	for _, c := range []struct{ method, comp string }{
		{http.MethodPost, "bulk"}, {http.MethodGet, "bulkk"}, {http.MethodPut, "bulkk"}, {http.MethodPost, "bulkk"}, {http.MethodGet, "nosuch"},
	} {
		var body []byte
		if c.method != http.MethodGet {
			body = []byte(`{"operations":[]}`)
		}
		key := srv.do(t, rawReq{Method: c.method, Path: "/" + acct + "/" + name, Query: "comp=" + c.comp, Body: body})
		requireXMLErr(t, key, http.StatusBadRequest, "InvalidQueryParameterValue")
		ids[key.Header.Get("x-ms-request-id")] = c.comp
		for what, sas := range map[string]string{"table SAS": tableSAS, "account SAS": acctSAS} {
			t.Run(c.method+"/"+c.comp+"/"+what, func(t *testing.T) {
				r := srv.do(t, rawReq{Method: c.method, Path: "/" + acct + "/" + name, Query: sas + "&comp=" + c.comp, Body: body, NoAuth: true})
				requireXMLErr(t, r, http.StatusBadRequest, "InvalidQueryParameterValue")
				if strings.Contains(string(r.Body), "account owner") {
					t.Errorf("answered as Get/Set Table ACL: %s", r.Body)
				}
				ids[r.Header.Get("x-ms-request-id")] = c.comp
			})
		}
	}
	// A SAS still has to verify: a tampered one is refused before the comp is looked at.
	bad := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/" + name, Query: setParam(t, "x?"+tableSAS, "sig", "dGFtcGVyZWQtc2lnbmF0dXJlLXZhbHVlLXRoYXQtaXMtbG9uZw==")[2:] + "&comp=bulkk", NoAuth: true})
	requireXMLErr(t, bad, http.StatusForbidden, "AuthenticationFailed")

	for id, comp := range ids {
		l := waitAccessLine(t, path, func(l accessLine) bool { return l.RequestID == id })
		want := "Unknown"
		if comp == "bulk" {
			want = "BulkWrite"
		}
		if l.Operation != want || l.Status != http.StatusBadRequest {
			t.Errorf("comp=%s logged as %s %d, want %s 400", comp, l.Operation, l.Status, want)
		}
	}
}

// x-ms-version and SAS requests (docs/compatibility.md "Credentials"): a SAS request is processed with
// its signed version sv, and its x-ms-version header is ignored, whatever it holds, as
// "Previous Azure Storage service versions" documents; an sv that is no version of the
// storage services is the signature's problem, 403 AuthenticationFailed, as a bad header is
// 400 with the account key — neither path serves a version it does not know.
func TestVersionWithSAS(t *testing.T) {
	f := newSASFixture(t)
	acct := f.srv.Default().Name
	sign := func(sv string) string {
		v := aztables.SASSignatureValues{Version: sv, Protocol: aztables.SASProtocolHTTPSandHTTP, StartTime: time.Now().Add(-time.Minute),
			ExpiryTime: time.Now().Add(time.Hour), Permissions: aztables.SASPermissions{Read: true, Add: true}.String()}
		return f.signTable(t, nil, v)
	}
	ent := func(rk string) []byte { return []byte(`{"PartitionKey":"p","RowKey":"` + rk + `"}`) }
	for i, hv := range []string{"invalid", "2099-01-01", "", "2019-02-02"} {
		qs := sign("2019-02-02")
		r := f.srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/" + f.name, Query: qs, NoAuth: true,
			Header: map[string]string{"x-ms-version": hv, "Prefer": "return-no-content"}, Body: ent(fmt.Sprint("h", i))})
		requireStatus(t, r, http.StatusNoContent, "SAS insert with x-ms-version "+hv)
		if got := r.Header.Get("x-ms-version"); got != "2019-02-02" {
			t.Errorf("x-ms-version %q: answered with version %q, want sv 2019-02-02", hv, got)
		}
		// The same header with the account key is refused (but an empty one).
		k := f.srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/" + f.name, Header: map[string]string{"x-ms-version": hv, "Prefer": "return-no-content"},
			Body: ent(fmt.Sprint("k", i))})
		if hv == "invalid" || hv == "2099-01-01" {
			requireRawErr(t, k, http.StatusBadRequest, "InvalidHeaderValue")
		} else {
			requireStatus(t, k, http.StatusNoContent, "shared key insert with x-ms-version "+hv)
		}
	}
	for _, sv := range []string{"2020-12-06", "2025-11-05"} {
		r := f.srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/" + f.name + "()", Query: sign(sv), NoAuth: true})
		requireStatus(t, r, http.StatusOK, "sv "+sv)
		if got := r.Header.Get("x-ms-version"); got != sv {
			t.Errorf("sv %s: answered with version %q", sv, got)
		}
	}
	for i, sv := range []string{"2099-01-01", "2019-02-03"} {
		qs := sign(sv)
		r := f.srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/" + f.name, Query: qs, NoAuth: true,
			Header: map[string]string{"Prefer": "return-no-content"}, Body: ent(fmt.Sprint("v", i))})
		requireRawErr(t, r, http.StatusForbidden, "AuthenticationFailed")
		if !strings.Contains(string(r.Body), "sv") {
			t.Errorf("sv %s: the refusal does not name the signed version: %s", sv, r.Body)
		}
		if _, found := f.ownerV(t, "p", fmt.Sprint("v", i)); found {
			t.Errorf("sv %s: the entity was written", sv)
		}
	}
}

// Query Tables sends a continuation only when a table inside the filter's range follows:
// tables zzza1..zzza4 and zzzb4, TableName ge 'zzza' and TableName lt 'zzzb', $top=2 — two
// pages, the second without x-ms-continuation-NextTableName, so the SDK stops after it.
func TestQueryTablesContinuationStopsAtRange(t *testing.T) {
	srv := startOwnServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	for _, n := range []string{"zzza1", "zzza2", "zzza3", "zzza4", "zzzb4", "zzzc1"} {
		if _, err := svc.CreateTable(ctx(t), n, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		filter string
		top    int
		pages  [][]string
	}{
		{"TableName ge 'zzza' and TableName lt 'zzzb'", 2, [][]string{{"zzza1", "zzza2"}, {"zzza3", "zzza4"}}},
		{"TableName ge 'zzza' and TableName le 'zzza4'", 2, [][]string{{"zzza1", "zzza2"}, {"zzza3", "zzza4"}}},
		{"TableName gt 'zzza1' and TableName lt 'zzza4'", 1, [][]string{{"zzza2"}, {"zzza3"}}},
		{"TableName ge 'zzza' and TableName lt 'zzzc'", 5, [][]string{{"zzza1", "zzza2", "zzza3", "zzza4", "zzzb4"}}},
		{"TableName ge 'zzza' and TableName lt 'zzzc'", 2, [][]string{{"zzza1", "zzza2"}, {"zzza3", "zzza4"}, {"zzzb4"}}},
	} {
		t.Run(c.filter+fmt.Sprint("/", c.top), func(t *testing.T) {
			next := ""
			for i, want := range c.pages {
				q := url.Values{"$filter": {c.filter}, "$top": {fmt.Sprint(c.top)}}
				if next != "" {
					q.Set("NextTableName", next)
				}
				r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables", Query: q.Encode()})
				requireStatus(t, r, http.StatusOK, "query tables")
				got := rawTableNames(t, r.Body)
				if strings.Join(got, ",") != strings.Join(want, ",") {
					t.Fatalf("page %d: %v, want %v", i+1, got, want)
				}
				next = r.Header.Get("x-ms-continuation-NextTableName")
				if last := i == len(c.pages)-1; last != (next == "") {
					t.Fatalf("page %d of %d: continuation %q", i+1, len(c.pages), next)
				}
			}
		})
	}
	// Through the SDK: exactly the two pages.
	pager := svc.NewListTablesPager(&aztables.ListTablesOptions{Filter: to.Ptr("TableName ge 'zzza' and TableName lt 'zzzb'"), Top: to.Ptr[int32](2)})
	pages := 0
	for pager.More() {
		if _, err := pager.NextPage(ctx(t)); err != nil {
			t.Fatal(err)
		}
		pages++
	}
	if pages != 2 {
		t.Errorf("the SDK fetched %d pages, want 2", pages)
	}
}

// rawTableNames reads the TableName of each table of a Query Tables answer.
func rawTableNames(t *testing.T, body []byte) []string {
	t.Helper()
	var v struct {
		Value []struct{ TableName string } `json:"value"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("query tables body %s: %v", body, err)
	}
	var out []string
	for _, tb := range v.Value {
		out = append(out, tb.TableName)
	}
	return out
}

// Query Entities does the same at a key range's upper bound: a page that ends with the
// last entity inside the filter's range carries no NextPartitionKey/NextRowKey, whatever
// lies beyond it; one that ends before it does.
func TestQueryEntitiesContinuationStopsAtRange(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	client, name := newTable(t, svc)
	acct := srv.Default().Name
	for _, k := range [][2]string{{"a", "1"}, {"a", "2"}, {"b", "1"}, {"b", "2"}, {"b", "3"}, {"c", "1"}} {
		if _, err := client.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": k[0], "RowKey": k[1]}), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		filter string
		top    int
		pages  []int // entities per page
	}{
		{"PartitionKey ge 'a' and PartitionKey lt 'b'", 2, []int{2}},
		{"PartitionKey ge 'a' and PartitionKey lt 'c'", 5, []int{5}},
		{"PartitionKey ge 'a' and PartitionKey lt 'c'", 2, []int{2, 2, 1}},
		{"PartitionKey eq 'b' and RowKey le '2'", 2, []int{2}},
		{"PartitionKey eq 'b' and RowKey lt '3'", 1, []int{1, 1}},
		{"PartitionKey eq 'b'", 3, []int{3}},
	} {
		t.Run(c.filter+fmt.Sprint("/", c.top), func(t *testing.T) {
			var npk, nrk string
			for i, want := range c.pages {
				q := url.Values{"$filter": {c.filter}, "$top": {fmt.Sprint(c.top)}}
				if npk != "" || nrk != "" {
					q.Set("NextPartitionKey", npk)
					q.Set("NextRowKey", nrk)
				}
				r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/" + name + "()", Query: q.Encode()})
				requireStatus(t, r, http.StatusOK, "query")
				var v struct{ Value []map[string]any }
				if err := json.Unmarshal(r.Body, &v); err != nil {
					t.Fatal(err)
				}
				if len(v.Value) != want {
					t.Fatalf("page %d: %d entities, want %d: %s", i+1, len(v.Value), want, r.Body)
				}
				npk, nrk = r.Header.Get("x-ms-continuation-NextPartitionKey"), r.Header.Get("x-ms-continuation-NextRowKey")
				if last := i == len(c.pages)-1; last != (npk == "" && nrk == "") {
					t.Fatalf("page %d of %d: continuation %q/%q", i+1, len(c.pages), npk, nrk)
				}
			}
		})
	}
}

// Set Table Service Properties and Set Table ACL with a value the service refuses (a
// retention of 366 days or 0, a sixth CORS rule, an unknown CORS method, a bad boolean, an
// unknown permission letter) answer what the service answers: 400 InvalidXmlDocument, a
// code in the SDKs' TableErrorCode lists (the Go SDK's TestRetentionTooLong, recorded
// against the service, requires it), with the reason in a <Reason> element.
func TestServicePropertiesInvalidValues(t *testing.T) {
	srv := freshAccountServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	retention := func(days string) string {
		return `<StorageServiceProperties><MinuteMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>true</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled><Days>` +
			days + `</Days></RetentionPolicy></MinuteMetrics></StorageServiceProperties>`
	}
	var six strings.Builder
	six.WriteString(`<StorageServiceProperties><Cors>`)
	for i := range 6 {
		fmt.Fprintf(&six, `<CorsRule><AllowedOrigins>http://o%d.example</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds><ExposedHeaders></ExposedHeaders><AllowedHeaders></AllowedHeaders></CorsRule>`, i)
	}
	six.WriteString(`</Cors></StorageServiceProperties>`)
	for _, c := range []struct{ name, body string }{
		{"Days366", retention("366")},
		{"Days0", retention("0")},
		{"DaysText", retention("x")},
		{"SixCorsRules", six.String()},
		{"CorsMethod", `<StorageServiceProperties><Cors><CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET,TRACE</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds><ExposedHeaders></ExposedHeaders><AllowedHeaders></AllowedHeaders></CorsRule></Cors></StorageServiceProperties>`},
		{"Bool", `<StorageServiceProperties><HourMetrics><Version>1.0</Version><Enabled>yes</Enabled></HourMetrics></StorageServiceProperties>`},
		{"MetricsVersion", `<StorageServiceProperties><HourMetrics><Version>9.0</Version><Enabled>false</Enabled></HourMetrics></StorageServiceProperties>`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := srv.do(t, xmlReq(http.MethodPut, "/"+acct, propsQuery(), []byte(c.body)))
			requireXMLErr(t, r, http.StatusBadRequest, "InvalidXmlDocument")
			requireXMLReason(t, r)
		})
	}
	// Through the SDK, as TestRetentionTooLong sends it.
	_, err := svc.SetProperties(ctx(t), aztables.ServiceProperties{MinuteMetrics: &aztables.Metrics{Enabled: to.Ptr(true), IncludeAPIs: to.Ptr(true),
		RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr[int32](366)}, Version: to.Ptr("1.0")}}, nil)
	requireSDKXMLErr(t, err, http.StatusBadRequest, "InvalidXmlDocument")
	var known bool
	for _, code := range aztables.PossibleTableErrorCodeValues() {
		known = known || string(code) == "InvalidXmlDocument"
	}
	if !known {
		t.Errorf("InvalidXmlDocument is not in the SDK's TableErrorCode list")
	}

	// Set Table ACL: an unknown permission letter, an identifier too long.
	_, name := newTable(t, svc)
	for _, body := range []string{
		`<SignedIdentifiers><SignedIdentifier><Id>x</Id><AccessPolicy><Permission>rx</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>`,
		`<SignedIdentifiers><SignedIdentifier><Id>` + strings.Repeat("i", 65) + `</Id><AccessPolicy><Permission>r</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>`,
	} {
		r := srv.do(t, xmlReq(http.MethodPut, tablePath(acct, name), aclQuery(), []byte(body)))
		requireXMLErr(t, r, http.StatusBadRequest, "InvalidXmlDocument")
		requireXMLReason(t, r)
	}
}

// requireXMLReason checks that an XML error names its reason in <Reason>.
func requireXMLReason(t *testing.T, r rawResp) {
	t.Helper()
	var e struct {
		XMLName xml.Name `xml:"Error"`
		Reason  string   `xml:"Reason"`
	}
	if err := xml.Unmarshal(r.Body, &e); err != nil || e.Reason == "" {
		t.Errorf("no <Reason> in %s (%v)", r.Body, err)
	}
}
