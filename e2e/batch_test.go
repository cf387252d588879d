package e2e

// Entity group transactions ($batch) through the Go SDK's SubmitTransaction (issue 5,
// docs/protocol.md §6, checklist items 23–27), plus the helpers batch_raw_test.go and
// batch_crash_test.go share: a recording transport, a strict parser of the $batch response
// layout, the §6.4 failure check, a byte-exact table snapshot and a multipart builder.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// ---------------------------------------------------------------------------------------
// Recording transport

// egtExchange is one $batch request and its response as they crossed the wire.
type egtExchange struct {
	ReqBody []byte
	Status  int
	Header  http.Header
	Body    []byte
}

// egtRecorder is a policy.Transporter that keeps the last $batch exchange. aztables
// v1.4.1's TransactionResponse has no fields and a failed transaction surfaces only as a
// ResponseError of the outer 202, so the sub-responses (their ETags, the failing index)
// can only be checked on the bytes the SDK received.
type egtRecorder struct {
	mu   sync.Mutex
	last egtExchange
	n    int
}

func (r *egtRecorder) Do(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if strings.HasSuffix(req.URL.Path, "/$batch") {
		r.mu.Lock()
		r.last = egtExchange{ReqBody: reqBody, Status: resp.StatusCode, Header: resp.Header.Clone(), Body: body}
		r.n++
		r.mu.Unlock()
	}
	return resp, nil
}

// Last returns the last $batch exchange and how many there were.
func (r *egtRecorder) Last() (egtExchange, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.n
}

// egtClient is an SDK client for table whose $batch exchanges are recorded.
func egtClient(t testing.TB, srv *server, table string) (*aztables.Client, *egtRecorder) {
	t.Helper()
	rec := &egtRecorder{}
	a := srv.Default()
	return newServiceClientFor(t, srv.Endpoint(a.Name), a.Name, a.Key, rec).NewClient(table), rec
}

// ---------------------------------------------------------------------------------------
// Response layout (docs/protocol.md §6.3, §6.4)

// egtSub is one sub-response of a $batch response.
type egtSub struct {
	Status int
	Header http.Header
	Body   []byte
	Raw    string // the application/http part's content: status line, headers, body
}

var (
	egtStatusLineRe = regexp.MustCompile(`^HTTP/1\.1 (\d{3}) [^\r\n]+\r\n`)
	egtIndexRe      = regexp.MustCompile(`"value":"(\d+):`) // older .NET, on the raw JSON
)

// parseBatchResponse checks the $batch response layout every SDK depends on (§6.3,
// checklist item 23) and returns the sub-responses in order: status 202; Content-Type
// multipart/mixed with a batchresponse_ boundary; the body starts with that delimiter (Go
// reads the boundary from the first body line); the changeset part (retrieve == false)
// nests a changesetresponse_ boundary and its body starts at once with that delimiter (Go
// again); CRLF line endings only; the JS split on "--changesetresponse_" yields exactly one
// piece per sub-response; each sub-response is an application/http part with a valid
// status line that http.ReadResponse accepts. With retrieve the single application/http
// part sits directly in the batch (the single-GET layout).
func parseBatchResponse(t testing.TB, status int, header http.Header, body []byte, retrieve bool) []egtSub {
	t.Helper()
	if status != http.StatusAccepted {
		t.Fatalf("$batch status %d, want 202 (x-ms-error-code %q, body %s)", status, header.Get("x-ms-error-code"), truncate(body))
	}
	ct := header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/mixed" {
		t.Fatalf("$batch response Content-Type %q is not multipart/mixed: %v", ct, err)
	}
	bb := params["boundary"]
	if !strings.HasPrefix(bb, "batchresponse_") {
		t.Errorf("response boundary %q must begin with batchresponse_", bb)
	}
	if !bytes.HasPrefix(body, []byte("--"+bb+"\r\n")) {
		t.Fatalf("response body must start with %q CRLF; starts %q", "--"+bb, truncate(body))
	}
	for i, c := range body {
		if c == '\n' && (i == 0 || body[i-1] != '\r') {
			t.Errorf("response body has a bare LF at byte %d: %q", i, truncate(body[max(0, i-80):]))
			break
		}
	}
	if !bytes.HasSuffix(bytes.TrimSuffix(body, []byte("\r\n")), []byte("--"+bb+"--")) {
		t.Errorf("response body must end with the closing delimiter --%s--: %q", bb, body[max(0, len(body)-120):])
	}
	mr := multipart.NewReader(bytes.NewReader(body), bb)
	outer, err := mr.NextPart()
	if err != nil {
		t.Fatalf("response: first batch part: %v (body %s)", err, truncate(body))
	}
	content, err := io.ReadAll(outer)
	if err != nil {
		t.Fatalf("response: reading batch part: %v", err)
	}
	var subs []egtSub
	if retrieve {
		subs = append(subs, egtParseSub(t, outer.Header, content))
	} else {
		mt, params, err := mime.ParseMediaType(outer.Header.Get("Content-Type"))
		if err != nil || mt != "multipart/mixed" {
			t.Fatalf("changeset part Content-Type %q is not multipart/mixed: %v", outer.Header.Get("Content-Type"), err)
		}
		cb := params["boundary"]
		if !strings.HasPrefix(cb, "changesetresponse_") {
			t.Errorf("changeset boundary %q must begin with changesetresponse_", cb)
		}
		if !bytes.HasPrefix(content, []byte("--"+cb+"\r\n")) {
			t.Fatalf("changeset part body must start at once with %q; starts %q", "--"+cb, truncate(content))
		}
		ir := multipart.NewReader(bytes.NewReader(content), cb)
		for {
			p, err := ir.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("response: changeset part %d: %v (body %s)", len(subs), err, truncate(body))
			}
			c, err := io.ReadAll(p)
			if err != nil {
				t.Fatalf("response: reading changeset part %d: %v", len(subs), err)
			}
			subs = append(subs, egtParseSub(t, p.Header, c))
		}
		if n := bytes.Count(body, []byte("--changesetresponse_")); n != len(subs)+1 {
			t.Errorf("body holds %d occurrences of --changesetresponse_, want %d (JS splits on it)", n, len(subs)+1)
		}
	}
	if _, err := mr.NextPart(); err != io.EOF {
		t.Errorf("response batch has more than one top-level part (NextPart: %v)", err)
	}
	return subs
}

func egtParseSub(t testing.TB, ph textproto.MIMEHeader, content []byte) egtSub {
	t.Helper()
	if got := ph.Get("Content-Type"); got != "application/http" {
		t.Errorf("sub-response part Content-Type = %q, want application/http", got)
	}
	if got := ph.Get("Content-Transfer-Encoding"); got != "binary" {
		t.Errorf("sub-response part Content-Transfer-Encoding = %q, want binary", got)
	}
	if !egtStatusLineRe.Match(content) {
		t.Errorf("sub-response does not begin with a status line `HTTP/1.1 <code> <reason>`: %q", truncate(content))
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(content)), nil)
	if err != nil {
		t.Errorf("http.ReadResponse (as the Go SDK does) failed on %q: %v", truncate(content), err)
		return egtSub{Raw: string(content)}
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("sub-response body: %v", err)
	}
	return egtSub{Status: resp.StatusCode, Header: resp.Header, Body: b, Raw: string(content)}
}

