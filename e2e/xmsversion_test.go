package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// x-ms-version: the versions of the storage services are accepted (the SDKs send
// 2017-04-17, 2019-02-02 and 2020-12-06 or later); anything else is 400 InvalidHeaderValue
// naming the header, as the service answers, instead of being served. A request without the
// header is served with the default, and every response echoes the version used.
func TestVersionHeaderChecked(t *testing.T) {
	srv := startServer(t)
	acct := srv.Default().Name
	for _, v := range []string{"2013-08-15", "2017-04-17", "2019-02-02", "2020-12-06", "2025-11-05", "2026-06-06"} {
		r := srv.do(t, rawReq{Method: "GET", Path: "/" + acct + "/Tables", Header: map[string]string{"x-ms-version": v}})
		requireStatus(t, r, http.StatusOK, "x-ms-version "+v)
		checkStdHeaders(t, r, v, "")
	}
	r := srv.do(t, rawReq{Method: "GET", Path: "/" + acct + "/Tables", Header: map[string]string{"x-ms-version": ""}})
	requireStatus(t, r, http.StatusOK, "no x-ms-version")
	checkStdHeaders(t, r, "2019-02-02", "")

	for _, v := range []string{"invalid", "2019-02-03", "2019-2-2", "2012-02-12", "2099-12-31", "2019-02-02; drop"} {
		r := srv.do(t, rawReq{Method: "GET", Path: "/" + acct + "/Tables", Header: map[string]string{"x-ms-version": v}})
		requireRawErr(t, r, http.StatusBadRequest, "InvalidHeaderValue")
		var e struct {
			Err struct {
				Message     struct{ Value string }
				HeaderName  string
				HeaderValue string
			} `json:"odata.error"`
		}
		if err := json.Unmarshal(r.Body, &e); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(e.Err.Message.Value, "The value for one of the HTTP headers is not in the correct format.") ||
			e.Err.HeaderName != "x-ms-version" || e.Err.HeaderValue != v {
			t.Errorf("x-ms-version %q: error body %s, want the service's message with HeaderName x-ms-version and HeaderValue", v, r.Body)
		}
	}

	// The XML endpoints answer in XML, with the service's HeaderName/HeaderValue elements.
	r = srv.do(t, rawReq{Method: "GET", Path: "/" + acct + "/", Query: "restype=service&comp=properties",
		Header: map[string]string{"x-ms-version": "invalid", "Accept": "application/xml"}})
	if r.Status != http.StatusBadRequest || r.Header.Get("x-ms-error-code") != "InvalidHeaderValue" ||
		!strings.Contains(string(r.Body), "<Code>InvalidHeaderValue</Code>") ||
		!strings.Contains(string(r.Body), "<HeaderName>x-ms-version</HeaderName><HeaderValue>invalid</HeaderValue></Error>") {
		t.Errorf("service properties with a bad x-ms-version: %d %s", r.Status, r.Body)
	}

	// A batch whose parts carry an empty x-ms-version (as the Go SDK writes them) is served:
	// only the request's own header is checked.
	svc := newServiceClient(t, srv)
	client, name := newTable(t, svc)
	var acts []aztables.TransactionAction
	for _, rk := range []string{"a", "b", "c"} {
		acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
			Entity: marshal(t, map[string]any{"PartitionKey": "p", "RowKey": rk})})
	}
	if _, err := client.SubmitTransaction(ctx(t), acts, nil); err != nil {
		t.Errorf("batch: %v", err)
	}

	// A SAS request is processed with the signature's version; its x-ms-version is ignored,
	// as the service documents.
	u, err := client.GetTableSASURL(aztables.SASPermissions{Read: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, qs, _ := strings.Cut(u, "?")
	r = srv.do(t, rawReq{Method: "GET", Path: "/" + acct + "/" + name + "()", Query: qs, NoAuth: true,
		Header: map[string]string{"x-ms-version": "invalid"}})
	requireStatus(t, r, http.StatusOK, "SAS query with x-ms-version: invalid")
	if sv := r.Header.Get("x-ms-version"); !strings.Contains(qs, "sv="+sv) {
		t.Errorf("SAS request answered with x-ms-version %q, want the signed version of %s", sv, qs)
	}
}

// Accept: text/html is 415 MediaTypeNotSupported, without a word about Atom; asking for
// Atom or XML is 415 AtomFormatNotSupported.
func TestUnsupportedAcceptMessages(t *testing.T) {
	srv := startServer(t)
	acct := srv.Default().Name
	r := srv.do(t, rawReq{Method: "GET", Path: "/" + acct + "/Tables", Header: map[string]string{"Accept": "text/html"}})
	requireRawErr(t, r, http.StatusUnsupportedMediaType, "MediaTypeNotSupported")
	if strings.Contains(string(r.Body), "Atom") {
		t.Errorf("Accept: text/html answered with a message about Atom: %s", r.Body)
	}
	r = srv.do(t, rawReq{Method: "GET", Path: "/" + acct + "/Tables", Header: map[string]string{"Accept": "application/atom+xml"}})
	requireRawErr(t, r, http.StatusUnsupportedMediaType, "AtomFormatNotSupported")
}
