package e2e

// If-Match spellings, black box (issue 10 item 3, issue 42 item 14): a value that is not
// one weak entity-tag — a strong tag such as "wrong" or the entity's own ETag without its
// W/, a bare token, a list — is 400 InvalidInput with the service's message, as Microsoft
// documents it and its emulator and Azurite answer (docs/compatibility.md "If-Match"); every
// well-formed weak ETag that does not name the entity's version — lower-case w/, foreign,
// stale, another entity's — is 412 UpdateConditionNotSatisfied with the entity unchanged;
// the entity's own ETag matches whether written with W/ or w/, ':' or %3A/%3a, with
// whitespace around. Update (PUT), merge (MERGE) and delete (DELETE), alone and inside a
// $batch changeset.

import (
	"net/http"
	"strings"
	"testing"
)

// ifMatchCase is one If-Match value derived from the target entity's current ETag (cur),
// a stale one of the same entity (stale) and another entity's (other).
type ifMatchCase struct {
	name string
	val  func(cur, stale, other string) string
	want string // "match", "412", "400"
}

var ifMatchCases = []ifMatchCase{
	{"Exact", func(c, _, _ string) string { return c }, "match"},
	{"ColonsDecoded", func(c, _, _ string) string { return strings.ReplaceAll(c, "%3A", ":") }, "match"},
	{"LowerPercent", func(c, _, _ string) string { return strings.ReplaceAll(c, "%3A", "%3a") }, "match"},
	{"Whitespace", func(c, _, _ string) string { return " \t" + c + " " }, "match"},
	{"LowerW", func(c, _, _ string) string { return "w" + c[1:] }, "match"},
	{"Star", func(_, _, _ string) string { return "*" }, "match"},

	{"LowerWWrong", func(_, _, _ string) string { return `w/"wrong"` }, "412"},
	{"WeakWrong", func(_, _, _ string) string { return `W/"wrong"` }, "412"},
	{"LowerWDatetimeOfNothing", func(_, _, _ string) string { return `w/"datetime'2001-01-01T00%3A00%3A00.0000000Z'"` }, "412"},
	{"Stale", func(_, s, _ string) string { return s }, "412"},
	{"LowerWStale", func(_, s, _ string) string { return "w" + s[1:] }, "412"},
	{"OtherEntity", func(_, _, o string) string { return o }, "412"},
	{"Reformatted", func(c, _, _ string) string { return strings.Replace(c, "Z'", "+00%3A00'", 1) }, "412"},
	{"Empty", func(_, _, _ string) string { return "" }, "412"},

	{"Strong", func(c, _, _ string) string { return c[2:] }, "400"},
	{"StrongWrong", func(_, _, _ string) string { return `"wrong"` }, "400"},
	{"StrongStale", func(_, s, _ string) string { return s[2:] }, "400"},
	{"Unterminated", func(c, _, _ string) string { return strings.TrimSuffix(c, `"`) }, "400"},
	{"Unquoted", func(c, _, _ string) string { return strings.Trim(c[2:], `"`) }, "400"},
	{"WeakPrefixOnly", func(_, _, _ string) string { return "W/" }, "400"},
	{"Garbage", func(_, _, _ string) string { return "abc" }, "400"},
	{"List", func(c, _, _ string) string { return c + ", " + c }, "400"},
	{"ListWithStar", func(c, _, _ string) string { return "*, " + c }, "400"},
}

