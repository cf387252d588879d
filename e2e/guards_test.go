package e2e

// Guards (issue 10, item 11): black-box tests for hostile or broken input that Cerulean
// already handles, kept so that it keeps handling it. Each runs against the real binary on
// the engine CERULEAN_TEST_ENGINE_ARGS selects (Pebble by default, PostgreSQL in the
// second pass of scripts/test). What each guard asserts, in short: bad input gets a 4xx
// with a consistent Azure error, never a 5xx, a crash, a hang, unbounded memory or a
// partial write, and the server answers normally afterwards.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// ---------------------------------------------------------------------------------------
// Helpers

// onPostgres reports whether the e2e servers run on the postgres engine.
func onPostgres() bool {
	return strings.Contains(os.Getenv("CERULEAN_TEST_ENGINE_ARGS"), "postgres")
}

// guardKey is one entity key in the guards' fixtures.
type guardKey struct{ PK, RK string }

func (k guardKey) less(o guardKey) bool {
	return k.PK < o.PK || (k.PK == o.PK && k.RK < o.RK)
}

// overHead reports whether a request with query string q is past the server's limit on a
// request head (64 KiB with its request line and headers; README, "Request heads"): such
// a request is refused with 400 OutOfRangeInput before its query is read. The queries
// these tests send are either well under the limit or well over it.
func overHead(q string) bool { return len(q) > 62<<10 }

// guardQuery runs one raw query page and returns its keys and continuation headers.
func guardQuery(t testing.TB, srv *server, r rawReq) (rawResp, []guardKey) {
	t.Helper()
	resp := srv.do(t, r)
	if resp.Status != http.StatusOK {
		return resp, nil
	}
	var v struct {
		Value []struct {
			PartitionKey string
			RowKey       string
			TableName    string
		} `json:"value"`
	}
	if err := json.Unmarshal(resp.Body, &v); err != nil {
		t.Fatalf("query %s?%.200s: body: %v: %s", r.Path, r.Query, err, truncate(resp.Body))
	}
	keys := []guardKey{}
	for _, e := range v.Value {
		if e.TableName != "" {
			keys = append(keys, guardKey{PK: e.TableName})
			continue
		}
		keys = append(keys, guardKey{e.PartitionKey, e.RowKey})
	}
	return resp, keys
}

// guardQueryAll follows the continuation of r to the end and returns every key. The first
// page's status is returned; a later page that is not 200 fails the test.
func guardQueryAll(t testing.TB, srv *server, r rawReq) (int, []guardKey) {
	t.Helper()
	resp, keys := guardQuery(t, srv, r)
	if resp.Status != http.StatusOK {
		return resp.Status, nil
	}
	base := r.Query
	for pages := 1; ; pages++ {
		npk, nrk := resp.Header.Get("x-ms-continuation-NextPartitionKey"), resp.Header.Get("x-ms-continuation-NextRowKey")
		if npk == "" && nrk == "" {
			return http.StatusOK, keys
		}
		if pages > 100 {
			t.Fatalf("query %s: runaway paging", r.Path)
		}
		q, err := url.ParseQuery(base)
		if err != nil {
			t.Fatalf("query %q: %v", base, err)
		}
		q.Set("NextPartitionKey", npk)
		q.Set("NextRowKey", nrk)
		r.Query = q.Encode()
		var more []guardKey
		resp, more = guardQuery(t, srv, r)
		requireStatus(t, resp, http.StatusOK, "continued query")
		keys = append(keys, more...)
	}
}

// guardToken builds a continuation token the way the server writes them: "1!<n>!<b64>".
func guardToken(key string) string {
	b := base64.RawURLEncoding.EncodeToString([]byte(key))
	return "1!" + strconv.Itoa(len(b)) + "!" + b
}

// guardNo5xx fails the test on any 5xx, naming the request.
func guardNo5xx(t testing.TB, r rawResp, what string) {
	t.Helper()
	if r.Status >= 500 {
		t.Errorf("%s: %d %s (x-ms-error-code %q): %s", what, r.Status, http.StatusText(r.Status), r.Header.Get("x-ms-error-code"), truncate(r.Body))
	}
}

// ---------------------------------------------------------------------------------------
// Oversized bodies

// bigReq is a request whose body is generated as it is sent: Prefix, then 'x' filler up to
// Size bytes, framed with Content-Length or, if Chunked, chunked transfer encoding.
type bigReq struct {
	Method, Path, Query string
	Header              map[string]string
	Prefix              []byte
	Size                int64
	Chunked             bool
}

