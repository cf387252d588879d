package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/ceruleandb/cerulean/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// Read replicas through the official Go SDK (docs/compatibility.md "Read consistency and replicas", issue 12 "What must
// be shown"): real cerulean front ends on the postgres engine with real streaming standbys
// of the test database — the two scripts/test shares (one replays at once, one
// CERULEAN_TEST_POSTGRES_REPLICA_DELAY late) and, for the test that kills one, a private
// standby of its own (internal/pgtest).
//
// These tests start their servers with --engine postgres themselves, whatever
// CERULEAN_TEST_ENGINE_ARGS says, so scripts/test runs them in its first pass only (its
// second pass, the suite again on the postgres engine, skips TestReplica). Without the
// servers they skip, except in CI, where they fail.
//
// What they assert holds on any machine; the figures (share of reads the replicas serve,
// throughput) are logged, with generous floors where one is asserted, so that a loaded
// 2-core machine does not make them flake.

// readHeaders carries, through one SDK call's context, the read headers to send and those
// the response answered; headersPolicy fills it. One per call: calls run concurrently.
type readHeaders struct {
	level string // x-ms-consistency-level to send ("": none)
	token string // x-ms-session-token to send ("": none)

	session  string // the response's x-ms-session-token
	source   string // x-cerulean-read-source
	position string // x-cerulean-read-position
}

type readHeadersKey struct{}

func withReadHeaders(parent context.Context, h *readHeaders) context.Context {
	return context.WithValue(parent, readHeadersKey{}, h)
}

// headersPolicy is a per-call policy (ClientOptions.PerCallPolicies) that sends the
// headers of the call's readHeaders and records the response's.
type headersPolicy struct{}

func (headersPolicy) Do(req *policy.Request) (*http.Response, error) {
	h, _ := req.Raw().Context().Value(readHeadersKey{}).(*readHeaders)
	if h != nil {
		if h.level != "" {
			req.Raw().Header.Set("x-ms-consistency-level", h.level)
		}
		if h.token != "" {
			req.Raw().Header.Set("x-ms-session-token", h.token)
		}
	}
	resp, err := req.Next()
	if h != nil && err == nil {
		h.session = resp.Header.Get("x-ms-session-token")
		h.source = resp.Header.Get("x-cerulean-read-source")
		h.position = resp.Header.Get("x-cerulean-read-position")
	}
	return resp, err
}

// tokenPosition is a session token's position ("1:<engine>:<position>").
func tokenPosition(text string) (uint64, error) {
	i := strings.LastIndexByte(text, ':')
	if !strings.HasPrefix(text, "1:") || i < 2 {
		return 0, fmt.Errorf("x-ms-session-token %q is not a session token", text)
	}
	return strconv.ParseUint(text[i+1:], 10, 64)
}

// served checks a read's answer headers — a source, a position, and a session token at
// that position — and returns the source and position.
func (h *readHeaders) served() (string, uint64, error) {
	pos, err := strconv.ParseUint(h.position, 10, 64)
	if err != nil || h.source == "" {
		return "", 0, fmt.Errorf("read answered x-cerulean-read-source %q, x-cerulean-read-position %q", h.source, h.position)
	}
	tok, err := tokenPosition(h.session)
	if err != nil || tok != pos {
		return "", 0, fmt.Errorf("read answered x-ms-session-token %q at x-cerulean-read-position %d", h.session, pos)
	}
	return h.source, pos, nil
}

// replicaFrontEnd is a cerulean front end on the test database with read replicas, its
// diagnostics address, and an SDK client whose calls go through headersPolicy.
type replicaFrontEnd struct {
	srv   *server
	debug string // host:port of --debug-addr (/debug/replicas)
	svc   *aztables.ServiceClient
}

// startReplicaFrontEnds starts n front ends on the test database (CERULEAN_TEST_POSTGRES_URL)
// with the given replica URLs.
func startReplicaFrontEnds(t *testing.T, n int, replicas ...string) []*replicaFrontEnd {
	t.Helper()
	return startFrontEndsOn(t, n, postgresURL(t), replicas...)
}

// startFrontEndsOn starts n front ends on the postgres database at primary with the given
// replica URLs. Their clients share one transport that keeps enough idle connections for
// every worker (the SDK's default keeps few, and would open a connection per request
// under this load).
func startFrontEndsOn(t *testing.T, n int, primary string, replicas ...string) []*replicaFrontEnd {
	t.Helper()
	transport := &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}
	t.Cleanup(transport.CloseIdleConnections)
	out := make([]*replicaFrontEnd, n)
	for i := range out {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		debug := fmt.Sprintf("127.0.0.1:%d", port)
		args := []string{"--engine", "postgres", "--postgres-url", primary, "--debug-addr", debug}
		for _, r := range replicas {
			args = append(args, "--postgres-replica-url", r)
		}
		out[i] = replicaFrontEndOf(t, startServer(t, withArgs(args...)), debug, transport)
	}
	return out
}

