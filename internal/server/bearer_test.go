package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/identity"
	"github.com/ceruleandb/cerulean/internal/observe"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// fakeVerifier accepts the tokens it maps to principals; package bearer's own tests and
// the e2e suite verify real tokens from a real provider. These tests hold the server's
// side: where tokens are taken, how refusals are answered, and that roles decide each
// operation.
type fakeVerifier map[string]identity.Principal

func (f fakeVerifier) Verify(_ context.Context, token, _ string) (identity.Principal, error) {
	if p, ok := f[token]; ok {
		return p, nil
	}
	return identity.Principal{}, errors.New("Signature validation failed.")
}

func (f fakeVerifier) Challenge() string {
	return "Bearer authorization_uri=https://login.example/authorize resource_id=https://storage.azure.com"
}

// fakeRoles allows object id "reader" the reads of every table, "writer" everything on
// table "mine".
type fakeRoles struct{}

func (fakeRoles) Allowed(p identity.Principal, account, table string, op auth.OpKind) bool {
	switch p.ObjectID {
	case "reader":
		return op == auth.OpQueryEntities || op == auth.OpGetEntity || op == auth.OpQueryTables
	case "writer":
		return strings.EqualFold(table, "mine")
	}
	return false
}

type observed struct{ reqs chan observe.Request }

func (o observed) Observe(r *observe.Request) { o.reqs <- *r }

// TestBearer: tokens are taken over HTTPS only (403 AuthenticationFailed over HTTP); one
// that does not verify is 401 InvalidAuthenticationInfo with a WWW-Authenticate
// challenge; a verified one is authorized operation by operation by its roles (403
// AuthorizationPermissionMismatch), in a $batch each operation; the access log names the
// principal, never the token.
func TestBearer(t *testing.T) {
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	obs := observed{reqs: make(chan observe.Request, 100)}
	principals := fakeVerifier{
		"tok-reader": {ObjectID: "reader"},
		"tok-writer": {ObjectID: "writer", AppID: "app1"},
	}
	srv, err := New(Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}, Bearer: principals, Roles: fakeRoles{}, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{"mine", "other"} {
		if err := srv.tables.CreateTable(t.Context(), auth.DevAccountName, tbl, nil); err != nil {
			t.Fatal(err)
		}
	}
	tlsSrv := httptest.NewTLSServer(srv)
	t.Cleanup(tlsSrv.Close)
	plain := httptest.NewServer(srv)
	t.Cleanup(plain.Close)

	type answer struct {
		status              int
		code, body, wwwAuth string
	}
	do := func(hs *httptest.Server, method, path, token, body string, contentType ...string) answer {
		t.Helper()
		r, err := http.NewRequest(method, hs.URL+"/"+auth.DevAccountName+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Accept", "application/json;odata=minimalmetadata")
		r.Header.Set("Content-Type", "application/json")
		if len(contentType) > 0 {
			r.Header.Set("Content-Type", contentType[0])
		}
		r.Header.Set("x-ms-version", "2020-12-06")
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hs.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("x-ms-error-code"), string(b), resp.Header.Get("WWW-Authenticate")}
	}
	want := func(what string, got answer, status int, code azerr.Code) {
		t.Helper()
		if got.status != status || got.code != string(code) {
			t.Errorf("%s: %d %s (%s), want %d %s", what, got.status, got.code, got.body, status, code)
		}
	}

	a := do(plain, http.MethodGet, "/mine()", "tok-reader", "")
	want("a token over HTTP", a, http.StatusForbidden, azerr.AuthenticationFailed)
	if !strings.Contains(a.body, "Authentication scheme Bearer is not allowed with HTTP.") {
		t.Errorf("a token over HTTP: %s", a.body)
	}
	a = do(tlsSrv, http.MethodGet, "/mine()", "tok-bogus", "")
	want("a token that does not verify", a, http.StatusUnauthorized, azerr.InvalidAuthenticationInfo)
	if !strings.HasPrefix(a.wwwAuth, "Bearer authorization_uri=") || !strings.Contains(a.body, "Signature validation failed.") {
		t.Errorf("a token that does not verify: WWW-Authenticate %q, body %s", a.wwwAuth, a.body)
	}
	a = do(tlsSrv, http.MethodGet, "/mine()", "", "")
	want("no credentials", a, http.StatusUnauthorized, azerr.NoAuthenticationInformation)
	if !strings.HasPrefix(a.wwwAuth, "Bearer authorization_uri=") {
		t.Errorf("no credentials: WWW-Authenticate %q, want the bearer challenge", a.wwwAuth)
	}
	want("a reader's query", do(tlsSrv, http.MethodGet, "/other()", "tok-reader", ""), http.StatusOK, "")
	want("a reader's listing", do(tlsSrv, http.MethodGet, "/Tables", "tok-reader", ""), http.StatusOK, "")
	want("a reader's insert", do(tlsSrv, http.MethodPost, "/mine", "tok-reader", `{"PartitionKey":"p","RowKey":"r"}`),
		http.StatusForbidden, azerr.AuthorizationPermissionMismatch)
	want("a reader's delete of a table", do(tlsSrv, http.MethodDelete, "/Tables('other')", "tok-reader", ""),
		http.StatusForbidden, azerr.AuthorizationPermissionMismatch)
	want("a writer's insert into its table", do(tlsSrv, http.MethodPost, "/mine", "tok-writer", `{"PartitionKey":"p","RowKey":"r"}`),
		http.StatusCreated, "")
	want("a writer's insert into another table", do(tlsSrv, http.MethodPost, "/other", "tok-writer", `{"PartitionKey":"p","RowKey":"r"}`),
		http.StatusForbidden, azerr.AuthorizationPermissionMismatch)

	// The access log's record of the writer's insert names it, and holds no token.
	deadline := time.After(5 * time.Second)
	found := false
	for !found {
		select {
		case r := <-obs.reqs:
			if r.Principal != "" && (strings.Contains(r.Principal, "tok-") || r.AuthScheme != "Bearer") {
				t.Errorf("observed %+v", r)
			}
			found = r.Principal == "writer via app1" && r.Status == http.StatusCreated
		case <-deadline:
			t.Fatal("no observed request names the writer")
		}
	}

	// A $batch: each operation needs its role; the refused one fails the change set.
	ct, body := batchBody([][3]string{{"POST", "/mine", `{"PartitionKey":"b","RowKey":"1"}`}, {"DELETE", "/mine(PartitionKey='p',RowKey='r')", ""}})
	a = do(tlsSrv, http.MethodPost, "/$batch", "tok-writer", string(body), ct)
	if a.status != http.StatusAccepted || strings.Contains(a.body, "AuthorizationPermissionMismatch") {
		t.Errorf("a writer's batch on its table: %d %s", a.status, a.body)
	}
	ct, body = batchBody([][3]string{{"POST", "/mine", `{"PartitionKey":"b","RowKey":"2"}`}})
	a = do(tlsSrv, http.MethodPost, "/$batch", "tok-reader", string(body), ct)
	if a.status != http.StatusAccepted || !strings.Contains(a.body, "AuthorizationPermissionMismatch") {
		t.Errorf("a reader's batch insert: %d %s", a.status, a.body)
	}
	want("the reader's batch wrote nothing", do(tlsSrv, http.MethodGet, "/mine(PartitionKey='b',RowKey='2')", "tok-writer", ""),
		http.StatusNotFound, azerr.ResourceNotFound)
}