// sendBig sends r on a fresh connection, signed with SharedKeyLite, and reads the response
// while the body is still being written (a server may answer before reading it all).
// It returns the response with its body, and how many body bytes the server let through
// before the response (or the write error) ended the upload.
func (srv *server) sendBig(t testing.TB, r bigReq) (rawResp, int64, error) {
	conn, err := srv.dial(&net.Dialer{Timeout: 5 * time.Second})
	if err != nil {
		return rawResp{}, 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))

	acct := srv.Default()
	date := time.Now().UTC().Format(http.TimeFormat)
	resource := "/" + acct.Name + r.Path
	if q, _ := url.ParseQuery(r.Query); q.Get("comp") != "" {
		resource += "?comp=" + q.Get("comp")
	}
	target := r.Path
	if r.Query != "" {
		target += "?" + r.Query
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\n", r.Method, target, srv.Addr)
	fmt.Fprintf(&head, "x-ms-version: 2019-02-02\r\nx-ms-date: %s\r\nDataServiceVersion: 3.0\r\n", date)
	fmt.Fprintf(&head, "Authorization: SharedKeyLite %s:%s\r\n", acct.Name, signLite(t, acct.Key, date+"\n"+resource))
	for k, v := range r.Header {
		fmt.Fprintf(&head, "%s: %s\r\n", k, v)
	}
	if r.Chunked {
		head.WriteString("Transfer-Encoding: chunked\r\n\r\n")
	} else {
		fmt.Fprintf(&head, "Content-Length: %d\r\n\r\n", r.Size)
	}

	var sent atomic.Int64
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		w := bufio.NewWriterSize(conn, 64<<10)
		if _, err := w.Write(head.Bytes()); err != nil {
			return
		}
		filler := bytes.Repeat([]byte{'x'}, 64<<10)
		prefix := r.Prefix
		for left := r.Size; left > 0; {
			chunk := filler
			if len(prefix) > 0 {
				chunk = prefix
				if int64(len(chunk)) > left {
					chunk = chunk[:left]
				}
				prefix = nil
			} else if int64(len(chunk)) > left {
				chunk = chunk[:left]
			}
			if r.Chunked {
				if _, err := fmt.Fprintf(w, "%x\r\n", len(chunk)); err != nil {
					return
				}
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
			if r.Chunked {
				if _, err := w.WriteString("\r\n"); err != nil {
					return
				}
			}
			left -= int64(len(chunk))
			sent.Add(int64(len(chunk)))
		}
		if r.Chunked {
			if _, err := w.WriteString("0\r\n\r\n"); err != nil {
				return
			}
		}
		_ = w.Flush()
	}()

	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: r.Method})
	if err != nil {
		conn.Close()
		<-writeDone
		return rawResp{}, sent.Load(), fmt.Errorf("no response after %d body bytes: %w", sent.Load(), err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	conn.Close()
	<-writeDone
	if err != nil {
		return rawResp{}, sent.Load(), fmt.Errorf("reading the response body: %w", err)
	}
	return rawResp{Status: resp.StatusCode, Header: resp.Header, Body: body}, sent.Load(), nil
}

// TestGuardBodyLimits: bodies of 5 MB and 100 MB, declared with Content-Length or sent
// chunked, on every endpoint that reads a body, are refused with 413 RequestBodyTooLarge;
// the server's peak RSS stays far below the body sizes, nothing is written, and the server
// answers normally afterwards.
func TestGuardBodyLimits(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, table := newTable(t, svc)
	acct := srv.Default().Name
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "V": 1}), nil); err != nil {
		t.Fatal(err)
	}
	_, before := getEDM(t, c, "p", "r")
	propsBefore := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/", Query: "restype=service&comp=properties", Header: map[string]string{"Accept": "application/xml"}})
	requireStatus(t, propsBefore, http.StatusOK, "Get Table Service Properties")

	startRSS, _ := srv.memKB(t)

	jsonH := map[string]string{"Content-Type": "application/json", "Accept": "application/json;odata=minimalmetadata"}
	xmlH := map[string]string{"Content-Type": "application/xml", "Accept": "application/xml"}
	entity := entityPath(acct, table, "p", "r")
	endpoints := []struct {
		name                string
		method, path, query string
		header              map[string]string
		prefix              string
		xml                 bool
	}{
		{"CreateTable", "POST", "/" + acct + "/Tables", "", jsonH, `{"TableName":"` + strings.Repeat("x", 100), false},
		{"Insert", "POST", "/" + acct + "/" + table, "", jsonH, `{"PartitionKey":"p","RowKey":"big","S":"`, false},
		{"Update", "PUT", entity, "", merged(jsonH, map[string]string{"If-Match": "*"}), `{"S":"`, false},
		{"InsertOrReplace", "PUT", entity, "", jsonH, `{"S":"`, false},
		{"Merge", "PATCH", entity, "", merged(jsonH, map[string]string{"If-Match": "*"}), `{"S":"`, false},
		{"MergeVerb", "MERGE", entity, "", jsonH, `{"S":"`, false},
		{"Batch", "POST", "/" + acct + "/$batch", "", map[string]string{"Content-Type": "multipart/mixed; boundary=batch_guard", "Accept": "application/json;odata=minimalmetadata"},
			"--batch_guard\r\nContent-Type: multipart/mixed; boundary=changeset_guard\r\n\r\n--changeset_guard\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
				"POST " + srv.BaseURL() + "/" + acct + "/" + table + " HTTP/1.1\r\nContent-Type: application/json\r\n\r\n{\"PartitionKey\":\"p\",\"RowKey\":\"batch\",\"S\":\"", false},
		{"SetACL", "PUT", "/" + acct + "/" + table, "comp=acl", xmlH, `<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers><SignedIdentifier><Id>`, true},
		{"SetServiceProperties", "PUT", "/" + acct + "/", "restype=service&comp=properties", xmlH, `<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Cors><CorsRule><AllowedOrigins>`, true},
	}
	for _, ep := range endpoints {
		for _, size := range []int64{5 << 20, 100 << 20} {
			for _, chunked := range []bool{false, true} {
				what := fmt.Sprintf("%s %d MiB chunked=%v", ep.name, size>>20, chunked)
				resp, sent, err := srv.sendBig(t, bigReq{Method: ep.method, Path: ep.path, Query: ep.query, Header: ep.header,
					Prefix: []byte(ep.prefix), Size: size, Chunked: chunked})
				if err != nil {
					t.Errorf("%s: %v", what, err)
				} else if resp.Status != http.StatusRequestEntityTooLarge || resp.Header.Get("x-ms-error-code") != "RequestBodyTooLarge" {
					t.Errorf("%s: %d x-ms-error-code=%q, want 413 RequestBodyTooLarge: %s", what, resp.Status, resp.Header.Get("x-ms-error-code"), truncate(resp.Body))
				} else if ep.xml {
					if !bytes.Contains(resp.Body, []byte("<Code>RequestBodyTooLarge</Code>")) {
						t.Errorf("%s: XML error body without the code: %s", what, truncate(resp.Body))
					}
				} else {
					checkErrorBody(t, resp.Body, "RequestBodyTooLarge")
				}
				if sent == size && !chunked {
					// The whole body went through before the answer: legal, but a server
					// that declares a body too large needs to read none of it.
					t.Logf("%s: the server read the whole declared body before answering", what)
				}
			}
		}
	}

	// Four 100 MiB uploads at once, each way: memory does not scale with them either.
	for _, chunked := range []bool{false, true} {
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, _, err := srv.sendBig(t, bigReq{Method: "POST", Path: "/" + acct + "/" + table, Header: jsonH,
					Prefix: []byte(`{"PartitionKey":"p","RowKey":"par","S":"`), Size: 100 << 20, Chunked: chunked})
				if err != nil {
					t.Errorf("parallel insert chunked=%v: %v", chunked, err)
				} else if resp.Status != http.StatusRequestEntityTooLarge {
					t.Errorf("parallel insert chunked=%v: %d %s", chunked, resp.Status, truncate(resp.Body))
				}
			}()
		}
		wg.Wait()
	}

	_, peak := srv.memKB(t)
	t.Logf("server RSS at start %d KiB, peak (VmHWM) after 2 GiB of refused bodies %d KiB", startRSS, peak)
	const limitKB = 100 << 10
	if peak > limitKB {
		t.Errorf("server peak RSS %d KiB exceeds %d KiB: oversized bodies are buffered", peak, limitKB)
	}

	// Nothing was written, and the server answers normally.
	_, after := getEDM(t, c, "p", "r")
	if after.ETag != before.ETag {
		t.Errorf("entity p/r changed: ETag %s → %s", before.ETag, after.ETag)
	}
	for _, rk := range []string{"big", "batch", "par"} {
		if _, err := c.GetEntity(ctx(t), "p", rk, nil); statusOf(err) != http.StatusNotFound {
			t.Errorf("entity p/%s: want 404 after refused uploads, got %v", rk, err)
		}
	}
	acl, err := c.GetAccessPolicy(ctx(t), nil)
	if err != nil || len(acl.SignedIdentifiers) != 0 {
		t.Errorf("ACL after refused uploads: %v, %d identifiers", err, len(acl.SignedIdentifiers))
	}
	propsAfter := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/", Query: "restype=service&comp=properties", Header: map[string]string{"Accept": "application/xml"}})
	if !bytes.Equal(propsBefore.Body, propsAfter.Body) {
		t.Errorf("service properties changed:\n%s\n%s", propsBefore.Body, propsAfter.Body)
	}
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "after", "V": 2}), nil); err != nil {
		t.Errorf("insert after the refused uploads: %v", err)
	}
	// Exactly at the limit is still accepted (the guard refuses only what is too large).
	b, bb := buildBatchBody([]egtPart{{Method: "POST", URL: srv.BaseURL() + "/" + acct + "/" + table,
		Header: [][2]string{{"Content-Type", "application/json"}, {"Prefer", "return-no-content"}},
		Body:   `{"PartitionKey":"p","RowKey":"limit","S":"` + strings.Repeat("y", 30000) + `"}`}})
	r := egtPost(t, srv, b, bb, nil)
	if s := egtSingle(t, parseBatchResponse(t, r.Status, r.Header, r.Body, false), "batch after"); s.Status != http.StatusNoContent {
		t.Errorf("batch after the refused uploads: %q", s.Raw)
	}
}