// replicaFrontEndOf makes the SDK client (through headersPolicy and transport) of srv, a
// front end started with --debug-addr debug.
func replicaFrontEndOf(t *testing.T, srv *server, debug string, transport *http.Client) *replicaFrontEnd {
	t.Helper()
	a := srv.Default()
	cred, err := aztables.NewSharedKeyCredential(a.Name, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	o := clientOptions(transport)
	o.PerCallPolicies = []policy.Policy{headersPolicy{}}
	svc, err := aztables.NewServiceClientWithSharedKey(srv.Endpoint(a.Name), cred, o)
	if err != nil {
		t.Fatal(err)
	}
	return &replicaFrontEnd{srv: srv, debug: debug, svc: svc}
}

// replicaSource is the x-cerulean-read-source of reads a replica given by URL serves.
func replicaSource(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil || p.Port() == "" {
		t.Fatalf("replica URL %q: want postgres://host:port/db (%v)", u, err)
	}
	return "replica " + p.Host
}

// replicaState is one entry of /debug/replicas (postgres.ReplicaStatus).
type replicaState struct {
	Name           string `json:"name"`
	Reachable      bool   `json:"reachable"`
	InRotation     bool   `json:"inRotation"`
	ReplayPosition string `json:"replayPosition"`
	Reads          uint64 `json:"reads"`
	Error          string `json:"error"`
}

// replicaStates reads a front end's /debug/replicas, by replica source name.
func replicaStates(fe *replicaFrontEnd) (map[string]replicaState, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + fe.debug + "/debug/replicas")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/debug/replicas: %d %s", resp.StatusCode, body)
	}
	var list []replicaState
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("/debug/replicas: %v: %s", err, body)
	}
	out := map[string]replicaState{}
	for _, s := range list {
		out["replica "+s.Name] = s
	}
	return out, nil
}

// parseLSN reads a position as PostgreSQL writes an LSN ("16/B374D848").
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("LSN %q", s)
	}
	return h<<32 | l, nil
}

// waitReplicas polls every front end's /debug/replicas until ok holds for each of the
// named replicas, and fails the test if it does not within limit.
func waitReplicas(t *testing.T, fes []*replicaFrontEnd, what string, limit time.Duration, ok func(replicaState) bool, names ...string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var last string
		for i, fe := range fes {
			states, err := replicaStates(fe)
			if err != nil {
				last = fmt.Sprintf("front end %d: %v", i, err)
				break
			}
			for _, n := range names {
				if s, found := states[n]; !found || !ok(s) {
					last = fmt.Sprintf("front end %d: %s: %+v (found %v)", i, n, s, found)
					break
				}
			}
			if last != "" {
				break
			}
		}
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas not %s after %v: %s", what, limit, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func inRotation(s replicaState) bool { return s.Reachable && s.InRotation }

// sharedReplicas returns the shared standbys' URLs (scripts/test) and their read sources.
func sharedReplicas(t *testing.T) (prompt, delayed, promptSrc, delayedSrc string, delay time.Duration) {
	t.Helper()
	postgresURL(t)
	prompt, delayed, delay = pgtest.ReplicaURLs(t)
	return prompt, delayed, replicaSource(t, prompt), replicaSource(t, delayed), delay
}

// pairTable makes the pair tests' table: one entity per worker (N = 0, version 0),
// written in a transaction per partition (workers ≤ 100 × pairPartitions), and waits until every replica of every front end has replayed
// them, so that no read (at any level) can miss the table or the entity; it returns a
// client of the table through each front end and the token of version 0.
func pairTable(t *testing.T, fes []*replicaFrontEnd, workers int, replicas ...string) ([]*aztables.Client, uint64) {
	t.Helper()
	c, name := newTable(t, fes[0].svc)
	var last uint64
	for part := range pairPartitions {
		var actions []aztables.TransactionAction
		for w := part; w < workers; w += pairPartitions {
			actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeInsertReplace,
				Entity: pairEntity(w, 0)})
		}
		h := &readHeaders{}
		if _, err := c.SubmitTransaction(withReadHeaders(ctx(t), h), actions, nil); err != nil {
			t.Fatalf("SubmitTransaction: %v", err)
		}
		pos, err := tokenPosition(h.session)
		if err != nil {
			t.Fatal(err)
		}
		last = max(last, pos)
	}
	waitReplicas(t, fes, "caught up with the table", time.Minute, func(s replicaState) bool {
		p, err := parseLSN(s.ReplayPosition)
		return inRotation(s) && err == nil && p >= last
	}, replicas...)
	clients := make([]*aztables.Client, len(fes))
	for i, fe := range fes {
		clients[i] = fe.svc.NewClient(name)
	}
	return clients, last
}

// pairPartitions is how many partitions the workers' entities share.
const pairPartitions = 8

// pairEntity is worker w's entity at version n.
func pairEntity(w, n int) []byte {
	b, _ := json.Marshal(map[string]any{"PartitionKey": pairPartition(w), "RowKey": strconv.Itoa(w), "N": n})
	return b
}

func pairPartition(w int) string { return "p" + strconv.Itoa(w%pairPartitions) }

// pairRead is what one write-then-read pair saw.
type pairRead struct {
	source   string
	readPos  uint64 // x-cerulean-read-position of the read
	wrote    int    // the version the pair wrote
	writePos uint64 // the write's session token
	seen     int    // the version the read returned
	// prevPos is the token of the write before the version seen (0 for version 0): the
	// version's commit comes after it, so a read that saw it is at a higher position.
	prevPos uint64
	// writeSent is when the upsert that succeeded was sent (its commit is later), and
	// readDone when the read's answer had come back (its position was read earlier).
	writeSent, readDone time.Time
}

