package e2e

// Black-box tests of the XML service endpoints (docs/protocol.md §3.12–3.13, §10): table ACLs
// (stored access policies), service properties, service stats (on the secondary and the
// path-style primary endpoint), CORS preflight and CORS headers on actual requests, and
// their isolation between accounts.
// The Go SDK is used wherever it offers the call; raw SharedKeyLite requests check the wire.

import (
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// ---------------------------------------------------------------------------------------
// Helpers

// xmlHeaders are the headers of a raw request to an XML endpoint.
var xmlHeaders = map[string]string{"Accept": "application/xml", "Content-Type": "application/xml"}

// xmlReq builds a signed raw request to an XML endpoint.
func xmlReq(method, path, query string, body []byte) rawReq {
	return rawReq{Method: method, Path: path, Query: query, Header: xmlHeaders, Body: body}
}

func aclQuery() string                    { return "comp=acl" }
func propsQuery() string                  { return "restype=service&comp=properties" }
func statsQuery() string                  { return "restype=service&comp=stats" }
func tablePath(acct, table string) string { return "/" + acct + "/" + table }

// xmlError is the storage XML error shape of docs/protocol.md §7.1.
type xmlError struct {
	XMLName xml.Name `xml:"Error"`
	Code    string   `xml:"Code"`
	Message string   `xml:"Message"`
}

// checkXMLErrorBody asserts body is <Error><Code>want</Code><Message>…</Message></Error>.
func checkXMLErrorBody(t testing.TB, body []byte, want string) {
	t.Helper()
	var e xmlError
	if err := xml.Unmarshal(body, &e); err != nil {
		t.Errorf("error body is not an XML <Error>: %v: %q", err, truncate(body))
		return
	}
	if e.Code != want {
		t.Errorf("<Code> = %q, want %q (body %s)", e.Code, want, truncate(body))
	}
	if strings.TrimSpace(e.Message) == "" {
		t.Errorf("<Message> is empty: %s", truncate(body))
	}
}

// requireXMLErr asserts a raw response is an XML storage error with status and code.
func requireXMLErr(t testing.TB, r rawResp, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("status %d, want %d (x-ms-error-code=%q body=%s)", r.Status, status, r.Header.Get("x-ms-error-code"), truncate(r.Body))
	}
	if h := r.Header.Get("x-ms-error-code"); h != code {
		t.Errorf("x-ms-error-code = %q, want %q (body %s)", h, code, truncate(r.Body))
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/xml") {
		t.Errorf("error Content-Type = %q, want application/xml", ct)
	}
	checkXMLErrorBody(t, r.Body, code)
}

// requireXMLErrIn is requireXMLErr for situations where the code is one of several.
func requireXMLErrIn(t testing.TB, r rawResp, status int, codes ...string) {
	t.Helper()
	h := r.Header.Get("x-ms-error-code")
	ok := false
	for _, c := range codes {
		ok = ok || c == h
	}
	if !ok {
		t.Errorf("x-ms-error-code = %q, want one of %q (status %d body %s)", h, codes, r.Status, truncate(r.Body))
		h = codes[0]
	}
	requireXMLErr(t, r, status, h)
}

// requireSDKXMLErr asserts an SDK error is a *azcore.ResponseError with status and code,
// carrying x-ms-error-code and an XML <Error> body.
func requireSDKXMLErr(t testing.TB, err error, status int, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected %d %s, got success", status, code)
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("expected *azcore.ResponseError (%d %s), got %T: %v", status, code, err, err)
	}
	if re.StatusCode != status || re.ErrorCode != code {
		t.Errorf("got %d %q, want %d %q", re.StatusCode, re.ErrorCode, status, code)
	}
	if re.RawResponse == nil {
		return
	}
	if h := re.RawResponse.Header.Get("x-ms-error-code"); h != code {
		t.Errorf("x-ms-error-code = %q, want %q", h, code)
	}
	body, perr := runtime.Payload(re.RawResponse)
	if perr != nil {
		t.Errorf("reading error body: %v", perr)
		return
	}
	checkXMLErrorBody(t, body, code)
}

// requireForbidden asserts an SDK error is a 403 response.
func requireForbidden(t testing.TB, err error, what string) {
	t.Helper()
	if code := statusOf(err); code != http.StatusForbidden {
		t.Errorf("%s: status %d (err %v), want 403", what, code, err)
	}
}

// ACL XML as the server returns it.
type xmlACL struct {
	XMLName xml.Name `xml:"SignedIdentifiers"`
	Items   []struct {
		ID     string `xml:"Id"`
		Policy struct {
			Start      string `xml:"Start"`
			Expiry     string `xml:"Expiry"`
			Permission string `xml:"Permission"`
		} `xml:"AccessPolicy"`
	} `xml:"SignedIdentifier"`
}

func parseACLBody(t testing.TB, body []byte) xmlACL {
	t.Helper()
	var a xmlACL
	if err := xml.Unmarshal(body, &a); err != nil {
		t.Fatalf("ACL body is not <SignedIdentifiers>: %v: %s", err, truncate(body))
	}
	return a
}

// aclTimeRe is the Get Table ACL time format: UTC with seven fraction digits.
var aclTimeRe = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z$`)

// sigID builds an SDK signed identifier.
func sigID(id string, start, expiry *time.Time, perm string) *aztables.SignedIdentifier {
	ap := &aztables.AccessPolicy{Start: start, Expiry: expiry}
	if perm != "" {
		ap.Permission = to.Ptr(perm)
	}
	return &aztables.SignedIdentifier{ID: to.Ptr(id), AccessPolicy: ap}
}

// aclXML builds a Set Table ACL body with n identifiers.
func aclXML(n int) []byte {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers>`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `<SignedIdentifier><Id>id%d</Id><AccessPolicy><Start>2030-01-01T00:00:00Z</Start>`+
			`<Expiry>2030-01-02T00:00:00Z</Expiry><Permission>r</Permission></AccessPolicy></SignedIdentifier>`, i)
	}
	b.WriteString(`</SignedIdentifiers>`)
	return []byte(b.String())
}

// getACL reads a table's ACL through the SDK, keyed by Id.
func getACL(t testing.TB, c *aztables.Client) map[string]*aztables.AccessPolicy {
	t.Helper()
	resp, err := c.GetAccessPolicy(ctx(t), nil)
	if err != nil {
		t.Fatalf("GetAccessPolicy: %v", err)
	}
	out := map[string]*aztables.AccessPolicy{}
	for _, si := range resp.SignedIdentifiers {
		if si == nil || si.ID == nil {
			t.Fatalf("GetAccessPolicy returned an identifier without Id")
		}
		out[*si.ID] = si.AccessPolicy
	}
	return out
}

func timeEq(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}

func fmtTime(p *time.Time) string {
	if p == nil {
		return "<nil>"
	}
	return p.UTC().Format(time.RFC3339Nano)
}

func checkPolicy(t testing.TB, got *aztables.AccessPolicy, id string, start, expiry *time.Time, perm string) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: no AccessPolicy returned", id)
		return
	}
	if !timeEq(got.Start, start) {
		t.Errorf("%s: Start = %s, want %s", id, fmtTime(got.Start), fmtTime(start))
	}
	if !timeEq(got.Expiry, expiry) {
		t.Errorf("%s: Expiry = %s, want %s", id, fmtTime(got.Expiry), fmtTime(expiry))
	}
	gp := ""
	if got.Permission != nil {
		gp = *got.Permission
	}
	if gp != perm {
		t.Errorf("%s: Permission = %q, want %q", id, gp, perm)
	}
}