func merged(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// ---------------------------------------------------------------------------------------
// Forged continuation tokens

// TestGuardContinuationTokens: NextPartitionKey/NextRowKey/NextTableName that are garbage,
// mis-sized, badly encoded, huge, out of a SAS key range, or taken from another table are
// answered 400 or with exactly the right entities — never a 5xx, never an entity outside
// the SAS range.
func TestGuardContinuationTokens(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	c, table := newTable(t, svc)
	other, otherName := newTable(t, svc)
	var all []guardKey
	for _, pk := range []string{"p0", "p1", "p2", "p3", "p4"} {
		var actions []aztables.TransactionAction
		for _, rk := range []string{"r0", "r1", "r2", "r3", "r4"} {
			all = append(all, guardKey{pk, rk})
			actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
				Entity: marshal(t, map[string]any{"PartitionKey": pk, "RowKey": rk})})
		}
		for _, cl := range []*aztables.Client{c, other} {
			if _, err := cl.SubmitTransaction(ctx(t), actions, nil); err != nil {
				t.Fatalf("seeding %s: %v", pk, err)
			}
		}
	}
	from := func(k guardKey, within func(guardKey) bool) []guardKey {
		out := []guardKey{}
		for _, e := range all {
			if !e.less(k) && (within == nil || within(e)) {
				out = append(out, e)
			}
		}
		return out
	}
	path := "/" + acct + "/" + table + "()"

	// Malformed tokens: 400 with a consistent error, never 5xx.
	huge := strings.Repeat("A", 600<<10)
	// badPK marks the cases whose NextPartitionKey itself is malformed (also used as a
	// NextTableName below).
	bad := []struct {
		name, npk, nrk string
		badPK          bool
	}{
		{"Garbage", "garbage", "garbage", true},
		{"Bangs", "!!!", "!!!", true},
		{"NoLength", "1!", "1!", true},
		{"EmptyLength", "1!!", "1!!", true},
		{"WrongVersion", "2!3!cDE", "2!3!cjA", true},
		{"WrongLengthShort", "1!2!cDE", "1!3!cjA", true},
		{"WrongLengthLong", "1!9!cDE", "1!3!cjA", true},
		{"NegativeLength", "1!-3!cDE", "1!3!cjA", true},
		{"OverflowLength", "1!99999999999999999999999!cDE", "1!3!cjA", true},
		{"BadBase64", "1!4!c*E=", "1!3!cjA", true},
		{"StdBase64Padding", "1!4!cDE=", "1!3!cjA", true},
		{"NULs", "1!3!\x00\x00\x00", "1!3!\x00\x00\x00", true},
		{"HugeGarbage", "1!" + strconv.Itoa(len(huge)+1) + "!" + huge, "1!3!cjA", true},
		{"HugeNoPrefix", huge[:300<<10], huge[:300<<10], true},
		{"OnlyPartitionKeyBad", "zzz", "", true},
		{"BadRowKeyLength", "1!3!cDE", "1!4!cjA", false},
		{"BadBase64RowKey", "1!3!cDE", "1!4!~~~~", false},
		{"OnlyRowKeyBad", "", "zzz", false},
	}
	for _, b := range bad {
		q := url.Values{}
		if b.npk != "" {
			q.Set("NextPartitionKey", b.npk)
		}
		if b.nrk != "" {
			q.Set("NextRowKey", b.nrk)
		}
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: path, Query: q.Encode()})
		guardNo5xx(t, r, "forged token "+b.name)
		if r.Status != http.StatusBadRequest {
			t.Errorf("forged token %s: status %d, want 400: %s", b.name, r.Status, truncate(r.Body))
			continue
		}
		code := requireRawErrStatus(t, r, http.StatusBadRequest)
		if overHead(q.Encode()) {
			if code != "OutOfRangeInput" {
				t.Errorf("forged token %s, past the limit on a request head: code %q, want OutOfRangeInput", b.name, code)
			}
		} else if code != "InvalidInput" && code != "InvalidQueryParameterValue" {
			t.Errorf("forged token %s: code %q, want InvalidInput or InvalidQueryParameterValue", b.name, code)
		}
	}

	// A token longer than a request line may be: a 4xx, never a 5xx.
	over := srv.do(t, rawReq{Method: http.MethodGet, Path: path, Query: url.Values{"NextPartitionKey": {strings.Repeat("A", 2<<20)}, "NextRowKey": {"1!3!cjA"}}.Encode()})
	guardNo5xx(t, over, "2 MiB token")
	if over.Status < 400 {
		t.Errorf("2 MiB token: status %d, want a 4xx", over.Status)
	}
	t.Logf("2 MiB token: %d x-ms-error-code=%q %.200s", over.Status, over.Header.Get("x-ms-error-code"), over.Body)

	// Well-formed tokens naming any key: exactly the entities from that key on (a key far
	// over the 1 KiB keys may have, as long as a request head allows).
	hugeKey := strings.Repeat("p", 20<<10)
	good := []struct {
		name string
		k    guardKey
	}{
		{"Middle", guardKey{"p2", "r3"}},
		{"BeforeAll", guardKey{"", ""}},
		{"AfterAll", guardKey{"zzz", ""}},
		{"BetweenRows", guardKey{"p1", "r1x"}},
		{"BetweenPartitions", guardKey{"p1x", "r9"}},
		{"Unicode", guardKey{"p2\u00e9\U0001F600", "\x00"}},
		{"HugeKey", guardKey{hugeKey, hugeKey[:10<<10]}},
		{"HugeBeforeAll", guardKey{"p", hugeKey}},
	}
	for _, g := range good {
		q := url.Values{"NextPartitionKey": {guardToken(g.k.PK)}, "NextRowKey": {guardToken(g.k.RK)}}
		status, keys := guardQueryAll(t, srv, rawReq{Method: http.MethodGet, Path: path, Query: q.Encode()})
		if want := from(g.k, nil); status != http.StatusOK || !slices.Equal(keys, want) {
			t.Errorf("token %s: status %d, keys %v, want 200 %v", g.name, status, keys, want)
		}
	}

	// A genuine token from another table resumes this table at the same key.
	r0 := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/" + otherName + "()", Query: "$top=7"})
	requireStatus(t, r0, http.StatusOK, "paged query of the other table")
	npk, nrk := r0.Header.Get("x-ms-continuation-NextPartitionKey"), r0.Header.Get("x-ms-continuation-NextRowKey")
	if npk == "" || nrk == "" {
		t.Fatalf("other table's first page of 7 has no continuation")
	}
	q := url.Values{"NextPartitionKey": {npk}, "NextRowKey": {nrk}}
	if status, keys := guardQueryAll(t, srv, rawReq{Method: http.MethodGet, Path: path, Query: q.Encode()}); status != http.StatusOK || !slices.Equal(keys, all[7:]) {
		t.Errorf("token from another table: status %d, keys %v, want %v", status, keys, all[7:])
	}
	// ... and with a filter on this table, only what the filter selects.
	q.Set("$filter", "RowKey eq 'r4'")
	if status, keys := guardQueryAll(t, srv, rawReq{Method: http.MethodGet, Path: path, Query: q.Encode()}); status != http.StatusOK ||
		!slices.Equal(keys, from(all[7], func(k guardKey) bool { return k.RK == "r4" })) {
		t.Errorf("token from another table with a filter: status %d, keys %v", status, keys)
	}

	// Tokens under a SAS confined to p1/r2 … p3/r1: whatever the token says, nothing
	// outside the range, and exactly the range's entities from the token on.
	t.Run("SASRange", func(t *testing.T) {
		cred, err := aztables.NewSharedKeyCredential(acct, srv.Default().Key)
		if err != nil {
			t.Fatal(err)
		}
		f := &sasFixture{srv: srv, svc: svc, cred: cred, name: table, owner: c}
		rng := aztables.SASSignatureValues{Permissions: "r", ExpiryTime: time.Now().Add(time.Hour),
			StartPartitionKey: "p1", StartRowKey: "r2", EndPartitionKey: "p3", EndRowKey: "r1"}
		sas := f.signTable(t, nil, rng)
		within := func(k guardKey) bool { return inRange(rng, pkrk(k)) }
		check := func(name string, npk, nrk string, want []guardKey, filter string) {
			t.Helper()
			q, err := url.ParseQuery(sas)
			if err != nil {
				t.Fatal(err)
			}
			q.Set("NextPartitionKey", npk)
			q.Set("NextRowKey", nrk)
			if filter != "" {
				q.Set("$filter", filter)
			}
			status, keys := guardQueryAll(t, srv, rawReq{Method: http.MethodGet, Path: path, Query: q.Encode(), NoAuth: true})
			for _, k := range keys {
				if !within(k) {
					t.Errorf("SAS %s: entity %v outside the SAS range leaked", name, k)
				}
			}
			if want == nil {
				if status != http.StatusBadRequest {
					t.Errorf("SAS %s: status %d, want 400", name, status)
				}
				return
			}
			if status != http.StatusOK || !slices.Equal(keys, want) {
				t.Errorf("SAS %s: status %d, keys %v, want 200 %v", name, status, keys, want)
			}
		}
		for _, k := range []guardKey{{"", ""}, {"p0", "r4"}, {"p1", "r1"}, {"p1", "r3"}, {"p2", "r0"}, {"p3", "r1"}, {"p3", "r2"}, {"p4", ""}, {hugeKey, ""}, {"p2", hugeKey}} {
			check(fmt.Sprintf("token %.20s/%.20s", k.PK, k.RK), guardToken(k.PK), guardToken(k.RK), from(k, within), "")
			check(fmt.Sprintf("token %.20s/%.20s with a filter reaching outside", k.PK, k.RK), guardToken(k.PK), guardToken(k.RK),
				from(k, func(e guardKey) bool { return within(e) && e.RK != "r3" }), "RowKey ne 'r3' or PartitionKey eq 'p0' or PartitionKey eq 'p4'")
		}
		check("garbage token", "garbage", "1!3!cjA", nil, "")
		check("other table's token", npk, nrk, from(all[7], within), "")
	})

	// NextTableName: garbage is 400; a token naming any table name resumes there.
	t.Run("NextTableName", func(t *testing.T) {
		prefix := "guard" + runID
		var names []string
		for i := 0; i < 5; i++ {
			n := fmt.Sprintf("%sx%d", prefix, i)
			if _, err := svc.CreateTable(ctx(t), n, nil); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		filter := url.Values{"$filter": {"TableName ge '" + prefix + "' and TableName lt '" + prefix + "y'"}}
		tpath := "/" + acct + "/Tables"
		for _, b := range bad {
			if !b.badPK {
				continue
			}
			q := url.Values{"NextTableName": {b.npk}}
			r := srv.do(t, rawReq{Method: http.MethodGet, Path: tpath, Query: q.Encode()})
			guardNo5xx(t, r, "NextTableName "+b.name)
			if r.Status != http.StatusBadRequest {
				t.Errorf("NextTableName %s: status %d, want 400: %s", b.name, r.Status, truncate(r.Body))
				continue
			}
			requireRawErrStatus(t, r, http.StatusBadRequest)
		}
		tableQuery := func(tok string) (int, []string) {
			q := url.Values{"$filter": filter["$filter"], "NextTableName": {tok}}
			var out []string
			for pages := 0; ; pages++ {
				r, keys := guardQuery(t, srv, rawReq{Method: http.MethodGet, Path: tpath, Query: q.Encode()})
				if r.Status != http.StatusOK {
					return r.Status, nil
				}
				for _, k := range keys {
					out = append(out, k.PK)
				}
				next := r.Header.Get("x-ms-continuation-NextTableName")
				if next == "" || pages > 100 {
					return http.StatusOK, out
				}
				q.Set("NextTableName", next)
			}
		}
		for _, tc := range []struct {
			tok  string
			want []string
		}{
			{prefix + "x2", names[2:]},
			{prefix + "x1z", names[2:]},
			{"", names},
			{"a", names},
			{"zzzz", nil},
			{strings.Repeat("z", 32<<10), nil},
			{"\x00\xff", names},
		} {
			status, got := tableQuery(guardToken(tc.tok))
			if status != http.StatusOK || strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("NextTableName for %.30q: status %d, tables %v, want %v", tc.tok, status, got, tc.want)
			}
		}
	})
}