func TestIfMatchSpellings(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)
	acct := srv.Default().Name
	c, table := newTable(t, svc)

	// fresh inserts rk with V=0, bumps it once (so a stale ETag exists), and returns the
	// current and stale ETags.
	fresh := func(t *testing.T, rk string) (cur, stale string) {
		t.Helper()
		add, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": rk, "V": 0}), nil)
		if err != nil {
			t.Fatal(err)
		}
		r := srv.do(t, rawReq{Method: "MERGE", Path: entityPath(acct, table, "p", rk), Header: map[string]string{"If-Match": "*"}, Body: []byte(`{"V":1}`)})
		requireStatus(t, r, http.StatusNoContent, "bump")
		return r.Header.Get("ETag"), string(add.ETag)
	}
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "other"}), nil); err != nil {
		t.Fatal(err)
	}
	_, og := getEDM(t, c, "p", "other")
	other := string(og.ETag)

	for _, method := range []string{http.MethodPut, "MERGE", http.MethodDelete} {
		for _, tc := range ifMatchCases {
			t.Run(method+"/"+tc.name, func(t *testing.T) {
				rk := method + "-" + tc.name
				cur, stale := fresh(t, rk)
				before := egtSnapshot(t, srv, table)
				var body []byte
				if method != http.MethodDelete {
					body = []byte(`{"V":2}`)
				}
				hdr := ifMatchHeader(tc.val(cur, stale, other))
				r := srv.do(t, rawReq{Method: method, Path: entityPath(acct, table, "p", rk), Header: hdr, Body: body})
				switch tc.want {
				case "match":
					requireStatus(t, r, http.StatusNoContent, method+" If-Match "+tc.name)
					if method == http.MethodDelete {
						egtRequireGone(t, c, "p", rk)
					} else if e, _ := getEDM(t, c, "p", rk); e.Properties["V"] != int32(2) {
						t.Errorf("after %s: V = %v, want 2", method, e.Properties["V"])
					}
				case "412":
					requireRawErr(t, r, http.StatusPreconditionFailed, "UpdateConditionNotSatisfied")
					egtRequireUnchanged(t, srv, table, before, tc.name)
				case "400":
					requireRawErr(t, r, http.StatusBadRequest, "InvalidInput")
					if !strings.Contains(string(r.Body), "The etag value") {
						t.Errorf("400 body does not explain the etag: %s", r.Body)
					}
					egtRequireUnchanged(t, srv, table, before, tc.name)
				}
			})
		}
	}

	// Inside a batch: the same value on the second operation of a changeset. A match
	// commits both; a failed precondition is that operation's 412 and a malformed value
	// its 400, index 1, nothing applied.
	for _, tc := range ifMatchCases {
		if tc.name == "Empty" {
			continue // an empty header line cannot be framed differently from a missing one
		}
		for _, method := range []string{http.MethodPut, "MERGE", http.MethodDelete} {
			t.Run("Batch/"+method+"/"+tc.name, func(t *testing.T) {
				rk := "b-" + method + "-" + tc.name
				cur, stale := fresh(t, rk)
				u := srv.BaseURL() + "/" + acct + "/" + table
				insert := egtPart{Method: "POST", URL: u, Header: [][2]string{{"Content-Type", "application/json"}, {"Prefer", "return-no-content"}},
					Body: `{"PartitionKey":"p","RowKey":"` + rk + `-new"}`}
				op := egtPart{Method: method, URL: egtKeyURL(srv, table, "p", rk), Header: [][2]string{{"If-Match", tc.val(cur, stale, other)}}}
				if method != http.MethodDelete {
					op.Header = append(op.Header, [2]string{"Content-Type", "application/json"})
					op.Body = `{"V":2}`
				}
				b, bb := buildBatchBody([]egtPart{insert, op})
				before := egtSnapshot(t, srv, table)
				r := egtPost(t, srv, b, bb, nil)
				subs := parseBatchResponse(t, r.Status, r.Header, r.Body, false)
				switch tc.want {
				case "match":
					if len(subs) != 2 || subs[0].Status != http.StatusNoContent || subs[1].Status != http.StatusNoContent {
						t.Fatalf("batch with If-Match %s: %s", tc.name, r.Body)
					}
					getEDM(t, c, "p", rk+"-new")
				case "412":
					checkBatchFailure(t, subs, http.StatusPreconditionFailed, "UpdateConditionNotSatisfied", 1)
					egtRequireUnchanged(t, srv, table, before, tc.name)
				case "400":
					checkBatchFailure(t, subs, http.StatusBadRequest, "InvalidInput", 1)
					egtRequireUnchanged(t, srv, table, before, tc.name)
				}
			})
		}
	}
}

// ifMatchHeader is the header map for an If-Match value. rawReq drops headers mapped to
// "", so an empty value is sent as one space, which reaches the server as the same empty
// value (header values are trimmed).
func ifMatchHeader(v string) map[string]string {
	if v == "" {
		v = " "
	}
	return map[string]string{"If-Match": v}
}
