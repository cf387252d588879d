package e2e

// Credentials that clients combine or omit (issue 10 item 2): a SharedKeyLite request
// without x-ms-date/Date is refused with a message saying what to send, and a request
// carrying both a shared key (Authorization) and a SAS (query) is authorized by whichever
// verifies, the key first, never by both: a valid key ignores the SAS's restrictions, a
// SAS used because the key failed gets nothing of the key's.

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

func TestSharedKeyLiteWithoutDate(t *testing.T) {
	srv := startServer(t)
	acct := srv.Default().Name
	// Signed over an empty date, as a client that omits the date computes it.
	r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables", NoDate: true})
	requireRawErr(t, r, http.StatusForbidden, "AuthenticationFailed")
	var eb errorBody
	if err := json.Unmarshal(r.Body, &eb); err != nil || eb.OData == nil || eb.OData.Message == nil {
		t.Fatalf("error body: %v %s", err, r.Body)
	}
	for _, want := range []string{"Request date header not specified", "x-ms-date (or Date)", "RFC 1123", "Mon, 02 Jan 2006 15:04:05 GMT"} {
		if !strings.Contains(eb.OData.Message.Value, want) {
			t.Errorf("message %q does not say %q", eb.OData.Message.Value, want)
		}
	}
	// The same request with the date it should carry succeeds.
	r = srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables"})
	requireStatus(t, r, http.StatusOK, "with x-ms-date")
}

func TestSharedKeyAndSAS(t *testing.T) {
	f := newSASFixture(t)
	acct := f.srv.Default().Name
	for _, k := range []pkrk{{"A", "1"}, {"P", "1"}, {"Z", "1"}} {
		f.put(t, k.PK, k.RK, 1)
	}
	exp := time.Now().Add(time.Hour)
	// A read-only table SAS on the fixture's table confined to PartitionKey P.
	goodSAS := f.signTable(t, nil, aztables.SASSignatureValues{Permissions: "r", ExpiryTime: exp,
		StartPartitionKey: "P", EndPartitionKey: "P"})
	wrongCred, err := aztables.NewSharedKeyCredential(acct, randomKey(t))
	if err != nil {
		t.Fatal(err)
	}
	badSAS := f.signTable(t, wrongCred, aztables.SASSignatureValues{Permissions: "r", ExpiryTime: exp,
		StartPartitionKey: "P", EndPartitionKey: "P"})
	badKey := randomKey(t)
	const malformedSAS = "sv=2019-02-02&tn=x&sig=notbase64" // a sig, but not a SAS
	entities := "/" + acct + "/" + f.name + "()"
	insertPath := "/" + acct + "/" + f.name

	query := func(t *testing.T, key, sas, extra string) (rawResp, []pkrk) {
		t.Helper()
		q := sas
		if extra != "" {
			q += "&" + extra
		}
		r := f.srv.do(t, rawReq{Method: http.MethodGet, Path: entities, Query: q, Key: key})
		if r.Status != http.StatusOK {
			return r, nil
		}
		var body struct {
			Value []json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatalf("query body: %v", err)
		}
		raw := make([][]byte, len(body.Value))
		for i, v := range body.Value {
			raw[i] = v
		}
		return r, keysOf(t, raw)
	}
	insert := func(t *testing.T, key, sas, rk string) rawResp {
		t.Helper()
		return f.srv.do(t, rawReq{Method: http.MethodPost, Path: insertPath, Query: sas, Key: key,
			Header: map[string]string{"Prefer": "return-no-content"},
			Body:   []byte(`{"PartitionKey":"A","RowKey":"` + rk + `"}`)})
	}
	all := []pkrk{{"A", "1"}, {"P", "1"}, {"Z", "1"}}

	t.Run("ValidKeyValidSAS", func(t *testing.T) {
		// The key authorizes: the SAS's read-only permission and key range do not apply.
		if _, got := query(t, "", goodSAS, ""); !slices.Equal(got, all) {
			t.Errorf("query: %v, want every entity %v (the SAS range must not apply)", got, all)
		}
		requireStatus(t, insert(t, "", goodSAS, "kv"), http.StatusNoContent, "insert with a valid key and a read-only SAS")
		requireEntity(t, f, "A", "kv", true)
		// The SAS parameters do not reach $filter: the filter alone decides.
		_, got := query(t, "", goodSAS, "$filter="+url.QueryEscape("PartitionKey eq 'Z'"))
		if !slices.Equal(got, []pkrk{{"Z", "1"}}) {
			t.Errorf("filtered query: %v, want Z/1", got)
		}
		// Nor comp: a table's ACL (never allowed with a SAS) is the owner's to read.
		r := f.srv.do(t, rawReq{Method: http.MethodGet, Path: insertPath, Query: goodSAS + "&comp=acl", Header: xmlHeaders})
		requireStatus(t, r, http.StatusOK, "GET ?comp=acl with a valid key and a SAS")
	})

	t.Run("ValidKeyBadSAS", func(t *testing.T) {
		if _, got := query(t, "", badSAS, ""); len(got) < len(all) {
			t.Errorf("query: %v, want every entity", got)
		}
		requireStatus(t, insert(t, "", badSAS, "kb"), http.StatusNoContent, "insert with a valid key and a bad SAS")
		requireEntity(t, f, "A", "kb", true)
		// A SAS that does not even parse is ignored as well.
		requireStatus(t, insert(t, "", malformedSAS, "km"), http.StatusNoContent, "insert with a valid key and a malformed SAS")
	})

	t.Run("BadKeyValidSAS", func(t *testing.T) {
		// The SAS authorizes, alone: its range applies and it grants no writes.
		r, got := query(t, badKey, goodSAS, "")
		requireStatus(t, r, http.StatusOK, "query with a bad key and a valid SAS")
		if !slices.Equal(got, []pkrk{{"P", "1"}}) {
			t.Errorf("query: %v, want only P/1 (the SAS's range)", got)
		}
		r = insert(t, badKey, goodSAS, "bv")
		requireRawErr(t, r, http.StatusForbidden, "AuthorizationPermissionMismatch")
		if !strings.Contains(string(r.Body), "The Authorization header was not used") {
			t.Errorf("refusal does not mention the key that did not verify: %s", r.Body)
		}
		requireEntity(t, f, "A", "bv", false)
		// A Bearer token is a key that does not verify: the SAS decides.
		r = f.srv.do(t, rawReq{Method: http.MethodGet, Path: entities, Query: goodSAS, NoAuth: true,
			Header: map[string]string{"Authorization": "Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln"}})
		requireStatus(t, r, http.StatusOK, "query with a Bearer token and a valid SAS")
	})

	t.Run("BothBad", func(t *testing.T) {
		r, _ := query(t, badKey, badSAS, "")
		requireRawErr(t, r, http.StatusForbidden, "AuthenticationFailed")
		r = insert(t, badKey, badSAS, "bb")
		requireRawErr(t, r, http.StatusForbidden, "AuthenticationFailed")
		requireEntity(t, f, "A", "bb", false)
		r = insert(t, badKey, malformedSAS, "bm")
		requireRawErrStatus(t, r, http.StatusForbidden)
		requireEntity(t, f, "A", "bm", false)
	})
}

// requireEntity checks through the account key whether (pk, rk) exists.
func requireEntity(t *testing.T, f *sasFixture, pk, rk string, want bool) {
	t.Helper()
	if _, ok := f.ownerV(t, pk, rk); ok != want {
		t.Errorf("entity (%s,%s) exists = %v, want %v", pk, rk, ok, want)
	}
}