// ---------------------------------------------------------------------------------------
// Nested filters

// TestGuardNestedFilters: deeply nested parentheses, long not-chains and very long
// or/and-chains are answered quickly with 400 InvalidInput or with exactly the right
// entities; never a crash (stack overflow), a 5xx or a hang.
func TestGuardNestedFilters(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	c, table := newTable(t, svc)
	var all []guardKey
	for i, pk := range []string{"p0", "p1", "p2", "p3", "p4"} {
		var actions []aztables.TransactionAction
		for j, rk := range []string{"r0", "r1", "r2", "r3", "r4"} {
			all = append(all, guardKey{pk, rk})
			actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd,
				Entity: marshal(t, map[string]any{"PartitionKey": pk, "RowKey": rk, "N": i*5 + j})})
		}
		if _, err := c.SubmitTransaction(ctx(t), actions, nil); err != nil {
			t.Fatalf("seeding %s: %v", pk, err)
		}
	}
	where := func(pred func(k guardKey, n int) bool) []guardKey {
		out := []guardKey{}
		for i, k := range all {
			if pred(k, i) {
				out = append(out, k)
			}
		}
		return out
	}
	isP1 := where(func(k guardKey, _ int) bool { return k.PK == "p1" })
	notP1 := where(func(k guardKey, _ int) bool { return k.PK != "p1" })
	path := "/" + acct + "/" + table + "()"

	// run sends the filter; want nil means it must be refused with 400 InvalidInput, and
	// mayRefuse allows either answer.
	run := func(name, filter string, want []guardKey, mayRefuse bool) {
		t.Helper()
		start := time.Now()
		q := url.Values{"$filter": {filter}}.Encode()
		r, keys := guardQuery(t, srv, rawReq{Method: http.MethodGet, Path: path, Query: q})
		elapsed := time.Since(start)
		if elapsed > 10*time.Second {
			t.Errorf("%s: took %v", name, elapsed)
		}
		guardNo5xx(t, r, name)
		switch {
		case overHead(q):
			requireRawErr(t, r, http.StatusBadRequest, "OutOfRangeInput")
		case r.Status == http.StatusBadRequest && (want == nil || mayRefuse):
			requireRawErr(t, r, http.StatusBadRequest, "InvalidInput")
		case r.Status == http.StatusOK && want != nil:
			if r.Header.Get("x-ms-continuation-NextPartitionKey") != "" {
				_, keys = guardQueryAll(t, srv, rawReq{Method: http.MethodGet, Path: path, Query: q})
			}
			if !slices.Equal(keys, want) {
				t.Errorf("%s: keys %v, want %v", name, keys, want)
			}
		default:
			t.Errorf("%s: status %d (want %s): %s", name, r.Status, map[bool]string{true: "400 InvalidInput", false: "200 or 400"}[want == nil], truncate(r.Body))
		}
		t.Logf("%s (%d bytes): %d in %v", name, len(filter), r.Status, elapsed.Round(time.Millisecond))
	}

	nest := func(n int, inner string) string {
		return strings.Repeat("(", n) + inner + strings.Repeat(")", n)
	}
	for _, n := range []int{1, 10, 50} {
		run(fmt.Sprintf("parentheses %d", n), nest(n, "PartitionKey eq 'p1'"), isP1, false)
		run(fmt.Sprintf("not×%d", n), strings.Repeat("not ", n)+"(PartitionKey eq 'p1')", map[bool][]guardKey{true: isP1, false: notP1}[n%2 == 0], false)
	}
	for _, n := range []int{99, 100, 101, 1000, 10000, 100000} {
		run(fmt.Sprintf("parentheses %d", n), nest(n, "PartitionKey eq 'p1'"), isP1, true)
		run(fmt.Sprintf("not×%d", n), strings.Repeat("not ", n)+"(PartitionKey eq 'p1')", map[bool][]guardKey{true: isP1, false: notP1}[n%2 == 0], true)
		if n > 10000 {
			continue // the forms below would not fit in a request line
		}
		run(fmt.Sprintf("not(×%d", n), strings.Repeat("not (", n)+"PartitionKey eq 'p1'"+strings.Repeat(")", n), map[bool][]guardKey{true: isP1, false: notP1}[n%2 == 0], true)
		run(fmt.Sprintf("right-nested or ×%d", n), strings.Repeat("RowKey eq 'x' or (", n)+"PartitionKey eq 'p1'"+strings.Repeat(")", n), isP1, true)
	}
	// Malformed nesting is a syntax error at any depth.
	for _, n := range []int{10, 10000, 50000} {
		run(fmt.Sprintf("unclosed %d", n), strings.Repeat("(", n)+"PartitionKey eq 'p1'", nil, false)
		run(fmt.Sprintf("unopened %d", n), "PartitionKey eq 'p1'"+strings.Repeat(")", n), nil, false)
		run(fmt.Sprintf("dangling not×%d (", n), strings.Repeat("not ", n)+"(", nil, false)
		// A last "not" with nothing after it is a bare boolean property named "not", which
		// no entity has: no match, or refused for its depth.
		run(fmt.Sprintf("not×%d", n), strings.Repeat("not ", n), []guardKey{}, n > 50)
		run(fmt.Sprintf("empty parentheses %d", n), nest(n, ""), nil, false)
	}

	// Long flat chains: an or over RowKeys, an and over always-true comparisons.
	for _, n := range []int{10, 500, 999, 1000, 1001, 5000, 20000} {
		var or, and []string
		for i := 0; i < n; i++ {
			or = append(or, fmt.Sprintf("RowKey eq 'r%d'", 2+(i%2)*100)) // r2, r102, r2, ...
			and = append(and, fmt.Sprintf("N ge %d", i%3))
		}
		mayRefuse := n > 500
		run(fmt.Sprintf("or-chain %d", n), strings.Join(or, " or "), where(func(k guardKey, _ int) bool { return k.RK == "r2" }), mayRefuse)
		run(fmt.Sprintf("and-chain %d", n), strings.Join(and, " and "), where(func(_ guardKey, i int) bool { return i >= min(n-1, 2) }), mayRefuse)
	}

	// Query Tables parses the same grammar.
	for _, n := range []int{10000, 100000} {
		q := url.Values{"$filter": {nest(n, "TableName eq '"+table+"'")}}.Encode()
		r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + acct + "/Tables", Query: q})
		guardNo5xx(t, r, fmt.Sprintf("Query Tables parentheses %d", n))
		if overHead(q) {
			requireRawErr(t, r, http.StatusBadRequest, "OutOfRangeInput")
		} else if r.Status == http.StatusBadRequest {
			requireRawErr(t, r, http.StatusBadRequest, "InvalidInput")
		} else if r.Status != http.StatusOK || !bytes.Contains(r.Body, []byte(table)) {
			t.Errorf("Query Tables parentheses %d: %d %s", n, r.Status, truncate(r.Body))
		}
	}

	// A filter longer than the request line may be: refused with a 4xx, the server unharmed.
	r := srv.do(t, rawReq{Method: http.MethodGet, Path: path, Query: url.Values{"$filter": {nest(200000, "PartitionKey eq 'p1'")}}.Encode()})
	guardNo5xx(t, r, "2.4 MB filter")
	if r.Status < 400 {
		t.Errorf("2.4 MB filter: status %d, want a 4xx", r.Status)
	}
	t.Logf("2.4 MB filter: %d x-ms-error-code=%q %.200s", r.Status, r.Header.Get("x-ms-error-code"), r.Body)

	// Still healthy.
	run("plain filter afterwards", "PartitionKey eq 'p1'", isP1, false)
}

