package e2e

// Raw-HTTP $batch requests in the exact shapes the JS, Python, .NET (and Go) SDKs send —
// the recorded fixtures of batch/testdata, retargeted at a fresh table — and the response
// checked against what each SDK's parser needs (docs/protocol.md §6, §11, checklist 23–27).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// egtFixture is a recorded $batch request of batch/testdata.
type egtFixture struct {
	Header [][2]string // outer headers as recorded, minus those the harness sets itself
	Body   string
}

// egtLoadFixture reads ../internal/batch/testdata/name and splits it into headers and body
// (CRLF or LF-only files).
func egtLoadFixture(t testing.TB, name string) egtFixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "internal", "batch", "testdata", name))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	s := string(b)
	eol := "\r\n"
	if first, _, _ := strings.Cut(s, "\n"); !strings.HasSuffix(first, "\r") {
		eol = "\n"
	}
	head, body, ok := strings.Cut(s, eol+eol)
	if !ok {
		t.Fatalf("fixture %s: no blank line after the headers", name)
	}
	var fx egtFixture
	for i, line := range strings.Split(head, eol) {
		if i == 0 {
			continue // request line: the harness sends to /<account>/$batch
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("fixture %s: bad header line %q", name, line)
		}
		switch strings.ToLower(k) {
		case "host", "authorization", "x-ms-date", "content-length", "connection", "accept-encoding", "user-agent":
			continue
		}
		fx.Header = append(fx.Header, [2]string{k, strings.TrimSpace(v)})
	}
	fx.Body = body
	return fx
}

var egtFixtureTableRe = regexp.MustCompile(`([/ ])t1([(? ])`)

// egtRetarget points a fixture body at table on srv: the table name in every part URL and the
// recorded local hosts (other hosts stay: the server must ignore them).
func egtRetarget(body, table string, srv *server) string {
	body = egtFixtureTableRe.ReplaceAllString(body, "${1}"+table+"${2}")
	for _, h := range []string{"127.0.0.1:10002", "127.0.0.1:36607"} {
		body = strings.ReplaceAll(body, h, srv.Addr)
	}
	return body
}

// egtPlaceholderETag is the If-Match value recorded in the fixtures.
const egtPlaceholderETag = `W/"datetime'2024-05-01T10%3A00%3A01.0000001Z'"`

// egtSendFixture posts a fixture body with its recorded outer headers. With sharedKey the
// request is signed with SharedKey (Table flavour, §8.4) as Python does; otherwise with
// SharedKeyLite.
func egtSendFixture(t testing.TB, srv *server, fx egtFixture, body string, sharedKey bool) rawResp {
	t.Helper()
	h := map[string]string{}
	for _, kv := range fx.Header {
		h[kv[0]] = kv[1]
	}
	acct := srv.Default()
	path := "/" + acct.Name + "/$batch"
	r := rawReq{Method: http.MethodPost, Path: path, Header: h, Body: []byte(body)}
	if sharedKey {
		ct := ""
		for k, v := range h {
			if strings.EqualFold(k, "Content-Type") {
				ct = v
			}
		}
		r.Date = time.Now()
		date := r.Date.UTC().Format(http.TimeFormat)
		sts := "POST\n\n" + ct + "\n" + date + "\n/" + acct.Name + path
		h["Authorization"] = "SharedKey " + acct.Name + ":" + signLite(t, acct.Key, sts)
		r.NoAuth = true
	}
	return srv.do(t, r)
}

// egtRawCase is one fixture, the state it needs and what must come back.
type egtRawCase struct {
	name, file string
	sharedKey  bool        // Python signs with SharedKey
	version    string      // x-ms-version the response must echo
	requestID  string      // x-ms-client-request-id the response must echo
	subst      [][2]string // textual substitutions in the body (after retargeting)
	seed       []string    // RowKeys of partition "p" created first, each {Orig:"o"}
	etags      []string    // the placeholder If-Match values, in order, become these entities' ETags
	staleETag  bool        // ... or a stale ETag of that entity
	ops        []string    // the RowKey each operation addresses
	cids       []string    // Content-ID each sub-response must echo ("" = none)
	created    []int       // operations sent without Prefer: 201 with the entity
	want       map[string]map[string]any
	fail       *egtRawFailure
}

type egtRawFailure struct {
	status int
	code   string
	index  int
	cid    string
}