// checkBatchFailure asserts the failure layout of §6.4 (checklist item 24): exactly one
// sub-response, with the operation's real status and code (code "" = any), a JSON body on
// one line with odata.error as the only key, and a message starting "<index>:" — parsed
// the way older .NET does (regex on the raw JSON) and the way Python does (digits before
// the first ':'). wantIndex lists the acceptable indexes. It returns the index and code.
func checkBatchFailure(t testing.TB, subs []egtSub, status int, code string, wantIndex ...int) (int, string) {
	t.Helper()
	if len(subs) != 1 {
		t.Errorf("failed changeset holds %d sub-responses, want exactly 1 (.NET counts them)", len(subs))
		if len(subs) == 0 {
			return -1, ""
		}
	}
	s := subs[len(subs)-1]
	if s.Status != status {
		t.Errorf("failing sub-response status %d, want %d (%s)", s.Status, status, truncate(s.Body))
	}
	if ct := s.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("failing sub-response Content-Type %q, want application/json...", ct)
	}
	if bytes.ContainsAny(s.Body, "\r\n") {
		t.Errorf("failing sub-response JSON must be one line (JS): %q", s.Body)
	}
	got := checkErrorBody(t, s.Body, code)
	m := egtIndexRe.FindSubmatch(s.Body)
	if m == nil {
		t.Errorf(`failing sub-response has no compact "value":"<index>: prefix: %s`, s.Body)
		return -1, got
	}
	idx, _ := strconv.Atoi(string(m[1]))
	var eb errorBody
	if json.Unmarshal(s.Body, &eb) == nil && eb.OData != nil && eb.OData.Message != nil {
		head, _, _ := strings.Cut(eb.OData.Message.Value, ":")
		if n, err := strconv.Atoi(head); err != nil || n != idx {
			t.Errorf("message %q: Python would read index %q, .NET %d", eb.OData.Message.Value, head, idx)
		}
	}
	ok := len(wantIndex) == 0
	for _, w := range wantIndex {
		ok = ok || idx == w
	}
	if !ok {
		t.Errorf("failing index %d, want one of %v (%s)", idx, wantIndex, s.Body)
	}
	return idx, got
}

// egtRequireFailure asserts that SubmitTransaction failed the way the Go SDK reports a
// failed changeset — a *azcore.ResponseError built from the outer 202, whose ErrorCode the
// server fills from x-ms-error-code — and checks the recorded response's failing
// sub-response (status, code, index).
func egtRequireFailure(t testing.TB, err error, rec *egtRecorder, status int, code string, wantIndex ...int) (int, string) {
	t.Helper()
	if err == nil {
		t.Errorf("SubmitTransaction succeeded, want %d %s at index %v", status, code, wantIndex)
		return -1, ""
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		t.Errorf("SubmitTransaction error %T %v, want *azcore.ResponseError", err, err)
		return -1, ""
	}
	if re.StatusCode != http.StatusAccepted {
		t.Errorf("ResponseError.StatusCode %d, want the outer 202", re.StatusCode)
	}
	if code != "" && re.ErrorCode != code {
		t.Errorf("ResponseError.ErrorCode %q, want %q (from x-ms-error-code)", re.ErrorCode, code)
	}
	ex, _ := rec.Last()
	subs := parseBatchResponse(t, ex.Status, ex.Header, ex.Body, false)
	idx, got := checkBatchFailure(t, subs, status, code, wantIndex...)
	if code == "" && re.ErrorCode != got {
		t.Errorf("ResponseError.ErrorCode %q, sub-response code %q", re.ErrorCode, got)
	}
	return idx, got
}

// egtRequireSuccess asserts that SubmitTransaction succeeded and returns the recorded
// sub-responses, one per action, each 2xx.
func egtRequireSuccess(t testing.TB, err error, rec *egtRecorder, n int) []egtSub {
	t.Helper()
	if err != nil {
		ex, _ := rec.Last()
		t.Fatalf("SubmitTransaction: %v\nresponse body: %s", err, truncate(ex.Body))
	}
	ex, _ := rec.Last()
	subs := parseBatchResponse(t, ex.Status, ex.Header, ex.Body, false)
	if len(subs) != n {
		t.Fatalf("%d sub-responses for %d operations", len(subs), n)
	}
	for i, s := range subs {
		if s.Status < 200 || s.Status > 299 {
			t.Errorf("sub-response %d: status %d", i, s.Status)
		}
	}
	return subs
}

// ---------------------------------------------------------------------------------------
// Snapshots and raw batches

// egtSnapshot returns the raw JSON array of every entity of the table — keys,
// properties, type annotations, Timestamp and odata.etag — exactly as one unfiltered query
// returns it. Two snapshots are equal only if nothing in the table changed.
func egtSnapshot(t testing.TB, srv *server, table string) []byte {
	t.Helper()
	r := srv.do(t, rawReq{Method: http.MethodGet, Path: "/" + srv.Default().Name + "/" + table + "()"})
	requireStatus(t, r, http.StatusOK, "snapshot query of "+table)
	if r.Header.Get("x-ms-continuation-NextPartitionKey") != "" {
		t.Fatalf("snapshot of %s needs more than one page", table)
	}
	var v struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(r.Body, &v); err != nil || v.Value == nil {
		t.Fatalf("snapshot query body: %v: %s", err, truncate(r.Body))
	}
	return v.Value
}

// egtRequireUnchanged compares a snapshot with the table now.
func egtRequireUnchanged(t testing.TB, srv *server, table string, before []byte, what string) {
	t.Helper()
	after := egtSnapshot(t, srv, table)
	if !bytes.Equal(before, after) {
		t.Errorf("%s: the table changed although the batch failed (no rollback):\nbefore: %s\nafter:  %s", what, before, after)
	}
}

// egtPart is one hand-built sub-request.
type egtPart struct {
	Method string
	URL    string      // exactly as on the request line
	Header [][2]string // in order
	Body   string
	MIME   [][2]string // extra MIME part headers (e.g. Content-ID)
}

// buildBatchBody frames parts as one changeset the way the Go and JS SDKs do (§6.2) and
// returns the body and the outer boundary.
func buildBatchBody(parts []egtPart) ([]byte, string) {
	n := nameCounter.Add(1)
	bb := fmt.Sprintf("batch_%s-%08d-0000-4000-8000-000000000000", runID, n)
	cb := fmt.Sprintf("changeset_%s-%08d-0000-4000-8000-000000000000", runID, n)
	var b bytes.Buffer
	b.WriteString("--" + bb + "\r\nContent-Type: multipart/mixed; boundary=" + cb + "\r\n\r\n")
	for _, p := range parts {
		b.WriteString("--" + cb + "\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n")
		for _, h := range p.MIME {
			b.WriteString(h[0] + ": " + h[1] + "\r\n")
		}
		b.WriteString("\r\n" + p.Method + " " + p.URL + " HTTP/1.1\r\n")
		for _, h := range p.Header {
			b.WriteString(h[0] + ": " + h[1] + "\r\n")
		}
		b.WriteString("\r\n" + p.Body + "\r\n")
	}
	b.WriteString("--" + cb + "--\r\n--" + bb + "--\r\n")
	return b.Bytes(), bb
}

