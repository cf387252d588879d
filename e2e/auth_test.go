package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSharedKeyScheme signs raw requests with the Table flavour of SharedKey (what the Python
// SDK sends, docs/protocol.md §8.4): VERB, Content-MD5, Content-Type, date, canonical resource.
func TestSharedKeyScheme(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default()
	_, table := newTable(t, svc)

	sign := func(method, contentType, path string, date time.Time) map[string]string {
		d := date.UTC().Format(http.TimeFormat)
		sts := strings.Join([]string{method, "", contentType, d, "/" + acct.Name + path}, "\n")
		return map[string]string{"Authorization": "SharedKey " + acct.Name + ":" + signLite(t, acct.Key, sts)}
	}
	now := time.Now()
	path := "/" + acct.Name + "/" + table
	h := sign(http.MethodPost, "application/json;odata=nometadata", path, now)
	h["Content-Type"] = "application/json;odata=nometadata"
	r := srv.do(t, rawReq{Method: http.MethodPost, Path: path, NoAuth: true, Date: now, Header: h,
		Body: []byte(`{"PartitionKey":"p","RowKey":"sk"}`)})
	requireStatus(t, r, http.StatusCreated, "SharedKey insert")

	h = sign(http.MethodGet, "", "/"+acct.Name+"/Tables", now)
	r = srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct.Name + "/Tables", NoAuth: true, Date: now, Header: h})
	requireStatus(t, r, http.StatusOK, "SharedKey query tables")

	// the verb is part of the signature
	h = sign(http.MethodDelete, "", "/"+acct.Name+"/Tables", now)
	r = srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct.Name + "/Tables", NoAuth: true, Date: now, Header: h})
	requireRawErr(t, r, http.StatusForbidden, "AuthenticationFailed")
}