func (r pairRead) stale() bool { return r.seen < r.wrote }

// pairRun is the outcome of runPairs.
type pairRun struct {
	reads  []pairRead
	errors []string // every failed request, in words
	// busy counts the upserts answered 503 ServerBusy and sent again (busyPatience), by
	// the run's workers.
	busy    int64
	workers int
	// slowest is the longest an upsert took, retries included.
	slowest time.Duration
	took    time.Duration
}

// busyPatience is how long runPairs keeps sending an upsert again after 503 ServerBusy
// (with Retry-After), backing off from 100 ms to 2 s, as the SDKs' retry policies do. A
// front end answers so while the database cannot serve it (storage.ErrUnavailable): on a
// loaded 2-core machine that can be a moment at the start, when the workers' first writes
// meet front ends whose connection pools are still empty. Those answers are within the
// service's contract; the tests count them (checkPairs bounds them) and report why the
// front ends gave them.
const busyPatience = 20 * time.Second

// isServerBusy reports a 503 answer.
func isServerBusy(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusServiceUnavailable
}

// pairMode says how a pair's read is sent.
type pairMode struct {
	level string // x-ms-consistency-level ("": none)
	token bool   // send the write's session token
}

// runPairs runs pairs write-then-read pairs over workers goroutines: each pair upserts the
// worker's entity with its next version through a random front end, then reads it with
// Get Entity through another one, as mode says. Version 0 of every worker's entity exists
// (pairTable); v0 is its token.
func runPairs(t *testing.T, clients []*aztables.Client, v0 uint64, workers, pairs int, mode pairMode) pairRun {
	t.Helper()
	cx := ctxFor(t, 10*time.Minute)
	var (
		next    atomic.Int64
		mu      sync.Mutex
		run     pairRun
		failed  atomic.Int64
		busy    atomic.Int64
		slowest atomic.Int64 // nanoseconds
		wg      sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		failed.Add(1)
		mu.Lock()
		run.errors = append(run.errors, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	began := time.Now()
	for w := range workers {
		wg.Go(func() {
			// The worker's versions and their tokens; the entity is at version n.
			tokens := []uint64{v0}
			var reads []pairRead
			defer func() {
				mu.Lock()
				run.reads = append(run.reads, reads...)
				mu.Unlock()
			}()
			for next.Add(1) <= int64(pairs) && failed.Load() < 20 {
				n := len(tokens)
				wi := rand.IntN(len(clients))
				ri := (wi + 1 + rand.IntN(len(clients)-1)) % len(clients)
				wh := &readHeaders{}
				sent := time.Now()
				_, err := clients[wi].UpsertEntity(withReadHeaders(cx, wh), pairEntity(w, n), nil)
				wsent := sent
				for try := 0; isServerBusy(err) && time.Since(sent) < busyPatience; try++ {
					busy.Add(1)
					time.Sleep(min(100*time.Millisecond<<try, 2*time.Second))
					wh = &readHeaders{}
					wsent = time.Now()
					_, err = clients[wi].UpsertEntity(withReadHeaders(cx, wh), pairEntity(w, n), nil)
				}
				if d := int64(time.Since(sent)); d > slowest.Load() {
					slowest.Store(d) // a racing larger store may be lost: a figure for the log
				}
				if err != nil {
					fail("worker %d: upsert of version %d through front end %d after %v: %v", w, n, wi, time.Since(sent).Round(time.Millisecond), err)
					return
				}
				wpos, err := tokenPosition(wh.session)
				if err != nil {
					fail("worker %d: upsert: %v", w, err)
					return
				}
				tokens = append(tokens, wpos)
				rh := &readHeaders{level: mode.level}
				if mode.token {
					rh.token = wh.session
				}
				resp, err := clients[ri].GetEntity(withReadHeaders(cx, rh), pairPartition(w), strconv.Itoa(w), nil)
				rdone := time.Now()
				if err != nil {
					fail("worker %d: read of version %d through front end %d (%+v): %v", w, n, ri, *rh, err)
					continue
				}
				source, pos, err := rh.served()
				if err != nil {
					fail("worker %d: %v", w, err)
					continue
				}
				var e struct{ N int }
				if err := json.Unmarshal(resp.Value, &e); err != nil {
					fail("worker %d: entity %s: %v", w, resp.Value, err)
					continue
				}
				r := pairRead{source: source, readPos: pos, wrote: n, writePos: wpos, seen: e.N, writeSent: wsent, readDone: rdone}
				if e.N < 0 || e.N > n {
					fail("worker %d: read version %d after writing version %d", w, e.N, n)
					continue
				}
				if e.N > 0 {
					r.prevPos = tokens[e.N-1]
				}
				reads = append(reads, r)
			}
		})
	}
	wg.Wait()
	run.took = time.Since(began)
	run.busy, run.workers = busy.Load(), workers
	run.slowest = time.Duration(slowest.Load())
	return run
}

// bySource counts reads by source, with those that satisfy pred.
type sourceCount struct{ reads, hits int }

func countBySource(reads []pairRead, pred func(pairRead) bool) map[string]*sourceCount {
	out := map[string]*sourceCount{}
	for _, r := range reads {
		c := out[r.source]
		if c == nil {
			c = &sourceCount{}
			out[r.source] = c
		}
		c.reads++
		if pred(r) {
			c.hits++
		}
	}
	return out
}

// describe writes counts by source, largest first, with shares.
func describe(counts map[string]*sourceCount, total int, hits string) string {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return counts[names[i]].reads > counts[names[j]].reads })
	var b strings.Builder
	for _, n := range names {
		c := counts[n]
		fmt.Fprintf(&b, "\n  %-28s %6d reads (%5.1f%%), %d %s", n, c.reads, 100*float64(c.reads)/float64(max(total, 1)), c.hits, hits)
	}
	return b.String()
}