// ---------------------------------------------------------------------------------------
// Malformed multipart batches

// TestGuardMalformedBatch: $batch bodies that are truncated anywhere, lack boundaries, nest
// garbage, carry huge header lines, have no changeset or are binary junk are refused with
// 400 and write nothing.
func TestGuardMalformedBatch(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	_, table := newTable(t, svc)
	u := srv.BaseURL() + "/" + acct + "/" + table
	insert := func(rk string) egtPart {
		return egtPart{Method: "POST", URL: u, Header: [][2]string{{"Content-Type", "application/json"}, {"Prefer", "return-no-content"}},
			Body: `{"PartitionKey":"p","RowKey":"` + rk + `","V":1}`}
	}
	valid, bb := buildBatchBody([]egtPart{insert("a"), insert("b"), insert("c")})
	m := regexp.MustCompile(`boundary=(changeset_\S+)`).FindSubmatch(valid)
	if m == nil {
		t.Fatalf("no changeset boundary in %q", valid)
	}
	cb := string(m[1])
	ct := "multipart/mixed; boundary=" + bb

	// send posts body and requires 400 with nothing written. With alt "whole", a batch
	// that is legal after all (a huge but well-formed header) may instead be answered 202
	// with every operation applied — all or nothing, never a part; the table is then
	// emptied again. With alt "op", a fault inside one operation's request may instead be
	// that operation's failure: 202 with exactly one failed sub-response, nothing written.
	send := func(name string, body []byte, contentType string, alt string) {
		t.Helper()
		r := srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + acct + "/$batch", Header: map[string]string{"Content-Type": contentType}, Body: body})
		guardNo5xx(t, r, name)
		got := egtSnapshot(t, srv, table)
		var ents []map[string]any
		if err := json.Unmarshal(got, &ents); err != nil {
			t.Fatalf("%s: snapshot: %v", name, err)
		}
		switch {
		case r.Status == http.StatusBadRequest:
			requireRawErrStatus(t, r, http.StatusBadRequest)
			if len(ents) != 0 {
				t.Errorf("%s: 400, yet the table holds %d entities: %s", name, len(ents), truncate(got))
			}
		case alt == "op" && r.Status == http.StatusAccepted:
			subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
			if len(subs) != 1 || subs[0].Status < 400 || len(ents) != 0 {
				t.Errorf("%s: 202 with %d sub-responses and %d entities written, want one failed operation and nothing written: %s", name, len(subs), len(ents), truncate(r.Body))
			} else {
				t.Logf("%s: answered as an operation failure: %d %s", name, subs[0].Status, truncate(subs[0].Body))
			}
		case alt == "whole" && r.Status == http.StatusAccepted:
			subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
			if len(subs) != 3 || len(ents) != 3 {
				t.Errorf("%s: 202 with %d sub-responses and %d entities written, want all 3 or a 400: %s", name, len(subs), len(ents), truncate(r.Body))
			}
			t.Logf("%s: accepted as a valid batch (202, all 3 operations applied)", name)
		default:
			t.Errorf("%s: status %d, want 400: %q", name, r.Status, r.Body[:min(len(r.Body), 1500)])
			if len(ents) != 0 {
				t.Errorf("%s: the table holds %d entities: %s", name, len(ents), truncate(got))
			}
		}
		for _, e := range ents {
			d := srv.do(t, rawReq{Method: http.MethodDelete, Path: entityPath(acct, table, e["PartitionKey"].(string), e["RowKey"].(string)), Header: map[string]string{"If-Match": "*"}})
			requireStatus(t, d, http.StatusNoContent, "emptying the table")
		}
	}

	// Truncated anywhere before the closing delimiter of the batch.
	closeAt := bytes.Index(valid, []byte("--"+bb+"--")) + len("--"+bb+"--")
	for n := 0; n < closeAt; n += 5 {
		send(fmt.Sprintf("truncated at %d of %d", n, len(valid)), valid[:n], ct, "")
	}
	send("truncated one byte short of the close delimiter", valid[:closeAt-1], ct, "")

	junk := func(n int) []byte {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	replace := func(old, new string) []byte { return bytes.Replace(valid, []byte(old), []byte(new), 1) }
	cases := []struct {
		name string
		body []byte
		ct   string
		alt  string // see send
	}{
		// Boundaries.
		{"no boundary parameter", valid, "multipart/mixed", ""},
		{"boundary not in the body", valid, "multipart/mixed; boundary=batch_elsewhere", ""},
		{"empty boundary", valid, "multipart/mixed; boundary=", ""},
		{"no Content-Type", valid, "", ""},
		{"not multipart", valid, "application/json", ""},
		{"changeset boundary missing", replace("boundary="+cb, ""), ct, ""},
		{"changeset boundary wrong", replace("boundary="+cb, "boundary=changeset_other"), ct, ""},
		{"no boundaries at all", bytes.ReplaceAll(bytes.ReplaceAll(valid, []byte("--"+bb), nil), []byte("--"+cb), nil), ct, ""},
		{"only the close delimiter", []byte("--" + bb + "--\r\n"), ct, ""},
		{"empty body", []byte{}, ct, ""},
		// Nesting.
		{"changeset inside a changeset", replace("Content-Type: application/http\r\n", "Content-Type: multipart/mixed; boundary="+cb+"\r\n"), ct, ""},
		{"garbage application/http part", replace("POST "+u+" HTTP/1.1", "\x00\x01garbage\xff"), ct, ""},
		{"part without a request line", replace("POST "+u+" HTTP/1.1\r\n", ""), ct, ""},
		{"third-level multipart", replace("Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n",
			"Content-Type: multipart/mixed; boundary=deeper\r\n\r\n--deeper\r\nContent-Type: application/http\r\n\r\n"), ct, ""},
		{"changeset part of an unknown type", replace("Content-Type: application/http\r\n", "Content-Type: text/plain\r\n"), ct, ""},
		// Huge header lines (the whole body stays under the 4 MiB limit).
		{"1 MiB MIME header line", replace("Content-Transfer-Encoding: binary\r\n", "X-Long: "+strings.Repeat("h", 1<<20)+"\r\n"), ct, "whole"},
		{"3 MiB sub-request header line", replace("Prefer: return-no-content\r\n", "Prefer: return-no-content\r\nX-Long: "+strings.Repeat("h", 3<<20)+"\r\n"), ct, "whole"},
		{"3 MiB request line", replace(" HTTP/1.1", strings.Repeat("/x", 3<<19)+" HTTP/1.1"), ct, "op"},
		{"100,000 part headers", replace("Content-Transfer-Encoding: binary\r\n", strings.Repeat("X-H: v\r\n", 100000)), ct, "whole"},
		{"1 MiB boundary line", append([]byte("--"+strings.Repeat("b", 1<<20)+"\r\n"), valid...), ct, "whole"},
		// No changeset: write operations as direct parts.
		{"insert without a changeset", []byte("--" + bb + "\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
			"POST " + u + " HTTP/1.1\r\nContent-Type: application/json\r\n\r\n{\"PartitionKey\":\"p\",\"RowKey\":\"a\"}\r\n--" + bb + "--\r\n"), ct, ""},
		// Binary junk.
		{"64 KiB of random bytes", junk(64 << 10), ct, ""},
		{"random bytes after the first delimiter", append([]byte("--"+bb+"\r\n"), junk(64<<10)...), ct, ""},
		{"random bytes inside the changeset", replace("Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nPOST", "\r\n"+string(junk(4096))+"\r\nPOST"), ct, ""},
		{"NULs everywhere", bytes.ReplaceAll(valid, []byte("\r\n"), []byte("\x00\r\n")), ct, ""},
	}
	for _, tc := range cases {
		send(tc.name, tc.body, tc.ct, tc.alt)
	}

	// The same server still runs the intact batch.
	r := egtPost(t, srv, valid, bb, nil)
	if subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false); len(subs) != 3 {
		t.Fatalf("valid batch afterwards: %d sub-responses", len(subs))
	}
	var v []map[string]any
	if err := json.Unmarshal(egtSnapshot(t, srv, table), &v); err != nil || len(v) != 3 {
		t.Errorf("valid batch afterwards: %d entities (%v)", len(v), err)
	}
}