func TestBatchRawSDKShapes(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	merged2 := map[string]any{"Orig": "o", "V": int32(2)}
	inserted1 := map[string]any{"V": int32(1), "L": aztables.EDMInt64(5)}
	std := map[string]map[string]any{"1": inserted1, "it's": merged2, "3": {"V": int32(3)}, "4": nil}
	goFixed := [][2]string{{"RowKey='it%27s'", "RowKey='it%27%27s'"}, {"%2F%C3%A9", "%2C%C3%A9"}} // quotes doubled; '/' is not a legal key character
	goWant := map[string]map[string]any{"1": inserted1, "2": merged2, "it's": {"V": int32(3)}, "a b+c%d,é": nil,
		"5": {"Orig": "o", "S": "x"}, "6": {}, "7": nil}
	goOps := []string{"1", "2", "it's", "a b+c%d,é", "5", "6", "7"}
	cases := []egtRawCase{
		{
			name: "JS", file: "js-data-tables.http", version: "2019-02-02",
			seed: []string{"it's", "4"}, ops: []string{"1", "it's", "a b+c", "4"},
			want: map[string]map[string]any{"1": inserted1, "it's": merged2, "a b+c": {"V": int32(3)}, "4": nil},
		},
		{
			name: "JSFailure", file: "js-data-tables.http", version: "2019-02-02",
			seed: []string{"4"}, // it's is missing: PATCH with If-Match * fails
			fail: &egtRawFailure{http.StatusNotFound, "ResourceNotFound", 1, ""},
		},
		{
			name: "Python", file: "python-azure-data-tables.http", sharedKey: true, version: "2019-02-02",
			seed: []string{"it's", "4"}, etags: []string{"it's"}, ops: []string{"1", "it's", "3", "4"},
			cids: []string{"0", "1", "2", "3"}, want: std,
		},
		{
			name: "PythonFailure", file: "python-azure-data-tables.http", sharedKey: true, version: "2019-02-02",
			seed: []string{"it's", "4"}, etags: []string{"it's"}, staleETag: true,
			fail: &egtRawFailure{http.StatusPreconditionFailed, "UpdateConditionNotSatisfied", 1, "1"},
		},
		{
			name: "DotNet", file: "dotnet-azure-data-tables.http", version: "2020-12-06", requestID: "0f4a1c3e-2b6d-4e8f-9a0b-1c2d3e4f5a6b",
			seed: []string{"it's", "4"}, ops: []string{"1", "it's", "3", "4"}, cids: []string{"1", "2", "3", "4"}, want: std,
		},
		{
			name: "DotNetFailure", file: "dotnet-azure-data-tables.http", version: "2020-12-06",
			seed: []string{"it's"}, // 4 is missing: DELETE fails
			fail: &egtRawFailure{http.StatusNotFound, "ResourceNotFound", 3, "4"},
		},
		{
			// As recorded: the Go SDK does not double the quote of it's inside a
			// transaction, so operation 2's key predicate is malformed.
			name: "GoAsRecorded", file: "go-aztables-1.4.1.http", version: "2019-02-02",
			seed: []string{"2", "7"}, etags: []string{"2", "7"},
			fail: &egtRawFailure{http.StatusBadRequest, "InvalidInput", 2, ""},
		},
		{
			name: "GoQuotesDoubled", file: "go-aztables-1.4.1.http", version: "2019-02-02", subst: goFixed,
			seed: []string{"2", "a b+c%d,é", "5", "7"}, etags: []string{"2", "7"}, ops: goOps, want: goWant,
		},
		{
			// Cosmos-style: merges as POST + X-HTTP-Method: MERGE, host-style part URLs
			// without the account.
			name: "GoCosmosXHTTPMethod", file: "go-aztables-1.4.1-cosmos.http", version: "2019-02-02", subst: goFixed,
			seed: []string{"2", "a b+c%d,é", "5", "7"}, etags: []string{"2", "7"}, ops: goOps, want: goWant,
		},
		{
			name: "LFOnly", file: "adv-lf-only.http", version: "2019-02-02",
			seed: []string{"2"}, ops: []string{"1", "2"}, want: map[string]map[string]any{"1": {}, "2": nil},
		},
		{
			// Relative part URLs (with and without the account), SAS parameters in a part
			// URL, a foreign host, lower-case and space-less part headers, Content-ID in
			// the MIME part and inside the HTTP request, mixed line endings.
			name: "MixedTolerance", file: "adv-mixed-tolerance.http", version: "2019-02-02",
			seed: []string{"a:b", "x+y+z"}, ops: []string{"1", "a:b", "x+y+z"}, cids: []string{"7", "part-2", ""}, created: []int{0},
			want: map[string]map[string]any{"1": {}, "a:b": {"Orig": "o", "X": int32(1)}, "x+y+z": {"Orig": "o"}},
		},
		{
			name: "PreambleEpilogue", file: "adv-preamble-epilogue.http", version: "2019-02-02",
			seed: []string{"2"}, ops: []string{"1", "2"}, want: map[string]map[string]any{"1": {}, "2": nil},
		},
		{
			name: "QuotedBoundary", file: "adv-quoted-boundary.http", version: "2019-02-02",
			seed: []string{"2"}, ops: []string{"1", "2"}, want: map[string]map[string]any{"1": {}, "2": nil},
		},
		{
			name: "XHTTPMethodOnPut", file: "adv-xmethod-not-post.http", version: "2019-02-02",
			fail: &egtRawFailure{http.StatusBadRequest, "XMethodNotUsingPost", 1, ""},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, table := newTable(t, svc)
			c, _ := egtClient(t, srv, table)
			for _, rk := range tc.seed {
				if _, err := c.AddEntity(ctx(t), marshal(t, egtEnt("p", rk, "Orig", "o")), nil); err != nil {
					t.Fatalf("seed %q: %v", rk, err)
				}
			}
			fx := egtLoadFixture(t, tc.file)
			body := egtRetarget(fx.Body, table, srv)
			for _, s := range tc.subst {
				if !strings.Contains(body, s[0]) {
					t.Fatalf("substitution %q not found in %s", s[0], tc.file)
				}
				body = strings.ReplaceAll(body, s[0], s[1])
			}
			for _, rk := range tc.etags {
				et := string(*egtCurrentETag(t, c, "p", rk))
				if tc.staleETag {
					if _, err := c.UpdateEntity(ctx(t), marshal(t, egtEnt("p", rk, "Orig", "o")), nil); err != nil {
						t.Fatal(err)
					}
				}
				if !strings.Contains(body, egtPlaceholderETag) {
					t.Fatalf("%s: no placeholder ETag left for %q", tc.file, rk)
				}
				body = strings.Replace(body, egtPlaceholderETag, et, 1)
			}
			before := egtSnapshot(t, srv, table)
			r := egtSendFixture(t, srv, fx, body, tc.sharedKey)
			checkStdHeaders(t, r, tc.version, tc.requestID)
			subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
			if tc.fail != nil {
				checkBatchFailure(t, subs, tc.fail.status, tc.fail.code, tc.fail.index)
				if len(subs) == 1 {
					if got := subs[0].Header.Get("Content-ID"); got != tc.fail.cid {
						t.Errorf("failing sub-response Content-ID %q, want %q", got, tc.fail.cid)
					}
				}
				egtRequireUnchanged(t, srv, table, before, tc.name)
				return
			}
			if h := r.Header.Get("x-ms-error-code"); h != "" {
				t.Errorf("successful batch carries x-ms-error-code %q", h)
			}
			if len(subs) != len(tc.ops) {
				t.Fatalf("%d sub-responses for %d operations:\n%s", len(subs), len(tc.ops), r.Body)
			}
			for i, s := range subs {
				status := http.StatusNoContent
				if slices.Contains(tc.created, i) {
					status = http.StatusCreated
				}
				egtCheckSuccess(t, i, s, status, table, tc.ops[i], tc.want[tc.ops[i]] == nil)
				cid := ""
				if tc.cids != nil {
					cid = tc.cids[i]
				}
				if got := s.Header.Get("Content-ID"); got != cid {
					t.Errorf("sub-response %d: Content-ID %q, want %q", i, got, cid)
				}
				if et := s.Header.Get("ETag"); et != "" && tc.want[tc.ops[i]] != nil {
					egtRequireProps(t, c, "p", tc.ops[i], tc.want[tc.ops[i]], et)
				}
			}
			for rk, props := range tc.want {
				if props == nil {
					egtRequireGone(t, c, "p", rk)
				} else {
					egtRequireProps(t, c, "p", rk, props, "")
				}
			}
		})
	}
}