// egtPost sends a raw $batch (signed with SharedKeyLite unless hdr overrides auth).
func egtPost(t testing.TB, srv *server, body []byte, boundary string, hdr map[string]string) rawResp {
	t.Helper()
	h := map[string]string{"Content-Type": "multipart/mixed; boundary=" + boundary}
	for k, v := range hdr {
		h[k] = v
	}
	return srv.do(t, rawReq{Method: http.MethodPost, Path: "/" + srv.Default().Name + "/$batch", Header: h, Body: body})
}

// egtKeyURL is an absolute sub-request URL for one entity, the key escaped correctly:
// quotes doubled, then percent-encoded as a path segment.
func egtKeyURL(srv *server, table, pk, rk string) string {
	return srv.BaseURL() + entityPath(srv.Default().Name, table, pk, rk)
}

// ---------------------------------------------------------------------------------------
// Entities and actions

// egtEnt builds an entity map: keys then name/value pairs.
func egtEnt(pk, rk string, kv ...any) map[string]any {
	m := map[string]any{"PartitionKey": pk, "RowKey": rk}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func egtAct(t testing.TB, kind aztables.TransactionType, e map[string]any, ifMatch *azcore.ETag) aztables.TransactionAction {
	return aztables.TransactionAction{ActionType: kind, Entity: marshal(t, e), IfMatch: ifMatch}
}

func egtETag(s string) *azcore.ETag { e := azcore.ETag(s); return &e }

// egtCurrentETag reads an entity's ETag.
func egtCurrentETag(t testing.TB, c *aztables.Client, pk, rk string) *azcore.ETag {
	t.Helper()
	_, g := getEDM(t, c, pk, rk)
	return egtETag(string(g.ETag))
}

// egtRequireGone asserts that the entity does not exist.
func egtRequireGone(t testing.TB, c *aztables.Client, pk, rk string) {
	t.Helper()
	_, err := c.GetEntity(ctx(t), pk, rk, nil)
	if statusOf(err) != http.StatusNotFound {
		t.Errorf("GetEntity(%q,%q) after delete: %v, want 404", pk, rk, err)
	}
}

// egtRequireProps asserts an entity's exact property set and that its ETag is the one the
// batch's sub-response reported.
func egtRequireProps(t testing.TB, c *aztables.Client, pk, rk string, want map[string]any, subETag string) {
	t.Helper()
	e, g := getEDM(t, c, pk, rk)
	if (len(e.Properties) != 0 || len(want) != 0) && !reflect.DeepEqual(e.Properties, want) {
		t.Errorf("(%q,%q) properties = %#v, want %#v", pk, rk, e.Properties, want)
	}
	if subETag != "" && string(g.ETag) != subETag {
		t.Errorf("(%q,%q) GetEntity ETag %s != the batch sub-response's ETag %s", pk, rk, g.ETag, subETag)
	}
}

// ---------------------------------------------------------------------------------------
// Tests

func TestBatchTransactionSDK(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)

	// Every action kind, with and without IfMatch: a batch of three actions of one kind,
	// then the entities, their properties and ETags afterwards.
	t.Run("EachKind", func(t *testing.T) {
		type kindCase struct {
			name    string
			kind    aztables.TransactionType
			exists  bool // the three entities exist before the batch
			ifMatch string
			// want is the entity afterwards (nil: gone), given that it held
			// {Orig:"o", N:1} before and the action carries {N:2, New:"n"}.
			want map[string]any
		}
		merged := map[string]any{"Orig": "o", "N": int32(2), "New": "n"}
		replaced := map[string]any{"N": int32(2), "New": "n"}
		cases := []kindCase{
			{"Add", aztables.TransactionTypeAdd, false, "", replaced},
			{"UpdateMergeIfMatchETag", aztables.TransactionTypeUpdateMerge, true, "etag", merged},
			{"UpdateMergeIfMatchStar", aztables.TransactionTypeUpdateMerge, true, "*", merged},
			// The Go SDK sends no If-Match for an UpdateMerge without IfMatch: on the wire
			// that is Insert Or Merge, so it merges an existing entity and creates a
			// missing one.
			{"UpdateMergeNoIfMatchExisting", aztables.TransactionTypeUpdateMerge, true, "", merged},
			{"UpdateMergeNoIfMatchMissing", aztables.TransactionTypeUpdateMerge, false, "", replaced},
			{"UpdateReplaceIfMatchETag", aztables.TransactionTypeUpdateReplace, true, "etag", replaced},
			{"UpdateReplaceIfMatchStar", aztables.TransactionTypeUpdateReplace, true, "*", replaced},
			{"UpdateReplaceNoIfMatchExisting", aztables.TransactionTypeUpdateReplace, true, "", replaced},
			{"UpdateReplaceNoIfMatchMissing", aztables.TransactionTypeUpdateReplace, false, "", replaced},
			{"UpsertMergeExisting", aztables.TransactionTypeInsertMerge, true, "", merged},
			{"UpsertMergeMissing", aztables.TransactionTypeInsertMerge, false, "", replaced},
			{"UpsertReplaceExisting", aztables.TransactionTypeInsertReplace, true, "", replaced},
			{"UpsertReplaceMissing", aztables.TransactionTypeInsertReplace, false, "", replaced},
			{"DeleteNoIfMatch", aztables.TransactionTypeDelete, true, "", nil},
			{"DeleteIfMatchStar", aztables.TransactionTypeDelete, true, "*", nil},
			{"DeleteIfMatchETag", aztables.TransactionTypeDelete, true, "etag", nil},
		}
		_, table := newTable(t, svc)
		c, rec := egtClient(t, srv, table)
		for ci, kc := range cases {
			t.Run(kc.name, func(t *testing.T) {
				pk := fmt.Sprintf("k%02d", ci)
				rks := []string{"a", "b", "c"}
				before := map[string]string{}
				for _, rk := range rks {
					if kc.exists {
						r, err := c.AddEntity(ctx(t), marshal(t, egtEnt(pk, rk, "Orig", "o", "N", 1)), nil)
						if err != nil {
							t.Fatalf("seed: %v", err)
						}
						before[rk] = string(r.ETag)
					}
				}
				var actions []aztables.TransactionAction
				for _, rk := range rks {
					var im *azcore.ETag
					switch kc.ifMatch {
					case "etag":
						im = egtETag(before[rk])
					case "*":
						im = egtETag("*")
					}
					actions = append(actions, egtAct(t, kc.kind, egtEnt(pk, rk, "N", 2, "New", "n"), im))
				}
				_, err := c.SubmitTransaction(ctx(t), actions, nil)
				subs := egtRequireSuccess(t, err, rec, len(actions))
				for i, rk := range rks {
					s := subs[i]
					if s.Status != http.StatusNoContent {
						t.Errorf("sub-response %d: status %d, want 204 (every SDK action asks for no content)", i, s.Status)
					}
					if len(s.Body) != 0 {
						t.Errorf("sub-response %d has a body (JS treats any {...} as an error): %q", i, s.Body)
					}
					if kc.want == nil {
						if et := s.Header.Get("ETag"); et != "" {
							t.Errorf("delete sub-response %d carries ETag %q", i, et)
						}
						egtRequireGone(t, c, pk, rk)
						continue
					}
					et := s.Header.Get("ETag")
					if et == "" {
						t.Errorf("sub-response %d has no ETag: %q", i, s.Raw)
						continue
					}
					if !strings.Contains(s.Raw, "\r\nETag: ") {
						t.Errorf("sub-response %d: the header must be spelled ETag (JS matches it literally): %q", i, s.Raw)
					}
					checkETag(t, et)
					if et == before[rk] {
						t.Errorf("sub-response %d: ETag %s unchanged by the write", i, et)
					}
					egtRequireProps(t, c, pk, rk, kc.want, et)
					if kc.kind == aztables.TransactionTypeAdd {
						if got := s.Header.Get("Preference-Applied"); got != "return-no-content" {
							t.Errorf("insert sub-response %d: Preference-Applied %q, want return-no-content", i, got)
						}
						loc := s.Header.Get("Location")
						if !strings.HasSuffix(loc, "/"+table+"(PartitionKey='"+pk+"',RowKey='"+rk+"')") {
							t.Errorf("insert sub-response %d: Location %q", i, loc)
						}
						if ds := s.Header.Get("DataServiceId"); ds != loc {
							t.Errorf("insert sub-response %d: DataServiceId %q != Location %q", i, ds, loc)
						}
					}
				}
			})
		}
	})

	// All kinds in one batch, together with the property types whose encoding matters.
	t.Run("Mix", func(t *testing.T) {
		_, table := newTable(t, svc)
		c, rec := egtClient(t, srv, table)
		for _, rk := range []string{"um", "ur", "umstar", "urstar", "m", "r", "d", "dstar"} {
			if _, err := c.AddEntity(ctx(t), marshal(t, egtEnt("mix", rk, "Orig", "o")), nil); err != nil {
				t.Fatal(err)
			}
		}
		etUM, etUR, etD := egtCurrentETag(t, c, "mix", "um"), egtCurrentETag(t, c, "mix", "ur"), egtCurrentETag(t, c, "mix", "d")
		typed := egtEnt("mix", "add", "S", "s", "I", 7, "B", true, "D", 1.5,
			"L", "9007199254740993", "L@odata.type", "Edm.Int64",
			"G", "c9da6455-213d-42c9-9a79-3e9149a57833", "G@odata.type", "Edm.Guid",
			"T", "2024-05-01T10:00:01.1234567Z", "T@odata.type", "Edm.DateTime",
			"X", "AQID", "X@odata.type", "Edm.Binary")
		actions := []aztables.TransactionAction{
			egtAct(t, aztables.TransactionTypeAdd, typed, nil),
			egtAct(t, aztables.TransactionTypeUpdateMerge, egtEnt("mix", "um", "V", 1), etUM),
			egtAct(t, aztables.TransactionTypeUpdateReplace, egtEnt("mix", "ur", "V", 2), etUR),
			egtAct(t, aztables.TransactionTypeUpdateMerge, egtEnt("mix", "umstar", "V", 3), egtETag("*")),
			egtAct(t, aztables.TransactionTypeUpdateReplace, egtEnt("mix", "urstar", "V", 4), egtETag("*")),
			egtAct(t, aztables.TransactionTypeInsertMerge, egtEnt("mix", "m", "V", 5), nil),
			egtAct(t, aztables.TransactionTypeInsertReplace, egtEnt("mix", "r", "V", 6), nil),
			egtAct(t, aztables.TransactionTypeDelete, egtEnt("mix", "d"), etD),
			egtAct(t, aztables.TransactionTypeDelete, egtEnt("mix", "dstar"), nil),
			egtAct(t, aztables.TransactionTypeInsertMerge, egtEnt("mix", "newm", "V", 7), nil),
			egtAct(t, aztables.TransactionTypeInsertReplace, egtEnt("mix", "newr", "V", 8), nil),
		}
		_, err := c.SubmitTransaction(ctx(t), actions, nil)
		subs := egtRequireSuccess(t, err, rec, len(actions))
		et := func(i int) string { return subs[i].Header.Get("ETag") }
		e, g := getEDM(t, c, "mix", "add")
		if string(g.ETag) != et(0) {
			t.Errorf("typed entity ETag %s != sub-response %s", g.ETag, et(0))
		}
		p := e.Properties
		if p["S"] != "s" || p["I"] != int32(7) || p["B"] != true || p["D"] != 1.5 ||
			p["L"] != aztables.EDMInt64(9007199254740993) || p["G"] != aztables.EDMGUID("c9da6455-213d-42c9-9a79-3e9149a57833") ||
			!bytes.Equal(egtBinary(p["X"]), []byte{1, 2, 3}) {
			t.Errorf("typed entity properties %#v", p)
		}
		if dt, ok := p["T"].(aztables.EDMDateTime); !ok || !time.Time(dt).Equal(time.Date(2024, 5, 1, 10, 0, 1, 123456700, time.UTC)) {
			t.Errorf("typed entity T = %#v", p["T"])
		}
		egtRequireProps(t, c, "mix", "um", map[string]any{"Orig": "o", "V": int32(1)}, et(1))
		egtRequireProps(t, c, "mix", "ur", map[string]any{"V": int32(2)}, et(2))
		egtRequireProps(t, c, "mix", "umstar", map[string]any{"Orig": "o", "V": int32(3)}, et(3))
		egtRequireProps(t, c, "mix", "urstar", map[string]any{"V": int32(4)}, et(4))
		egtRequireProps(t, c, "mix", "m", map[string]any{"Orig": "o", "V": int32(5)}, et(5))
		egtRequireProps(t, c, "mix", "r", map[string]any{"V": int32(6)}, et(6))
		egtRequireGone(t, c, "mix", "d")
		egtRequireGone(t, c, "mix", "dstar")
		egtRequireProps(t, c, "mix", "newm", map[string]any{"V": int32(7)}, et(9))
		egtRequireProps(t, c, "mix", "newr", map[string]any{"V": int32(8)}, et(10))
		// The query sees the same ETags as the sub-responses (odata.etag).
		for _, b := range listAll(t, c, nil) {
			var q struct {
				RowKey string
				ETag   string `json:"odata.etag"`
			}
			if err := json.Unmarshal(b, &q); err != nil {
				t.Fatal(err)
			}
			for i, a := range actions {
				var k struct{ RowKey string }
				_ = json.Unmarshal(a.Entity, &k)
				if k.RowKey == q.RowKey && a.ActionType != aztables.TransactionTypeDelete && q.ETag != et(i) {
					t.Errorf("query odata.etag of %s = %s, sub-response %d ETag %s", q.RowKey, q.ETag, i, et(i))
				}
			}
		}
	})

	// An ETag from a sub-response is the entity's ETag: it satisfies If-Match in the next
	// batch, and is stale after that.
	t.Run("ETagChain", func(t *testing.T) {
		_, table := newTable(t, svc)
		c, rec := egtClient(t, srv, table)
		_, err := c.SubmitTransaction(ctx(t), []aztables.TransactionAction{egtAct(t, aztables.TransactionTypeAdd, egtEnt("p", "x", "V", 1), nil)}, nil)
		first := egtRequireSuccess(t, err, rec, 1)[0].Header.Get("ETag")
		_, err = c.SubmitTransaction(ctx(t), []aztables.TransactionAction{egtAct(t, aztables.TransactionTypeUpdateReplace, egtEnt("p", "x", "V", 2), egtETag(first))}, nil)
		second := egtRequireSuccess(t, err, rec, 1)[0].Header.Get("ETag")
		if second == first {
			t.Errorf("ETag unchanged by the update: %s", second)
		}
		before := egtSnapshot(t, srv, table)
		_, err = c.SubmitTransaction(ctx(t), []aztables.TransactionAction{egtAct(t, aztables.TransactionTypeUpdateMerge, egtEnt("p", "x", "V", 3), egtETag(first))}, nil)
		egtRequireFailure(t, err, rec, http.StatusPreconditionFailed, "UpdateConditionNotSatisfied", 0)
		egtRequireUnchanged(t, srv, table, before, "stale ETag from an earlier sub-response")
		_, err = c.SubmitTransaction(ctx(t), []aztables.TransactionAction{egtAct(t, aztables.TransactionTypeDelete, egtEnt("p", "x"), egtETag(second))}, nil)
		egtRequireSuccess(t, err, rec, 1)
		egtRequireGone(t, c, "p", "x")
	})

	t.Run("HundredOperations", func(t *testing.T) {
		_, table := newTable(t, svc)
		c, rec := egtClient(t, srv, table)
		var actions []aztables.TransactionAction
		for i := 0; i < 100; i++ {
			actions = append(actions, egtAct(t, aztables.TransactionTypeAdd, egtEnt("p", fmt.Sprintf("%03d", i), "I", i), nil))
		}
		_, err := c.SubmitTransaction(ctx(t), actions, nil)
		subs := egtRequireSuccess(t, err, rec, 100)
		list := listAll(t, c, nil)
		if len(list) != 100 {
			t.Fatalf("%d entities after a 100-operation batch", len(list))
		}
		for i, b := range list {
			var q struct {
				RowKey string
				I      int
				ETag   string `json:"odata.etag"`
			}
			if err := json.Unmarshal(b, &q); err != nil {
				t.Fatal(err)
			}
			if q.RowKey != fmt.Sprintf("%03d", i) || q.I != i || q.ETag != subs[i].Header.Get("ETag") {
				t.Errorf("entity %d = %+v, sub-response ETag %s", i, q, subs[i].Header.Get("ETag"))
			}
		}
	})

	t.Run("RulesAndRollback", func(t *testing.T) { testBatchRules(t, srv, svc) })
	t.Run("Keys", func(t *testing.T) { testBatchKeys(t, srv, svc) })
}