// ---------------------------------------------------------------------------------------
// Concurrent connections

// endedConn records how a client connection ended: the first read error (the server
// closed or reset it) or the client's own Close — what a test reports when a connection
// it expected to keep was replaced.
type endedConn struct {
	net.Conn
	at   time.Time
	mu   sync.Mutex
	err  error
	done time.Time
}

func (c *endedConn) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err, c.done = err, time.Now()
	}
}

func (c *endedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.end(fmt.Errorf("read: %w", err))
	}
	return n, err
}

// closeCounter counts the responses that end their connection (Connection: close).
type closeCounter struct {
	http.RoundTripper
	n *atomic.Int64
}

func (c closeCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.RoundTripper.RoundTrip(r)
	if err == nil && resp.Close {
		c.n.Add(1)
	}
	return resp, err
}

// errClientClosed is how a connection the client closed itself ended.
var errClientClosed = errors.New("closed by the client")

func (c *endedConn) Close() error {
	c.end(errClientClosed)
	return c.Conn.Close()
}

// byServer reports whether the server ended the connection (the client read an error
// from it: EOF or a reset) rather than the client closing it.
func (c *endedConn) byServer() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil && !errors.Is(c.err, errClientClosed)
}

func (c *endedConn) why() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return errors.New("not ended (the client dialled beside it)")
	}
	return c.err
}

