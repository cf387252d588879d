package server

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// TestAuthenticateKeyAndSAS drives authenticate with every combination of a shared key
// (Authorization) and a SAS (query) on one request: whichever verifies authorizes, the key
// first, never both; the SAS parameters leave rq.query in every case.
func TestAuthenticateKeyAndSAS(t *testing.T) {
	const acct = "acct1"
	key := []byte("0123456789abcdef0123456789abcdef")
	other := []byte("fedcba9876543210fedcba9876543210")
	s := &Server{verifier: auth.NewVerifier([]auth.Account{{Name: acct, Keys: [][]byte{key}}}, nil)}

	// A table SAS for t1, read-only, signed with k; "bad" tampers with its permissions.
	sasQuery := func(k []byte, bad bool) string {
		sas := &auth.SAS{Version: "2019-02-02", Permissions: "r", Expiry: time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04:05Z"), TableName: "t1"}
		q := url.Values{"sv": {sas.Version}, "sp": {sas.Permissions}, "se": {sas.Expiry}, "tn": {sas.TableName},
			"sig": {auth.Sign(k, sas.StringToSign(acct))}}
		if bad {
			q.Set("sp", "raud")
		}
		return q.Encode()
	}
	const filter = "$filter=" + "PartitionKey%20eq%20'p'" + "&$top=5"
	newRQ := func(t *testing.T, sasQ string, keyAuth string) *request {
		t.Helper()
		target := "/" + acct + "/t1()?" + filter
		if sasQ != "" {
			target += "&" + sasQ
		}
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.Host = "127.0.0.1:10002"
		switch keyAuth {
		case "good":
			auth.SignRequest(r, auth.SchemeSharedKeyLite, acct, key, time.Now())
		case "bad":
			auth.SignRequest(r, auth.SchemeSharedKeyLite, acct, other, time.Now())
		case "bearer":
			r.Header.Set("Authorization", "Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln")
		}
		rq := &request{r: r, query: r.URL.Query()}
		s.address(rq)
		return rq
	}
	for _, tc := range []struct {
		name     string
		key      string // "", "good", "bad", "bearer"
		sas      string // "", "good", "bad" (valid form, wrong signature), "malformed"
		wantSAS  bool   // the SAS is returned for authorizeSAS
		wantCode azerr.Code
		wantNote string // in the error detail, naming the other credential
	}{
		{name: "key only", key: "good"},
		{name: "SAS only", sas: "good", wantSAS: true},
		{name: "neither", wantCode: azerr.NoAuthenticationInformation},
		{name: "valid key + valid SAS: the key, SAS ignored", key: "good", sas: "good"},
		{name: "valid key + bad SAS: the key", key: "good", sas: "bad"},
		{name: "valid key + malformed SAS: the key", key: "good", sas: "malformed"},
		{name: "bad key + valid SAS: the SAS", key: "bad", sas: "good", wantSAS: true},
		{name: "bearer + valid SAS: the SAS", key: "bearer", sas: "good", wantSAS: true},
		{name: "bad key + bad SAS: the SAS decides (later)", key: "bad", sas: "bad", wantSAS: true},
		{name: "bad key + malformed SAS", key: "bad", sas: "malformed", wantCode: azerr.AuthenticationFailed,
			wantNote: "The shared access signature in the query was refused too: AuthenticationFailed"},
		{name: "malformed SAS only", sas: "malformed", wantCode: azerr.AuthenticationFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q string
			switch tc.sas {
			case "good":
				q = sasQuery(key, false)
			case "bad":
				q = sasQuery(key, true)
			case "malformed":
				q = "sv=2019-02-02&sp=r&tn=t1&sig=notbase64"
			}
			rq := newRQ(t, q, tc.key)
			sas, err := s.authenticate(rq)
			if tc.wantCode != "" {
				e, _ := azerr.As(err)
				if err == nil || e.Code != tc.wantCode {
					t.Fatalf("authenticate: %v, want %s", err, tc.wantCode)
				}
				if !strings.Contains(e.Detail, tc.wantNote) {
					t.Errorf("detail %q lacks %q", e.Detail, tc.wantNote)
				}
			} else if err != nil {
				t.Fatalf("authenticate: %v", err)
			}
			if (sas != nil) != tc.wantSAS {
				t.Errorf("SAS returned: %v, want %v", sas != nil, tc.wantSAS)
			}
			if tc.wantSAS && (rq.keyRefused != nil) != (tc.key != "") {
				t.Errorf("keyRefused = %v with key %q", rq.keyRefused, tc.key)
			}
			for k := range rq.query {
				if auth.IsSASParam(k) {
					t.Errorf("SAS parameter %q left in the query: %v", k, rq.query)
				}
			}
			if rq.query.Get("$filter") != "PartitionKey eq 'p'" || rq.query.Get("$top") != "5" {
				t.Errorf("query lost its own parameters: %v", rq.query)
			}
		})
	}
}

