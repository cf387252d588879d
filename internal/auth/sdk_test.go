package auth_test

// These tests sign with the official Go SDK (aztables) and verify with package auth over
// real HTTP, so any divergence between what the SDK signs and what the verifier
// reconstructs (escaping, account doubling, comp handling) shows up here.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/azerr"
)

type authResult struct {
	method, uri, account string
	err                  error
}

// authServer authenticates every request with a Verifier, records the outcome, and
// answers just well enough for the SDK calls to succeed.
type authServer struct {
	v       *auth.Verifier
	mu      sync.Mutex
	results []authResult
}

func (s *authServer) take() []authResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.results
	s.results = nil
	return r
}

// resolveAccount applies docs/protocol.md §1.1: an IP literal or dot-less host means
// path-style (account = first path segment), otherwise the first DNS label; a
// "-secondary" suffix is removed.
func resolveAccount(r *http.Request) string {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	var account string
	if net.ParseIP(host) != nil || !strings.Contains(host, ".") {
		account, _, _ = strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	} else {
		account, _, _ = strings.Cut(host, ".")
	}
	return strings.TrimSuffix(strings.ToLower(account), "-secondary")
}

func (s *authServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	account := resolveAccount(r)
	err := s.v.Authenticate(r, account)
	s.mu.Lock()
	s.results = append(s.results, authResult{r.Method, r.RequestURI, account, err})
	s.mu.Unlock()
	if err != nil {
		ae, _ := azerr.As(err)
		w.Header().Set("x-ms-error-code", string(ae.Code))
		w.Header().Set("Content-Type", "application/json;odata=minimalmetadata")
		w.WriteHeader(ae.Status)
		body, _ := json.Marshal(map[string]any{"odata.error": map[string]any{
			"code": ae.Code, "message": map[string]string{"lang": "en-US", "value": ae.Message + "\n" + ae.Detail}}})
		w.Write(body)
		return
	}
	comp := r.URL.Query().Get("comp")
	xml := func(status int, body string) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprint(w, `<?xml version="1.0" encoding="utf-8"?>`+body)
	}
	switch {
	case r.Method == "GET" && comp == "acl":
		xml(200, `<SignedIdentifiers></SignedIdentifiers>`)
	case r.Method == "GET" && comp == "properties":
		xml(200, `<StorageServiceProperties></StorageServiceProperties>`)
	case r.Method == "GET" && comp == "stats":
		xml(200, `<StorageServiceStats><GeoReplication><Status>live</Status><LastSyncTime>Wed, 01 May 2024 10:00:00 GMT</LastSyncTime></GeoReplication></StorageServiceStats>`)
	case r.Method == "PUT" && comp == "properties":
		w.WriteHeader(http.StatusAccepted)
	case strings.HasSuffix(r.URL.Path, "/$batch"):
		// Authentication is all this test is about; the SDK's batch parser gets an error.
		w.Header().Set("x-ms-error-code", "NotImplemented")
		w.WriteHeader(http.StatusBadRequest)
	case r.Method == "GET":
		w.Header().Set("Content-Type", "application/json;odata=minimalmetadata")
		fmt.Fprint(w, `{"value":[]}`)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

const devKey = auth.DevAccountKey

func newAuthServer(t *testing.T) (*authServer, *httptest.Server) {
	t.Helper()
	other, err := auth.ParseAccounts("other1:" + base64.StdEncoding.EncodeToString([]byte("other key")))
	if err != nil {
		t.Fatal(err)
	}
	s := &authServer{v: auth.NewVerifier(append(other, auth.DevAccount()), nil)}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

func sdkClient(t *testing.T, serviceURL, account, key string, transport policy.Transporter) *aztables.ServiceClient {
	t.Helper()
	cred, err := aztables.NewSharedKeyCredential(account, key)
	if err != nil {
		t.Fatal(err)
	}
	opts := &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{
		Retry:     policy.RetryOptions{MaxRetries: -1},
		Transport: transport,
	}}
	c, err := aztables.NewServiceClientWithSharedKey(serviceURL, cred, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// exercise runs SDK operations covering every URL shape the verifier must reproduce.
func exercise(t *testing.T, svc *aztables.ServiceClient) {
	t.Helper()
	ctx := context.Background()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	const pk, rk = "a'b c", "r 1/2+%"
	_, err := svc.CreateTable(ctx, "mytable", nil)
	must("CreateTable", err)
	_, err = svc.NewListTablesPager(&aztables.ListTablesOptions{Filter: to.Ptr("TableName eq 'mytable'")}).NextPage(ctx)
	must("ListTables", err)
	tc := svc.NewClient("mytable")
	ent, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "Value": 1})
	_, err = tc.AddEntity(ctx, ent, nil)
	must("AddEntity", err)
	_, err = tc.GetEntity(ctx, pk, rk, nil)
	must("GetEntity", err)
	_, err = tc.UpdateEntity(ctx, ent, &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeReplace})
	must("UpdateEntity(replace)", err)
	_, err = tc.UpsertEntity(ctx, ent, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge})
	must("UpsertEntity(merge)", err)
	_, err = tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{
		Filter: to.Ptr("PartitionKey eq 'a''b c' and RowKey ge 'r'"), Top: to.Ptr(int32(5)),
	}).NextPage(ctx)
	must("ListEntities", err)
	_, err = tc.GetAccessPolicy(ctx, nil)
	must("GetAccessPolicy", err)
	_, err = tc.SetAccessPolicy(ctx, &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{{
		ID: to.Ptr("policy1"),
		AccessPolicy: &aztables.AccessPolicy{
			Start: to.Ptr(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)), Expiry: to.Ptr(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)),
			Permission: to.Ptr("raud")},
	}}})
	must("SetAccessPolicy", err)
	_, _ = tc.SubmitTransaction(ctx, []aztables.TransactionAction{{ActionType: aztables.TransactionTypeAdd, Entity: ent}}, nil)
	_, err = tc.DeleteEntity(ctx, pk, rk, nil)
	must("DeleteEntity", err)
	_, err = svc.GetProperties(ctx, nil)
	must("GetProperties", err)
	_, err = svc.SetProperties(ctx, aztables.ServiceProperties{}, nil)
	must("SetProperties", err)
	_, err = svc.DeleteTable(ctx, "mytable", nil)
	must("DeleteTable", err)
}