func (c *endedConn) lived() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done.IsZero() {
		return time.Since(c.at).Round(time.Millisecond)
	}
	return c.done.Sub(c.at).Round(time.Millisecond)
}

// TestGuardConcurrentConnections: 500 keep-alive connections open at once, each used for
// gets, inserts, queries and merges, are all answered correctly, with no 5xx and no
// connection dropped by the server; the server is healthy afterwards. Go's Transport may
// close a connection itself after a good response: it reuses one only if its writer
// goroutine reported the request written within 50 ms of the response's end
// (maxWriteWaitBeforeConnReuse), which on a loaded machine with 500 workers it sometimes
// does not. Such a close is the client's and is only logged.
func TestGuardConcurrentConnections(t *testing.T) {
	const workers = 500
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	c, table := newTable(t, svc)
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "shared", "RowKey": "s", "V": 42}), nil); err != nil {
		t.Fatal(err)
	}
	a := srv.Default()
	var dials, redials, dropped, closing atomic.Int64
	cx := ctxFor(t, 3*time.Minute)
	connected := make(chan struct{})
	var ready, wg sync.WaitGroup
	ready.Add(workers)
	var failures atomic.Int64
	fail := func(format string, args ...any) {
		if failures.Add(1) <= 20 {
			t.Errorf(format, args...)
		}
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			once := sync.OnceFunc(ready.Done)
			defer once()
			d := &net.Dialer{Timeout: 10 * time.Second}
			var prev *endedConn // this worker's connection
			tr := &http.Transport{
				DialContext: func(c context.Context, network, addr string) (net.Conn, error) {
					if dials.Add(1); prev != nil {
						if prev.byServer() {
							dropped.Add(1)
						}
						if redials.Add(1) <= 5 {
							t.Logf("worker %d dials again; its connection ended after %v: %v", w, prev.lived(), prev.why())
						}
					}
					conn, err := d.DialContext(c, network, addr)
					if err != nil {
						return nil, err
					}
					prev = &endedConn{Conn: conn, at: time.Now()}
					return prev, nil
				},
				MaxIdleConnsPerHost: 1,
				MaxConnsPerHost:     1,
				IdleConnTimeout:     5 * time.Minute,
			}
			defer tr.CloseIdleConnections()
			rt := closeCounter{tr, &closing}
			cl := newServiceClientFor(t, srv.Endpoint(a.Name), a.Name, a.Key, &http.Client{Transport: rt, Timeout: 2 * time.Minute}).NewClient(table)
			// Open the connection and hold it until every worker has one.
			resp, err := cl.GetEntity(cx, "shared", "s", nil)
			if err != nil {
				fail("worker %d: first GetEntity: %v", w, err)
				return
			}
			if e := decodeEDM(t, resp.Value); e.Properties["V"] != int32(42) {
				fail("worker %d: shared V = %v", w, e.Properties["V"])
			}
			once()
			<-connected

			pk, rk := fmt.Sprintf("w%02d", w%20), fmt.Sprintf("%04d", w)
			if _, err := cl.AddEntity(cx, marshal(t, map[string]any{"PartitionKey": pk, "RowKey": rk, "W": w}), nil); err != nil {
				fail("worker %d: AddEntity: %v", w, err)
				return
			}
			if _, err := cl.UpdateEntity(cx, marshal(t, map[string]any{"PartitionKey": pk, "RowKey": rk, "M": w * 2}),
				&aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge}); err != nil {
				fail("worker %d: merge: %v", w, err)
				return
			}
			resp, err = cl.GetEntity(cx, pk, rk, nil)
			if err != nil {
				fail("worker %d: GetEntity: %v", w, err)
				return
			}
			if e := decodeEDM(t, resp.Value); e.Properties["W"] != int32(w) || e.Properties["M"] != int32(w*2) {
				fail("worker %d: read back %v", w, e.Properties)
			}
			p := cl.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: to.Ptr("PartitionKey eq '" + pk + "' and RowKey eq '" + rk + "'")})
			n := 0
			for p.More() {
				page, err := p.NextPage(cx)
				if err != nil {
					fail("worker %d: query: %v", w, err)
					return
				}
				n += len(page.Entities)
			}
			if n != 1 {
				fail("worker %d: query found %d entities, want 1", w, n)
			}
			if _, err := cl.GetEntity(cx, "shared", "missing", nil); statusOf(err) != http.StatusNotFound {
				fail("worker %d: missing entity: %v", w, err)
			}
		}(w)
	}
	ready.Wait()
	close(connected)
	wg.Wait()
	if failures.Load() > 20 {
		t.Errorf("... %d failures in all", failures.Load())
	}
	if got := dropped.Load(); got != 0 {
		t.Errorf("the server closed %d of %d keep-alive connections under load (%d dialled)", got, workers, dials.Load())
	}
	if got := closing.Load(); got != 0 {
		t.Errorf("the server answered %d requests with Connection: close under load", got)
	}
	keys := listAll(t, c, &aztables.ListEntitiesOptions{Select: to.Ptr("RowKey")})
	if len(keys) != workers+1 {
		t.Errorf("%d entities after the run, want %d", len(keys), workers+1)
	}
	if _, err := svc.CreateTable(ctx(t), tableName(t), nil); err != nil {
		t.Errorf("create table afterwards: %v", err)
	}
}