// egtCheckSuccess checks one sub-response of a successful changeset: the status (204 for
// SDK-shaped writes, which all ask for no content; 201 for an insert without Prefer); with
// 204 no body at all (JS treats any {...} as an error), with 201 the entity as one line of
// JSON; an ETag spelled "ETag" unless it deleted; for inserts a Location JS can take the
// RowKey from and, with 204, Preference-Applied.
func egtCheckSuccess(t testing.TB, i int, s egtSub, status int, table, rk string, deleted bool) {
	t.Helper()
	if s.Status != status {
		t.Errorf("sub-response %d: status %d, want %d: %q", i, s.Status, status, s.Raw)
	}
	if status == http.StatusNoContent && strings.Contains(s.Raw, "{") {
		t.Errorf("sub-response %d contains '{' (JS would report the transaction as failed): %q", i, s.Raw)
	}
	if status == http.StatusCreated {
		if bytes.ContainsAny(s.Body, "\r\n") {
			t.Errorf("sub-response %d: entity JSON spans lines: %q", i, s.Body)
		}
		if got, _ := rawString(t, rawObject(t, s.Body), "RowKey"); got != rk {
			t.Errorf("sub-response %d: body RowKey %q, want %q", i, got, rk)
		}
	}
	et := s.Header.Get("ETag")
	switch {
	case deleted && et != "":
		t.Errorf("sub-response %d (delete) carries ETag %q", i, et)
	case !deleted && et == "":
		t.Errorf("sub-response %d has no ETag: %q", i, s.Raw)
	case !deleted:
		checkETag(t, et)
		if !strings.Contains(s.Raw, "\r\nETag: "+et+"\r\n") {
			t.Errorf("sub-response %d: ETag header not spelled `ETag: ` (JS): %q", i, s.Raw)
		}
	}
	if loc := s.Header.Get("Location"); loc != "" {
		if !strings.Contains(loc, "/"+table+"(") || !strings.Contains(loc, "RowKey='"+strings.ReplaceAll(rk, "'", "''")+"')") {
			t.Errorf("sub-response %d: Location %q does not name (p,%q)", i, loc, rk)
		}
		if got := s.Header.Get("Preference-Applied"); status == http.StatusNoContent && got != "return-no-content" {
			t.Errorf("insert sub-response %d: Preference-Applied %q, want return-no-content", i, got)
		}
	}
}

