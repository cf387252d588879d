package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// Session tokens through the official Go SDK (docs/compatibility.md "Session tokens"): every write answers
// x-ms-session-token; a read that sends one sees every write it covers; malformed tokens
// are 400, tokens from the future 503 with Retry-After. The idiomatic ways to use them:
//   - read a write's token: runtime.WithCaptureResponse on the call's context;
//   - send one on a read: policy.WithHTTPHeader on the call's context, or a policy in
//     ClientOptions.PerCallPolicies that does both for every call (sessionPolicy).

// sessionToken is one token and its position, parsed as a client may: the text form is
// "1:<engine>:<position>", and of two tokens from one store the larger position covers
// the other.
type sessionToken struct {
	text string
	pos  uint64
}

func parseSessionToken(t testing.TB, what, text string) sessionToken {
	t.Helper()
	i := strings.LastIndexByte(text, ':')
	pos, err := strconv.ParseUint(text[i+1:], 10, 64)
	if !strings.HasPrefix(text, "1:") || i < 2 || err != nil {
		t.Fatalf("%s: x-ms-session-token %q is not a session token", what, text)
	}
	return sessionToken{text, pos}
}

// captured runs a call with runtime.WithCaptureResponse and returns the token of its
// response.
func captured(t testing.TB, what string, call func(context.Context) error) sessionToken {
	t.Helper()
	var resp *http.Response
	if err := call(runtime.WithCaptureResponse(ctx(t), &resp)); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return parseSessionToken(t, what, resp.Header.Get("x-ms-session-token"))
}

// withToken is a context whose calls send a session token in the header given.
func withToken(parent context.Context, header, token string) context.Context {
	return policy.WithHTTPHeader(parent, http.Header{header: {token}})
}

// transactionTokens submits a transaction and returns the $batch response's token and
// those of its changeset parts: the SDK's TransactionResponse carries none, but the
// captured response keeps its body (runtime.Payload), so its parts can be read.
func transactionTokens(t testing.TB, c *aztables.Client, actions []aztables.TransactionAction) (sessionToken, []sessionToken) {
	t.Helper()
	var resp *http.Response
	if _, err := c.SubmitTransaction(runtime.WithCaptureResponse(ctx(t), &resp), actions, nil); err != nil {
		t.Fatalf("SubmitTransaction: %v", err)
	}
	outer := parseSessionToken(t, "transaction", resp.Header.Get("x-ms-session-token"))
	body, err := runtime.Payload(resp)
	if err != nil {
		t.Fatal(err)
	}
	_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	changeset, err := multipart.NewReader(bytes.NewReader(body), params["boundary"]).NextPart()
	if err != nil {
		t.Fatal(err)
	}
	_, params, err = mime.ParseMediaType(changeset.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	parts := multipart.NewReader(changeset, params["boundary"])
	var tokens []sessionToken
	for {
		p, err := parts.NextPart()
		if err == io.EOF {
			return outer, tokens
		}
		if err != nil {
			t.Fatal(err)
		}
		r, err := http.ReadResponse(bufio.NewReader(p), nil)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, parseSessionToken(t, fmt.Sprintf("part %d", len(tokens)), r.Header.Get("x-ms-session-token")))
	}
}

