package e2e

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

func TestErrors(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	c, table := newTable(t, svc)
	insertPath := "/" + acct + "/" + table

	// rawInsert posts a raw JSON body to the shared table.
	rawInsert := func(t *testing.T, body string) rawResp {
		t.Helper()
		return srv.do(t, rawReq{Method: http.MethodPost, Path: insertPath, Body: []byte(body)})
	}
	// sdkInsert inserts an entity map through the SDK.
	sdkInsert := func(t *testing.T, ent map[string]any) error {
		t.Helper()
		_, err := c.AddEntity(ctx(t), marshal(t, ent), nil)
		return err
	}
	// absent asserts that a rejected entity was not stored.
	absent := func(t *testing.T, pk, rk string) {
		t.Helper()
		if _, err := c.GetEntity(ctx(t), pk, rk, nil); statusOf(err) != http.StatusNotFound {
			t.Errorf("rejected entity (%q,%q) is readable: err=%v", pk, rk, err)
		}
	}

	t.Run("PropertiesNeedValue", func(t *testing.T) {
		for _, body := range []string{
			`{"PartitionKey":"p","V":1}`,
			`{"RowKey":"r","V":1}`,
			`{"PartitionKey":"p","RowKey":null,"V":1}`,
			`{"PartitionKey":null,"RowKey":"r"}`,
		} {
			requireRawErr(t, rawInsert(t, body), http.StatusBadRequest, "PropertiesNeedValue")
		}
	})

	t.Run("InvalidInputBadJSON", func(t *testing.T) {
		for _, body := range []string{`{"PartitionKey":`, `not json`, `[1,2]`, `{"PartitionKey":"p","RowKey":"r",}`} {
			requireRawErr(t, rawInsert(t, body), http.StatusBadRequest, "InvalidInput")
		}
	})

	t.Run("DuplicatePropertiesSpecified", func(t *testing.T) {
		requireRawErr(t, rawInsert(t, `{"PartitionKey":"p","RowKey":"dup","A":1,"A":2}`), http.StatusBadRequest, "DuplicatePropertiesSpecified")
		absent(t, "p", "dup")
	})

	t.Run("PropertyNameInvalid", func(t *testing.T) {
		for _, name := range []string{"1bad", "has-dash", "has space", "dot.ted"} {
			err := sdkInsert(t, map[string]any{"PartitionKey": "p", "RowKey": "badname", name: 1})
			requireRespErr(t, err, http.StatusBadRequest, "PropertyNameInvalid")
		}
		absent(t, "p", "badname")
		if err := sdkInsert(t, map[string]any{"PartitionKey": "p", "RowKey": "goodname", "_ok1": 1, "Ünïcode": 2}); err != nil {
			t.Errorf("valid property names rejected: %v", err)
		}
	})

	t.Run("PropertyNameTooLong", func(t *testing.T) {
		err := sdkInsert(t, map[string]any{"PartitionKey": "p", "RowKey": "longname", "a" + strings.Repeat("b", 255): 1})
		requireRespErr(t, err, http.StatusBadRequest, "PropertyNameTooLong")
		absent(t, "p", "longname")
		if err := sdkInsert(t, map[string]any{"PartitionKey": "p", "RowKey": "name255", "a" + strings.Repeat("b", 254): 1}); err != nil {
			t.Errorf("255-character property name rejected: %v", err)
		}
	})

	t.Run("TooManyProperties", func(t *testing.T) {
		props := func(n int, rk string) map[string]any {
			m := map[string]any{"PartitionKey": "p", "RowKey": rk}
			for i := 0; i < n; i++ {
				m[fmt.Sprintf("P%03d", i)] = i
			}
			return m
		}
		requireRespErr(t, sdkInsert(t, props(253, "many")), http.StatusBadRequest, "TooManyProperties")
		absent(t, "p", "many")
		if err := sdkInsert(t, props(252, "max")); err != nil {
			t.Fatalf("252 custom properties rejected: %v", err)
		}
		e, _ := getEDM(t, c, "p", "max")
		if len(e.Properties) != 252 {
			t.Errorf("252-property entity reads back with %d", len(e.Properties))
		}
		// merging one more property into a full entity is also too many
		_, err := c.UpdateEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "max", "Extra": 1}), nil)
		requireRespErr(t, err, http.StatusBadRequest, "TooManyProperties")
	})

	t.Run("PropertyValueTooLarge", func(t *testing.T) {
		err := sdkInsert(t, map[string]any{"PartitionKey": "p", "RowKey": "bigstr", "S": strings.Repeat("x", 32769)})
		requireRespErr(t, err, http.StatusBadRequest, "PropertyValueTooLarge")
		// 32,768 UTF-16 units: 16,384 emoji are 32,768 units; one more is too many.
		err = sdkInsert(t, map[string]any{"PartitionKey": "p", "RowKey": "bigemoji", "S": strings.Repeat("😀", 16385)})
		requireRespErr(t, err, http.StatusBadRequest, "PropertyValueTooLarge")
		// (a plain map needs the annotation spelled out: EDMBinary alone marshals as a string)
		err = sdkInsert(t, map[string]any{"PartitionKey": "p", "RowKey": "bigbin",
			"B": aztables.EDMBinary(make([]byte, 65537)), "B@odata.type": "Edm.Binary"})
		requireRespErr(t, err, http.StatusBadRequest, "PropertyValueTooLarge")
		err = sdkInsert(t, map[string]any{"PartitionKey": "p", "RowKey": strings.Repeat("k", 513)})
		requireRespErr(t, err, http.StatusBadRequest, "PropertyValueTooLarge")
		err = sdkInsert(t, map[string]any{"PartitionKey": strings.Repeat("k", 513), "RowKey": "r"})
		requireRespErr(t, err, http.StatusBadRequest, "PropertyValueTooLarge")
		for _, rk := range []string{"bigstr", "bigemoji", "bigbin"} {
			absent(t, "p", rk)
		}

		// Exactly at the limits is accepted and round-trips.
		okEnt := map[string]any{
			"PartitionKey": "p", "RowKey": strings.Repeat("k", 512),
			"S": strings.Repeat("x", 32768), "E": strings.Repeat("😀", 16384),
			"B": aztables.EDMBinary(make([]byte, 65536)), "B@odata.type": "Edm.Binary",
		}
		if err := sdkInsert(t, okEnt); err != nil {
			t.Fatalf("entity at the limits rejected: %v", err)
		}
		e, _ := getEDM(t, c, "p", strings.Repeat("k", 512))
		if e.Properties["S"] != okEnt["S"] || e.Properties["E"] != okEnt["E"] {
			t.Errorf("limit strings did not round-trip")
		}
		if b, ok := e.Properties["B"].(aztables.EDMBinary); !ok || len(b) != 65536 {
			t.Errorf("64 KiB binary did not round-trip")
		}
		// A too-long key in the URL of an upsert is refused too.
		r := srv.do(t, rawReq{Method: http.MethodPut, Path: entityPath(acct, table, "p", strings.Repeat("u", 513)),
			Body: []byte(`{"PartitionKey":"p","RowKey":"` + strings.Repeat("u", 513) + `"}`)})
		requireRawErr(t, r, http.StatusBadRequest, "PropertyValueTooLarge")
	})

	t.Run("EntityTooLarge", func(t *testing.T) {
		// 40 strings of 16,000 characters: ~1.28 MB by the service's size formula.
		big := map[string]any{"PartitionKey": "p", "RowKey": "huge"}
		for i := 0; i < 40; i++ {
			big[fmt.Sprintf("S%02d", i)] = strings.Repeat("x", 16000)
		}
		requireRespErr(t, sdkInsert(t, big), http.StatusBadRequest, "EntityTooLarge")
		absent(t, "p", "huge")
		// 28 such strings (~0.9 MB) fit.
		fits := map[string]any{"PartitionKey": "p", "RowKey": "fits"}
		for i := 0; i < 28; i++ {
			fits[fmt.Sprintf("S%02d", i)] = strings.Repeat("x", 16000)
		}
		if err := sdkInsert(t, fits); err != nil {
			t.Fatalf("~0.9 MB entity rejected: %v", err)
		}
		// Growing it past 1 MiB by merge is refused.
		more := map[string]any{"PartitionKey": "p", "RowKey": "fits"}
		for i := 28; i < 40; i++ {
			more[fmt.Sprintf("S%02d", i)] = strings.Repeat("x", 16000)
		}
		_, err := c.UpdateEntity(ctx(t), marshal(t, more), nil)
		requireRespErr(t, err, http.StatusBadRequest, "EntityTooLarge")
	})

	t.Run("OutOfRangeInputKeys", func(t *testing.T) {
		for _, k := range []string{"a/b", "a\\b", "a#b", "a?b", "a\x01b", "tab\t", "nl\n", "del\x7f", "c1\u0085"} {
			err := sdkInsert(t, map[string]any{"PartitionKey": "p", "RowKey": k})
			requireRespErr(t, err, http.StatusBadRequest, "OutOfRangeInput")
			err = sdkInsert(t, map[string]any{"PartitionKey": k, "RowKey": "r"})
			requireRespErr(t, err, http.StatusBadRequest, "OutOfRangeInput")
		}
	})

	t.Run("OutOfRangeInputDateTime", func(t *testing.T) {
		r := rawInsert(t, `{"PartitionKey":"p","RowKey":"olddate","D@odata.type":"Edm.DateTime","D":"1600-12-31T23:59:59Z"}`)
		requireRawErr(t, r, http.StatusBadRequest, "OutOfRangeInput")
		absent(t, "p", "olddate")
	})

	t.Run("ValueDoesNotFitType", func(t *testing.T) {
		// docs/protocol.md fixes the status (400) but not the code for these (§4.3 [INF]).
		for _, body := range []string{
			`{"PartitionKey":"p","RowKey":"bad","N@odata.type":"Edm.Int32","N":2147483648}`,
			`{"PartitionKey":"p","RowKey":"bad","N@odata.type":"Edm.Int32","N":-2147483649}`,
			`{"PartitionKey":"p","RowKey":"bad","N@odata.type":"Edm.Int64","N":"9223372036854775808"}`,
			`{"PartitionKey":"p","RowKey":"bad","N@odata.type":"Edm.Int64","N":"12x"}`,
			`{"PartitionKey":"p","RowKey":"bad","N@odata.type":"Edm.Guid","N":"not-a-guid"}`,
			`{"PartitionKey":"p","RowKey":"bad","N@odata.type":"Edm.Binary","N":"***"}`,
			`{"PartitionKey":"p","RowKey":"bad","N@odata.type":"Edm.DateTime","N":"yesterday"}`,
			`{"PartitionKey":"p","RowKey":"bad","N@odata.type":"Edm.DateTime","N":""}`,
			`{"PartitionKey":"p","RowKey":"bad","N@odata.type":"Edm.Boolean","N":"maybe"}`,
			`{"PartitionKey":"p","RowKey":"bad","N@odata.type":"Edm.Double","N":1.797693134862316e309}`,
			`{"PartitionKey":"p","RowKey":"bad","N@odata.type":"Edm.Decimal","N":"1.5"}`,
		} {
			r := rawInsert(t, body)
			code := requireRawErrStatus(t, r, http.StatusBadRequest)
			t.Logf("%s -> %d %s", body, r.Status, code)
		}
		absent(t, "p", "bad")
	})

	t.Run("WrongSignature", func(t *testing.T) {
		bad := newServiceClientFor(t, srv.Endpoint(acct), acct, randomKey(t), nil)
		_, err := bad.NewClient(table).GetEntity(ctx(t), "p", "r", nil)
		requireRespErr(t, err, http.StatusForbidden, "AuthenticationFailed")
		_, err = bad.CreateTable(ctx(t), tableName(t), nil)
		requireRespErr(t, err, http.StatusForbidden, "AuthenticationFailed")
		_, err = bad.NewListTablesPager(nil).NextPage(ctx(t))
		requireRespErr(t, err, http.StatusForbidden, "AuthenticationFailed")

		// Signature over a different resource than the request's.
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables", SignPath: "/" + acct + "/" + acct + "/Other"})
		requireRawErr(t, r, http.StatusForbidden, "AuthenticationFailed")
		// Correct raw signature works (control).
		r = srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables"})
		requireStatus(t, r, http.StatusOK, "correctly signed raw request")
	})

	t.Run("MissingAuthorization", func(t *testing.T) {
		for _, p := range []string{"/" + acct + "/Tables", entityPath(acct, table, "p", "r")} {
			r := srv.do(t, rawReq{Method: http.MethodGet, Path: p, NoAuth: true})
			if r.Status != http.StatusUnauthorized && r.Status != http.StatusForbidden {
				t.Errorf("GET %s without Authorization: status %d, want 401 or 403", p, r.Status)
			}
			if got := r.Header.Get("x-ms-error-code"); got != "NoAuthenticationInformation" {
				t.Errorf("GET %s without Authorization: x-ms-error-code %q, want NoAuthenticationInformation", p, got)
			}
			checkErrorBody(t, r.Body, "NoAuthenticationInformation")
		}
		r := srv.do(t, rawReq{Method: http.MethodPost, Path: insertPath, NoAuth: true, Body: []byte(`{"PartitionKey":"p","RowKey":"noauth"}`)})
		if r.Status != http.StatusUnauthorized && r.Status != http.StatusForbidden {
			t.Errorf("unauthenticated insert: status %d", r.Status)
		}
		absent(t, "p", "noauth")
	})

	t.Run("SkewedDate", func(t *testing.T) {
		for _, skew := range []time.Duration{-20 * time.Minute, 20 * time.Minute} {
			r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables", Date: time.Now().Add(skew)})
			if r.Status != http.StatusForbidden {
				t.Errorf("date skewed by %v: status %d, want 403 (body %s)", skew, r.Status, truncate(r.Body))
			}
			if got := r.Header.Get("x-ms-error-code"); got != "AuthenticationFailed" {
				t.Errorf("date skewed by %v: x-ms-error-code %q, want AuthenticationFailed", skew, got)
			}
		}
		// a few minutes of skew is fine
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables", Date: time.Now().Add(-5 * time.Minute)})
		requireStatus(t, r, http.StatusOK, "date skewed by 5 minutes")
	})

	t.Run("ErrorHeadersAndShape", func(t *testing.T) {
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "p", "nothere"),
			Header: map[string]string{"x-ms-client-request-id": "err-crid-1"}})
		requireRawErr(t, r, http.StatusNotFound, "ResourceNotFound")
		checkStdHeaders(t, r, "2019-02-02", "err-crid-1")
		for _, level := range []string{"nometadata", "fullmetadata"} {
			r := srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "p", "nothere"),
				Header: map[string]string{"Accept": "application/json;odata=" + level}})
			requireRawErr(t, r, http.StatusNotFound, "ResourceNotFound")
		}
	})

	t.Run("BinaryBase64Variants", func(t *testing.T) {
		// standard alphabet with padding is what every SDK sends; it must round-trip exactly
		data := []byte{0xfb, 0xff, 0xfe}
		body := `{"PartitionKey":"p","RowKey":"b64","B@odata.type":"Edm.Binary","B":"` + base64.StdEncoding.EncodeToString(data) + `"}`
		requireStatus(t, rawInsert(t, body), http.StatusCreated, "insert binary")
		e, _ := getEDM(t, c, "p", "b64")
		if b, ok := e.Properties["B"].(aztables.EDMBinary); !ok || string(b) != string(data) {
			t.Errorf("binary = %#v", e.Properties["B"])
		}
	})
}