// ---------------------------------------------------------------------------------------
// Read-only data directory

// TestGuardReadOnlyDataDir: on a data directory that is on a read-only file system, start-up
// fails at once with exit status 1 and a message that names the directory and the cause —
// no panic, no hang, no listening socket — and the data is untouched: the same directory
// serves it again once writable. Needs root (mount), so it skips elsewhere; skips on the
// postgres engine, which keeps no data in the directory.
func TestGuardReadOnlyDataDir(t *testing.T) {
	if onPostgres() {
		t.Skip("the postgres engine keeps no data in the data directory")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a read-only file system (permissions alone do not stop root)")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s)", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
			_ = exec.Command("umount", "-l", mnt).Run()
		}
	})
	remount := func(mode string) {
		t.Helper()
		if out, err := exec.Command("mount", "-o", "remount,"+mode, mnt).CombinedOutput(); err != nil {
			t.Fatalf("remount %s %s: %v: %s", mode, mnt, err, out)
		}
	}

	dataDir := filepath.Join(mnt, "data")
	srv := startServer(t, func(c *serverConfig) { c.dataDir = dataDir })
	svc := newServiceClient(t, srv)
	c, table := newTable(t, svc)
	for i := 0; i < 20; i++ {
		if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": fmt.Sprint(i), "V": i}), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err, inTime := srv.terminate(stopTimeout); !inTime || err != nil {
		t.Fatalf("stopping the server: %v (in time: %v)", err, inTime)
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		_ = filepath.Walk(dataDir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				out[p] = fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
			}
			return nil
		})
		return out
	}
	remount("ro")
	filesBefore := snapshot()

	for _, tc := range []struct{ name, dir string }{
		{"populated", dataDir},
		{"missing", filepath.Join(mnt, "absent", "data")},
	} {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(binaryPath, "serve", "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--data", tc.dir)
		cmd.Env = filterEnv(os.Environ())
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("%s read-only data directory: exit %v, want status 1\n%s", tc.name, err, out.String())
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("%s read-only data directory: still running after 20 s (hang, or serving without saying so)\n%s", tc.name, out.String())
		}
		msg := out.String()
		t.Logf("%s read-only data directory: exited after %v: %s", tc.name, time.Since(start).Round(time.Millisecond), strings.TrimSpace(msg))
		if !strings.Contains(msg, "read-only file system") || !strings.Contains(msg, mnt) {
			t.Errorf("%s: the message should name the path and say it is read-only: %q", tc.name, msg)
		}
		for _, bad := range []string{"panic", "goroutine ", "fatal error"} {
			if strings.Contains(msg, bad) {
				t.Errorf("%s: output contains %q:\n%s", tc.name, bad, msg)
			}
		}
		if lines := strings.Count(strings.TrimSpace(msg), "\n") + 1; lines > 5 {
			t.Errorf("%s: %d lines of output for one start-up failure:\n%s", tc.name, lines, msg)
		}
		if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			conn.Close()
			t.Errorf("%s: something listens on the port after the failed start", tc.name)
		}
	}
	if after := snapshot(); fmt.Sprint(after) != fmt.Sprint(filesBefore) {
		t.Errorf("data directory changed on a read-only file system?\nbefore %v\nafter  %v", filesBefore, after)
	}

	// Writable again: the same directory serves everything that was written.
	remount("rw")
	srv.restart(t)
	c = newServiceClient(t, srv).NewClient(table)
	keys := listAll(t, c, nil)
	got := make([]string, 0, len(keys))
	for _, k := range keys {
		got = append(got, decodeEDM(t, k).RowKey)
	}
	sort.Strings(got)
	if len(got) != 20 {
		t.Errorf("after remounting read-write: %d entities, want 20 (%v)", len(got), got)
	}
}