func checkAllAuthenticated(t *testing.T, results []authResult, wantMin int, mustSee ...string) {
	t.Helper()
	if len(results) < wantMin {
		t.Fatalf("server saw %d requests, want at least %d", len(results), wantMin)
	}
	for _, r := range results {
		if r.err != nil {
			t.Errorf("%s %s (account %q): %v", r.method, r.uri, r.account, r.err)
		}
	}
	for _, sub := range mustSee {
		found := false
		for _, r := range results {
			found = found || strings.Contains(r.uri, sub)
		}
		if !found {
			t.Errorf("no request URI contains %q; the test no longer covers that shape", sub)
		}
	}
}

func TestSDKPathStyle(t *testing.T) {
	s, ts := newAuthServer(t)
	exercise(t, sdkClient(t, ts.URL+"/devstoreaccount1", "devstoreaccount1", devKey, nil))
	checkAllAuthenticated(t, s.take(), 14,
		"/devstoreaccount1/Tables",                             // account doubled in the resource
		"(PartitionKey='a%27%27b%20c',RowKey='r%201%2F2+%25')", // Go's escaping of ' space / % ('+' stays)
		"?comp=acl", "/devstoreaccount1?comp=properties", "%24filter=", "/devstoreaccount1/$batch")

	// The secondary endpoint, as a separate client the way Go users address it.
	sec := sdkClient(t, ts.URL+"/devstoreaccount1-secondary", "devstoreaccount1", devKey, nil)
	if _, err := sec.GetStatistics(context.Background(), nil); err != nil {
		t.Fatalf("GetStatistics: %v", err)
	}
	checkAllAuthenticated(t, s.take(), 1, "/devstoreaccount1-secondary")
}

func TestSDKHostStyle(t *testing.T) {
	s, ts := newAuthServer(t)
	// Resolve every host name to the test server, so production-style URLs can be used.
	var d net.Dialer
	transport := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, ts.Listener.Addr().String())
		},
	}}
	exercise(t, sdkClient(t, "http://devstoreaccount1.table.core.windows.net", "devstoreaccount1", devKey, transport))
	results := s.take()
	checkAllAuthenticated(t, results, 14, "/Tables", "(PartitionKey='a%27%27b%20c'", "?comp=acl")
	for _, r := range results {
		if strings.HasPrefix(r.uri, "/devstoreaccount1") {
			t.Fatalf("host-style request has the account in the path: %s", r.uri)
		}
	}

	sec := sdkClient(t, "http://devstoreaccount1-secondary.table.core.windows.net", "devstoreaccount1", devKey, transport)
	if _, err := sec.GetStatistics(context.Background(), nil); err != nil {
		t.Fatalf("GetStatistics: %v", err)
	}
	checkAllAuthenticated(t, s.take(), 1)
}

func TestSDKWrongCredentials(t *testing.T) {
	s, ts := newAuthServer(t)
	wrongKey := base64.StdEncoding.EncodeToString([]byte("definitely not the dev key"))
	tests := []struct {
		name, account, key string
		wantDetail         string
	}{
		{"wrong key", "devstoreaccount1", wrongKey, "The MAC signature found in the HTTP request"},
		{"key of another account", "devstoreaccount1", base64.StdEncoding.EncodeToString([]byte("other key")), "The MAC signature"},
		{"other account's credential", "other1", base64.StdEncoding.EncodeToString([]byte("other key")), "'other1' in the Authorization header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := sdkClient(t, ts.URL+"/devstoreaccount1", tc.account, tc.key, nil)
			_, err := svc.NewClient("mytable").GetEntity(context.Background(), "a'b c", "r", nil)
			var re *azcore.ResponseError
			if !errors.As(err, &re) || re.StatusCode != http.StatusForbidden || re.ErrorCode != string(azerr.AuthenticationFailed) {
				t.Fatalf("GetEntity error = %v, want 403 AuthenticationFailed", err)
			}
			results := s.take()
			if len(results) != 1 {
				t.Fatalf("server saw %d requests, want 1 (403 must not be retried)", len(results))
			}
			var ae *azerr.Error
			if !errors.As(results[0].err, &ae) || ae.Code != azerr.AuthenticationFailed || !strings.Contains(ae.Detail, tc.wantDetail) {
				t.Fatalf("Authenticate = %v, want AuthenticationFailed with %q", results[0].err, tc.wantDetail)
			}
		})
	}
}