// TestSessionTokensGoSDK: every write kind answers a token, tokens increase, reads with a
// token in either header see the write, malformed ones are 400 and future ones 503.
func TestSessionTokensGoSDK(t *testing.T) {
	srv := startServer(t)
	c, _ := newTable(t, newServiceClient(t, srv))
	ent := func(rk string, n int) []byte {
		return marshal(t, map[string]any{"PartitionKey": "p", "RowKey": rk, "N": n})
	}
	etagAny := azcore.ETagAny
	writes := []struct {
		what string
		call func(context.Context) error
	}{
		{"AddEntity", func(cx context.Context) error { _, err := c.AddEntity(cx, ent("r", 1), nil); return err }},
		{"UpsertEntity merge", func(cx context.Context) error {
			_, err := c.UpsertEntity(cx, ent("r", 2), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeMerge})
			return err
		}},
		{"UpsertEntity replace", func(cx context.Context) error {
			_, err := c.UpsertEntity(cx, ent("r", 3), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
			return err
		}},
		{"UpdateEntity merge", func(cx context.Context) error {
			_, err := c.UpdateEntity(cx, ent("r", 4), &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeMerge, IfMatch: &etagAny})
			return err
		}},
		{"UpdateEntity replace", func(cx context.Context) error {
			_, err := c.UpdateEntity(cx, ent("r", 5), &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeReplace})
			return err
		}},
		{"DeleteEntity", func(cx context.Context) error { _, err := c.DeleteEntity(cx, "p", "r", nil); return err }},
		{"AddEntity again", func(cx context.Context) error { _, err := c.AddEntity(cx, ent("r", 6), nil); return err }},
	}
	var first, last sessionToken
	for i, w := range writes {
		tok := captured(t, w.what, w.call)
		if i > 0 && tok.pos <= last.pos {
			t.Fatalf("%s: token %s after %s", w.what, tok.text, last.text)
		}
		if i == 0 {
			first = tok
		}
		last = tok
	}
	outer, parts := transactionTokens(t, c, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeAdd, Entity: ent("b1", 1)},
		{ActionType: aztables.TransactionTypeUpdateMerge, Entity: ent("b2", 2)},
		{ActionType: aztables.TransactionTypeInsertReplace, Entity: ent("b3", 3)},
		{ActionType: aztables.TransactionTypeDelete, Entity: ent("r", 0)},
	})
	if outer.pos <= last.pos || len(parts) != 4 {
		t.Fatalf("transaction: token %s after %s, %d parts", outer.text, last.text, len(parts))
	}
	for i, p := range parts {
		if p != outer {
			t.Errorf("part %d: token %s, want the transaction's %s", i, p.text, outer.text)
		}
	}
	last = outer

	// Reads: the token in x-ms-session-token or MSCRM.SessionToken, alone, in a list or
	// both, on GetEntity and on every page of ListEntities.
	reads := map[string]func(context.Context) error{
		"GetEntity": func(cx context.Context) error {
			resp, err := c.GetEntity(cx, "p", "b3", nil)
			if err == nil && decodeEDM(t, resp.Value).Properties["N"] != int32(3) {
				err = fmt.Errorf("read %s", resp.Value)
			}
			return err
		},
		"ListEntities": func(cx context.Context) error {
			top := int32(1)
			pager := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: &top})
			n := 0
			for pager.More() {
				page, err := pager.NextPage(cx)
				if err != nil {
					return err
				}
				n += len(page.Entities)
			}
			if n != 3 {
				return fmt.Errorf("listed %d entities, want 3", n)
			}
			return nil
		},
	}
	for name, read := range reads {
		for _, h := range []http.Header{
			{"x-ms-session-token": {last.text}},
			{"MSCRM.SessionToken": {last.text}},
			{"x-ms-session-token": {first.text + "," + last.text}},
			{"x-ms-session-token": {last.text}, "MSCRM.SessionToken": {tokenAt(last, 0)}},
		} {
			if err := read(policy.WithHTTPHeader(ctx(t), h)); err != nil {
				t.Errorf("%s with %v: %v", name, h, err)
			}
		}
		for _, h := range []string{"x-ms-session-token", "MSCRM.SessionToken"} {
			err := read(withToken(ctx(t), h, "not-a-token"))
			re := requireRespErr(t, err, http.StatusBadRequest, "InvalidHeaderValue")
			if body, _ := runtime.Payload(re.RawResponse); !bytes.Contains(body, []byte(h+" header is not valid")) {
				t.Errorf("%s with a bad %s: %s, want the header named", name, h, body)
			}
		}
		future := tokenAt(last, last.pos+1_000_000_000)
		start := time.Now()
		err := read(withToken(ctx(t), "x-ms-session-token", future))
		took := time.Since(start)
		re := requireRespErr(t, err, http.StatusServiceUnavailable, "ServerBusy")
		if re.RawResponse.Header.Get("Retry-After") == "" || took > 5*time.Second {
			t.Errorf("%s with a future token: Retry-After %q after %v, want one within 5 s", name, re.RawResponse.Header.Get("Retry-After"), took)
		}
		t.Logf("%s with a future token: 503 after %v", name, took.Round(time.Millisecond))
	}
}

// tokenAt is a token of tok's engine at position pos.
func tokenAt(tok sessionToken, pos uint64) string {
	return tok.text[:strings.LastIndexByte(tok.text, ':')+1] + strconv.FormatUint(pos, 10)
}

// sessionPolicy is a client-wide session: it remembers the newest token its client's
// writes answered and sends it on every read, so the client reads its own writes
// whichever front end serves it. It goes in ClientOptions.PerCallPolicies.
type sessionPolicy struct {
	mu     sync.Mutex
	newest sessionToken
}

func (p *sessionPolicy) Do(req *policy.Request) (*http.Response, error) {
	p.mu.Lock()
	tok := p.newest.text
	p.mu.Unlock()
	if req.Raw().Method == http.MethodGet && tok != "" {
		req.Raw().Header.Set("x-ms-session-token", tok)
	}
	resp, err := req.Next()
	if err == nil {
		if text := resp.Header.Get("x-ms-session-token"); text != "" {
			i := strings.LastIndexByte(text, ':')
			if pos, perr := strconv.ParseUint(text[i+1:], 10, 64); perr == nil {
				p.mu.Lock()
				if pos > p.newest.pos {
					p.newest = sessionToken{text, pos}
				}
				p.mu.Unlock()
			}
		}
	}
	return resp, err
}