// splitCSV splits a comma list into trimmed, non-empty items.
func splitCSV(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func sameList(a, b string, fold bool) bool {
	x, y := splitCSV(a), splitCSV(b)
	if fold {
		for i := range x {
			x[i] = strings.ToLower(x[i])
		}
		for i := range y {
			y[i] = strings.ToLower(y[i])
		}
	}
	sort.Strings(x)
	sort.Strings(y)
	return strings.Join(x, ",") == strings.Join(y, ",")
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// fullProperties is a service properties document touching every section.
func fullProperties() aztables.ServiceProperties {
	return aztables.ServiceProperties{
		Logging: &aztables.Logging{
			Version: to.Ptr("1.0"), Delete: to.Ptr(true), Read: to.Ptr(false), Write: to.Ptr(true),
			RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr[int32](7)},
		},
		HourMetrics: &aztables.Metrics{
			Version: to.Ptr("1.0"), Enabled: to.Ptr(true), IncludeAPIs: to.Ptr(true),
			RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr[int32](5)},
		},
		MinuteMetrics: &aztables.Metrics{
			Version: to.Ptr("1.0"), Enabled: to.Ptr(false),
			RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(false)},
		},
		Cors: []*aztables.CorsRule{
			{
				AllowedOrigins: to.Ptr("http://a.example,http://b.example"), AllowedMethods: to.Ptr("GET,PUT"),
				AllowedHeaders: to.Ptr("x-ms-meta-abc,x-ms-prefix-*"), ExposedHeaders: to.Ptr("x-ms-meta-*"),
				MaxAgeInSeconds: to.Ptr[int32](500),
			},
			{
				AllowedOrigins: to.Ptr("*"), AllowedMethods: to.Ptr("POST"),
				AllowedHeaders: to.Ptr("*"), ExposedHeaders: to.Ptr("x-ms-request-id"),
				MaxAgeInSeconds: to.Ptr[int32](60),
			},
		},
	}
}

func checkLogging(t testing.TB, got, want *aztables.Logging) {
	t.Helper()
	if got == nil {
		t.Errorf("Logging missing")
		return
	}
	if deref(got.Version) != deref(want.Version) || deref(got.Delete) != deref(want.Delete) ||
		deref(got.Read) != deref(want.Read) || deref(got.Write) != deref(want.Write) {
		t.Errorf("Logging = {v%s d%v r%v w%v}, want {v%s d%v r%v w%v}",
			deref(got.Version), deref(got.Delete), deref(got.Read), deref(got.Write),
			deref(want.Version), deref(want.Delete), deref(want.Read), deref(want.Write))
	}
	checkRetention(t, "Logging", got.RetentionPolicy, want.RetentionPolicy)
}

func checkMetrics(t testing.TB, name string, got, want *aztables.Metrics) {
	t.Helper()
	if got == nil {
		t.Errorf("%s missing", name)
		return
	}
	if deref(got.Version) != deref(want.Version) || deref(got.Enabled) != deref(want.Enabled) ||
		deref(got.IncludeAPIs) != deref(want.IncludeAPIs) {
		t.Errorf("%s = {v%s enabled %v includeAPIs %v}, want {v%s enabled %v includeAPIs %v}", name,
			deref(got.Version), deref(got.Enabled), deref(got.IncludeAPIs),
			deref(want.Version), deref(want.Enabled), deref(want.IncludeAPIs))
	}
	checkRetention(t, name, got.RetentionPolicy, want.RetentionPolicy)
}

func checkRetention(t testing.TB, name string, got, want *aztables.RetentionPolicy) {
	t.Helper()
	var g, w aztables.RetentionPolicy
	if got != nil {
		g = *got
	}
	if want != nil {
		w = *want
	}
	wantDays := int32(0)
	if deref(w.Enabled) {
		wantDays = deref(w.Days)
	}
	if deref(g.Enabled) != deref(w.Enabled) || deref(g.Days) != wantDays {
		t.Errorf("%s retention = {enabled %v days %d}, want {enabled %v days %d}", name,
			deref(g.Enabled), deref(g.Days), deref(w.Enabled), wantDays)
	}
}

func checkCors(t testing.TB, got, want []*aztables.CorsRule) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d CORS rules, want %d", len(got), len(want))
		return
	}
	for i := range want {
		g, w := got[i], want[i]
		if !sameList(deref(g.AllowedOrigins), deref(w.AllowedOrigins), false) ||
			!sameList(deref(g.AllowedMethods), deref(w.AllowedMethods), true) ||
			!sameList(deref(g.AllowedHeaders), deref(w.AllowedHeaders), true) ||
			!sameList(deref(g.ExposedHeaders), deref(w.ExposedHeaders), true) ||
			deref(g.MaxAgeInSeconds) != deref(w.MaxAgeInSeconds) {
			t.Errorf("CORS rule %d = {origins %q methods %q headers %q exposed %q maxAge %d}, want {%q %q %q %q %d}", i,
				deref(g.AllowedOrigins), deref(g.AllowedMethods), deref(g.AllowedHeaders), deref(g.ExposedHeaders), deref(g.MaxAgeInSeconds),
				deref(w.AllowedOrigins), deref(w.AllowedMethods), deref(w.AllowedHeaders), deref(w.ExposedHeaders), deref(w.MaxAgeInSeconds))
		}
	}
}

func checkAllProperties(t testing.TB, got, want aztables.ServiceProperties) {
	t.Helper()
	checkLogging(t, got.Logging, want.Logging)
	checkMetrics(t, "HourMetrics", got.HourMetrics, want.HourMetrics)
	checkMetrics(t, "MinuteMetrics", got.MinuteMetrics, want.MinuteMetrics)
	checkCors(t, got.Cors, want.Cors)
}

func defaultProperties() aztables.ServiceProperties {
	off := &aztables.RetentionPolicy{Enabled: to.Ptr(false)}
	return aztables.ServiceProperties{
		Logging:       &aztables.Logging{Version: to.Ptr("1.0"), Delete: to.Ptr(false), Read: to.Ptr(false), Write: to.Ptr(false), RetentionPolicy: off},
		HourMetrics:   &aztables.Metrics{Version: to.Ptr("1.0"), Enabled: to.Ptr(false), RetentionPolicy: off},
		MinuteMetrics: &aztables.Metrics{Version: to.Ptr("1.0"), Enabled: to.Ptr(false), RetentionPolicy: off},
	}
}

func getProps(t testing.TB, svc *aztables.ServiceClient) aztables.ServiceProperties {
	t.Helper()
	resp, err := svc.GetProperties(ctx(t), nil)
	if err != nil {
		t.Fatalf("GetProperties: %v", err)
	}
	return resp.ServiceProperties
}

func setProps(t testing.TB, svc *aztables.ServiceClient, p aztables.ServiceProperties) {
	t.Helper()
	if _, err := svc.SetProperties(ctx(t), p, nil); err != nil {
		t.Fatalf("SetProperties: %v", err)
	}
}

// xmlStats is the Get Table Service Stats body.
type xmlStats struct {
	XMLName xml.Name `xml:"StorageServiceStats"`
	Geo     struct {
		Status       string `xml:"Status"`
		LastSyncTime string `xml:"LastSyncTime"`
	} `xml:"GeoReplication"`
}

// preflight sends an unauthenticated OPTIONS request. Empty origin/method/headers are not
// sent.
func preflight(t testing.TB, srv *server, path, origin, method, headers string) rawResp {
	t.Helper()
	h := map[string]string{"Accept": "", "DataServiceVersion": "", "x-ms-version": ""}
	if origin != "" {
		h["Origin"] = origin
	}
	if method != "" {
		h["Access-Control-Request-Method"] = method
	}
	if headers != "" {
		h["Access-Control-Request-Headers"] = headers
	}
	return srv.do(t, rawReq{Method: http.MethodOptions, Path: path, Header: h, NoAuth: true})
}

// requirePreflightRefused asserts a preflight failure: status, x-ms-error-code, no
// Access-Control-Allow-Origin, and an XML <Error> body when there is a body.
func requirePreflightRefused(t testing.TB, r rawResp, status int, code, what string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("%s: status %d, want %d (x-ms-error-code=%q body=%s)", what, r.Status, status, r.Header.Get("x-ms-error-code"), truncate(r.Body))
	}
	if code != "" {
		if h := r.Header.Get("x-ms-error-code"); h != code {
			t.Errorf("%s: x-ms-error-code = %q, want %q", what, h, code)
		}
		if len(strings.TrimSpace(string(r.Body))) > 0 {
			checkXMLErrorBody(t, r.Body, code)
		}
	}
	if v := r.Header.Get("Access-Control-Allow-Origin"); v != "" {
		t.Errorf("%s: refused preflight carries Access-Control-Allow-Origin %q", what, v)
	}
}

func hasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, p := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(p), token) {
				return true
			}
		}
	}
	return false
}

// freshAccountServer starts a server whose only account has a new random name: its service
// properties have never been set, even when the engine's database is shared with earlier
// servers and runs (the postgres engine).
func freshAccountServer(t testing.TB) *server {
	t.Helper()
	return startServer(t, withAccounts(account{Name: fmt.Sprintf("svc%s%d", runID, nameCounter.Add(1)), Key: randomKey(t)}))
}

// ---------------------------------------------------------------------------------------
// Table ACL

func TestTableACL(t *testing.T) {
	srv := startServer(t)
	acct := srv.Default().Name
	svc := newServiceClient(t, srv)

	t.Run("SetGetRoundTrip", func(t *testing.T) {
		c, name := newTable(t, svc)
		s1 := time.Date(2030, 1, 2, 3, 4, 5, 123456700, time.UTC)
		e1 := time.Date(2030, 2, 3, 4, 5, 6, 0, time.UTC)
		e2 := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
		if _, err := c.SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{
			sigID("policy1", &s1, &e1, "raud"),
			sigID("readonly", nil, &e2, "r"),
		}}); err != nil {
			t.Fatalf("SetAccessPolicy: %v", err)
		}
		got := getACL(t, c)
		if len(got) != 2 {
			t.Fatalf("GetAccessPolicy returned %d identifiers, want 2: %v", len(got), got)
		}
		checkPolicy(t, got["policy1"], "policy1", &s1, &e1, "raud")
		checkPolicy(t, got["readonly"], "readonly", nil, &e2, "r")

		r := srv.do(t, xmlReq(http.MethodGet, tablePath(acct, name), aclQuery(), nil))
		requireStatus(t, r, http.StatusOK, "GET ?comp=acl")
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/xml") {
			t.Errorf("Get ACL Content-Type = %q, want application/xml", ct)
		}
		a := parseACLBody(t, r.Body)
		if len(a.Items) != 2 || a.Items[0].ID != "policy1" || a.Items[1].ID != "readonly" {
			t.Fatalf("raw ACL identifiers wrong (want policy1, readonly in order): %s", truncate(r.Body))
		}
		for _, ts := range []string{a.Items[0].Policy.Start, a.Items[0].Policy.Expiry, a.Items[1].Policy.Expiry} {
			if !aclTimeRe.MatchString(ts) {
				t.Errorf("ACL time %q is not UTC with 7 fraction digits", ts)
			}
		}
		if a.Items[0].Policy.Start != "2030-01-02T03:04:05.1234567Z" {
			t.Errorf("policy1 Start = %q, want 2030-01-02T03:04:05.1234567Z", a.Items[0].Policy.Start)
		}
		if a.Items[1].Policy.Start != "" {
			t.Errorf("readonly has no Start but the server returned %q", a.Items[1].Policy.Start)
		}
	})

	t.Run("RawPutIs204AndSecondsPrecision", func(t *testing.T) {
		c, name := newTable(t, svc)
		// JS sends seconds precision; docs/protocol.md §3.13.
		body := []byte(`<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers><SignedIdentifier><Id>js</Id>` +
			`<AccessPolicy><Start>2021-07-08T09:10:09Z</Start><Expiry>2031-07-08T09:10:09Z</Expiry><Permission>ra</Permission></AccessPolicy>` +
			`</SignedIdentifier></SignedIdentifiers>`)
		r := srv.do(t, xmlReq(http.MethodPut, tablePath(acct, name), aclQuery(), body))
		requireStatus(t, r, http.StatusNoContent, "PUT ?comp=acl")
		r = srv.do(t, xmlReq(http.MethodGet, tablePath(acct, name), aclQuery(), nil))
		requireStatus(t, r, http.StatusOK, "GET ?comp=acl")
		a := parseACLBody(t, r.Body)
		if len(a.Items) != 1 || a.Items[0].ID != "js" {
			t.Fatalf("ACL = %s, want one identifier js", truncate(r.Body))
		}
		if p := a.Items[0].Policy; p.Start != "2021-07-08T09:10:09.0000000Z" || p.Expiry != "2031-07-08T09:10:09.0000000Z" || p.Permission != "ra" {
			t.Errorf("ACL policy = %+v, want Start 2021-07-08T09:10:09.0000000Z Expiry 2031-07-08T09:10:09.0000000Z Permission ra", p)
		}
		s, e := time.Date(2021, 7, 8, 9, 10, 9, 0, time.UTC), time.Date(2031, 7, 8, 9, 10, 9, 0, time.UTC)
		checkPolicy(t, getACL(t, c)["js"], "js", &s, &e, "ra")
	})

	t.Run("EmptyWhenNeverSet", func(t *testing.T) {
		c, name := newTable(t, svc)
		if got := getACL(t, c); len(got) != 0 {
			t.Errorf("new table has ACL %v", got)
		}
		r := srv.do(t, xmlReq(http.MethodGet, tablePath(acct, name), aclQuery(), nil))
		requireStatus(t, r, http.StatusOK, "GET ?comp=acl")
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/xml") {
			t.Errorf("Content-Type = %q, want application/xml", ct)
		}
		if a := parseACLBody(t, r.Body); len(a.Items) != 0 {
			t.Errorf("new table ACL body %s", truncate(r.Body))
		}
	})

	t.Run("ReplaceAndClear", func(t *testing.T) {
		c, name := newTable(t, svc)
		e := time.Date(2032, 1, 1, 0, 0, 0, 0, time.UTC)
		if _, err := c.SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{
			sigID("a", nil, &e, "r"), sigID("b", nil, &e, "a"),
		}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{
			sigID("c", nil, &e, "u"),
		}}); err != nil {
			t.Fatal(err)
		}
		got := getACL(t, c)
		if len(got) != 1 || got["c"] == nil {
			t.Fatalf("after replace ACL = %v, want only c", got)
		}
		checkPolicy(t, got["c"], "c", nil, &e, "u")
		// The SDK with no identifiers sends no body: that clears the policies.
		if _, err := c.SetAccessPolicy(ctx(t), nil); err != nil {
			t.Fatalf("SetAccessPolicy(nil): %v", err)
		}
		if got := getACL(t, c); len(got) != 0 {
			t.Errorf("after clearing ACL = %v", got)
		}
		// <SignedIdentifiers/> clears too.
		if _, err := c.SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{sigID("d", nil, &e, "d")}}); err != nil {
			t.Fatal(err)
		}
		r := srv.do(t, xmlReq(http.MethodPut, tablePath(acct, name), aclQuery(), []byte(`<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers />`)))
		requireStatus(t, r, http.StatusNoContent, "PUT empty <SignedIdentifiers/>")
		if got := getACL(t, c); len(got) != 0 {
			t.Errorf("after <SignedIdentifiers/> ACL = %v", got)
		}
	})

	t.Run("FiveAllowedSixRefused", func(t *testing.T) {
		c, name := newTable(t, svc)
		r := srv.do(t, xmlReq(http.MethodPut, tablePath(acct, name), aclQuery(), aclXML(5)))
		requireStatus(t, r, http.StatusNoContent, "PUT 5 identifiers")
		if got := getACL(t, c); len(got) != 5 {
			t.Fatalf("after 5 identifiers ACL has %d", len(got))
		}
		r = srv.do(t, xmlReq(http.MethodPut, tablePath(acct, name), aclQuery(), aclXML(6)))
		requireXMLErr(t, r, http.StatusBadRequest, "InvalidXmlDocument")

		// The SDK with six identifiers: the server refuses, the SDK reports its own error.
		e := time.Date(2032, 1, 1, 0, 0, 0, 0, time.UTC)
		var six []*aztables.SignedIdentifier
		for i := 0; i < 6; i++ {
			six = append(six, sigID(fmt.Sprintf("six%d", i), nil, &e, "r"))
		}
		if _, err := c.SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: six}); err == nil {
			t.Errorf("SDK SetAccessPolicy with 6 identifiers succeeded")
		}
		got := getACL(t, c)
		if len(got) != 5 || got["id0"] == nil || got["six0"] != nil {
			t.Errorf("a refused Set ACL changed the stored policies: %v", got)
		}
	})

	t.Run("InvalidPermission", func(t *testing.T) {
		_, name := newTable(t, svc)
		body := []byte(`<SignedIdentifiers><SignedIdentifier><Id>x</Id><AccessPolicy><Permission>rx</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>`)
		r := srv.do(t, xmlReq(http.MethodPut, tablePath(acct, name), aclQuery(), body))
		requireXMLErr(t, r, http.StatusBadRequest, "InvalidXmlDocument")
		r = srv.do(t, xmlReq(http.MethodPut, tablePath(acct, name), aclQuery(), []byte(`<SignedIdentifiers><SignedIdentifier>`)))
		requireXMLErr(t, r, http.StatusBadRequest, "InvalidXmlDocument")
	})

	t.Run("MissingTable", func(t *testing.T) {
		name := tableName(t)
		c := svc.NewClient(name)
		_, err := c.GetAccessPolicy(ctx(t), nil)
		requireSDKXMLErr(t, err, http.StatusNotFound, "TableNotFound")
		e := time.Date(2032, 1, 1, 0, 0, 0, 0, time.UTC)
		_, err = c.SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{sigID("p", nil, &e, "r")}})
		requireSDKXMLErr(t, err, http.StatusNotFound, "TableNotFound")

		r := srv.do(t, xmlReq(http.MethodGet, tablePath(acct, name), aclQuery(), nil))
		requireXMLErr(t, r, http.StatusNotFound, "TableNotFound")
		r = srv.do(t, xmlReq(http.MethodPut, tablePath(acct, name), aclQuery(), aclXML(1)))
		requireXMLErr(t, r, http.StatusNotFound, "TableNotFound")
	})

	t.Run("RecreateClearsACL", func(t *testing.T) {
		c, name := newTable(t, svc)
		e := time.Date(2032, 1, 1, 0, 0, 0, 0, time.UTC)
		if _, err := c.SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{sigID("old", nil, &e, "raud")}}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.DeleteTable(ctx(t), name, nil); err != nil {
			t.Fatalf("DeleteTable: %v", err)
		}
		_, err := c.GetAccessPolicy(ctx(t), nil)
		requireSDKXMLErr(t, err, http.StatusNotFound, "TableNotFound")
		if _, err := svc.CreateTable(ctx(t), name, nil); err != nil {
			t.Fatalf("re-CreateTable: %v", err)
		}
		if got := getACL(t, c); len(got) != 0 {
			t.Errorf("recreated table inherited the old ACL: %v", got)
		}
	})

	t.Run("PersistsAcrossRestart", func(t *testing.T) {
		srv := startServer(t)
		svc := newServiceClient(t, srv)
		c, name := newTable(t, svc)
		e := time.Date(2033, 3, 3, 3, 3, 3, 300000000, time.UTC)
		if _, err := c.SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{sigID("keep", nil, &e, "ru")}}); err != nil {
			t.Fatal(err)
		}
		if err, inTime := srv.terminate(stopTimeout); !inTime || err != nil {
			t.Fatalf("stop: %v (in time %v)", err, inTime)
		}
		srv.restart(t)
		c = newServiceClient(t, srv).NewClient(name)
		got := getACL(t, c)
		if len(got) != 1 {
			t.Fatalf("after restart ACL = %v", got)
		}
		checkPolicy(t, got["keep"], "keep", nil, &e, "ru")
	})
}