// egtManyProps is n name/value pairs P0=0, P1=1, ...
func egtManyProps(n int) []any {
	var kv []any
	for i := 0; i < n; i++ {
		kv = append(kv, fmt.Sprintf("P%d", i), i)
	}
	return kv
}

// egtSingle returns the only sub-response, failing the test if there is not exactly one.
func egtSingle(t testing.TB, subs []egtSub, what string) egtSub {
	t.Helper()
	if len(subs) != 1 {
		t.Fatalf("%s: %d sub-responses, want 1", what, len(subs))
	}
	return subs[0]
}

func egtBinary(v any) []byte {
	b, _ := v.(aztables.EDMBinary)
	return b
}

// testBatchRules: every rule violation and failing operation, with its code and index, and
// the table byte-for-byte unchanged afterwards (snapshot before vs after).
func testBatchRules(t *testing.T, srv *server, svc *aztables.ServiceClient) {
	_, table := newTable(t, svc)
	c, rec := egtClient(t, srv, table)
	seed := []map[string]any{
		egtEnt("p", "e0", "S", "zero", "I", 0),
		egtEnt("p", "e1", "S", "one", "L", "123", "L@odata.type", "Edm.Int64", "D", 2.5),
		egtEnt("p", "e2", "B", true, "T", "2024-05-01T10:00:01.1234567Z", "T@odata.type", "Edm.DateTime"),
		egtEnt("p", "e3", "X", "AQID", "X@odata.type", "Edm.Binary"),
		egtEnt("p", "e4", "G", "c9da6455-213d-42c9-9a79-3e9149a57833", "G@odata.type", "Edm.Guid"),
		egtEnt("q", "q0", "S", "other partition"),
	}
	for _, e := range seed {
		if _, err := c.AddEntity(ctx(t), marshal(t, e), nil); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	n := 0
	// prefix is six valid actions that would change the partition: a failing batch must
	// undo all of them.
	prefix := func() []aztables.TransactionAction {
		n++
		return []aztables.TransactionAction{
			egtAct(t, aztables.TransactionTypeAdd, egtEnt("p", fmt.Sprintf("new%d", n), "V", 1), nil),
			egtAct(t, aztables.TransactionTypeUpdateReplace, egtEnt("p", "e1", "X", "changed"), egtETag("*")),
			egtAct(t, aztables.TransactionTypeUpdateMerge, egtEnt("p", "e2", "Y", 2), egtCurrentETag(t, c, "p", "e2")),
			egtAct(t, aztables.TransactionTypeDelete, egtEnt("p", "e3"), nil),
			egtAct(t, aztables.TransactionTypeInsertMerge, egtEnt("p", "e4", "Z", true), nil),
			egtAct(t, aztables.TransactionTypeInsertReplace, egtEnt("p", fmt.Sprintf("up%d", n), "W", 1), nil),
		}
	}
	with := func(a []aztables.TransactionAction, more ...aztables.TransactionAction) []aztables.TransactionAction {
		return append(a, more...)
	}
	adds := func(k int) []aztables.TransactionAction {
		n++
		var a []aztables.TransactionAction
		for i := 0; i < k; i++ {
			a = append(a, egtAct(t, aztables.TransactionTypeAdd, egtEnt("p", fmt.Sprintf("many%d-%03d", n, i)), nil))
		}
		return a
	}
	check := func(t *testing.T, actions []aztables.TransactionAction, status int, code string, idx ...int) {
		t.Helper()
		before := egtSnapshot(t, srv, table)
		_, err := c.SubmitTransaction(ctx(t), actions, nil)
		egtRequireFailure(t, err, rec, status, code, idx...)
		egtRequireUnchanged(t, srv, table, before, t.Name())
	}

	t.Run("MixedPartitions", func(t *testing.T) {
		check(t, with(prefix(), egtAct(t, aztables.TransactionTypeAdd, egtEnt("q", "x"), nil), egtAct(t, aztables.TransactionTypeAdd, egtEnt("p", "y"), nil)),
			http.StatusBadRequest, "CommandsInBatchActOnDifferentPartitions", 6)
	})
	t.Run("MixedPartitionsSecondOp", func(t *testing.T) {
		check(t, append([]aztables.TransactionAction{egtAct(t, aztables.TransactionTypeInsertMerge, egtEnt("q", "q0", "V", 9), nil)}, prefix()...),
			http.StatusBadRequest, "CommandsInBatchActOnDifferentPartitions", 1)
	})
	t.Run("DuplicateRowKey", func(t *testing.T) {
		// e1 is the prefix's action 1; its second occurrence is action 6.
		check(t, with(prefix(), egtAct(t, aztables.TransactionTypeInsertMerge, egtEnt("p", "e1", "V", 1), nil)),
			http.StatusBadRequest, "InvalidDuplicateRow", 6)
	})
	t.Run("DuplicateNewRowKey", func(t *testing.T) {
		check(t, with(prefix(), egtAct(t, aztables.TransactionTypeAdd, egtEnt("p", "dup"), nil), egtAct(t, aztables.TransactionTypeAdd, egtEnt("p", "other"), nil),
			egtAct(t, aztables.TransactionTypeDelete, egtEnt("p", "dup"), nil)),
			http.StatusBadRequest, "InvalidDuplicateRow", 8)
	})
	t.Run("MoreThan100", func(t *testing.T) {
		// recorded with index 0 or 99 (docs/protocol.md §6.4)
		check(t, adds(101), http.StatusBadRequest, "InvalidInput", 0, 99)
	})
	t.Run("InsertExisting", func(t *testing.T) {
		check(t, with(prefix(), egtAct(t, aztables.TransactionTypeAdd, egtEnt("p", "e0", "V", 1), nil)), http.StatusConflict, "EntityAlreadyExists", 6)
	})
	t.Run("InsertExistingAt99", func(t *testing.T) {
		check(t, with(adds(99), egtAct(t, aztables.TransactionTypeAdd, egtEnt("p", "e0"), nil)), http.StatusConflict, "EntityAlreadyExists", 99)
	})
	t.Run("InsertExistingFirst", func(t *testing.T) {
		check(t, append([]aztables.TransactionAction{egtAct(t, aztables.TransactionTypeAdd, egtEnt("p", "e0"), nil)}, prefix()...),
			http.StatusConflict, "EntityAlreadyExists", 0)
	})
	stale := func(t *testing.T) *azcore.ETag {
		t.Helper()
		old := egtCurrentETag(t, c, "p", "e0")
		if _, err := c.UpdateEntity(ctx(t), marshal(t, egtEnt("p", "e0", "S", "zero", "I", 0)), &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
			t.Fatal(err)
		}
		return old
	}
	t.Run("StaleETagUpdateReplace", func(t *testing.T) {
		check(t, with(prefix(), egtAct(t, aztables.TransactionTypeUpdateReplace, egtEnt("p", "e0", "V", 1), stale(t))),
			http.StatusPreconditionFailed, "UpdateConditionNotSatisfied", 6)
	})
	t.Run("StaleETagUpdateMerge", func(t *testing.T) {
		check(t, with(prefix(), egtAct(t, aztables.TransactionTypeUpdateMerge, egtEnt("p", "e0", "V", 1), stale(t))),
			http.StatusPreconditionFailed, "UpdateConditionNotSatisfied", 6)
	})
	t.Run("StaleETagDelete", func(t *testing.T) {
		check(t, with(prefix(), egtAct(t, aztables.TransactionTypeDelete, egtEnt("p", "e0"), stale(t))),
			http.StatusPreconditionFailed, "UpdateConditionNotSatisfied", 6)
	})
	t.Run("UpdateMissing", func(t *testing.T) {
		check(t, with(prefix(), egtAct(t, aztables.TransactionTypeUpdateReplace, egtEnt("p", "missing", "V", 1), egtETag("*"))),
			http.StatusNotFound, "ResourceNotFound", 6)
	})
	t.Run("MergeMissing", func(t *testing.T) {
		check(t, with(prefix(), egtAct(t, aztables.TransactionTypeUpdateMerge, egtEnt("p", "missing", "V", 1), egtETag("*"))),
			http.StatusNotFound, "ResourceNotFound", 6)
	})
	t.Run("DeleteMissing", func(t *testing.T) {
		check(t, with(prefix(), egtAct(t, aztables.TransactionTypeDelete, egtEnt("p", "missing"), nil)), http.StatusNotFound, "ResourceNotFound", 6)
	})
	t.Run("DeleteMissingWithETag", func(t *testing.T) {
		et := egtCurrentETag(t, c, "p", "e0")
		check(t, with(prefix(), egtAct(t, aztables.TransactionTypeDelete, egtEnt("p", "missing"), et)), http.StatusNotFound, "ResourceNotFound", 6)
	})

	// An invalid property in action k fails the batch at k with the code a single write of
	// the same entity gets.
	bad := []struct {
		name  string
		props []any
	}{
		{"BadPropertyName", []any{"bad-name", 1}},
		{"StringTooLarge", []any{"S", strings.Repeat("x", 64*1024+1)}},
		{"BadInt64", []any{"L", "12x", "L@odata.type", "Edm.Int64"}},
		{"BadGuid", []any{"G", "not-a-guid", "G@odata.type", "Edm.Guid"}},
		{"TooManyProperties", egtManyProps(253)},
	}
	for bi, b := range bad {
		t.Run("InvalidProperty"+b.name, func(t *testing.T) {
			single := egtEnt("p", "single-"+b.name, b.props...)
			_, err := c.AddEntity(ctx(t), marshal(t, single), nil)
			if statusOf(err) != http.StatusBadRequest {
				t.Fatalf("single AddEntity of %s: %v, want 400", b.name, err)
			}
			var re *azcore.ResponseError
			errors.As(err, &re)
			for _, k := range []int{0, 3, 6} {
				kinds := []aztables.TransactionType{aztables.TransactionTypeAdd, aztables.TransactionTypeInsertMerge, aztables.TransactionTypeInsertReplace}
				a := prefix()
				badAct := egtAct(t, kinds[(bi+k)%3], egtEnt("p", "bad"+b.name, b.props...), nil)
				a = append(a[:k], append([]aztables.TransactionAction{badAct}, a[k:]...)...)
				check(t, a, http.StatusBadRequest, re.ErrorCode, k)
			}
		})
	}

	t.Run("MissingTable", func(t *testing.T) {
		missing := tableName(t)
		mc, mrec := egtClient(t, srv, missing)
		_, err := mc.SubmitTransaction(ctx(t), []aztables.TransactionAction{
			egtAct(t, aztables.TransactionTypeAdd, egtEnt("p", "a"), nil),
			egtAct(t, aztables.TransactionTypeInsertMerge, egtEnt("p", "b"), nil),
		}, nil)
		egtRequireFailure(t, err, mrec, http.StatusNotFound, "TableNotFound", 0)
		if contains(listTableNames(t, svc), missing) {
			t.Errorf("the failed batch created table %s", missing)
		}
	})

	t.Run("BodyTooLarge", func(t *testing.T) {
		// 100 inserts of ~50 KB each: ~5 MB, over the 4 MiB limit (not a 202: 413 with a
		// normal error response).
		big := strings.Repeat("b", 25000)
		var a []aztables.TransactionAction
		for i := 0; i < 100; i++ {
			a = append(a, egtAct(t, aztables.TransactionTypeAdd, egtEnt("p", fmt.Sprintf("big%03d", i), "S1", big, "S2", big), nil))
		}
		before := egtSnapshot(t, srv, table)
		_, err := c.SubmitTransaction(ctx(t), a, nil)
		requireRespErr(t, err, http.StatusRequestEntityTooLarge, "RequestBodyTooLarge")
		egtRequireUnchanged(t, srv, table, before, t.Name())
	})

	// The Go SDK does not double quotes in keys inside transactions (SDK bug, docs/protocol.md
	// §1.3): a key with ' yields a malformed key predicate, which must fail with 400 at
	// that action — not address some other entity.
	t.Run("GoSDKUnescapedQuote", func(t *testing.T) {
		for _, rk := range []string{"it's", "'", "a'b c"} {
			if _, err := c.AddEntity(ctx(t), marshal(t, egtEnt("p", rk, "V", 0)), nil); err != nil {
				t.Fatalf("AddEntity(%q): %v", rk, err)
			}
			for _, kind := range []aztables.TransactionType{aztables.TransactionTypeUpdateMerge, aztables.TransactionTypeInsertReplace, aztables.TransactionTypeDelete} {
				check(t, with(prefix(), egtAct(t, kind, egtEnt("p", rk, "V", 1), nil)), http.StatusBadRequest, "", 6)
			}
		}
	})
}

// testBatchKeys: keys with %, spaces, '+', '/', unicode through SubmitTransaction, in the
// RowKey and in the PartitionKey; keys with quotes through raw batches escaped correctly.
func testBatchKeys(t *testing.T, srv *server, svc *aztables.ServiceClient) {
	keys := []string{"100%", "%41", "%2F", "with space", " lead", "trail ", "a+b", "+", "ключ", "emoji😀", "日本語",
		"a,b", "(paren)", "&=;:@!$*", "~-._", "é\u0301", "\"dq\""}
	t.Run("SDK", func(t *testing.T) {
		_, table := newTable(t, svc)
		c, rec := egtClient(t, srv, table)
		for ki, k := range keys {
			for _, pair := range [][2]string{{"p", k}, {k, fmt.Sprintf("r%02d", ki)}} {
				pk, rk := pair[0], pair[1]
				_, err := c.SubmitTransaction(ctx(t), []aztables.TransactionAction{egtAct(t, aztables.TransactionTypeAdd, egtEnt(pk, rk, "V", 1), nil)}, nil)
				add := egtRequireSuccess(t, err, rec, 1)[0].Header.Get("ETag")
				egtRequireProps(t, c, pk, rk, map[string]any{"V": int32(1)}, add)
				steps := []struct {
					kind aztables.TransactionType
					want map[string]any
					im   *azcore.ETag
				}{
					{aztables.TransactionTypeUpdateMerge, map[string]any{"V": int32(1), "M": int32(2)}, egtETag(add)},
					{aztables.TransactionTypeUpdateReplace, map[string]any{"M": int32(3)}, egtETag("*")},
					{aztables.TransactionTypeInsertMerge, map[string]any{"M": int32(4)}, nil},
					{aztables.TransactionTypeInsertReplace, map[string]any{"M": int32(5)}, nil},
				}
				for si, s := range steps {
					_, err := c.SubmitTransaction(ctx(t), []aztables.TransactionAction{egtAct(t, s.kind, egtEnt(pk, rk, "M", si+2), s.im)}, nil)
					egtRequireProps(t, c, pk, rk, s.want, egtRequireSuccess(t, err, rec, 1)[0].Header.Get("ETag"))
				}
				_, err = c.SubmitTransaction(ctx(t), []aztables.TransactionAction{egtAct(t, aztables.TransactionTypeDelete, egtEnt(pk, rk), nil)}, nil)
				egtRequireSuccess(t, err, rec, 1)
				egtRequireGone(t, c, pk, rk)
			}
		}
		// Several special keys in one batch, one partition.
		var a []aztables.TransactionAction
		for _, k := range keys {
			a = append(a, egtAct(t, aztables.TransactionTypeInsertReplace, egtEnt("multi", k, "K", k), nil))
		}
		_, err := c.SubmitTransaction(ctx(t), a, nil)
		subs := egtRequireSuccess(t, err, rec, len(a))
		for i, k := range keys {
			egtRequireProps(t, c, "multi", k, map[string]any{"K": k}, subs[i].Header.Get("ETag"))
		}
	})

	// Keys with quotes, escaped as every other SDK does it (quotes doubled; literal or
	// percent-encoded), succeed in raw batches; the Go SDK shape fails (RulesAndRollback).
	t.Run("QuotesRaw", func(t *testing.T) {
		_, table := newTable(t, svc)
		c, _ := egtClient(t, srv, table)
		acct := srv.Default().Name
		base := srv.BaseURL() + "/" + acct + "/" + table
		for _, k := range []string{"it's", "'", "''", "x',RowKey='y", "PartitionKey='z'", "a'b c%"} {
			for _, pair := range [][2]string{{"p", k}, {k, "r"}} {
				pk, rk := pair[0], pair[1]
				doubled := func(s string) string { return strings.ReplaceAll(s, "'", "''") }
				// three spellings of the same key: percent-encoded with doubled quotes
				// (Go single ops), literal doubled quotes (.NET/JS), %27 doubled (Python).
				urls := []string{
					egtKeyURL(srv, table, pk, rk),
					base + "(PartitionKey='" + strings.ReplaceAll(url.PathEscape(doubled(pk)), "%27", "'") + "',RowKey='" + strings.ReplaceAll(url.PathEscape(doubled(rk)), "%27", "'") + "')",
					base + "(PartitionKey=%27" + url.PathEscape(doubled(pk)) + "%27,RowKey=%27" + url.PathEscape(doubled(rk)) + "%27)",
				}
				body := string(marshal(t, egtEnt(pk, rk, "V", 1)))
				parts := []egtPart{{Method: "POST", URL: base, Header: [][2]string{{"Content-Type", "application/json"}, {"Prefer", "return-no-content"}}, Body: body}}
				b, bb := buildBatchBody(parts)
				r := egtPost(t, srv, b, bb, nil)
				if s := egtSingle(t, parseBatchResponse(t, r.Status, r.Header, r.Body, false), "insert"); s.Status != http.StatusNoContent {
					t.Fatalf("insert (%q,%q): sub-response %q", pk, rk, s.Raw)
				}
				for ui, u := range urls {
					b, bb := buildBatchBody([]egtPart{
						{Method: "PATCH", URL: u, Header: [][2]string{{"Content-Type", "application/json"}, {"If-Match", "*"}}, Body: string(marshal(t, egtEnt(pk, rk, "M", ui)))},
					})
					r := egtPost(t, srv, b, bb, nil)
					s := egtSingle(t, parseBatchResponse(t, r.Status, r.Header, r.Body, false), "merge")
					if s.Status != http.StatusNoContent {
						t.Errorf("merge (%q,%q) via %s: sub-response %q", pk, rk, u, s.Raw)
						continue
					}
					egtRequireProps(t, c, pk, rk, map[string]any{"V": int32(1), "M": int32(ui)}, s.Header.Get("ETag"))
				}
				b, bb = buildBatchBody([]egtPart{{Method: "DELETE", URL: urls[1], Header: [][2]string{{"If-Match", "*"}}}})
				r = egtPost(t, srv, b, bb, nil)
				if s := egtSingle(t, parseBatchResponse(t, r.Status, r.Header, r.Body, false), "delete"); s.Status != http.StatusNoContent {
					t.Errorf("delete (%q,%q): sub-response %q", pk, rk, s.Raw)
				}
				egtRequireGone(t, c, pk, rk)
			}
		}
	})
}

// TestBatchTransferInvariant: 32 goroutines move random amounts between 10 entities of one
// partition, each move a batch of two UpdateReplace actions with If-Match from a fresh
// read; readers query the partition all the while and must always see the same total;
// single-entity merges with If-Match compete for the same ETags. Afterwards every
// entity's amount is exactly what the acknowledged moves imply.
func TestBatchTransferInvariant(t *testing.T) {
	const (
		accounts = 10
		movers   = 32
		readers  = 4
		touchers = 2
		initial  = 100
		total    = accounts * initial
		pk       = "bank"
	)
	runFor := 3 * time.Second
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	_, table := newTable(t, svc)
	c := svc.NewClient(table)
	rk := func(i int) string { return fmt.Sprintf("acct%02d", i) }
	var seed []aztables.TransactionAction
	for i := 0; i < accounts; i++ {
		seed = append(seed, egtAct(t, aztables.TransactionTypeAdd, egtEnt(pk, rk(i), "Amount", initial), nil))
	}
	if _, err := c.SubmitTransaction(ctx(t), seed, nil); err != nil {
		t.Fatalf("seed: %v", err)
	}

	type acctRead struct {
		amount int
		etag   azcore.ETag
	}
	read := func(cx *aztables.Client, i int) (acctRead, error) {
		cctx, cancel := ctxWithTimeout(30 * time.Second)
		defer cancel()
		g, err := cx.GetEntity(cctx, pk, rk(i), nil)
		if err != nil {
			return acctRead{}, err
		}
		var v struct{ Amount int }
		if err := json.Unmarshal(g.Value, &v); err != nil {
			return acctRead{}, err
		}
		return acctRead{v.Amount, g.ETag}, nil
	}

	var delta [accounts]atomic.Int64
	var commits, conflicts, reads, badReads, touches atomic.Int64
	var firstBad atomic.Value
	deadline := time.Now().Add(runFor)
	var wg sync.WaitGroup
	for w := 0; w < movers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for time.Now().Before(deadline) {
				i := rng.IntN(accounts)
				j := (i + 1 + rng.IntN(accounts-1)) % accounts
				ri, err := read(c, i)
				if err == nil {
					var rj acctRead
					rj, err = read(c, j)
					if err == nil {
						k := 1 + rng.IntN(10)
						if ri.amount < k {
							k = ri.amount
						}
						if k == 0 {
							continue
						}
						a := []aztables.TransactionAction{
							egtAct(t, aztables.TransactionTypeUpdateReplace, egtEnt(pk, rk(i), "Amount", ri.amount-k), &ri.etag),
							egtAct(t, aztables.TransactionTypeUpdateReplace, egtEnt(pk, rk(j), "Amount", rj.amount+k), &rj.etag),
						}
						if rng.IntN(2) == 0 {
							a[0], a[1] = a[1], a[0]
						}
						cctx, cancel := ctxWithTimeout(30 * time.Second)
						_, err = c.SubmitTransaction(cctx, a, nil)
						cancel()
						var re *azcore.ResponseError
						switch {
						case err == nil:
							delta[i].Add(int64(-k))
							delta[j].Add(int64(k))
							commits.Add(1)
							continue
						case errors.As(err, &re) && re.StatusCode == http.StatusAccepted && re.ErrorCode == "UpdateConditionNotSatisfied":
							conflicts.Add(1)
							continue
						}
					}
				}
				t.Errorf("mover %d: %v", w, err)
				return
			}
		}(w)
	}
	for w := 0; w < touchers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(1000+w), uint64(time.Now().UnixNano())))
			for n := 0; time.Now().Before(deadline); n++ {
				i := rng.IntN(accounts)
				r, err := read(c, i)
				if err == nil {
					cctx, cancel := ctxWithTimeout(30 * time.Second)
					_, err = c.UpdateEntity(cctx, marshal(t, egtEnt(pk, rk(i), "Touch", n)), &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge, IfMatch: &r.etag})
					cancel()
					if err == nil {
						touches.Add(1)
						continue
					}
					if statusOf(err) == http.StatusPreconditionFailed {
						continue
					}
				}
				t.Errorf("toucher %d: %v", w, err)
				return
			}
		}(w)
	}
	partition := func() (map[string]int, error) {
		got := map[string]int{}
		filter := "PartitionKey eq '" + pk + "'"
		p := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter})
		pages := 0
		for p.More() {
			cctx, cancel := ctxWithTimeout(30 * time.Second)
			page, err := p.NextPage(cctx)
			cancel()
			if err != nil {
				return nil, err
			}
			if pages++; pages > 1 {
				return nil, fmt.Errorf("a %d-entity partition came in more than one page", accounts)
			}
			for _, b := range page.Entities {
				var v struct {
					RowKey string
					Amount int
				}
				if err := json.Unmarshal(b, &v); err != nil {
					return nil, err
				}
				got[v.RowKey] = v.Amount
			}
		}
		return got, nil
	}
	for w := 0; w < readers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				got, err := partition()
				if err != nil {
					t.Errorf("reader %d: %v", w, err)
					return
				}
				sum := 0
				for _, v := range got {
					sum += v
				}
				reads.Add(1)
				if sum != total || len(got) != accounts {
					badReads.Add(1)
					firstBad.CompareAndSwap(nil, fmt.Sprintf("%d entities, total %d: %v", len(got), sum, got))
				}
			}
		}(w)
	}
	wg.Wait()
	t.Logf("%d moves committed, %d If-Match conflicts, %d single merges, %d partition reads", commits.Load(), conflicts.Load(), touches.Load(), reads.Load())
	if n := badReads.Load(); n > 0 {
		t.Errorf("%d of %d partition reads saw a total other than %d (not a consistent snapshot), first: %v", n, reads.Load(), total, firstBad.Load())
	}
	if commits.Load() == 0 || reads.Load() == 0 {
		t.Errorf("no progress: %d commits, %d reads", commits.Load(), reads.Load())
	}
	got, err := partition()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for i := 0; i < accounts; i++ {
		want := initial + int(delta[i].Load())
		if got[rk(i)] != want {
			t.Errorf("%s: Amount %d, the acknowledged moves imply %d (lost or phantom update)", rk(i), got[rk(i)], want)
		}
		sum += got[rk(i)]
	}
	if sum != total || len(got) != accounts {
		t.Errorf("final: %d entities, total %d, want %d and %d", len(got), sum, accounts, total)
	}
}
