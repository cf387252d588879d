package console

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/hotpart"
	"github.com/ceruleandb/cerulean/internal/observe"
)

func TestIsConsolePath(t *testing.T) {
	for _, c := range []struct {
		path string
		want bool
	}{
		{"/-", true}, {"/-/", true}, {"/-/app.js", true}, {"/-/api/watch", true},
		{"/", false}, {"", false}, {"-", false}, {"/--", false}, {"/-x", false}, {"/devstoreaccount1/Tables", false},
		{"/Tables", false}, {"//-/", false}, {"/_/", false},
	} {
		if got := IsConsolePath(c.path); got != c.want {
			t.Errorf("IsConsolePath(%q) = %v, want %v", c.path, got, c.want)
		}
	}
}

var (
	acctA = auth.Account{Name: "alpha", Keys: [][]byte{[]byte("alpha-key-0123456789")}}
	acctB = auth.Account{Name: "bravo", Keys: [][]byte{[]byte("bravo-key-0123456789")}}
)

func newTestConsole(now func() time.Time) (*Console, *Rates, *hotpart.Tracker) {
	rates := NewRates([]string{"alpha", "bravo"}, now)
	hot := hotpart.New(hotpart.Options{Warn: -1, Now: now})
	return New(Options{Accounts: []auth.Account{acctA, acctB}, Rates: rates, Hot: hot, Now: now}), rates, hot
}

// apiStub answers every request it gets with 418, to tell it from the console.
var apiStub = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestMountRoutes(t *testing.T) {
	c, _, _ := newTestConsole(nil)
	h := Mount(c, apiStub)
	for _, tc := range []struct {
		method, target string
		status         int
		contentType    string
		body           string
	}{
		{"GET", "/-/", 200, "text/html", `<script type="module" src="app.js">`},
		{"GET", "/-/app.js", 200, "text/javascript", "import * as api"},
		{"GET", "/-/api.js", 200, "text/javascript", "SharedKey"},
		{"GET", "/-/sha256.js", 200, "text/javascript", "hmacSha256"},
		{"GET", "/-/style.css", 200, "text/css", "--accent"},
		{"GET", "/-", 301, "", ""},
		{"HEAD", "/-/", 200, "text/html", ""},
		{"POST", "/-/", 405, "", ""},
		{"GET", "/-/missing.js", 404, "", ""},
		{"GET", "/-/api/other", 404, "application/json", "ResourceNotFound"},
		{"GET", "/devstoreaccount1/Tables", 418, "", ""},
		{"GET", "/", 418, "", ""},
		{"GET", "/-x", 418, "", ""},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		w := serve(h, r)
		if w.Code != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.target, w.Code, tc.status)
			continue
		}
		if tc.contentType != "" && !strings.HasPrefix(w.Header().Get("Content-Type"), tc.contentType) {
			t.Errorf("%s %s: Content-Type %q, want %s", tc.method, tc.target, w.Header().Get("Content-Type"), tc.contentType)
		}
		if !strings.Contains(w.Body.String(), tc.body) {
			t.Errorf("%s %s: body lacks %q", tc.method, tc.target, tc.body)
		}
		if tc.status != 418 && !strings.Contains(w.Header().Get("Content-Security-Policy"), "connect-src 'self'") {
			t.Errorf("%s %s: no same-origin Content-Security-Policy: %q", tc.method, tc.target, w.Header().Get("Content-Security-Policy"))
		}
		if tc.status == 301 && w.Header().Get("Location") != "/-/" {
			t.Errorf("/- redirects to %q", w.Header().Get("Location"))
		}
	}
}

// signed is a watch request signed for account with key.
func signed(target, scheme, account string, key []byte, now time.Time) *http.Request {
	r := httptest.NewRequest("GET", target, nil)
	r.RequestURI = target
	auth.SignRequest(r, scheme, account, key, now)
	return r
}