// checkPairs fails the test on every failed request, on more 503 ServerBusy answers to
// upserts (each then sent again) than a burst that refuses every worker three times plus
// one in a hundred upserts (a server that refuses every write earns one per pair or
// more), and on reads whose headers contradict what they returned: a read that saw a
// version is at a position past the write before it (that version's commit comes after
// that write's token). When requests failed or were refused, the front ends' own account
// of why comes first.
func checkPairs(t *testing.T, fes []*replicaFrontEnd, run pairRun, pairs int) {
	t.Helper()
	if len(run.errors) > 0 || run.busy > 0 {
		for i, fe := range fes {
			if why := logLines(fe.srv, 5, "storage unavailable", "request failed"); why != "" {
				t.Logf("front end %d logged:\n%s", i, why)
			}
		}
	}
	if run.busy > 0 || run.slowest > 5*time.Second {
		t.Logf("%d upserts answered 503 ServerBusy and sent again; the slowest upsert took %v", run.busy, run.slowest.Round(time.Millisecond))
	}
	if limit := int64(3*run.workers + pairs/100); run.busy > limit {
		t.Errorf("%d 503 ServerBusy answers to %d upserts by %d workers; want at most %d", run.busy, pairs, run.workers, limit)
	}
	for i, e := range run.errors {
		if i == 10 {
			t.Errorf("... %d failed requests in all", len(run.errors))
			break
		}
		t.Error(e)
	}
	if len(run.errors) == 0 && len(run.reads) != pairs {
		t.Errorf("%d reads recorded for %d pairs", len(run.reads), pairs)
	}
	bad := 0
	for _, r := range run.reads {
		if r.readPos <= r.prevPos {
			if bad++; bad <= 5 {
				t.Errorf("a read from %s returned version %d at x-cerulean-read-position %d, which is not past the token %d of the write before it",
					r.source, r.seen, r.readPos, r.prevPos)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d reads report a position before the state they returned", bad)
	}
}

// TestReplicaReadYourWrites: three front ends, each with both shared standbys (one of
// them 2 s behind), 96 workers doing write-then-read pairs across random front ends with
// the write's session token at Session: every read returns the version its pair wrote
// (0 stale reads, 0 failed requests over 20,000 pairs; an upsert answered 503 ServerBusy
// is sent again, as the SDKs do, and checkPairs bounds how often), at a position at or
// past the token, while the replicas serve a large share of the reads (issue 12's goal
// 60%; asserted ≥ 30%, a floor a loaded 2-core machine keeps).
func TestReplicaReadYourWrites(t *testing.T) {
	prompt, delayed, promptSrc, delayedSrc, _ := sharedReplicas(t)
	fes := startReplicaFrontEnds(t, 3, prompt, delayed)
	waitReplicas(t, fes, "in rotation", time.Minute, inRotation, promptSrc, delayedSrc)
	const workers, pairs = 96, 20_000
	clients, v0 := pairTable(t, fes, workers, promptSrc, delayedSrc)

	run := runPairs(t, clients, v0, workers, pairs, pairMode{level: "Session", token: true})
	checkPairs(t, fes, run, pairs)
	stale, early := 0, 0
	for _, r := range run.reads {
		if r.stale() {
			if stale++; stale <= 10 {
				t.Errorf("stale read: version %d written (token %d), version %d read from %s at position %d", r.wrote, r.writePos, r.seen, r.source, r.readPos)
			}
		}
		// A Session read is served at the token's position or later.
		if r.readPos < r.writePos {
			if early++; early <= 10 {
				t.Errorf("Session read with token %d answered from %s at position %d", r.writePos, r.source, r.readPos)
			}
		}
	}
	counts := countBySource(run.reads, pairRead.stale)
	replica := 0
	for src, c := range counts {
		if src != "primary" {
			replica += c.reads
			if src != promptSrc && src != delayedSrc {
				t.Errorf("%d reads from %q, which is neither replica", c.reads, src)
			}
		}
	}
	share := float64(replica) / float64(max(len(run.reads), 1))
	t.Logf("%d pairs (96 workers, 3 front ends) in %v: %.0f pairs/s; %d stale reads, %d failed requests; replicas served %.1f%% of the reads:%s",
		len(run.reads), run.took.Round(time.Millisecond), float64(len(run.reads))/run.took.Seconds(), stale, len(run.errors),
		100*share, describe(counts, len(run.reads), "stale"))
	if stale > 0 || early > 0 {
		t.Errorf("%d stale reads, %d reads before their token's position, over %d Session pairs", stale, early, len(run.reads))
	}
	if len(run.reads) > 0 && share < 0.30 {
		t.Errorf("replicas served %.1f%% of the Session reads; want at least 30%% (the goal is 60%%)", 100*share)
	}
}

// TestReplicaEventualIsStale: the same pairs at Eventual (which ignores the token) read
// stale versions from the delayed standby — staleness is real, so the Session result
// means something — and never from the primary; no read's position contradicts what it
// returned, and a stale read from the delayed standby answered within its delay of the
// upsert reports a position before the write's. Strong, and no header (the server's default, Strong), never read a replica
// and are never stale, with or without a token.
func TestReplicaEventualIsStale(t *testing.T) {
	prompt, delayed, promptSrc, delayedSrc, delay := sharedReplicas(t)
	fes := startReplicaFrontEnds(t, 3, prompt, delayed)
	waitReplicas(t, fes, "in rotation", time.Minute, inRotation, promptSrc, delayedSrc)
	const workers = 96
	clients, v0 := pairTable(t, fes, workers, promptSrc, delayedSrc)

	t.Run("Eventual", func(t *testing.T) {
		const pairs = 2_000
		run := runPairs(t, clients, v0, workers, pairs, pairMode{level: "Eventual", token: true})
		checkPairs(t, fes, run, pairs)
		counts := countBySource(run.reads, pairRead.stale)
		t.Logf("%d Eventual pairs in %v (delayed standby %v behind):%s", len(run.reads), run.took.Round(time.Millisecond), delay,
			describe(counts, len(run.reads), "stale"))
		for src, c := range counts {
			if src != promptSrc && src != delayedSrc && src != "primary" {
				t.Errorf("%d reads from %q, which is neither replica", c.reads, src)
			}
		}
		if c := counts["primary"]; c != nil && c.hits > 0 {
			t.Errorf("%d stale reads from the primary", c.hits)
		}
		if c := counts[delayedSrc]; c == nil || c.hits == 0 {
			t.Errorf("no stale read from the delayed standby %s (%+v): Eventual reads must be able to see its old state", delayedSrc, c)
		}
		if c := counts[promptSrc]; c == nil || c.reads == 0 {
			t.Errorf("the prompt standby %s served no Eventual read", promptSrc)
		}
		// A stale read's position bounds the state it saw from above, so it is before
		// the write it missed when the write cannot have been replayed yet as the
		// position was read. The delayed standby applies a commit no sooner than the
		// delay after the commit (recovery_min_apply_delay, against the commit's
		// timestamp, on this machine's one clock), and the commit came after the upsert
		// was sent: so a read from it answered within the delay of that send holds a
		// position before the write's token, exactly. Later than that (a loaded machine
		// may hold a request for seconds), and on the prompt standby at any time, the
		// write may be replayed between the read and its position: not a contradiction,
		// only counted.
		ahead, checked, late := map[string]int{}, 0, 0
		for _, r := range run.reads {
			if !r.stale() {
				continue
			}
			bound := r.source == delayedSrc && r.readDone.Before(r.writeSent.Add(delay))
			if bound {
				checked++
			} else if r.source == delayedSrc {
				late++
			}
			if r.readPos >= r.writePos {
				ahead[r.source]++
				if bound && ahead[r.source] <= 5 {
					t.Errorf("stale read from %s: version %d of %d, at position %d, not before the write's token %d, answered %v after the upsert was sent",
						r.source, r.seen, r.wrote, r.readPos, r.writePos, r.readDone.Sub(r.writeSent).Round(time.Millisecond))
				}
			}
		}
		if len(ahead) > 0 || late > 0 {
			t.Logf("stale reads reporting a position at or past the write they missed (replayed while they ran): %v; stale reads from the delayed standby answered more than %v after their upsert was sent: %d", ahead, delay, late)
		}
		if checked == 0 {
			t.Errorf("none of the delayed standby's stale reads was answered within %v of its upsert (%d later): its positions went unchecked", delay, late)
		}
	})

	for _, mode := range []pairMode{{"Strong", true}, {"Strong", false}, {"", true}, {"", false}} {
		name := mode.level
		if name == "" {
			name = "NoHeader"
		}
		if mode.token {
			name += "WithToken"
		}
		t.Run(name, func(t *testing.T) {
			const pairs = 300
			run := runPairs(t, clients, v0, 32, pairs, mode)
			checkPairs(t, fes, run, pairs)
			counts := countBySource(run.reads, pairRead.stale)
			for src, c := range counts {
				if src != "primary" {
					t.Errorf("%d of %d reads at %+v served by %s", c.reads, len(run.reads), mode, src)
				}
				if c.hits > 0 {
					t.Errorf("%d stale reads at %+v from %s", c.hits, mode, src)
				}
			}
			t.Logf("%+v: %d pairs in %v:%s", mode, len(run.reads), run.took.Round(time.Millisecond), describe(counts, len(run.reads), "stale"))
		})
	}
}

// TestReplicaPagingSession: a partition of 60 entities is rewritten without pause, each
// generation in one transaction (so every state holds one generation), through random
// front ends, while a reader pages through it with $top=7, each page through a random
// front end: the generation never goes down from one page to the next of a listing, each
// page holds one generation, and each listing returns every entity once, in order —
// at Session (each page sends the previous answer's token) and at Eventual (no token:
// only the continuation's position keeps the pages in order). A control run at Eventual
// with the positions cut from the continuation tokens (as an earlier server wrote them)
// does go back in time, which shows the standbys' states really differ.
func TestReplicaPagingSession(t *testing.T) {
	prompt, delayed, promptSrc, delayedSrc, _ := sharedReplicas(t)
	fes := startReplicaFrontEnds(t, 3, prompt, delayed)
	waitReplicas(t, fes, "in rotation", time.Minute, inRotation, promptSrc, delayedSrc)
	_, name := newTable(t, fes[0].svc)
	clients := make([]*aztables.Client, len(fes))
	for i, fe := range fes {
		clients[i] = fe.svc.NewClient(name)
	}
	const entities = 60
	generation := func(cx context.Context, c *aztables.Client, g int) (string, error) {
		actions := make([]aztables.TransactionAction, entities)
		for i := range actions {
			b, _ := json.Marshal(map[string]any{"PartitionKey": "g", "RowKey": fmt.Sprintf("r%02d", i), "G": g})
			actions[i] = aztables.TransactionAction{ActionType: aztables.TransactionTypeInsertReplace, Entity: b}
		}
		h := &readHeaders{}
		_, err := c.SubmitTransaction(withReadHeaders(cx, h), actions, nil)
		return h.session, err
	}
	first, err := generation(ctx(t), clients[0], 1)
	if err != nil {
		t.Fatal(err)
	}
	// Both standbys hold generation 1 before any read: a listing never finds the
	// partition empty.
	pos, err := tokenPosition(first)
	if err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, fes, "caught up with generation 1", time.Minute, func(s replicaState) bool {
		p, err := parseLSN(s.ReplayPosition)
		return inRotation(s) && err == nil && p >= pos
	}, promptSrc, delayedSrc)

	stop := make(chan struct{})
	var (
		writerErr   error
		generations atomic.Int64
		writer      sync.WaitGroup
	)
	generations.Store(1)
	writer.Go(func() {
		cx, cancel := ctxWithTimeout(10 * time.Minute)
		defer cancel()
		for g := 2; ; g++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := generation(cx, clients[rand.IntN(len(clients))], g); err != nil {
				writerErr = fmt.Errorf("generation %d: %w", g, err)
				return
			}
			generations.Store(int64(g))
		}
	})
	stopWriter := sync.OnceFunc(func() { close(stop); writer.Wait() })
	t.Cleanup(stopWriter)

	filter := "PartitionKey eq 'g'"
	top := int32(7)
	token := first
	// listing pages through the partition once; it returns the generation of each page
	// and its source, or a description of what went wrong.
	listing := func(level string, sendToken, cutPositions bool) (gens []int, sources []string, problem string) {
		var npk, nrk *string
		var want int
		var lastPos uint64
		for page := 0; ; page++ {
			if page > 2*entities {
				return gens, sources, "paging does not end"
			}
			h := &readHeaders{level: level}
			if sendToken {
				h.token = token
			}
			fe := rand.IntN(len(clients))
			p, err := clients[fe].NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter, Top: &top,
				NextPartitionKey: npk, NextRowKey: nrk}).NextPage(withReadHeaders(ctx(t), h))
			if err != nil {
				return gens, sources, fmt.Sprintf("page %d through front end %d: %v", page, fe, err)
			}
			source, pos, err := h.served()
			if err != nil {
				return gens, sources, fmt.Sprintf("page %d: %v", page, err)
			}
			if !cutPositions && pos < lastPos {
				return gens, sources, fmt.Sprintf("page %d from %s at position %d, the page before at %d", page, source, pos, lastPos)
			}
			lastPos = pos
			token = h.session
			g := -1
			for _, raw := range p.Entities {
				var e struct {
					RowKey string
					G      int
				}
				if err := json.Unmarshal(raw, &e); err != nil {
					return gens, sources, fmt.Sprintf("page %d: %v", page, err)
				}
				if e.RowKey != fmt.Sprintf("r%02d", want) {
					return gens, sources, fmt.Sprintf("page %d: RowKey %q where r%02d was due", page, e.RowKey, want)
				}
				want++
				if g != -1 && e.G != g {
					return gens, sources, fmt.Sprintf("page %d from %s holds generations %d and %d: one statement saw half a transaction", page, source, g, e.G)
				}
				g = e.G
			}
			if len(p.Entities) > int(top) || (len(p.Entities) == 0 && want < entities) {
				return gens, sources, fmt.Sprintf("page %d holds %d entities at $top %d", page, len(p.Entities), top)
			}
			if g != -1 {
				gens = append(gens, g)
				sources = append(sources, source)
			}
			npk, nrk = p.NextPartitionKey, p.NextRowKey
			if (npk == nil || *npk == "") && (nrk == nil || *nrk == "") {
				break
			}
			if cutPositions && nrk != nil {
				// 1!<n>!<base64>!<position> → 1!<n>!<base64>
				if parts := strings.Split(*nrk, "!"); len(parts) == 4 {
					nrk = new(string)
					*nrk = strings.Join(parts[:3], "!")
				}
			}
		}
		if want != entities {
			return gens, sources, fmt.Sprintf("%d entities listed, want %d", want, entities)
		}
		return gens, sources, ""
	}

	const listings = 100
	for _, c := range []struct {
		name, level string
		sendToken   bool
	}{{"Session", "Session", true}, {"Eventual", "Eventual", false}} {
		t.Run(c.name, func(t *testing.T) {
			pages, mixed := 0, 0
			bySource := map[string]int{}
			for l := range listings {
				gens, sources, problem := listing(c.level, c.sendToken, false)
				if problem != "" {
					t.Fatalf("listing %d: %s (generations %v from %q)", l, problem, gens, sources)
				}
				for i := 1; i < len(gens); i++ {
					if gens[i] < gens[i-1] {
						t.Errorf("listing %d went back in time: generation %d on page %d (%s) after %d on page %d (%s)",
							l, gens[i], i, sources[i], gens[i-1], i-1, sources[i-1])
					}
				}
				pages += len(gens)
				for _, s := range sources {
					bySource[s]++
				}
				if len(slices.Compact(slices.Clone(sources))) > 1 {
					mixed++
				}
			}
			t.Logf("%s: %d listings, %d pages (%d listings served by more than one source), pages by source %v; %d generations written so far",
				c.name, listings, pages, mixed, bySource, generations.Load())
			replicaPages := 0
			for s, n := range bySource {
				if s != "primary" {
					replicaPages += n
				}
			}
			if replicaPages == 0 {
				t.Errorf("no page was served by a replica: the test shows nothing about replicas")
			}
			if c.level == "Eventual" && bySource[delayedSrc] == 0 {
				t.Errorf("no page at Eventual was served by the delayed standby %s", delayedSrc)
			}
		})
	}

	t.Run("EventualWithoutPositions", func(t *testing.T) {
		back := 0
		for l := range listings {
			gens, sources, problem := listing("Eventual", false, true)
			if problem != "" {
				t.Fatalf("listing %d: %s (generations %v from %q)", l, problem, gens, sources)
			}
			for i := 1; i < len(gens); i++ {
				if gens[i] < gens[i-1] {
					back++
					break
				}
			}
		}
		t.Logf("without positions in the continuation tokens, %d of %d listings went back in time", back, listings)
		if back == 0 {
			t.Errorf("no listing went back in time without positions: the control shows no difference between the standbys")
		}
	})

	stopWriter()
	if writerErr != nil {
		t.Errorf("writer: %v", writerErr)
	}
}

