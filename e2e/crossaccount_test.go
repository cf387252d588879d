package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// TestBearerRefused: Cerulean cannot validate Entra ID tokens, so it refuses them clearly
// instead of accepting what it cannot verify.
func TestBearerRefused(t *testing.T) {
	srv := startServer(t)
	for _, path := range []string{"/devstoreaccount1/Tables", "/devstoreaccount1/sometable()"} {
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: path, NoAuth: true,
			Header: map[string]string{"Authorization": "Bearer eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl"}})
		requireRawErr(t, r, http.StatusForbidden, "AuthenticationFailed")
	}
}

// TestSASCrossAccount: a shared access signature made with account A's key grants nothing
// in account B, on any endpoint, even for a table of the same name.
func TestSASCrossAccount(t *testing.T) {
	a := account{Name: "sasa" + runID, Key: randomKey(t)}
	b := account{Name: "sasb" + runID, Key: randomKey(t)}
	srv := startServer(t, withAccounts(a, b))
	svcA := newServiceClientFor(t, srv.Endpoint(a.Name), a.Name, a.Key, nil)
	svcB := newServiceClientFor(t, srv.Endpoint(b.Name), b.Name, b.Key, nil)
	name := tableName(t)
	for _, svc := range []*aztables.ServiceClient{svcA, svcB} {
		if _, err := svc.CreateTable(ctx(t), name, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svcB.NewClient(name).AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "Owner": "B"}), nil); err != nil {
		t.Fatal(err)
	}

	all := aztables.AccountSASPermissions{Read: true, Write: true, Delete: true, List: true, Add: true, Create: true, Update: true, Process: true}
	rt := aztables.AccountSASResourceTypes{Service: true, Container: true, Object: true}
	sasURL, err := svcA.GetAccountSASURL(rt, all, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// The SDK returns "<endpoint>?<sas>"; keep the signature, aim it at account B.
	qs := sasURL[len(srv.Endpoint(a.Name)):]
	if qs == "" || qs[0] != '?' {
		qs = "?" + qs
	}
	qs = qs[1:]
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/" + b.Name + "/Tables"},
		{http.MethodGet, "/" + b.Name + "/" + name + "()"},
		{http.MethodGet, "/" + b.Name + "/" + name + "(PartitionKey='p',RowKey='r')"},
		{http.MethodDelete, "/" + b.Name + "/Tables('" + name + "')"},
		{http.MethodGet, "/" + b.Name + "/"},
	} {
		q := qs
		if tc.path == "/"+b.Name+"/" {
			q += "&restype=service&comp=properties"
		}
		r := srv.do(t, rawReq{Method: tc.method, Path: tc.path, Query: q, NoAuth: true})
		if r.Status != http.StatusForbidden {
			t.Errorf("%s %s with account A's SAS: status %d, want 403 (%s)", tc.method, tc.path, r.Status, truncate(r.Body))
		}
	}
	// B's data is untouched.
	if _, err := svcB.NewClient(name).GetEntity(ctx(t), "p", "r", nil); err != nil {
		t.Fatalf("B's entity after the attempts: %v", err)
	}
}