func TestWatchAuthentication(t *testing.T) {
	c, _, _ := newTestConsole(nil)
	now := time.Now()
	for _, tc := range []struct {
		name   string
		req    *http.Request
		status int
		code   string
	}{
		{"no credentials", httptest.NewRequest("GET", "/-/api/watch", nil), 401, "NoAuthenticationInformation"},
		{"wrong key", signed("/-/api/watch", auth.SchemeSharedKey, "alpha", acctB.Keys[0], now), 403, "AuthenticationFailed"},
		{"unknown account", signed("/-/api/watch", auth.SchemeSharedKey, "charlie", acctA.Keys[0], now), 403, "AuthenticationFailed"},
		{"stale date", signed("/-/api/watch", auth.SchemeSharedKey, "alpha", acctA.Keys[0], now.Add(-time.Hour)), 403, "AuthenticationFailed"},
		{"malformed header", func() *http.Request {
			r := httptest.NewRequest("GET", "/-/api/watch", nil)
			r.Header.Set("Authorization", "SharedKey nocolon")
			return r
		}(), 400, "InvalidAuthenticationInfo"},
		{"bad seconds", signed("/-/api/watch?seconds=0", auth.SchemeSharedKey, "alpha", acctA.Keys[0], now), 400, "OutOfRangeInput"},
		{"bad top", signed("/-/api/watch?top=x", auth.SchemeSharedKey, "alpha", acctA.Keys[0], now), 400, "OutOfRangeInput"},
		{"SharedKey", signed("/-/api/watch", auth.SchemeSharedKey, "alpha", acctA.Keys[0], now), 200, ""},
		{"SharedKeyLite", signed("/-/api/watch?seconds=10", auth.SchemeSharedKeyLite, "bravo", acctB.Keys[0], now), 200, ""},
	} {
		w := serve(c, tc.req)
		if w.Code != tc.status || w.Header().Get("X-Ms-Error-Code") != tc.code {
			t.Errorf("%s: %d %q, want %d %q (%s)", tc.name, w.Code, w.Header().Get("X-Ms-Error-Code"), tc.status, tc.code, w.Body)
		}
		if tc.code != "" && !strings.Contains(w.Body.String(), `"code":"`+tc.code+`"`) {
			t.Errorf("%s: body %s lacks the code", tc.name, w.Body)
		}
	}
}

// TestWatchShowsOnlyTheAccount: a signed request sees its own account's operations and
// partitions, never another's.
func TestWatchShowsOnlyTheAccount(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	now := func() time.Time { return clock }
	c, rates, hot := newTestConsole(now)
	obs := observe.Observers{rates, hot}
	for i := range 30 {
		obs.Observe(&observe.Request{Start: clock.Add(-3 * time.Second), Latency: time.Duration(i+1) * time.Millisecond, Account: "alpha",
			Operation: "InsertEntity", Table: "orders", PartitionKey: "hot", Status: 204, EntitiesWritten: 1})
		obs.Observe(&observe.Request{Start: clock.Add(-2 * time.Second), Latency: time.Millisecond, Account: "bravo",
			Operation: "DeleteEntity", Table: "secret", PartitionKey: "theirs", Status: 404, ErrorCode: "ResourceNotFound"})
	}
	obs.Observe(&observe.Request{Start: clock.Add(-3 * time.Second), Account: "alpha", Operation: "QueryEntities", Table: "orders", Status: 400})
	w := serve(c, signed("/-/api/watch?seconds=10&table=orders", auth.SchemeSharedKey, "alpha", acctA.Keys[0], clock))
	if w.Code != 200 {
		t.Fatalf("watch: %d %s", w.Code, w.Body)
	}
	var resp WatchResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Account != "alpha" || resp.Rates.Seconds != 10 || resp.Rates.Start != clock.Unix()-10 {
		t.Fatalf("watch: account %q, %d seconds from %d", resp.Account, resp.Rates.Seconds, resp.Rates.Start)
	}
	if len(resp.Rates.Operations) != 2 || resp.Rates.Operations[0].Operation != "InsertEntity" || resp.Rates.Operations[1].Operation != "QueryEntities" {
		t.Fatalf("operations: %+v", resp.Rates.Operations)
	}
	ins := resp.Rates.Operations[0]
	if ins.Requests[7] != 30 || ins.Entities[7] != 30 || ins.Errors[7] != 0 || ins.MaxMs[7] != 30 || ins.MeanMs[7] != 15.5 || ins.Requests[8] != 0 {
		t.Fatalf("InsertEntity second -3: %+v", ins)
	}
	if q := resp.Rates.Operations[1]; q.Errors[7] != 1 {
		t.Fatalf("QueryEntities errors: %+v", q)
	}
	if len(resp.Partitions.Tables) != 1 || resp.Partitions.Tables[0].Table != "orders" || resp.Partitions.Tables[0].Partitions[0].PartitionKey != "hot" {
		t.Fatalf("partitions: %+v", resp.Partitions)
	}
	if resp.Partitions.TargetPerSec != hotpart.Target {
		t.Fatalf("target %v", resp.Partitions.TargetPerSec)
	}
	if strings.Contains(w.Body.String(), "secret") || strings.Contains(w.Body.String(), "DeleteEntity") || strings.Contains(w.Body.String(), "theirs") {
		t.Fatalf("alpha's watch shows bravo's data: %s", w.Body)
	}
	// All of alpha's tables without ?table=, still none of bravo's.
	w = serve(c, signed("/-/api/watch", auth.SchemeSharedKey, "alpha", acctA.Keys[0], clock))
	if strings.Contains(w.Body.String(), "secret") || !strings.Contains(w.Body.String(), "orders") {
		t.Fatalf("alpha's watch of all tables: %s", w.Body)
	}
}