// ---------------------------------------------------------------------------------------
// Service properties

func TestServiceProperties(t *testing.T) {
	t.Run("DefaultsWhenNeverSet", func(t *testing.T) {
		srv := freshAccountServer(t)
		checkAllProperties(t, getProps(t, newServiceClient(t, srv)), defaultProperties())
		for _, path := range []string{"/" + srv.Default().Name, "/" + srv.Default().Name + "/"} {
			r := srv.do(t, xmlReq(http.MethodGet, path, propsQuery(), nil))
			requireStatus(t, r, http.StatusOK, "GET properties at "+path)
			if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/xml") {
				t.Errorf("%s: Content-Type = %q, want application/xml", path, ct)
			}
			var doc struct {
				XMLName xml.Name  `xml:"StorageServiceProperties"`
				Cors    *struct{} `xml:"Cors"`
			}
			if err := xml.Unmarshal(r.Body, &doc); err != nil {
				t.Errorf("%s: body is not <StorageServiceProperties>: %v: %s", path, err, truncate(r.Body))
			} else if doc.Cors == nil {
				t.Errorf("%s: body lacks <Cors/> (always included): %s", path, truncate(r.Body))
			}
		}
	})

	t.Run("SetGetRoundTrip", func(t *testing.T) {
		srv := freshAccountServer(t)
		svc := newServiceClient(t, srv)
		want := fullProperties()
		setProps(t, svc, want) // the SDK fails unless the status is 202
		checkAllProperties(t, getProps(t, svc), want)
	})

	t.Run("RawStatusesAndPaths", func(t *testing.T) {
		srv := freshAccountServer(t)
		svc := newServiceClient(t, srv)
		acct := srv.Default().Name
		body := []byte(`<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Logging><Version>1.0</Version>` +
			`<Delete>true</Delete><Read>true</Read><Write>false</Write><RetentionPolicy><Enabled>true</Enabled><Days>3</Days></RetentionPolicy>` +
			`</Logging></StorageServiceProperties>`)
		// With the trailing slash (what most SDKs send) ...
		r := srv.do(t, xmlReq(http.MethodPut, "/"+acct+"/", propsQuery(), body))
		requireStatus(t, r, http.StatusAccepted, "PUT properties with trailing slash")
		p := getProps(t, svc)
		checkLogging(t, p.Logging, &aztables.Logging{Version: to.Ptr("1.0"), Delete: to.Ptr(true), Read: to.Ptr(true), Write: to.Ptr(false),
			RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr[int32](3)}})
		// ... and without (what Go sends).
		body2 := []byte(strings.Replace(string(body), "<Days>3</Days>", "<Days>4</Days>", 1))
		r = srv.do(t, xmlReq(http.MethodPut, "/"+acct, propsQuery(), body2))
		requireStatus(t, r, http.StatusAccepted, "PUT properties without trailing slash")
		r1 := srv.do(t, xmlReq(http.MethodGet, "/"+acct, propsQuery(), nil))
		r2 := srv.do(t, xmlReq(http.MethodGet, "/"+acct+"/", propsQuery(), nil))
		requireStatus(t, r1, http.StatusOK, "GET properties without slash")
		requireStatus(t, r2, http.StatusOK, "GET properties with slash")
		if string(r1.Body) != string(r2.Body) {
			t.Errorf("GET properties differs with/without trailing slash:\n%s\n%s", r1.Body, r2.Body)
		}
		if !strings.Contains(string(r1.Body), "<Days>4</Days>") {
			t.Errorf("GET properties after raw PUT lacks <Days>4</Days>: %s", truncate(r1.Body))
		}
	})

	t.Run("OmittedSectionsUnchanged", func(t *testing.T) {
		srv := freshAccountServer(t)
		svc := newServiceClient(t, srv)
		acct := srv.Default().Name
		want := fullProperties()
		setProps(t, svc, want)

		// Only CORS (the SDK omits nil sections).
		newCors := []*aztables.CorsRule{{
			AllowedOrigins: to.Ptr("http://c.example"), AllowedMethods: to.Ptr("DELETE,MERGE"),
			AllowedHeaders: to.Ptr("x-ms-c"), ExposedHeaders: to.Ptr("x-ms-e"), MaxAgeInSeconds: to.Ptr[int32](9),
		}}
		setProps(t, svc, aztables.ServiceProperties{Cors: newCors})
		want.Cors = newCors
		checkAllProperties(t, getProps(t, svc), want)

		// Only HourMetrics.
		hm := &aztables.Metrics{Version: to.Ptr("1.0"), Enabled: to.Ptr(false), RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(false)}}
		setProps(t, svc, aztables.ServiceProperties{HourMetrics: hm})
		want.HourMetrics = hm
		checkAllProperties(t, getProps(t, svc), want)

		// Only Logging, raw, without any Cors element: the rules stay.
		body := []byte(`<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Logging><Version>1.0</Version>` +
			`<Delete>false</Delete><Read>true</Read><Write>false</Write><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>` +
			`</Logging></StorageServiceProperties>`)
		requireStatus(t, srv.do(t, xmlReq(http.MethodPut, "/"+acct, propsQuery(), body)), http.StatusAccepted, "PUT only Logging")
		want.Logging = &aztables.Logging{Version: to.Ptr("1.0"), Delete: to.Ptr(false), Read: to.Ptr(true), Write: to.Ptr(false),
			RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(false)}}
		checkAllProperties(t, getProps(t, svc), want)

		// An empty <Cors/> clears the rules and nothing else.
		body = []byte(`<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Cors /></StorageServiceProperties>`)
		requireStatus(t, srv.do(t, xmlReq(http.MethodPut, "/"+acct, propsQuery(), body)), http.StatusAccepted, "PUT empty Cors")
		want.Cors = nil
		checkAllProperties(t, getProps(t, svc), want)
	})

	t.Run("InvalidRefused", func(t *testing.T) {
		srv := freshAccountServer(t)
		svc := newServiceClient(t, srv)
		acct := srv.Default().Name
		want := fullProperties()
		setProps(t, svc, want)

		var six []*aztables.CorsRule
		for i := 0; i < 6; i++ {
			six = append(six, &aztables.CorsRule{AllowedOrigins: to.Ptr(fmt.Sprintf("http://o%d.example", i)),
				AllowedMethods: to.Ptr("GET"), AllowedHeaders: to.Ptr("x"), ExposedHeaders: to.Ptr("y"), MaxAgeInSeconds: to.Ptr[int32](1)})
		}
		_, err := svc.SetProperties(ctx(t), aztables.ServiceProperties{Cors: six}, nil)
		if statusOf(err) != http.StatusBadRequest {
			t.Errorf("6 CORS rules: err %v, want 400", err)
		} else {
			var re *azcore.ResponseError
			errors.As(err, &re)
			if re.ErrorCode != "InvalidXmlDocument" {
				t.Errorf("6 CORS rules: code %q, want InvalidXmlDocument", re.ErrorCode)
			}
			requireSDKXMLErr(t, err, http.StatusBadRequest, re.ErrorCode)
		}

		zeroDays := aztables.ServiceProperties{Logging: &aztables.Logging{Version: to.Ptr("1.0"), Delete: to.Ptr(true), Read: to.Ptr(true), Write: to.Ptr(true),
			RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr[int32](0)}}}
		_, err = svc.SetProperties(ctx(t), zeroDays, nil)
		if statusOf(err) != http.StatusBadRequest {
			t.Errorf("retention enabled with Days 0: err %v, want 400", err)
		} else {
			var re *azcore.ResponseError
			errors.As(err, &re)
			if re.ErrorCode != "InvalidXmlDocument" {
				t.Errorf("Days 0: code %q, want InvalidXmlDocument", re.ErrorCode)
			}
			requireSDKXMLErr(t, err, http.StatusBadRequest, re.ErrorCode)
		}

		// Raw: 6 rules, Days 366, an unknown method, malformed XML.
		var b strings.Builder
		b.WriteString(`<StorageServiceProperties><Cors>`)
		for i := 0; i < 6; i++ {
			fmt.Fprintf(&b, `<CorsRule><AllowedOrigins>http://o%d.example</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds><ExposedHeaders>y</ExposedHeaders><AllowedHeaders>x</AllowedHeaders></CorsRule>`, i)
		}
		b.WriteString(`</Cors></StorageServiceProperties>`)
		requireXMLErrIn(t, srv.do(t, xmlReq(http.MethodPut, "/"+acct, propsQuery(), []byte(b.String()))), http.StatusBadRequest, "InvalidXmlDocument")
		requireXMLErrIn(t, srv.do(t, xmlReq(http.MethodPut, "/"+acct, propsQuery(), []byte(
			`<StorageServiceProperties><HourMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>false</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled><Days>366</Days></RetentionPolicy></HourMetrics></StorageServiceProperties>`))),
			http.StatusBadRequest, "InvalidXmlDocument")
		requireXMLErrIn(t, srv.do(t, xmlReq(http.MethodPut, "/"+acct, propsQuery(), []byte(
			`<StorageServiceProperties><Cors><CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET,TRACE</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds><ExposedHeaders></ExposedHeaders><AllowedHeaders></AllowedHeaders></CorsRule></Cors></StorageServiceProperties>`))),
			http.StatusBadRequest, "InvalidXmlDocument")
		requireXMLErr(t, srv.do(t, xmlReq(http.MethodPut, "/"+acct, propsQuery(), []byte(`<StorageServiceProperties><Logging>`))),
			http.StatusBadRequest, "InvalidXmlDocument")

		// Nothing changed.
		checkAllProperties(t, getProps(t, svc), want)
	})

	t.Run("PersistsAcrossRestart", func(t *testing.T) {
		srv := freshAccountServer(t)
		svc := newServiceClient(t, srv)
		want := fullProperties()
		setProps(t, svc, want)
		if err, inTime := srv.terminate(stopTimeout); !inTime || err != nil {
			t.Fatalf("stop: %v (in time %v)", err, inTime)
		}
		srv.restart(t)
		checkAllProperties(t, getProps(t, newServiceClient(t, srv)), want)
	})
}