// TestReplicaKilledUnderLoad: front ends with two replicas — a private standby and the
// shared prompt one — under writes and Session and Eventual reads from many workers; the
// private standby is killed (pg_ctl stop -m immediate), and later started again. No
// request fails at any time; while it is down the reads go to the other replica or the
// primary, and the front ends take it out of rotation; once started it comes back into
// rotation by itself and serves reads again.
func TestReplicaKilledUnderLoad(t *testing.T) {
	primary := postgresURL(t)
	prompt, _, promptSrc, _, _ := sharedReplicas(t)
	u, err := url.Parse(primary)
	if err != nil || strings.Trim(u.Path, "/") == "" {
		t.Fatalf("CERULEAN_TEST_POSTGRES_URL %q: want a URL naming the database (%v)", primary, err)
	}
	standby := pgtest.StartStandby(t, pgtest.StandbyOptions{})
	privateURL := standby.URL(strings.Trim(u.Path, "/"))
	privateSrc := replicaSource(t, privateURL)
	fes := startReplicaFrontEnds(t, 2, privateURL, prompt)
	waitReplicas(t, fes, "in rotation", time.Minute, inRotation, privateSrc, promptSrc)
	const workers = 24
	clients, _ := pairTable(t, fes, workers, privateSrc, promptSrc)
	restartPoint(t, fes, primary, privateURL, privateSrc)

	// Phases: a request is counted in a phase if it began and ended in it.
	const (
		before = iota
		killing
		down
		restarted
		phases
	)
	var (
		phase  atomic.Int32
		mu     sync.Mutex
		errs   []string
		served [phases]map[string]int
		total  atomic.Int64
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	for i := range served {
		served[i] = map[string]int{}
	}
	// served counts reads by phase, under "<level> <source>".
	record := func(began int32, h *readHeaders) {
		ended := phase.Load()
		total.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if began == ended {
			served[began][h.level+" "+h.source]++
		}
	}
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf("%s: %s", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...)))
		mu.Unlock()
	}
	// count is how many reads at the levels given a source served in phase p.
	count := func(p int, src string, levels ...string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, l := range levels {
			n += served[p][l+" "+src]
		}
		return n
	}
	both := []string{"Session", "Eventual"}
	for w := range workers {
		wg.Go(func() {
			cx, cancel := ctxWithTimeout(10 * time.Minute)
			defer cancel()
			pk, rk := pairPartition(w), strconv.Itoa(w)
			for n := 1; ; n++ { // version 0 is pairTable's
				select {
				case <-stop:
					return
				default:
				}
				wh := &readHeaders{}
				if _, err := clients[rand.IntN(len(clients))].UpsertEntity(withReadHeaders(cx, wh), pairEntity(w, n), nil); err != nil {
					fail("worker %d: upsert: %v", w, err)
					continue
				}
				for _, level := range []string{"Session", "Eventual"} {
					h := &readHeaders{level: level, token: wh.session}
					began := phase.Load()
					resp, err := clients[rand.IntN(len(clients))].GetEntity(withReadHeaders(cx, h), pk, rk, nil)
					if err != nil {
						fail("worker %d: %s read: %v", w, level, err)
						continue
					}
					var e struct{ N int }
					if err := json.Unmarshal(resp.Value, &e); err != nil {
						fail("worker %d: %s read: %v", w, level, err)
						continue
					}
					if level == "Session" && e.N != n {
						fail("worker %d: Session read from %s returned version %d after version %d was written", w, h.source, e.N, n)
					}
					record(began, h)
				}
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)

	// waitFor waits for cond while the load runs, failing the test after limit.
	waitFor := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !cond() {
			if time.Now().After(deadline) {
				mu.Lock()
				t.Errorf("reads by phase: %v", served)
				mu.Unlock()
				stopLoad()
				t.Fatalf("%s: not after %v", what, limit)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("the private standby serves reads", time.Minute, func() bool { return count(before, privateSrc, both...) >= 100 })

	phase.Store(killing)
	standby.Kill()
	killedAt := time.Now()
	phase.Store(down)
	waitReplicas(t, fes, "out of rotation after the kill", 30*time.Second, func(s replicaState) bool { return !s.InRotation }, privateSrc)
	t.Logf("private standby %s killed; out of rotation on every front end after %v", privateSrc, time.Since(killedAt).Round(time.Millisecond))
	// Reads go on while it is down.
	waitFor("reads while the standby is down", time.Minute, func() bool {
		return count(down, promptSrc, both...)+count(down, "primary", both...) >= 1000
	})

	// Each front end's count of the reads it served, when the standby starts again.
	readsAt := make([]uint64, len(fes))
	for i, fe := range fes {
		states, err := replicaStates(fe)
		if err != nil {
			t.Fatal(err)
		}
		readsAt[i] = states[privateSrc].Reads
	}
	phase.Store(restarted)
	startedAt := time.Now()
	standby.Start()
	waitReplicas(t, fes, "back in rotation", 2*time.Minute, inRotation, privateSrc)
	t.Logf("private standby started (pg_ctl start) and in rotation again on every front end after %v", time.Since(startedAt).Round(time.Millisecond))
	// It serves reads again, Session ones too: it streams from the primary again and
	// keeps up, which Session reads need.
	waitFor("the private standby serves Session reads again", 2*time.Minute, func() bool {
		return count(restarted, privateSrc, "Session") >= 50 && count(restarted, privateSrc, "Eventual") >= 50
	})
	t.Logf("private standby serves Session and Eventual reads again after %v", time.Since(startedAt).Round(time.Millisecond))
	stopLoad() // the workers are gone: no more locking

	t.Logf("%d reads; served by phase (requests that began and ended in it): before %v, down %v, restarted %v",
		total.Load(), served[before], served[down], served[restarted])
	for i, e := range errs {
		if i == 10 {
			t.Errorf("... %d failed requests in all", len(errs))
			break
		}
		t.Error(e)
	}
	if n := count(down, privateSrc, both...); n > 0 {
		t.Errorf("%d reads served by the killed standby while it was down", n)
	}
	if count(down, promptSrc, "Eventual") == 0 || count(down, promptSrc, "Session")+count(down, "primary", "Session") == 0 {
		t.Errorf("while the private standby was down, Session and Eventual reads were not both served elsewhere: %v", served[down])
	}
	for i, fe := range fes {
		states, err := replicaStates(fe)
		if err != nil {
			t.Fatal(err)
		}
		if s := states[privateSrc]; !inRotation(s) || s.Reads <= readsAt[i] {
			t.Errorf("front end %d: /debug/replicas after the restart: %+v; %d reads when it started", i, s, readsAt[i])
		}
	}
}

// restartPoint makes the standby at standbyURL (source name src) keep, across a crash,
// everything written so far: a checkpoint on the primary, and once every front end saw
// the standby replay past it, a restartpoint on the standby (CHECKPOINT during recovery),
// which moves its minimum recovery point past that checkpoint. A standby restarted after
// a crash accepts reads once it has replayed to its minimum recovery point; without this,
// that point may still be the base backup's, and for a moment the standby would serve
// (at Eventual, rightly) a state from before the test's table existed.
func restartPoint(t *testing.T, fes []*replicaFrontEnd, primaryURL, standbyURL, src string) {
	t.Helper()
	cx := ctx(t)
	exec := func(u, sql string, scan ...any) {
		t.Helper()
		c, err := pgx.Connect(cx, u)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if len(scan) == 0 {
			_, err = c.Exec(cx, sql)
		} else {
			err = c.QueryRow(cx, sql).Scan(scan...)
		}
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var lsn string
	exec(primaryURL, "CHECKPOINT")
	exec(primaryURL, "SELECT pg_current_wal_insert_lsn()::TEXT", &lsn)
	pos, err := parseLSN(lsn)
	if err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, fes, "past the checkpoint", time.Minute, func(s replicaState) bool {
		p, err := parseLSN(s.ReplayPosition)
		return inRotation(s) && err == nil && p >= pos
	}, src)
	exec(standbyURL, "CHECKPOINT")
}