// sessionClient is a client whose reads carry the newest token of its writes.
func sessionClient(t testing.TB, srv *server, table string) (*aztables.Client, *sessionPolicy) {
	t.Helper()
	a := srv.Default()
	cred, err := aztables.NewSharedKeyCredential(a.Name, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	sp := &sessionPolicy{}
	opts := clientOptions(nil)
	opts.PerCallPolicies = append(opts.PerCallPolicies, sp)
	svc, err := aztables.NewServiceClientWithSharedKey(srv.Endpoint(a.Name), cred, opts)
	if err != nil {
		t.Fatal(err)
	}
	return svc.NewClient(table), sp
}

// TestSessionPolicy: a client-wide policy keeps the newest token and sends it on reads.
func TestSessionPolicy(t *testing.T) {
	srv := startServer(t)
	_, table := newTable(t, newServiceClient(t, srv))
	c, sp := sessionClient(t, srv, table)
	var seen []uint64
	for i := range 5 {
		if _, err := c.UpsertEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "N": i}), nil); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, sp.newest.pos)
		resp, err := c.GetEntity(ctx(t), "p", "r", nil)
		if err != nil || decodeEDM(t, resp.Value).Properties["N"] != int32(i) {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("positions %v do not increase", seen)
		}
	}
}

// TestSessionTokenRestart: a token from before a restart — graceful or a crash (kill -9)
// after the write was acknowledged — is still covered after it (not "from the future"),
// and writes after the restart answer larger tokens.
func TestSessionTokenRestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "Graceful", true: "Crash"}[crash], func(t *testing.T) {
			srv := startServer(t)
			c, table := newTable(t, newServiceClient(t, srv))
			var tok sessionToken
			for i := range 20 {
				tok = captured(t, "upsert", func(cx context.Context) error {
					_, err := c.UpsertEntity(cx, marshal(t, map[string]any{"PartitionKey": "p", "RowKey": strconv.Itoa(i)}), nil)
					return err
				})
			}
			if crash {
				srv.kill()
			} else if exitErr, inTime := srv.terminate(stopTimeout); !inTime || exitErr != nil {
				t.Fatalf("stop: %v (in time: %v)", exitErr, inTime)
			}
			srv.restart(t)
			c = newServiceClient(t, srv).NewClient(table)
			start := time.Now()
			if _, err := c.GetEntity(withToken(ctx(t), "x-ms-session-token", tok.text), "p", "19", nil); err != nil {
				t.Fatalf("read with a token from before the restart: %v", err)
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Errorf("read with a token from before the restart took %v: the server waited for it", d)
			}
			after := captured(t, "upsert after restart", func(cx context.Context) error {
				_, err := c.UpsertEntity(cx, marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "x"}), nil)
				return err
			})
			if after.pos <= tok.pos {
				t.Fatalf("token after the restart %s, before %s", after.text, tok.text)
			}
		})
	}
}

// TestPostgresSessionTokens: three front ends on one database; a write through one and a
// read with its token through each of the others sees the write, every time.
func TestPostgresSessionTokens(t *testing.T) {
	svcs := postgresServiceClients(t, 3)
	clients, _ := tableOnEach(t, svcs)
	var last sessionToken
	const rounds = 60
	for i := range rounds {
		w := i % len(clients)
		rk := strconv.Itoa(i % 7)
		tok := captured(t, "write", func(cx context.Context) error {
			_, err := clients[w].UpsertEntity(cx, marshal(t, map[string]any{"PartitionKey": "p", "RowKey": rk, "N": i}), nil)
			return err
		})
		if tok.pos <= last.pos {
			t.Fatalf("round %d: token %s after %s", i, tok.text, last.text)
		}
		last = tok
		for r := range clients {
			if r == w {
				continue
			}
			resp, err := clients[r].GetEntity(withToken(ctx(t), "x-ms-session-token", tok.text), "p", rk, nil)
			if err != nil {
				t.Fatalf("round %d: read through front end %d with the token of front end %d: %v", i, r, w, err)
			}
			if n := decodeEDM(t, resp.Value).Properties["N"]; n != int32(i) {
				t.Fatalf("round %d: front end %d read N=%v after front end %d wrote %d", i, r, n, w, i)
			}
			top := int32(1000)
			page, err := clients[r].NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: &top}).NextPage(withToken(ctx(t), "MSCRM.SessionToken", tok.text))
			if err != nil || !entitiesHold(t, page.Entities, rk, i) {
				t.Fatalf("round %d: query through front end %d with the token of front end %d: %v", i, r, w, err)
			}
		}
	}
	// A token from one front end is no future on another, and one beyond the database's
	// position is, on each.
	future := tokenAt(last, last.pos+1<<40)
	for i, c := range clients {
		_, err := c.GetEntity(withToken(ctx(t), "x-ms-session-token", future), "p", "0", nil)
		re := requireRespErr(t, err, http.StatusServiceUnavailable, "ServerBusy")
		if re.RawResponse.Header.Get("Retry-After") == "" {
			t.Errorf("front end %d: 503 without Retry-After", i)
		}
	}
	t.Logf("%d writes, each read back through the two other front ends with its token; last token %s", rounds, last.text)
}

// entitiesHold reports whether a page holds RowKey rk with N = n.
func entitiesHold(t testing.TB, entities [][]byte, rk string, n int) bool {
	for _, b := range entities {
		e := decodeEDM(t, b)
		if e.RowKey == rk {
			return e.Properties["N"] == int32(n)
		}
	}
	return false
}
