package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
	"github.com/ceruleandb/cerulean/internal/table"
)

// settingsServer serves a fresh Pebble engine over HTTP with the elastic-table rules spec.
func settingsServer(t *testing.T, spec string) *httptest.Server {
	t.Helper()
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	rules, err := table.ParseElasticRules(spec)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}, ElasticTables: rules})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs
}

// call sends a signed request and returns the status, error code and body.
func call(t *testing.T, hs *httptest.Server, method, path, body string) (int, string, string) {
	t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	resp, out := do(t, signed(t, hs, method, path, b))
	return resp.StatusCode, resp.Header.Get("x-ms-error-code"), string(out)
}

// wantError checks a 4xx answer: its status, code and a part of its message.
func wantError(t *testing.T, what string, status int, code, body string, wantStatus int, wantCode, msg string) {
	t.Helper()
	if status != wantStatus || code != wantCode || !strings.Contains(body, msg) {
		t.Errorf("%s: %d %s %s; want %d %s with %q", what, status, code, body, wantStatus, wantCode, msg)
	}
}

func TestCreateTableSettings(t *testing.T) {
	hs := settingsServer(t, "events*:60,cache*:-1:Exp")
	for _, c := range []struct {
		body, want string
	}{
		// The rules decide when the body says nothing.
		{`{"TableName":"events1"}`, `{"TableName":"events1","Elastic":true,"DefaultTimeToLive":60,"TimeToLiveProperty":"TTLInSeconds"}`},
		{`{"TableName":"CacheA"}`, `{"TableName":"CacheA","Elastic":true,"DefaultTimeToLive":-1,"TimeToLiveProperty":"Exp"}`},
		{`{"TableName":"plain1","odata.type":"x"}`, `{"TableName":"plain1","Elastic":false}`},
		// The body wins over the rules.
		{`{"TableName":"events2","Elastic":false}`, `{"TableName":"events2","Elastic":false}`},
		{`{"TableName":"plain2","Elastic":true}`, `{"TableName":"plain2","Elastic":true,"TimeToLiveProperty":"TTLInSeconds"}`},
		{`{"TableName":"plain3","Elastic":true,"DefaultTimeToLive":3600,"TimeToLiveProperty":"Expiry"}`, `{"TableName":"plain3","Elastic":true,"DefaultTimeToLive":3600,"TimeToLiveProperty":"Expiry"}`},
		{`{"TableName":"events3","Elastic":true,"DefaultTimeToLive":null}`, `{"TableName":"events3","Elastic":true,"TimeToLiveProperty":"TTLInSeconds"}`},
	} {
		if st, code, body := call(t, hs, "POST", "/Tables", c.body); st != http.StatusCreated {
			t.Fatalf("create %s: %d %s %s", c.body, st, code, body)
		}
		var name struct{ TableName string }
		_ = json.Unmarshal([]byte(c.body), &name)
		st, _, body := call(t, hs, "GET", "/"+name.TableName+"?comp=properties", "")
		if st != http.StatusOK || body != c.want {
			t.Errorf("settings after %s: %d %s; want %s", c.body, st, body, c.want)
		}
	}
	for _, c := range []struct {
		body, code, msg string
	}{
		{`{"TableName":"bad1","DefaultTimeToLive":60}`, "InvalidInput", "Time-to-live is available on elastic tables only."},
		{`{"TableName":"bad1","Elastic":false,"TimeToLiveProperty":"x"}`, "InvalidInput", "A time-to-live property is available on elastic tables only."},
		{`{"TableName":"bad1","Elastic":"yes"}`, "InvalidInput", "The value of 'Elastic' must be true or false."},
		{`{"TableName":"bad1","Elastic":true,"DefaultTimeToLive":0}`, "InvalidInput", "The value 0 of 'DefaultTimeToLive' is not valid"},
		{`{"TableName":"bad1","Elastic":true,"DefaultTimeToLive":"60"}`, "InvalidInput", `The value \"60\" of 'DefaultTimeToLive'`},
		{`{"TableName":"bad1","Elastic":true,"DefaultTimeToLive":2147483648}`, "InvalidInput", "2147483648"},
		{`{"TableName":"bad1","Elastic":true,"TimeToLiveProperty":"no good"}`, "InvalidInput", "The time-to-live property name 'no good' is not a valid property name."},
		{`{"TableName":"bad1","Elastic":true,"TimeToLiveProperty":"RowKey"}`, "InvalidInput", "system property 'RowKey'"},
		{`{"TableName":"bad1","Elastic":true,"Elastic":true}`, "DuplicatePropertiesSpecified", ""},
	} {
		st, code, body := call(t, hs, "POST", "/Tables", c.body)
		wantError(t, "create "+c.body, st, code, body, http.StatusBadRequest, c.code, c.msg)
	}
	if st, _, _ := call(t, hs, "GET", "/Tables('bad1')", ""); st != http.StatusNotFound {
		t.Errorf("a refused Create Table created the table: %d", st)
	}
}