// ---------------------------------------------------------------------------------------
// Service stats

func TestServiceStats(t *testing.T) {
	srv := startServer(t)
	acct := srv.Default().Name
	before := time.Now().Add(-time.Hour)

	t.Run("SDKOnSecondary", func(t *testing.T) {
		sec := newServiceClientFor(t, srv.Endpoint(acct+"-secondary"), acct, srv.Default().Key, nil)
		resp, err := sec.GetStatistics(ctx(t), nil)
		if err != nil {
			t.Fatalf("GetStatistics on the secondary: %v", err)
		}
		if resp.GeoReplication == nil {
			t.Fatalf("GetStatistics: no GeoReplication")
		}
		if s := deref(resp.GeoReplication.Status); s != aztables.GeoReplicationStatusLive {
			t.Errorf("Status = %q, want live", s)
		}
		lst := resp.GeoReplication.LastSyncTime
		if lst == nil || lst.IsZero() {
			t.Fatalf("LastSyncTime missing")
		}
		if lst.Before(before) || lst.After(time.Now().Add(time.Minute)) {
			t.Errorf("LastSyncTime %v is not recent", lst)
		}
	})

	t.Run("RawOnSecondary", func(t *testing.T) {
		for _, path := range []string{"/" + acct + "-secondary/", "/" + acct + "-secondary"} {
			r := srv.do(t, xmlReq(http.MethodGet, path, statsQuery(), nil))
			requireStatus(t, r, http.StatusOK, "GET stats at "+path)
			if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/xml") {
				t.Errorf("%s: Content-Type = %q, want application/xml", path, ct)
			}
			if _, err := time.Parse(http.TimeFormat, r.Header.Get("Date")); err != nil {
				t.Errorf("%s: Date header %q: %v", path, r.Header.Get("Date"), err)
			}
			var st xmlStats
			if err := xml.Unmarshal(r.Body, &st); err != nil {
				t.Fatalf("%s: body is not <StorageServiceStats>: %v: %s", path, err, truncate(r.Body))
			}
			if st.Geo.Status != "live" {
				t.Errorf("%s: Status = %q, want live", path, st.Geo.Status)
			}
			lst, err := time.Parse(http.TimeFormat, st.Geo.LastSyncTime)
			if err != nil {
				t.Errorf("%s: LastSyncTime %q is not RFC 1123 GMT: %v", path, st.Geo.LastSyncTime, err)
			} else if lst.Before(before) || lst.After(time.Now().Add(time.Minute)) {
				t.Errorf("%s: LastSyncTime %v is not recent", path, lst)
			}
		}
	})

	t.Run("HostStyle", func(t *testing.T) {
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/", Query: statsQuery(), Header: xmlHeaders, Host: acct + "-secondary.table.localhost"})
		requireStatus(t, r, http.StatusOK, "host-style GET stats on the secondary")
		var st xmlStats
		if err := xml.Unmarshal(r.Body, &st); err != nil || st.Geo.Status != "live" {
			t.Errorf("host-style stats body %s (%v)", truncate(r.Body), err)
		}
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: "/", Query: statsQuery(), Header: xmlHeaders, Host: acct + ".table.localhost"})
		requireXMLErr(t, r, http.StatusBadRequest, "InvalidQueryParameterValue")
	})

	// The printed connection string's endpoint is path-style primary: Go and JS call
	// it for stats (JS cannot derive a secondary for an IP address), and this one node's
	// primary is its own secondary, so stats are served there. A host-style primary keeps
	// the service's 400 (HostStyle above).
	t.Run("PrimaryPathStyleServed", func(t *testing.T) {
		for name, sc := range map[string]*aztables.ServiceClient{
			"endpoint":          newServiceClient(t, srv),
			"connection string": serviceClientFromConnectionString(t, compatConnectionString(srv)),
		} {
			resp, err := sc.GetStatistics(ctx(t), nil)
			if err != nil {
				t.Fatalf("GetStatistics (%s): %v", name, err)
			}
			if resp.GeoReplication == nil || deref(resp.GeoReplication.Status) != aztables.GeoReplicationStatusLive ||
				resp.GeoReplication.LastSyncTime == nil || resp.GeoReplication.LastSyncTime.Before(before) {
				t.Errorf("GetStatistics (%s): %+v", name, resp.GeoReplication)
			}
		}
		for _, path := range []string{"/" + acct + "/", "/" + acct} {
			r := srv.do(t, xmlReq(http.MethodGet, path, statsQuery(), nil))
			requireStatus(t, r, http.StatusOK, "GET stats at "+path)
			var st xmlStats
			if err := xml.Unmarshal(r.Body, &st); err != nil || st.Geo.Status != "live" {
				t.Errorf("%s: stats body %s (%v)", path, truncate(r.Body), err)
			}
		}
	})

	// The Python SDK (and az) sends /<acct>-secondary/<acct>/?restype=service&comp=stats
	// signed as the primary URL /<acct>/ (it swaps the host after signing).
	t.Run("PythonSecondaryShape", func(t *testing.T) {
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "-secondary/" + acct + "/", Query: statsQuery(),
			Header: xmlHeaders, SignPath: "/" + acct + "/" + acct + "/?comp=stats"})
		requireStatus(t, r, http.StatusOK, "Python-shaped secondary stats")
		var st xmlStats
		if err := xml.Unmarshal(r.Body, &st); err != nil || st.Geo.Status != "live" {
			t.Errorf("stats body %s (%v)", truncate(r.Body), err)
		}
		// A signature of another resource does not pass for it.
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "-secondary/" + acct + "/", Query: statsQuery(),
			Header: xmlHeaders, SignPath: "/" + acct + "/" + acct + "/Tables?comp=stats"})
		requireXMLErr(t, r, http.StatusForbidden, "AuthenticationFailed")
		// A table named like the account is still a table on the secondary ("acct()" has
		// no '/' after the name, so nothing is skipped).
		svc := newServiceClient(t, srv)
		if _, err := svc.CreateTable(ctx(t), acct, nil); err != nil {
			t.Fatalf("CreateTable(%s): %v", acct, err)
		}
		// Its name is fixed: a database that outlives the run (CERULEAN_TEST_ENGINE_ARGS
		// naming a server's database) must not keep it for the next one.
		t.Cleanup(func() {
			cx, cancel := ctxWithTimeout(30 * time.Second)
			defer cancel()
			if _, err := svc.DeleteTable(cx, acct, nil); err != nil {
				t.Errorf("DeleteTable(%s): %v", acct, err)
			}
		})
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "-secondary/" + acct + "()"})
		requireStatus(t, r, http.StatusOK, "query of table "+acct+" on the secondary")
		if !strings.Contains(string(r.Body), `"value":[]`) {
			t.Errorf("query of table %s on the secondary: %s", acct, truncate(r.Body))
		}
	})
}