func TestBatchRawHandBuilt(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name

	// Prefer on inserts: absent → 201 with the entity, no Preference-Applied;
	// return-content → 201 + Preference-Applied; return-no-content → 204 + Preference-Applied.
	t.Run("InsertPrefer", func(t *testing.T) {
		_, table := newTable(t, svc)
		c, _ := egtClient(t, srv, table)
		u := srv.BaseURL() + "/" + acct + "/" + table
		jsonH := [2]string{"Content-Type", "application/json"}
		b, bb := buildBatchBody([]egtPart{
			{Method: "POST", URL: u, Header: [][2]string{jsonH}, Body: `{"PartitionKey":"p","RowKey":"none","V":1}`},
			{Method: "POST", URL: u, Header: [][2]string{jsonH, {"Prefer", "return-content"}}, Body: `{"PartitionKey":"p","RowKey":"content","V":2}`},
			{Method: "POST", URL: u, Header: [][2]string{jsonH, {"Prefer", "return-no-content"}}, Body: `{"PartitionKey":"p","RowKey":"nocontent","V":3}`},
		})
		r := egtPost(t, srv, b, bb, nil)
		subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
		if len(subs) != 3 {
			t.Fatalf("%d sub-responses", len(subs))
		}
		for i, want := range []struct {
			status int
			pref   string
			rk     string
		}{{201, "", "none"}, {201, "return-content", "content"}, {204, "return-no-content", "nocontent"}} {
			s := subs[i]
			if s.Status != want.status {
				t.Errorf("sub-response %d: status %d, want %d", i, s.Status, want.status)
			}
			if got := s.Header.Get("Preference-Applied"); got != want.pref {
				t.Errorf("sub-response %d: Preference-Applied %q, want %q", i, got, want.pref)
			}
			et := s.Header.Get("ETag")
			_, g := getEDM(t, c, "p", want.rk)
			if et != string(g.ETag) {
				t.Errorf("sub-response %d: ETag %q, GetEntity ETag %q", i, et, g.ETag)
			}
			if want.status == 201 {
				if ct := s.Header.Get("Content-Type"); mediaLevel(t, ct) != "minimalmetadata" {
					t.Errorf("sub-response %d: Content-Type %q", i, ct)
				}
				if bytes.ContainsAny(s.Body, "\r\n") {
					t.Errorf("sub-response %d: entity JSON spans lines: %q", i, s.Body)
				}
				m := rawObject(t, s.Body)
				if rk, _ := rawString(t, m, "RowKey"); rk != want.rk {
					t.Errorf("sub-response %d: body RowKey %q", i, rk)
				}
				if oe, _ := rawString(t, m, "odata.etag"); oe != et {
					t.Errorf("sub-response %d: body odata.etag %q != ETag %q", i, oe, et)
				}
			} else if len(s.Body) != 0 {
				t.Errorf("sub-response %d: body %q, want none", i, s.Body)
			}
		}
	})

	// Part URLs absolute with a foreign host, path-only with the account, relative with
	// and without a leading slash; merges as PATCH, MERGE and POST + X-HTTP-Method: MERGE;
	// %24format and $format in the query.
	t.Run("URLsAndVerbs", func(t *testing.T) {
		_, table := newTable(t, svc)
		c, _ := egtClient(t, srv, table)
		for _, rk := range []string{"a", "b", "c", "d", "e", "f"} {
			if _, err := c.AddEntity(ctx(t), marshal(t, egtEnt("p", rk, "Orig", "o")), nil); err != nil {
				t.Fatal(err)
			}
		}
		pred := func(rk string) string { return table + "(PartitionKey='p',RowKey='" + rk + "')" }
		star := [2]string{"If-Match", "*"}
		jsonH := [2]string{"Content-Type", "application/json"}
		parts := []egtPart{
			{Method: "PATCH", URL: "https://elsewhere.example:8443/" + acct + "/" + pred("a") + "?%24format=application%2Fjson%3Bodata%3Dminimalmetadata", Header: [][2]string{jsonH, star}, Body: `{"V":1}`},
			{Method: "MERGE", URL: "/" + acct + "/" + pred("b") + "?$format=application/json;odata=minimalmetadata", Header: [][2]string{jsonH, star}, Body: `{"V":2}`},
			{Method: "POST", URL: pred("c"), Header: [][2]string{jsonH, star, {"X-HTTP-Method", "MERGE"}}, Body: `{"V":3}`},
			{Method: "POST", URL: "/" + pred("d"), Header: [][2]string{jsonH, {"X-HTTP-Method", "MERGE"}}, Body: `{"V":4}`},
			{Method: "PUT", URL: "/" + acct + "/" + pred("e"), Header: [][2]string{jsonH, star}, Body: `{"V":5}`},
			{Method: "DELETE", URL: pred("f"), Header: [][2]string{star}},
			{Method: "POST", URL: "/" + acct + "/" + table, Header: [][2]string{jsonH, {"Prefer", "return-no-content"}}, Body: `{"PartitionKey":"p","RowKey":"g","V":7}`},
			{Method: "POST", URL: pred("h"), Header: [][2]string{jsonH, {"X-HTTP-Method", "MERGE"}}, Body: `{"V":8}`}, // insert-or-merge of a missing entity
		}
		b, bb := buildBatchBody(parts)
		r := egtPost(t, srv, b, bb, nil)
		subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
		ops := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		if len(subs) != len(ops) {
			t.Fatalf("%d sub-responses for %d operations: %s", len(subs), len(ops), r.Body)
		}
		want := map[string]map[string]any{
			"a": {"Orig": "o", "V": int32(1)}, "b": {"Orig": "o", "V": int32(2)}, "c": {"Orig": "o", "V": int32(3)},
			"d": {"Orig": "o", "V": int32(4)}, "e": {"V": int32(5)}, "g": {"V": int32(7)}, "h": {"V": int32(8)},
		}
		for i, s := range subs {
			egtCheckSuccess(t, i, s, http.StatusNoContent, table, ops[i], ops[i] == "f")
			if w := want[ops[i]]; w != nil {
				egtRequireProps(t, c, "p", ops[i], w, s.Header.Get("ETag"))
			}
		}
		egtRequireGone(t, c, "p", "f")
	})

	// Every operation kind in a batch with bare LF line endings, built by hand.
	t.Run("LFOnlyAllKinds", func(t *testing.T) {
		_, table := newTable(t, svc)
		c, _ := egtClient(t, srv, table)
		for _, rk := range []string{"m", "r", "d"} {
			if _, err := c.AddEntity(ctx(t), marshal(t, egtEnt("p", rk, "Orig", "o")), nil); err != nil {
				t.Fatal(err)
			}
		}
		etR := string(*egtCurrentETag(t, c, "p", "r"))
		u := srv.BaseURL() + "/" + acct + "/" + table
		b, bb := buildBatchBody([]egtPart{
			{Method: "POST", URL: u, Header: [][2]string{{"Content-Type", "application/json"}, {"Prefer", "return-no-content"}}, Body: `{"PartitionKey":"p","RowKey":"i","V":1}`},
			{Method: "PATCH", URL: egtKeyURL(srv, table, "p", "m"), Header: [][2]string{{"Content-Type", "application/json"}, {"If-Match", "*"}}, Body: `{"V":2}`},
			{Method: "PUT", URL: egtKeyURL(srv, table, "p", "r"), Header: [][2]string{{"Content-Type", "application/json"}, {"If-Match", etR}}, Body: `{"V":3}`},
			{Method: "PUT", URL: egtKeyURL(srv, table, "p", "u"), Header: [][2]string{{"Content-Type", "application/json"}}, Body: `{"V":4}`},
			{Method: "DELETE", URL: egtKeyURL(srv, table, "p", "d"), Header: [][2]string{{"If-Match", "*"}}},
		})
		b = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
		r := egtPost(t, srv, b, bb, nil)
		subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
		ops := []string{"i", "m", "r", "u", "d"}
		if len(subs) != len(ops) {
			t.Fatalf("%d sub-responses for %d operations: %s", len(subs), len(ops), r.Body)
		}
		want := map[string]map[string]any{"i": {"V": int32(1)}, "m": {"Orig": "o", "V": int32(2)}, "r": {"V": int32(3)}, "u": {"V": int32(4)}}
		for i, s := range subs {
			egtCheckSuccess(t, i, s, http.StatusNoContent, table, ops[i], ops[i] == "d")
			if w := want[ops[i]]; w != nil {
				egtRequireProps(t, c, "p", ops[i], w, s.Header.Get("ETag"))
			}
		}
		egtRequireGone(t, c, "p", "d")
	})

	// A single GET as a direct batch part (no changeset): 202, one application/http part,
	// 200 with the entity and its ETag; a missing entity is its 404 inside the 202.
	t.Run("Retrieve", func(t *testing.T) {
		_, table := newTable(t, svc)
		c, _ := egtClient(t, srv, table)
		if _, err := c.AddEntity(ctx(t), marshal(t, egtEnt("p", "1", "V", 5, "W", 6)), nil); err != nil {
			t.Fatal(err)
		}
		_, g := getEDM(t, c, "p", "1")
		fx := egtLoadFixture(t, "adv-retrieve.http")
		withSelect := egtRetarget(fx.Body, table, srv)
		body := strings.Replace(withSelect, "?$select=V ", " ", 1)
		if body == withSelect {
			t.Fatalf("adv-retrieve.http has no ?$select=V")
		}
		r := egtSendFixture(t, srv, fx, body, false)
		checkStdHeaders(t, r, "2019-02-02", "")
		s := egtSingle(t, parseBatchResponse(t, r.Status, r.Header, r.Body, true), "retrieve")
		if s.Status != http.StatusOK {
			t.Fatalf("retrieve: status %d: %q", s.Status, s.Raw)
		}
		if et := s.Header.Get("ETag"); et != string(g.ETag) {
			t.Errorf("retrieve: ETag %q, GetEntity ETag %q", et, g.ETag)
		}
		if ct := s.Header.Get("Content-Type"); mediaLevel(t, ct) != "minimalmetadata" {
			t.Errorf("retrieve: Content-Type %q", ct)
		}
		if bytes.ContainsAny(s.Body, "\r\n") {
			t.Errorf("retrieve: entity JSON spans lines: %q", s.Body)
		}
		m := rawObject(t, s.Body)
		if string(m["V"]) != "5" || string(m["W"]) != "6" {
			t.Errorf("retrieve: V, W = %s, %s in %s", m["V"], m["W"], s.Body)
		}
		if oe, _ := rawString(t, m, "odata.etag"); oe != string(g.ETag) {
			t.Errorf("retrieve: odata.etag %q, want %q", oe, g.ETag)
		}

		// As recorded, the part asks for $select=V; a single GET with $select=V answers
		// without W, and so must the retrieve.
		single := srv.do(t, rawReq{Method: http.MethodGet, Path: entityPath(acct, table, "p", "1"), Query: "$select=V"})
		requireStatus(t, single, http.StatusOK, "single GET with $select=V")
		if _, ok := rawObject(t, single.Body)["W"]; ok {
			t.Fatalf("single GET ignores $select=V: %s", single.Body)
		}
		r = egtSendFixture(t, srv, fx, withSelect, false)
		s = egtSingle(t, parseBatchResponse(t, r.Status, r.Header, r.Body, true), "retrieve with $select")
		m = rawObject(t, s.Body)
		if s.Status != http.StatusOK || string(m["V"]) != "5" {
			t.Errorf("retrieve with $select=V: status %d, body %s", s.Status, s.Body)
		}
		if _, ok := m["W"]; ok {
			t.Errorf("retrieve ignores the part's $select=V (a single GET honours it): %s", s.Body)
		}

		missing := strings.Replace(body, "RowKey='1'", "RowKey='nope'", 1)
		r = egtSendFixture(t, srv, fx, missing, false)
		s = egtSingle(t, parseBatchResponse(t, r.Status, r.Header, r.Body, true), "retrieve missing")
		if s.Status != http.StatusNotFound {
			t.Errorf("retrieve of a missing entity: status %d, want 404", s.Status)
		}
		checkErrorBody(t, s.Body, "ResourceNotFound")
		// Like every batch failure, it names its operation, 0, the way .NET and Python read it.
		if m := egtIndexRe.FindSubmatch(s.Body); m == nil || string(m[1]) != "0" {
			t.Errorf(`retrieve failure lacks the "0:" prefix of batch failures: %s`, s.Body)
		}
	})

	// The body limit is 4 MiB: exactly 4 MiB is processed (padded with a preamble), one
	// byte more is a plain 413 RequestBodyTooLarge, not a 202.
	t.Run("BodyLimit", func(t *testing.T) {
		_, table := newTable(t, svc)
		c, _ := egtClient(t, srv, table)
		u := srv.BaseURL() + "/" + acct + "/" + table
		b, bb := buildBatchBody([]egtPart{{Method: "POST", URL: u, Header: [][2]string{{"Content-Type", "application/json"}, {"Prefer", "return-no-content"}}, Body: `{"PartitionKey":"p","RowKey":"1"}`}})
		padded := func(total int) []byte {
			var p bytes.Buffer
			line := strings.Repeat("x", 76) + "\r\n"
			for p.Len()+len(line)+len(b) <= total {
				p.WriteString(line)
			}
			p.WriteString(strings.Repeat("y", total-len(b)-p.Len()-2) + "\r\n")
			p.Write(b)
			return p.Bytes()
		}
		over := padded(4<<20 + 1)
		before := egtSnapshot(t, srv, table)
		r := egtPost(t, srv, over, bb, nil)
		requireRawErr(t, r, http.StatusRequestEntityTooLarge, "RequestBodyTooLarge")
		egtRequireUnchanged(t, srv, table, before, "413")

		exact := padded(4 << 20)
		if len(exact) != 4<<20 || len(over) != 4<<20+1 {
			t.Fatalf("padding: %d and %d bytes", len(exact), len(over))
		}
		r = egtPost(t, srv, exact, bb, nil)
		subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
		if s := egtSingle(t, subs, "4 MiB batch"); s.Status != http.StatusNoContent {
			t.Errorf("4 MiB batch: sub-response %q", s.Raw)
		}
		getEDM(t, c, "p", "1")
	})

	// Framing errors prevent processing: a plain 400 error response, not a 202.
	t.Run("Malformed", func(t *testing.T) {
		_, table := newTable(t, svc)
		for _, f := range []string{"adv-missing-close.http", "adv-missing-changeset-close.http", "adv-empty-changeset.http", "adv-no-request-line.http",
			"adv-two-changesets.http", "adv-empty-batch.http", "adv-bad-request-line.http", "adv-nested-garbage.http"} {
			fx := egtLoadFixture(t, f)
			before := egtSnapshot(t, srv, table)
			r := egtSendFixture(t, srv, fx, egtRetarget(fx.Body, table, srv), false)
			requireRawErr(t, r, http.StatusBadRequest, "InvalidInput")
			egtRequireUnchanged(t, srv, table, before, f)
		}
	})

	// Errors that belong to one operation are that operation's failure inside a 202.
	t.Run("OperationErrors", func(t *testing.T) {
		_, table := newTable(t, svc)
		_, other := newTable(t, svc)
		c, _ := egtClient(t, srv, table)
		oc, _ := egtClient(t, srv, other)
		for _, cl := range []*aztables.Client{c, oc} {
			if _, err := cl.AddEntity(ctx(t), marshal(t, egtEnt("p", "x", "Orig", "o")), nil); err != nil {
				t.Fatal(err)
			}
		}
		u := srv.BaseURL() + "/" + acct + "/" + table
		insert := egtPart{Method: "POST", URL: u, Header: [][2]string{{"Content-Type", "application/json"}, {"Prefer", "return-no-content"}}, Body: `{"PartitionKey":"p","RowKey":"new"}`}
		merge := func(tbl string) egtPart {
			return egtPart{Method: "PATCH", URL: egtKeyURL(srv, tbl, "p", "x"), Header: [][2]string{{"Content-Type", "application/json"}, {"If-Match", "*"}}, Body: `{"V":1}`}
		}
		cases := []struct {
			name   string
			parts  []egtPart
			status int
			code   string
			index  int
		}{
			{"SecondTable", []egtPart{insert, merge(other)}, http.StatusBadRequest, "InvalidInput", 1},
			{"DeleteWithoutIfMatch", []egtPart{insert, {Method: "DELETE", URL: egtKeyURL(srv, table, "p", "x")}}, http.StatusBadRequest, "MissingRequiredHeader", 1},
			{"GetInChangeset", []egtPart{insert, {Method: "GET", URL: egtKeyURL(srv, table, "p", "x")}}, http.StatusBadRequest, "InvalidInput", 1},
			{"BadKeyEscape", []egtPart{insert, merge(table), {Method: "DELETE", URL: u + "(PartitionKey='p',RowKey='%zz')", Header: [][2]string{{"If-Match", "*"}}}}, http.StatusBadRequest, "InvalidUri", 2},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				b, bb := buildBatchBody(tc.parts)
				before, beforeOther := egtSnapshot(t, srv, table), egtSnapshot(t, srv, other)
				r := egtPost(t, srv, b, bb, nil)
				checkBatchFailure(t, parseBatchResponse(t, r.Status, r.Header, r.Body, false), tc.status, tc.code, tc.index)
				egtRequireUnchanged(t, srv, table, before, tc.name)
				egtRequireUnchanged(t, srv, other, beforeOther, tc.name+" (other table)")
			})
		}
	})

	// Table names are case-insensitive across the parts, and If-Match compares ETags
	// whether ':' is written as %3A or not.
	t.Run("TableCaseAndETagForms", func(t *testing.T) {
		_, table := newTable(t, svc)
		c, _ := egtClient(t, srv, table)
		for _, rk := range []string{"a", "b"} {
			if _, err := c.AddEntity(ctx(t), marshal(t, egtEnt("p", rk, "Orig", "o")), nil); err != nil {
				t.Fatal(err)
			}
		}
		etA := string(*egtCurrentETag(t, c, "p", "a"))
		etB := string(*egtCurrentETag(t, c, "p", "b"))
		b, bb := buildBatchBody([]egtPart{
			{Method: "PUT", URL: egtKeyURL(srv, strings.ToUpper(table), "p", "a"), Header: [][2]string{{"Content-Type", "application/json"}, {"If-Match", strings.ReplaceAll(etA, "%3A", ":")}}, Body: `{"V":1}`},
			{Method: "PATCH", URL: egtKeyURL(srv, table, "p", "b"), Header: [][2]string{{"Content-Type", "application/json"}, {"If-Match", etB}}, Body: `{"V":2}`},
		})
		r := egtPost(t, srv, b, bb, nil)
		subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
		if len(subs) != 2 {
			t.Fatalf("%d sub-responses: %s", len(subs), r.Body)
		}
		egtCheckSuccess(t, 0, subs[0], http.StatusNoContent, table, "a", false)
		egtCheckSuccess(t, 1, subs[1], http.StatusNoContent, table, "b", false)
		egtRequireProps(t, c, "p", "a", map[string]any{"V": int32(1)}, subs[0].Header.Get("ETag"))
		egtRequireProps(t, c, "p", "b", map[string]any{"Orig": "o", "V": int32(2)}, subs[1].Header.Get("ETag"))
	})

	// The failure shape for an operation-level error in each position, checked the way each
	// SDK parses it (helpers): .NET regex, Python split, JS one-line JSON, Go status.
	t.Run("FailureEachIndex", func(t *testing.T) {
		_, table := newTable(t, svc)
		c, _ := egtClient(t, srv, table)
		if _, err := c.AddEntity(ctx(t), marshal(t, egtEnt("p", "exists")), nil); err != nil {
			t.Fatal(err)
		}
		u := srv.BaseURL() + "/" + acct + "/" + table
		for _, k := range []int{0, 1, 9, 10, 42, 99} {
			var parts []egtPart
			for i := 0; i < 100; i++ {
				rk := fmt.Sprintf("n%03d", i)
				if i == k {
					rk = "exists"
				}
				parts = append(parts, egtPart{Method: "POST", URL: u, Header: [][2]string{{"Content-Type", "application/json"}, {"Prefer", "return-no-content"}},
					Body: string(marshal(t, egtEnt("p", rk))), MIME: [][2]string{{"Content-ID", fmt.Sprint(i + 1)}}})
			}
			b, bb := buildBatchBody(parts)
			before := egtSnapshot(t, srv, table)
			r := egtPost(t, srv, b, bb, nil)
			subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
			checkBatchFailure(t, subs, http.StatusConflict, "EntityAlreadyExists", k)
			if len(subs) == 1 {
				if got := subs[0].Header.Get("Content-ID"); got != fmt.Sprint(k+1) {
					t.Errorf("index %d: failing sub-response Content-ID %q, want %d", k, got, k+1)
				}
				var eb errorBody
				if err := json.Unmarshal(subs[0].Body, &eb); err != nil || eb.OData == nil || eb.OData.Message == nil ||
					!strings.HasPrefix(eb.OData.Message.Value, fmt.Sprintf("%d:The specified entity already exists.", k)) {
					t.Errorf("index %d: message %s", k, subs[0].Body)
				}
			}
			egtRequireUnchanged(t, srv, table, before, fmt.Sprintf("failure at %d", k))
		}
	})
}