func TestRatesWindow(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	r := NewRates([]string{"a"}, func() time.Time { return clock })
	r.Observe(&observe.Request{Start: clock.Add(-5 * time.Second), Account: "a", Operation: "InsertEntity", Status: 204})
	r.Observe(&observe.Request{Start: clock, Account: "a", Operation: "InsertEntity", Status: 204})             // still counting: not shown
	r.Observe(&observe.Request{Start: clock, Account: "nobody", Operation: "InsertEntity", Status: 204})        // not kept
	r.Observe(&observe.Request{Start: clock.Add(-time.Second), Account: "", Operation: "Unknown", Status: 400}) // not kept
	s := r.Snapshot("a", 10)
	if len(s.Operations) != 1 || s.Operations[0].Requests[5] != 1 || s.Operations[0].Requests[9] != 0 {
		t.Fatalf("snapshot: %+v", s)
	}
	if len(r.Snapshot("nobody", 10).Operations) != 0 {
		t.Fatal("an account the Rates was not made for has series")
	}
	// A bucket is reused Window seconds later: the old count does not leak into it.
	clock = clock.Add(Window * time.Second)
	r.Observe(&observe.Request{Start: clock.Add(-5 * time.Second), Account: "a", Operation: "InsertEntity", Status: 204})
	r.Observe(&observe.Request{Start: clock.Add(-5 * time.Second), Account: "a", Operation: "InsertEntity", Status: 204})
	if got := r.Snapshot("a", 10).Operations[0].Requests[5]; got != 2 {
		t.Fatalf("reused bucket holds %d, want 2", got)
	}
	// Seconds are bounded by the window.
	if s := r.Snapshot("a", 10*Window); s.Seconds != Window-1 {
		t.Fatalf("snapshot of %d seconds", s.Seconds)
	}
	// Operations are bounded.
	for i := range 2 * maxOperations {
		r.Observe(&observe.Request{Start: clock.Add(-time.Second), Account: "a", Operation: "Op" + string(rune('A'+i%26)) + string(rune('a'+i/26)), Status: 200})
	}
	if n := len(r.accounts["a"].ops); n != maxOperations {
		t.Fatalf("%d operations kept, want at most %d", n, maxOperations)
	}
}

// BenchmarkRatesObserve is the console's cost on every request's path.
func BenchmarkRatesObserve(b *testing.B) {
	r := NewRates([]string{"devstoreaccount1"}, nil)
	q := &observe.Request{Start: time.Now(), Latency: time.Millisecond, Account: "devstoreaccount1", Operation: "InsertEntity", Status: 204, EntitiesWritten: 1}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Observe(q)
		}
	})
}

// BenchmarkMount is what routing through Mount adds to a table API request.
func BenchmarkMount(b *testing.B) {
	c, _, _ := newTestConsole(nil)
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	r := httptest.NewRequest("GET", "/devstoreaccount1/Tables", nil)
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"direct", noop}, {"mounted", Mount(c, noop)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.h.ServeHTTP(nil, r)
			}
		})
	}
}