// serviceClientFromConnectionString is the Go SDK client a user builds from the printed
// connection string.
func serviceClientFromConnectionString(t testing.TB, cs string) *aztables.ServiceClient {
	t.Helper()
	c, err := aztables.NewServiceClientFromConnectionString(cs, clientOptions(nil))
	if err != nil {
		t.Fatalf("NewServiceClientFromConnectionString: %v", err)
	}
	return c
}

// ---------------------------------------------------------------------------------------
// CORS

func TestCORSPreflight(t *testing.T) {
	srv := freshAccountServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	tables := "/" + acct + "/Tables"

	t.Run("NoRulesRefused", func(t *testing.T) {
		r := preflight(t, srv, tables, "http://a.example", "GET", "")
		requirePreflightRefused(t, r, http.StatusForbidden, "CorsPreflightFailure", "no CORS rules")
	})

	t.Run("MissingRequiredHeaders", func(t *testing.T) {
		requirePreflightRefused(t, preflight(t, srv, tables, "", "GET", ""), http.StatusBadRequest, "InvalidHeaderValue", "no Origin")
		requirePreflightRefused(t, preflight(t, srv, tables, "http://a.example", "", ""), http.StatusBadRequest, "InvalidHeaderValue", "no Access-Control-Request-Method")
	})

	// From here on the account has the rules of fullProperties (everything asserted is set).
	setProps(t, svc, fullProperties())

	t.Run("Allowed", func(t *testing.T) {
		paths := []string{
			tables,
			"/" + acct + "/sometable(PartitionKey='a',RowKey='b')",
			"/" + acct + "/sometable()",
			"/" + acct + "/$batch",
			"/" + acct + "/",
		}
		for _, path := range paths {
			r := preflight(t, srv, path, "http://a.example", "PUT", "x-ms-meta-abc, x-ms-prefix-foo")
			if r.Status != http.StatusOK {
				t.Errorf("%s: preflight status %d, want 200 (x-ms-error-code=%q body=%s)", path, r.Status, r.Header.Get("x-ms-error-code"), truncate(r.Body))
				continue
			}
			h := r.Header
			if v := h.Get("Access-Control-Allow-Origin"); v != "http://a.example" {
				t.Errorf("%s: Allow-Origin = %q, want http://a.example", path, v)
			}
			if v := h.Get("Access-Control-Allow-Methods"); !sameList(v, "PUT", true) {
				t.Errorf("%s: Allow-Methods = %q, want PUT", path, v)
			}
			if v := h.Get("Access-Control-Allow-Headers"); !sameList(v, "x-ms-meta-abc,x-ms-prefix-foo", true) {
				t.Errorf("%s: Allow-Headers = %q, want x-ms-meta-abc,x-ms-prefix-foo", path, v)
			}
			if v := h.Get("Access-Control-Max-Age"); v != "500" {
				t.Errorf("%s: Max-Age = %q, want 500", path, v)
			}
			if v := h.Get("Access-Control-Allow-Credentials"); v != "true" {
				t.Errorf("%s: Allow-Credentials = %q, want true", path, v)
			}
		}
		// Service-level URL with a query string.
		r := srv.do(t, rawReq{Method: http.MethodOptions, Path: "/" + acct, Query: propsQuery(), NoAuth: true,
			Header: map[string]string{"Origin": "http://b.example", "Access-Control-Request-Method": "GET"}})
		requireStatus(t, r, http.StatusOK, "preflight on the service properties URL")
		if v := r.Header.Get("Access-Control-Allow-Origin"); v != "http://b.example" {
			t.Errorf("Allow-Origin = %q, want http://b.example", v)
		}
	})

	t.Run("OriginCaseInsensitive", func(t *testing.T) {
		r := preflight(t, srv, tables, "HTTP://A.EXAMPLE", "GET", "")
		requireStatus(t, r, http.StatusOK, "preflight with upper-case origin")
		if v := r.Header.Get("Access-Control-Allow-Origin"); v != "HTTP://A.EXAMPLE" {
			t.Errorf("Allow-Origin = %q, want the request's origin", v)
		}
	})

	t.Run("WildcardRule", func(t *testing.T) {
		r := preflight(t, srv, tables, "http://anything.example", "POST", "x-whatever")
		requireStatus(t, r, http.StatusOK, "preflight matching the * rule")
		if v := r.Header.Get("Access-Control-Allow-Origin"); v != "http://anything.example" {
			t.Errorf("Allow-Origin = %q, want the request's origin", v)
		}
		if v := r.Header.Get("Access-Control-Max-Age"); v != "60" {
			t.Errorf("Max-Age = %q, want 60 (the * rule's)", v)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		cases := []struct{ what, origin, method, headers string }{
			{"origin not allowed", "http://evil.example", "GET", ""},
			{"method not allowed", "http://a.example", "DELETE", ""},
			{"header not allowed", "http://a.example", "GET", "x-ms-meta-abc,x-ms-other"},
			{"prefix does not match", "http://a.example", "GET", "x-ms-prefi"},
			{"wildcard rule, method not allowed", "http://anything.example", "GET", ""},
		}
		for _, c := range cases {
			r := preflight(t, srv, tables, c.origin, c.method, c.headers)
			requirePreflightRefused(t, r, http.StatusForbidden, "CorsPreflightFailure", c.what)
		}
	})

	t.Run("ActualRequests", func(t *testing.T) {
		// Matching a non-wildcard rule: origin echoed, expose headers, Vary and credentials.
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: tables, Header: map[string]string{"Origin": "http://a.example"}})
		requireStatus(t, r, http.StatusOK, "GET /Tables with Origin")
		if v := r.Header.Get("Access-Control-Allow-Origin"); v != "http://a.example" {
			t.Errorf("actual GET: Allow-Origin = %q, want http://a.example", v)
		}
		// The rule's, plus the headers Cerulean answers every read with (docs/compatibility.md "Read consistency and replicas").
		if v := r.Header.Get("Access-Control-Expose-Headers"); !sameList(v, "x-ms-meta-*,x-ms-session-token,x-cerulean-read-source,x-cerulean-read-position", true) {
			t.Errorf("actual GET: Expose-Headers = %q, want x-ms-meta-* and the read headers", v)
		}
		if !hasToken(r.Header, "Vary", "Origin") {
			t.Errorf("actual GET: Vary = %q, want Origin", r.Header.Values("Vary"))
		}
		if v := r.Header.Get("Access-Control-Allow-Credentials"); v != "true" {
			t.Errorf("actual GET: Allow-Credentials = %q, want true", v)
		}

		// Matching the wildcard rule (POST): "*", its expose headers, no credentials.
		name := tableName(t)
		r = srv.do(t, rawReq{Method: http.MethodPost, Path: tables, Body: marshal(t, map[string]string{"TableName": name}),
			Header: map[string]string{"Origin": "http://anything.example"}})
		requireStatus(t, r, http.StatusCreated, "POST /Tables with Origin")
		if v := r.Header.Get("Access-Control-Allow-Origin"); v != "*" {
			t.Errorf("actual POST (wildcard rule): Allow-Origin = %q, want *", v)
		}
		// The rule's, plus the session token a table-level change answers (docs/compatibility.md "Session tokens").
		if v := r.Header.Get("Access-Control-Expose-Headers"); !sameList(v, "x-ms-request-id,x-ms-session-token", true) {
			t.Errorf("actual POST (wildcard rule): Expose-Headers = %q, want x-ms-request-id and x-ms-session-token", v)
		}
		if v := r.Header.Get("Access-Control-Allow-Credentials"); v != "" {
			t.Errorf("actual POST (wildcard rule): Allow-Credentials = %q, want none", v)
		}
		if hasToken(r.Header, "Vary", "Origin") {
			t.Errorf("actual POST (wildcard rule): Vary: Origin set, want none for a * rule")
		}

		// Rules exist but none matches: only Vary: Origin.
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: tables, Header: map[string]string{"Origin": "http://evil.example"}})
		requireStatus(t, r, http.StatusOK, "GET /Tables with a non-matching Origin")
		if !hasToken(r.Header, "Vary", "Origin") {
			t.Errorf("non-matching origin: Vary = %q, want Origin", r.Header.Values("Vary"))
		}
		for _, k := range []string{"Access-Control-Allow-Origin", "Access-Control-Expose-Headers", "Access-Control-Allow-Credentials"} {
			if v := r.Header.Get(k); v != "" {
				t.Errorf("non-matching origin: %s = %q, want none", k, v)
			}
		}

		// No Origin: no CORS headers.
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: tables})
		requireStatus(t, r, http.StatusOK, "GET /Tables without Origin")
		for _, k := range []string{"Access-Control-Allow-Origin", "Access-Control-Expose-Headers", "Access-Control-Allow-Credentials"} {
			if v := r.Header.Get(k); v != "" {
				t.Errorf("no Origin: %s = %q, want none", k, v)
			}
		}
	})

	t.Run("RulesChangeTakesEffect", func(t *testing.T) {
		setProps(t, svc, aztables.ServiceProperties{Cors: []*aztables.CorsRule{{
			AllowedOrigins: to.Ptr("http://new.example"), AllowedMethods: to.Ptr("GET"),
			AllowedHeaders: to.Ptr(""), ExposedHeaders: to.Ptr(""), MaxAgeInSeconds: to.Ptr[int32](7),
		}}})
		requirePreflightRefused(t, preflight(t, srv, tables, "http://a.example", "GET", ""), http.StatusForbidden, "CorsPreflightFailure", "old rule after replace")
		r := preflight(t, srv, tables, "http://new.example", "GET", "")
		requireStatus(t, r, http.StatusOK, "new rule")
		if v := r.Header.Get("Access-Control-Max-Age"); v != "7" {
			t.Errorf("Max-Age = %q, want 7", v)
		}

		// Clear the rules: preflight refused, actual requests get no CORS headers at all.
		requireStatus(t, srv.do(t, xmlReq(http.MethodPut, "/"+acct, propsQuery(), []byte(`<StorageServiceProperties><Cors/></StorageServiceProperties>`))),
			http.StatusAccepted, "PUT empty Cors")
		requirePreflightRefused(t, preflight(t, srv, tables, "http://new.example", "GET", ""), http.StatusForbidden, "CorsPreflightFailure", "after clearing rules")
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: tables, Header: map[string]string{"Origin": "http://new.example"}})
		requireStatus(t, r, http.StatusOK, "GET /Tables with Origin, no rules")
		if v := r.Header.Get("Access-Control-Allow-Origin"); v != "" {
			t.Errorf("no rules: Allow-Origin = %q", v)
		}
		if hasToken(r.Header, "Vary", "Origin") {
			t.Errorf("no rules: Vary: Origin set")
		}
	})
}