func TestTableSettingsEndpoint(t *testing.T) {
	hs := settingsServer(t, "")
	if st, code, body := call(t, hs, "POST", "/Tables", `{"TableName":"Tbl"}`); st != http.StatusCreated {
		t.Fatalf("create: %d %s %s", st, code, body)
	}
	get := func() string {
		t.Helper()
		resp, body := do(t, signed(t, hs, "GET", "/tbl?comp=properties", nil))
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != settingsContentType {
			t.Fatalf("GET settings: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		return string(body)
	}
	if got := get(); got != `{"TableName":"Tbl","Elastic":false}` {
		t.Errorf("standard table: %s", got)
	}
	for _, c := range []struct{ put, want string }{
		{`{"Elastic":true,"DefaultTimeToLive":5}`, `{"TableName":"Tbl","Elastic":true,"DefaultTimeToLive":5,"TimeToLiveProperty":"TTLInSeconds"}`},
		// A GET answer is a PUT body; TableName may be given in any case.
		{`{"TableName":"TBL","Elastic":true,"DefaultTimeToLive":-1,"TimeToLiveProperty":"Exp"}`, `{"TableName":"Tbl","Elastic":true,"DefaultTimeToLive":-1,"TimeToLiveProperty":"Exp"}`},
		// Members left out take their defaults: the body states the whole settings.
		{`{"Elastic":true}`, `{"TableName":"Tbl","Elastic":true,"TimeToLiveProperty":"TTLInSeconds"}`},
		{`{}`, `{"TableName":"Tbl","Elastic":false}`},
	} {
		if st, code, body := call(t, hs, "PUT", "/Tbl?comp=properties", c.put); st != http.StatusNoContent || body != "" {
			t.Fatalf("PUT %s: %d %s %s", c.put, st, code, body)
		}
		if got := get(); got != c.want {
			t.Errorf("after PUT %s: %s; want %s", c.put, got, c.want)
		}
	}
	for _, c := range []struct {
		method, path, body string
		status             int
		code, msg          string
	}{
		{"PUT", "/Tbl?comp=properties", `{"TableName":"other","Elastic":true}`, 400, "InvalidInput", "The TableName 'other' in the body is not the table addressed, 'Tbl'."},
		{"PUT", "/Tbl?comp=properties", `{"Elastic":true,"TTL":5}`, 400, "InvalidInput", "The member 'TTL' is not a table setting"},
		{"PUT", "/Tbl?comp=properties", `{"DefaultTimeToLive":5}`, 400, "InvalidInput", "Time-to-live is available on elastic tables only."},
		{"PUT", "/Tbl?comp=properties", `{"Elastic":true,"DefaultTimeToLive":-2}`, 400, "InvalidInput", "The value -2 of 'DefaultTimeToLive'"},
		{"PUT", "/Tbl?comp=properties", `not json`, 400, "InvalidInput", ""},
		{"PUT", "/nosuch?comp=properties", `{"Elastic":true}`, 404, "TableNotFound", ""},
		{"GET", "/nosuch?comp=properties", ``, 404, "TableNotFound", ""},
		{"POST", "/Tbl?comp=properties", `{}`, 405, "MethodNotAllowed", ""},
		{"DELETE", "/Tbl?comp=properties", ``, 405, "MethodNotAllowed", ""},
	} {
		st, code, body := call(t, hs, c.method, c.path, c.body)
		wantError(t, c.method+" "+c.path+" "+c.body, st, code, body, c.status, c.code, c.msg)
		if !strings.HasPrefix(body, `{"odata.error":`) {
			t.Errorf("%s %s: error body %s is not JSON", c.method, c.path, body)
		}
	}
	// An XML body is refused as on the other JSON operations.
	r := signed(t, hs, "PUT", "/Tbl?comp=properties", []byte(`<x/>`))
	r.Header.Set("Content-Type", "application/xml")
	acct := auth.DevAccount()
	auth.SignRequest(r, auth.SchemeSharedKeyLite, acct.Name, acct.Keys[0], time.Now())
	if resp, body := do(t, r); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("XML body: %d %s", resp.StatusCode, body)
	}
}

// Query Tables and Get Table write the settings members only when $select names them.
func TestTableSettingsSelect(t *testing.T) {
	hs := settingsServer(t, "ev*:30")
	for _, n := range []string{"ev1", "st1"} {
		if st, code, body := call(t, hs, "POST", "/Tables", `{"TableName":"`+n+`"}`); st != http.StatusCreated {
			t.Fatalf("create %s: %d %s %s", n, st, code, body)
		}
	}
	root := hs.URL + "/" + auth.DevAccountName
	for _, c := range []struct{ path, want string }{
		{"/Tables", `{"odata.metadata":"` + root + `/$metadata#Tables","value":[{"TableName":"ev1"},{"TableName":"st1"}]}`},
		{"/Tables?$select=", `{"odata.metadata":"` + root + `/$metadata#Tables","value":[{"TableName":"ev1"},{"TableName":"st1"}]}`},
		{"/Tables?$select=TableName", `{"odata.metadata":"` + root + `/$metadata#Tables","value":[{"TableName":"ev1"},{"TableName":"st1"}]}`},
		{"/Tables?$select=TableName,Elastic,DefaultTimeToLive", `{"odata.metadata":"` + root + `/$metadata#Tables","value":[` +
			`{"TableName":"ev1","Elastic":true,"DefaultTimeToLive":30},{"TableName":"st1","Elastic":false,"DefaultTimeToLive":null}]}`},
		{"/Tables?$select=TimeToLiveProperty&$filter=" + url.QueryEscape("TableName eq 'st1'"), `{"odata.metadata":"` + root + `/$metadata#Tables","value":[{"TableName":"st1","TimeToLiveProperty":null}]}`},
		{"/Tables('ev1')", `{"odata.metadata":"` + root + `/$metadata#Tables/@Element","TableName":"ev1"}`},
		{"/Tables('ev1')?$select=" + url.QueryEscape("Elastic, TimeToLiveProperty"), `{"odata.metadata":"` + root + `/$metadata#Tables/@Element","TableName":"ev1","Elastic":true,"TimeToLiveProperty":"TTLInSeconds"}`},
	} {
		st, code, body := call(t, hs, "GET", c.path, "")
		if st != http.StatusOK || body != c.want {
			t.Errorf("GET %s: %d %s\n got %s\nwant %s", c.path, st, code, body, c.want)
		}
	}
	st, code, body := call(t, hs, "GET", "/Tables?$select="+url.QueryEscape("TableName,,Elastic"), "")
	wantError(t, "malformed $select", st, code, body, 400, "InvalidInput", "item 2 of $select is empty")
}

// The settings endpoint takes the account key or an account SAS for tables (srt=c) with r
// or l to read and w to write; a table SAS can do neither.
func TestTableSettingsSAS(t *testing.T) {
	hs := settingsServer(t, "")
	if st, code, body := call(t, hs, "POST", "/Tables", `{"TableName":"tbl"}`); st != http.StatusCreated {
		t.Fatalf("create: %d %s %s", st, code, body)
	}
	acct := auth.DevAccount()
	exp := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04:05Z")
	accountSAS := func(srt, sp string) string {
		s := &auth.SAS{Version: "2019-02-02", Services: "t", ResourceTypes: srt, Permissions: sp, Expiry: exp}
		return url.Values{"sv": {s.Version}, "ss": {"t"}, "srt": {srt}, "sp": {sp}, "se": {exp},
			"sig": {auth.Sign(acct.Keys[0], s.StringToSign(acct.Name))}}.Encode()
	}
	tableSAS := func(sp string) string {
		s := &auth.SAS{Version: "2019-02-02", Permissions: sp, Expiry: exp, TableName: "tbl"}
		return url.Values{"sv": {s.Version}, "sp": {sp}, "se": {exp}, "tn": {"tbl"},
			"sig": {auth.Sign(acct.Keys[0], s.StringToSign(acct.Name))}}.Encode()
	}
	send := func(method, sas, body string) (int, string) {
		var rd *strings.Reader
		if body != "" {
			rd = strings.NewReader(body)
		} else {
			rd = strings.NewReader("")
		}
		r, err := http.NewRequest(method, hs.URL+"/"+acct.Name+"/tbl?comp=properties&"+sas, rd)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/json")
		resp, _ := do(t, r)
		return resp.StatusCode, resp.Header.Get("x-ms-error-code")
	}
	for _, c := range []struct {
		name, method, sas string
		status            int
		code              string
	}{
		{"account c r read", "GET", accountSAS("c", "r"), 200, ""},
		{"account c l read", "GET", accountSAS("c", "l"), 200, ""},
		{"account c w read", "GET", accountSAS("c", "w"), 403, "AuthorizationPermissionMismatch"},
		{"account o r read", "GET", accountSAS("o", "r"), 403, "AuthorizationResourceTypeMismatch"},
		{"account c w write", "PUT", accountSAS("c", "w"), 204, ""},
		{"account sco rl write", "PUT", accountSAS("sco", "rl"), 403, "AuthorizationPermissionMismatch"},
		{"account o w write", "PUT", accountSAS("o", "w"), 403, "AuthorizationResourceTypeMismatch"},
		{"table raud read", "GET", tableSAS("raud"), 403, "AuthorizationFailure"},
		{"table raud write", "PUT", tableSAS("raud"), 403, "AuthorizationFailure"},
	} {
		st, code := send(c.method, c.sas, `{"Elastic":true}`)
		if st != c.status || code != c.code {
			t.Errorf("%s: %d %s; want %d %s", c.name, st, code, c.status, c.code)
		}
	}
}