// TestAuthorizeSASNotesRefusedKey: when a request's key did not verify and its SAS is
// refused too, the answer is the SAS's and its detail says why the key was not used.
func TestAuthorizeSASNotesRefusedKey(t *testing.T) {
	keyErr := azerr.New(azerr.AuthenticationFailed).WithDetail("The MAC signature found in the HTTP request 'x' is not the same as any computed signature.")
	sasErr := azerr.New(azerr.AuthorizationPermissionMismatch).WithDetail("needs a")
	got, _ := azerr.As(noteRefusal(sasErr, "The Authorization header was not used, it did not verify", keyErr))
	if got.Code != azerr.AuthorizationPermissionMismatch || got.Status != http.StatusForbidden {
		t.Fatalf("code %s/%d", got.Code, got.Status)
	}
	want := "needs a The Authorization header was not used, it did not verify: AuthenticationFailed: The MAC signature"
	if !strings.HasPrefix(got.Detail, want) {
		t.Errorf("detail %q, want prefix %q", got.Detail, want)
	}
	if sasErr.Detail != "needs a" {
		t.Errorf("noteRefusal modified its argument: %q", sasErr.Detail)
	}
}

// TestStrictProtocol: with Options.StrictProtocol a SAS signed spr=https is refused on a
// request that arrived over plain HTTP (403 AuthorizationProtocolMismatch, the service's
// answer) and accepted over TLS; spr=https,http is accepted over both. Without it (the
// default) spr=https is accepted over plain HTTP too.
func TestStrictProtocol(t *testing.T) {
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	acct := auth.DevAccount()
	newServer := func(strict bool) *Server {
		srv, err := New(Options{Engine: eng, Accounts: []auth.Account{acct}, StrictProtocol: strict})
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	if err := newServer(false).tables.CreateTable(t.Context(), acct.Name, "tbl", nil); err != nil {
		t.Fatal(err)
	}
	sasQuery := func(spr string) string {
		sas := &auth.SAS{Version: "2019-02-02", Permissions: "r", Expiry: time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04:05Z"), TableName: "tbl", Protocol: spr}
		q := url.Values{"sv": {sas.Version}, "sp": {sas.Permissions}, "se": {sas.Expiry}, "tn": {sas.TableName}, "spr": {spr},
			"sig": {auth.Sign(acct.Keys[0], sas.StringToSign(acct.Name))}}
		return q.Encode()
	}
	get := func(hs *httptest.Server, spr string) (int, string) {
		t.Helper()
		r, err := http.NewRequest(http.MethodGet, hs.URL+"/"+acct.Name+"/tbl()?"+sasQuery(spr), nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Accept", "application/json;odata=minimalmetadata")
		resp, err := hs.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("x-ms-error-code")
	}
	for _, tc := range []struct {
		strict, tls bool
		spr         string
		want        int
		code        string
	}{
		{true, false, "https", http.StatusForbidden, string(azerr.AuthorizationProtocolMismatch)},
		{true, true, "https", http.StatusOK, ""},
		{true, false, "https,http", http.StatusOK, ""},
		{true, true, "https,http", http.StatusOK, ""},
		{false, false, "https", http.StatusOK, ""},
	} {
		var hs *httptest.Server
		if tc.tls {
			hs = httptest.NewTLSServer(newServer(tc.strict))
		} else {
			hs = httptest.NewServer(newServer(tc.strict))
		}
		status, code := get(hs, tc.spr)
		hs.Close()
		if status != tc.want || code != tc.code {
			t.Errorf("strict=%v tls=%v spr=%s: %d %q, want %d %q", tc.strict, tc.tls, tc.spr, status, code, tc.want, tc.code)
		}
	}
}