// TestSharedKeyOff: an account whose shared key access is off refuses SharedKey and SAS
// requests signed with its keys (403 KeyBasedAuthenticationNotPermitted), a wrong
// signature as any (403 AuthenticationFailed), and takes bearer tokens; another account
// keeps its keys.
func TestSharedKeyOff(t *testing.T) {
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	off := auth.DevAccount()
	off.SharedKeyOff = true
	on := auth.Account{Name: "other", Keys: [][]byte{[]byte("0123456789abcdef0123456789abcdef")}}
	srv, err := New(Options{Engine: eng, Accounts: []auth.Account{off, on},
		Bearer: fakeVerifier{"tok-writer": {ObjectID: "writer"}}, Roles: fakeRoles{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{off.Name, on.Name} {
		if err := srv.tables.CreateTable(t.Context(), a, "mine", nil); err != nil {
			t.Fatal(err)
		}
	}
	hs := httptest.NewTLSServer(srv)
	t.Cleanup(hs.Close)
	get := func(acct auth.Account, key []byte, query, token string) (int, string) {
		t.Helper()
		r, err := http.NewRequest(http.MethodGet, hs.URL+"/"+acct.Name+"/mine()"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Accept", "application/json;odata=minimalmetadata")
		switch {
		case token != "":
			r.Header.Set("Authorization", "Bearer "+token)
		case key != nil:
			auth.SignRequest(r, auth.SchemeSharedKeyLite, acct.Name, key, time.Now())
		}
		resp, err := hs.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("x-ms-error-code")
	}
	sasQuery := func(acct auth.Account) string {
		sas := &auth.SAS{Version: "2019-02-02", Permissions: "r", Expiry: time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04:05Z"), TableName: "mine"}
		q := url.Values{"sv": {sas.Version}, "sp": {sas.Permissions}, "se": {sas.Expiry}, "tn": {sas.TableName},
			"sig": {auth.Sign(acct.Keys[0], sas.StringToSign(acct.Name))}}
		return "?" + q.Encode()
	}
	for _, tc := range []struct {
		what         string
		acct         auth.Account
		key          []byte
		query, token string
		status       int
		code         azerr.Code
	}{
		{"shared key, keys off", off, off.Keys[0], "", "", http.StatusForbidden, azerr.KeyBasedAuthenticationNotPermitted},
		{"SAS, keys off", off, nil, sasQuery(off), "", http.StatusForbidden, azerr.KeyBasedAuthenticationNotPermitted},
		{"a wrong key, keys off", off, on.Keys[0], "", "", http.StatusForbidden, azerr.AuthenticationFailed},
		{"a token, keys off", off, nil, "", "tok-writer", http.StatusOK, ""},
		{"shared key, keys on", on, on.Keys[0], "", "", http.StatusOK, ""},
		{"SAS, keys on", on, nil, sasQuery(on), "", http.StatusOK, ""},
	} {
		if status, code := get(tc.acct, tc.key, tc.query, tc.token); status != tc.status || code != string(tc.code) {
			t.Errorf("%s: %d %s, want %d %s", tc.what, status, code, tc.status, tc.code)
		}
	}
}