// ---------------------------------------------------------------------------------------
// Isolation between accounts

func TestServiceIsolation(t *testing.T) {
	a := account{Name: fmt.Sprintf("svca%s%d", runID, nameCounter.Add(1)), Key: randomKey(t)}
	b := account{Name: fmt.Sprintf("svcb%s%d", runID, nameCounter.Add(1)), Key: randomKey(t)}
	srv := startServer(t, withAccounts(a, b))
	svcA := newServiceClientFor(t, srv.Endpoint(a.Name), a.Name, a.Key, nil)
	svcB := newServiceClientFor(t, srv.Endpoint(b.Name), b.Name, b.Key, nil)

	shared := tableName(t)
	for _, s := range []*aztables.ServiceClient{svcA, svcB} {
		if _, err := s.CreateTable(ctx(t), shared, nil); err != nil {
			t.Fatalf("CreateTable(%s): %v", shared, err)
		}
	}
	ca, cb := svcA.NewClient(shared), svcB.NewClient(shared)
	exp := time.Date(2034, 4, 4, 4, 4, 4, 0, time.UTC)

	t.Run("ACLPerAccount", func(t *testing.T) {
		if _, err := ca.SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{sigID("onlyA", nil, &exp, "raud")}}); err != nil {
			t.Fatal(err)
		}
		if got := getACL(t, cb); len(got) != 0 {
			t.Errorf("B's table sees A's ACL: %v", got)
		}
		if _, err := cb.SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{sigID("onlyB", nil, &exp, "r")}}); err != nil {
			t.Fatal(err)
		}
		gotA, gotB := getACL(t, ca), getACL(t, cb)
		if len(gotA) != 1 || gotA["onlyA"] == nil {
			t.Errorf("A's ACL = %v, want onlyA", gotA)
		}
		if len(gotB) != 1 || gotB["onlyB"] == nil {
			t.Errorf("B's ACL = %v, want onlyB", gotB)
		}
	})

	t.Run("PropertiesPerAccount", func(t *testing.T) {
		setProps(t, svcA, fullProperties())
		checkAllProperties(t, getProps(t, svcB), defaultProperties())
		checkAllProperties(t, getProps(t, svcA), fullProperties())
		// CORS rules are per account too.
		requireStatus(t, preflight(t, srv, "/"+a.Name+"/Tables", "http://a.example", "GET", ""), http.StatusOK, "preflight on A")
		requirePreflightRefused(t, preflight(t, srv, "/"+b.Name+"/Tables", "http://a.example", "GET", ""),
			http.StatusForbidden, "CorsPreflightFailure", "preflight on B with A's rules")
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + b.Name + "/Tables", Account: b.Name, Header: map[string]string{"Origin": "http://a.example"}})
		requireStatus(t, r, http.StatusOK, "B GET /Tables with Origin")
		if v := r.Header.Get("Access-Control-Allow-Origin"); v != "" || hasToken(r.Header, "Vary", "Origin") {
			t.Errorf("B (no rules) answered with A's CORS headers: Allow-Origin %q Vary %q", v, r.Header.Values("Vary"))
		}
	})

	t.Run("StatsPerAccount", func(t *testing.T) {
		for _, acc := range []account{a, b} {
			sec := newServiceClientFor(t, srv.Endpoint(acc.Name+"-secondary"), acc.Name, acc.Key, nil)
			if _, err := sec.GetStatistics(ctx(t), nil); err != nil {
				t.Errorf("%s GetStatistics: %v", acc.Name, err)
			}
		}
	})

	t.Run("SignedForAAddressedToB", func(t *testing.T) {
		beforeACL := getACL(t, cb)
		beforeProps := getProps(t, svcB)

		// SDK: B's URLs, signed as account A with A's key.
		asA := newServiceClientFor(t, srv.Endpoint(b.Name), a.Name, a.Key, nil)
		_, err := asA.NewClient(shared).GetAccessPolicy(ctx(t), nil)
		requireForbidden(t, err, "SDK GetAccessPolicy on B signed as A")
		_, err = asA.NewClient(shared).SetAccessPolicy(ctx(t), &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{sigID("evil", nil, &exp, "raud")}})
		requireForbidden(t, err, "SDK SetAccessPolicy on B signed as A")
		_, err = asA.NewClient(shared).SetAccessPolicy(ctx(t), nil)
		requireForbidden(t, err, "SDK clear ACL on B signed as A")
		_, err = asA.GetProperties(ctx(t), nil)
		requireForbidden(t, err, "SDK GetProperties on B signed as A")
		_, err = asA.SetProperties(ctx(t), fullProperties(), nil)
		requireForbidden(t, err, "SDK SetProperties on B signed as A")
		secAsA := newServiceClientFor(t, srv.Endpoint(b.Name+"-secondary"), a.Name, a.Key, nil)
		_, err = secAsA.GetStatistics(ctx(t), nil)
		requireForbidden(t, err, "SDK GetStatistics on B's secondary signed as A")

		// SDK: B's URLs and name with A's key (wrong key).
		wrongKey := newServiceClientFor(t, srv.Endpoint(b.Name), b.Name, a.Key, nil)
		_, err = wrongKey.NewClient(shared).GetAccessPolicy(ctx(t), nil)
		requireSDKXMLErr(t, err, http.StatusForbidden, "AuthenticationFailed")
		_, err = wrongKey.GetProperties(ctx(t), nil)
		requireSDKXMLErr(t, err, http.StatusForbidden, "AuthenticationFailed")
		_, err = wrongKey.SetProperties(ctx(t), fullProperties(), nil)
		requireSDKXMLErr(t, err, http.StatusForbidden, "AuthenticationFailed")
		wrongSec := newServiceClientFor(t, srv.Endpoint(b.Name+"-secondary"), b.Name, a.Key, nil)
		_, err = wrongSec.GetStatistics(ctx(t), nil)
		requireSDKXMLErr(t, err, http.StatusForbidden, "AuthenticationFailed")

		// Raw: signed by A (name and key) for B's paths.
		raw := func(method, path, query string, body []byte) rawResp {
			r := xmlReq(method, path, query, body)
			r.Account, r.Key = a.Name, a.Key
			return srv.do(t, r)
		}
		cases := []struct {
			what string
			r    rawResp
		}{
			{"GET B ACL", raw(http.MethodGet, tablePath(b.Name, shared), aclQuery(), nil)},
			{"PUT B ACL", raw(http.MethodPut, tablePath(b.Name, shared), aclQuery(), aclXML(2))},
			{"GET B properties", raw(http.MethodGet, "/"+b.Name, propsQuery(), nil)},
			{"GET B properties /", raw(http.MethodGet, "/"+b.Name+"/", propsQuery(), nil)},
			{"PUT B properties", raw(http.MethodPut, "/"+b.Name, propsQuery(), []byte(`<StorageServiceProperties><Cors/></StorageServiceProperties>`))},
			{"GET B stats", raw(http.MethodGet, "/"+b.Name+"-secondary/", statsQuery(), nil)},
		}
		for _, c := range cases {
			if c.r.Status != http.StatusForbidden {
				t.Errorf("%s signed for A: status %d, want 403 (x-ms-error-code=%q body=%s)", c.what, c.r.Status, c.r.Header.Get("x-ms-error-code"), truncate(c.r.Body))
			}
		}

		// Unauthenticated requests to B's XML endpoints are refused too (401 or 403).
		unauth := func(method, path, query string, body []byte) rawResp {
			r := xmlReq(method, path, query, body)
			r.NoAuth = true
			return srv.do(t, r)
		}
		for _, c := range []struct {
			what string
			r    rawResp
		}{
			{"GET B ACL", unauth(http.MethodGet, tablePath(b.Name, shared), aclQuery(), nil)},
			{"PUT B ACL", unauth(http.MethodPut, tablePath(b.Name, shared), aclQuery(), aclXML(2))},
			{"GET B properties", unauth(http.MethodGet, "/"+b.Name, propsQuery(), nil)},
			{"PUT B properties", unauth(http.MethodPut, "/"+b.Name, propsQuery(), []byte(`<StorageServiceProperties><Cors/></StorageServiceProperties>`))},
			{"GET B stats", unauth(http.MethodGet, "/"+b.Name+"-secondary/", statsQuery(), nil)},
		} {
			if c.r.Status != http.StatusUnauthorized && c.r.Status != http.StatusForbidden {
				t.Errorf("%s unauthenticated: status %d, want 401 or 403 (body %s)", c.what, c.r.Status, truncate(c.r.Body))
			}
		}

		// B is unchanged.
		afterACL := getACL(t, cb)
		if len(afterACL) != len(beforeACL) || afterACL["evil"] != nil || afterACL["id0"] != nil {
			t.Errorf("B's ACL changed by requests signed for A: before %v, after %v", beforeACL, afterACL)
		}
		for id, p := range beforeACL {
			checkPolicy(t, afterACL[id], id, p.Start, p.Expiry, deref(p.Permission))
		}
		checkAllProperties(t, getProps(t, svcB), beforeProps)
	})
}
