package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/pgtest"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
	"github.com/jackc/pgx/v5"
)

// Read replicas at the engine boundary, on the standbys scripts/test starts: where each
// level reads, what it sees, and how a replica that cannot serve is left out.

// replicaEngine opens an engine with the prompt and the delayed standby as replicas,
// and waits until both are in rotation.
func replicaEngine(t *testing.T, opts postgres.Options) *postgres.Engine {
	t.Helper()
	prompt, delayed := replicaURLs(t)
	opts.ReplicaURLs = []string{prompt, delayed}
	e := open(t, opts)
	waitRotation(t, e, 2)
	return e
}

// waitRotation waits until n replicas are in rotation.
func waitRotation(t *testing.T, e *postgres.Engine, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		in := 0
		for _, st := range e.Replicas() {
			if st.InRotation {
				in++
			}
		}
		if in >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d replicas in rotation after 30 s, want %d: %+v", in, n, e.Replicas())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// keepWriting applies muts(1), muts(2), … to partition "p" of table T, pausing every
// between them and calling committed(n) after each, until the returned stop is called.
func keepWriting(t *testing.T, e *postgres.Engine, acct string, every time.Duration, muts func(n int64) []storage.Mutation, committed func(n int64)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := int64(1); ; n++ {
			select {
			case <-done:
				return
			default:
			}
			if _, err := e.Apply(context.Background(), acct, "T", "p", muts(n)); err != nil {
				t.Error(err)
				return
			}
			if committed != nil {
				committed(n)
			}
			time.Sleep(every)
		}
	}()
	return func() { close(done); wg.Wait() }
}

// waitDelay waits out the delayed replica's apply delay, so that it has replayed what
// was written before.
func waitDelay(t *testing.T) {
	t.Helper()
	_, _, d := pgtest.ReplicaURLs(t)
	time.Sleep(d + 500*time.Millisecond)
}

// hostPort is the host:port of a postgres URL, as the engine names a replica.
func hostPort(t *testing.T, url string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(url, "postgres://")
	if !ok {
		t.Fatalf("unexpected url %q", url)
	}
	if i := strings.Index(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// counter reads an Int64 N from a view's Get.
func readN(t *testing.T, v storage.View, acct, tbl, pk, rk string) (int64, error) {
	t.Helper()
	rec, err := v.Get(t.Context(), acct, tbl, pk, rk)
	if err != nil {
		return 0, err
	}
	for _, p := range rec.Entity.Props {
		if p.Name == "N" {
			return p.Value.Int, nil
		}
	}
	return 0, errors.New("no N")
}

func TestReplicaLevels(t *testing.T) {
	e := replicaEngine(t, postgres.Options{})
	ctx, acct := t.Context(), newAccount()
	prompt, delayed := replicaURLs(t)
	promptName, delayedName := hostPort(t, prompt), hostPort(t, delayed)
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	applied, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{mut(storage.InsertOrReplace, "r", i64("N", 1))})
	if err != nil {
		t.Fatal(err)
	}
	waitDelay(t)

	// Strong, and Session without a position, read the primary.
	for _, opts := range []storage.ReadOptions{{}, {Consistency: storage.Strong, At: applied.Position}, {Consistency: storage.Session}} {
		v, err := e.ReadView(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := readN(t, v, acct, "T", "p", "r"); err != nil || n != 1 {
			t.Fatalf("%+v: N = %d, %v", opts, n, err)
		}
		if v.Source() != storage.SourcePrimary {
			t.Fatalf("%+v read from %q, want the primary", opts, v.Source())
		}
		if v.Position() < applied.Position {
			t.Fatalf("%+v: Position %d below the write's %d", opts, v.Position(), applied.Position)
		}
	}

	// Session with the write's position sees it, from the prompt replica or the primary
	// (never the delayed one, 2 s behind a fresh write).
	sources := map[string]int{}
	for i := range 200 {
		applied, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{mut(storage.InsertOrReplace, "r", i64("N", int64(10+i)))})
		if err != nil {
			t.Fatal(err)
		}
		v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: storage.Session, At: applied.Position})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := readN(t, v, acct, "T", "p", "r"); err != nil || n != int64(10+i) {
			t.Fatalf("Session read %d after the write: N = %d, %v (from %s)", i, n, err, v.Source())
		}
		sources[v.Source()]++
		if v.Source() == storage.ReplicaSource(delayedName) {
			t.Fatalf("a Session read right after the write was served by the delayed replica")
		}
	}
	t.Logf("Session reads right after a write: %v", sources)
	if sources[storage.ReplicaSource(promptName)] == 0 {
		t.Fatalf("no Session read was served by the prompt replica: %v", sources)
	}

	// Eventual reads spread over both replicas, and the delayed one shows the state of
	// before the last write: staleness is real.
	last, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{mut(storage.InsertOrReplace, "r", i64("N", 1000))})
	if err != nil {
		t.Fatal(err)
	}
	// Long enough for the prompt replica to replay it, well within the delayed one's delay.
	time.Sleep(200 * time.Millisecond)
	stale := 0
	sources = map[string]int{}
	for range 40 {
		v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: storage.Eventual})
		if err != nil {
			t.Fatal(err)
		}
		n, err := readN(t, v, acct, "T", "p", "r")
		if err != nil {
			t.Fatal(err)
		}
		sources[v.Source()]++
		if v.Source() == storage.SourcePrimary {
			t.Fatalf("an Eventual read went to the primary with both replicas in rotation")
		}
		if n != 1000 {
			stale++
			if v.Source() != storage.ReplicaSource(delayedName) {
				t.Fatalf("stale read (N = %d) from %s", n, v.Source())
			}
			if v.Position() >= last.Position {
				t.Fatalf("a stale read reports Position %d, at or past the write's %d", v.Position(), last.Position)
			}
		}
	}
	t.Logf("Eventual reads: %v, %d stale", sources, stale)
	if stale == 0 || sources[storage.ReplicaSource(promptName)] == 0 {
		t.Fatalf("Eventual reads: %v, %d stale; want reads from both replicas and stale ones from the delayed", sources, stale)
	}

	// Eventual with a position to cover (a continuation's) never reads older than it.
	for range 40 {
		v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: storage.Eventual, At: last.Position})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := readN(t, v, acct, "T", "p", "r"); err != nil || n != 1000 {
			t.Fatalf("Eventual read at the write's position: N = %d, %v (from %s)", n, err, v.Source())
		}
	}
}

// TestReplicaBoundedStaleness: while writes go on, a bound shorter than the delayed
// replica's delay keeps reads off it, and what they read is no older than the bound.
func TestReplicaBoundedStaleness(t *testing.T) {
	e := replicaEngine(t, postgres.Options{MaxStaleness: 500 * time.Millisecond})
	_, delayed := replicaURLs(t)
	delayedName := hostPort(t, delayed)
	ctx, acct := t.Context(), newAccount()
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	// A writer that keeps the primary moving, recording when each value committed.
	var mu sync.Mutex
	committed := map[int64]time.Time{}
	defer keepWriting(t, e, acct, 5*time.Millisecond, func(n int64) []storage.Mutation {
		return []storage.Mutation{mut(storage.InsertOrReplace, "r", i64("N", n))}
	}, func(n int64) {
		mu.Lock()
		committed[n] = time.Now()
		mu.Unlock()
	})()
	// Let the delayed replica fall its delay behind.
	time.Sleep(3 * time.Second)
	sources := map[string]int{}
	for range 100 {
		start := time.Now()
		v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: storage.BoundedStaleness})
		if err != nil {
			t.Fatal(err)
		}
		n, err := readN(t, v, acct, "T", "p", "r")
		if err != nil {
			t.Fatal(err)
		}
		sources[v.Source()]++
		if v.Source() == storage.ReplicaSource(delayedName) {
			t.Fatalf("a BoundedStaleness read (500 ms) went to the replica 2 s behind: %+v", e.Replicas())
		}
		// The next value committed before the read started would show a read older
		// than the bound (plus the poll's resolution).
		mu.Lock()
		next, ok := committed[n+1]
		mu.Unlock()
		if ok && start.Sub(next) > time.Second {
			t.Fatalf("read N = %d from %s, but N = %d committed %v before the read", n, v.Source(), n+1, start.Sub(next))
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("BoundedStaleness reads: %v", sources)
}

// TestReplicaNotAStandby: a replica URL that points at a primary (here: the primary
// itself) or at nothing is never read, and reads at every level still succeed.
func TestReplicaNotAStandby(t *testing.T) {
	url := testURL(t)
	// A port nothing listens on: the listener is closed before the engine starts.
	closed := strings.Replace(url, hostPort(t, url), "127.0.0.1:1", 1)
	e := open(t, postgres.Options{ReplicaURLs: []string{url, closed}, ReplicaPoll: 20 * time.Millisecond})
	ctx, acct := t.Context(), newAccount()
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{mut(storage.Insert, "r", i64("N", 7))}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		sts := e.Replicas()
		if len(sts) == 2 && sts[0].Error != "" && sts[0].Error != "not polled yet" && sts[1].Error != "" && sts[1].Error != "not polled yet" {
			if sts[0].InRotation || sts[1].InRotation || !sts[0].Reachable || sts[1].Reachable {
				t.Fatalf("status %+v", sts)
			}
			if !strings.Contains(sts[0].Error, "not in recovery") || !strings.Contains(sts[1].Error, "unreachable") {
				t.Fatalf("status %+v", sts)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status after 10 s: %+v", sts)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range []storage.Consistency{storage.Strong, storage.BoundedStaleness, storage.Session, storage.ConsistentPrefix, storage.Eventual} {
		v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: c, At: 1})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := readN(t, v, acct, "T", "p", "r"); err != nil || n != 7 || v.Source() != storage.SourcePrimary {
			t.Fatalf("%v: N = %d, %v from %s", c, n, err, v.Source())
		}
	}
}

// TestReplicaPaging: pages of one query read at every level, each at the position of
// the one before, while a writer rewrites the whole partition in one Apply each time:
// no page shows an older generation than the page before it.
func TestReplicaPaging(t *testing.T) {
	e := replicaEngine(t, postgres.Options{})
	ctx, acct := t.Context(), newAccount()
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	gen := func(n int64) []storage.Mutation {
		muts := make([]storage.Mutation, 50)
		for i := range muts {
			muts[i] = mut(storage.InsertOrReplace, fmt.Sprintf("r%02d", i), i64("N", n))
		}
		return muts
	}
	if _, err := e.Apply(ctx, acct, "T", "p", gen(0)); err != nil {
		t.Fatal(err)
	}
	waitDelay(t) // until the delayed replica has the table
	defer keepWriting(t, e, acct, 10*time.Millisecond, gen, nil)()
	time.Sleep(500 * time.Millisecond)
	for _, level := range []storage.Consistency{storage.Eventual, storage.ConsistentPrefix, storage.Session, storage.BoundedStaleness} {
		backwards, pages := 0, 0
		for range 10 {
			var at storage.Position
			seen := int64(-1)
			start := storage.Key{}
			for {
				v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: level, At: at})
				if err != nil {
					t.Fatal(err)
				}
				res, err := v.Scan(ctx, acct, "T", storage.ScanRequest{Start: start, Limit: 5})
				if err != nil {
					t.Fatal(err)
				}
				pages++
				for _, rec := range res.Records {
					n := rec.Entity.Props[0].Value.Int
					if n < seen {
						backwards++
						t.Errorf("%v: a page from %s shows generation %d after a page showed %d", level, v.Source(), n, seen)
					}
					seen = max(seen, n)
				}
				if v.Position() < at {
					t.Fatalf("%v: Position %d below the position asked for %d", level, v.Position(), at)
				}
				at = v.Position()
				if res.Next == nil {
					break
				}
				start = *res.Next
			}
		}
		if backwards > 0 {
			t.Fatalf("%v: %d of %d pages went back in time", level, backwards, pages)
		}
	}
}

// TestReplicaConcurrentSession: many readers each write and read their write back at
// Session level: never a stale read.
func TestReplicaConcurrentSession(t *testing.T) {
	e := replicaEngine(t, postgres.Options{})
	ctx, acct := context.Background(), newAccount()
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		sources = map[string]int{}
		wg      sync.WaitGroup
	)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pk := fmt.Sprintf("w%d", w)
			for i := range 100 {
				applied, err := e.Apply(ctx, acct, "T", pk, []storage.Mutation{mut(storage.InsertOrReplace, "r", i64("N", int64(i)))})
				if err != nil {
					t.Error(err)
					return
				}
				v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: storage.Session, At: applied.Position})
				if err != nil {
					t.Error(err)
					return
				}
				n, err := readN(t, v, acct, "T", pk, "r")
				if err != nil || n != int64(i) {
					t.Errorf("writer %d: read N = %d, %v from %s after writing %d", w, n, err, v.Source(), i)
					return
				}
				mu.Lock()
				sources[v.Source()]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("Session reads: %v", sources)
}

// TestReplicaKilled: a replica killed under load fails no read — they move to the other
// replica or the primary — and it comes back into rotation by itself once restarted.
func TestReplicaKilled(t *testing.T) {
	url := testURL(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	standby := pgtest.StartStandby(t, pgtest.StandbyOptions{})
	prompt, _ := replicaURLs(t)
	mine := standby.URL(cfg.Database)
	e := open(t, postgres.Options{ReplicaURLs: []string{mine, prompt}, ReplicaPoll: 20 * time.Millisecond})
	waitRotation(t, e, 2)
	mineSource := storage.ReplicaSource(hostPort(t, mine))
	ctx, acct := t.Context(), newAccount()
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		sources = map[string]int{}
		failed  []error
		phase   = "before"
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pk := fmt.Sprintf("w%d", w)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				applied, err := e.Apply(ctx, acct, "T", pk, []storage.Mutation{mut(storage.InsertOrReplace, "r", i64("N", int64(i)))})
				if err != nil {
					mu.Lock()
					failed = append(failed, fmt.Errorf("write: %w", err))
					mu.Unlock()
					return
				}
				level := []storage.Consistency{storage.Session, storage.Eventual}[i%2]
				v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: level, At: applied.Position})
				if err == nil {
					var n int64
					n, err = readN(t, v, acct, "T", pk, "r")
					if err == nil && n != int64(i) {
						err = fmt.Errorf("%v read N = %d after writing %d, from %s", level, n, i, v.Source())
					}
				}
				mu.Lock()
				if err != nil {
					failed = append(failed, fmt.Errorf("%s: %w", phase, err))
				} else {
					sources[phase+" "+v.Source()]++
				}
				mu.Unlock()
			}
		}()
	}
	setPhase := func(p string) {
		mu.Lock()
		phase = p
		mu.Unlock()
	}
	// servedBy waits at least a second, and then until the replica has served a read in
	// the current phase (at most 20 s): on a loaded machine the first second may see
	// only a few dozen reads (CI once had 49, all from the primary).
	servedBy := func(key string) {
		time.Sleep(time.Second)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			n := sources[key]
			mu.Unlock()
			if n > 0 {
				return
			}
		}
	}
	servedBy("before " + mineSource)
	setPhase("killed")
	standby.Kill()
	// Out of rotation, by the reads' failures or the next poll.
	deadline := time.Now().Add(10 * time.Second)
	for e.Replicas()[0].InRotation {
		if time.Now().After(deadline) {
			t.Fatalf("the killed replica is still in rotation: %+v", e.Replicas())
		}
		time.Sleep(10 * time.Millisecond)
	}
	setPhase("down")
	time.Sleep(time.Second)
	setPhase("restarting")
	standby.Start()
	waitRotation(t, e, 2)
	setPhase("back")
	servedBy("back " + mineSource)
	close(stop)
	wg.Wait()
	t.Logf("reads by phase and source: %v", sources)
	for _, err := range failed {
		t.Error(err)
	}
	if sources["before "+mineSource] == 0 || sources["back "+mineSource] == 0 {
		t.Fatalf("the replica served no reads before the kill or after its restart: %v", sources)
	}
	if sources["down "+mineSource] != 0 {
		t.Fatalf("reads were served by the replica while it was down: %v", sources)
	}
	if sources["down replica "+hostPort(t, prompt)]+sources["down primary"] == 0 {
		t.Fatalf("no reads while the replica was down: %v", sources)
	}
}

// TestReplicaWrongDatabase (issue 44): a replica URL that names the right standby but
// another database — here /postgres, which has no Cerulean schema — is refused at start-up
// with a message that names the replica, the database and the problem. Before, it was
// shown in rotation and failed every read there.
func TestReplicaWrongDatabase(t *testing.T) {
	testURL(t)
	prompt, _ := replicaURLs(t)
	wrong, err := pgtest.DatabaseURL(prompt, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	e, err := postgres.Open(t.Context(), testURL(t), postgres.Options{ReplicaURLs: []string{wrong}})
	if err == nil {
		e.Close()
		t.Fatalf("Open with a replica URL naming database postgres succeeded")
	}
	t.Logf("refused: %v", err)
	for _, want := range []string{"replica " + hostPort(t, prompt), `database "postgres"`, "no Cerulean schema", "another database"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

// TestReplicaSchemaNotReplayedYet: a fresh database whose standby has not replayed it yet
// (the delayed one, 2 s behind) is no misconfiguration: the engine opens with the replica
// out of rotation, saying why, and takes it in once it has replayed the schema.
func TestReplicaSchemaNotReplayedYet(t *testing.T) {
	_, delayed := replicaURLs(t)
	db := fmt.Sprintf("h44_fresh_%d", time.Now().UnixNano())
	primary := pgtest.CreateDatabase(t, db)
	replica, err := pgtest.DatabaseURL(delayed, db)
	if err != nil {
		t.Fatal(err)
	}
	e, err := postgres.Open(t.Context(), primary, postgres.Options{ReplicaURLs: []string{replica}, ReplicaPoll: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer e.Close()
	st := e.Replicas()[0]
	if st.InRotation || st.Error == "" {
		t.Fatalf("right after the schema was made on the primary, the delayed replica is %+v; want out of rotation, with a reason", st)
	}
	t.Logf("at start-up: %s", st.Error)
	waitRotation(t, e, 1)
}

// logLines collects the lines an engine logs, for tests that check what it says.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

// count is how many lines hold every one of subs.
func (l *logLines) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range l.lines {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		n++
	}
	return n
}

// TestReplicaWrongDatabaseLater: a replica that is down at start-up, and once up turns out
// to be the wrong database, stays out of rotation with the reason in Replicas
// (/debug/replicas) and logged once, however often it is polled.
func TestReplicaWrongDatabaseLater(t *testing.T) {
	standby := pgtest.StartStandby(t, pgtest.StandbyOptions{})
	standby.Kill()
	logs := &logLines{}
	e := open(t, postgres.Options{
		ReplicaURLs: []string{standby.URL("postgres")},
		ReplicaPoll: 10 * time.Millisecond,
		Logger:      slog.New(slog.NewTextHandler(logs, nil)),
	})
	if st := e.Replicas()[0]; st.InRotation || !strings.Contains(st.Error, "unreachable") {
		t.Fatalf("replica down at start-up: %+v", st)
	}
	standby.Start()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(e.Replicas()[0].Error, "no Cerulean schema") {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %+v", e.Replicas()[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second) // a hundred polls
	st := e.Replicas()[0]
	if st.InRotation || !st.Reachable || !strings.Contains(st.Error, `database "postgres"`) {
		t.Fatalf("wrong-database replica: %+v", st)
	}
	if n := logs.count("out of rotation", "no Cerulean schema"); n != 1 {
		t.Fatalf("the reason was logged %d times, want once:\n%s", n, strings.Join(logs.lines, ""))
	}
	t.Logf("out of rotation: %s", st.Error)
}

// TestReplicaRecoveryConflictLogged: when the replay of the primary's WAL ends a replica's
// connections — here a DROP DATABASE of the database the replica URL names — the engine
// logs a recovery conflict, not "unreachable": the replica is up, and says what it did.
func TestReplicaRecoveryConflictLogged(t *testing.T) {
	prompt, _ := replicaURLs(t)
	db := fmt.Sprintf("h44_conflict_%d", time.Now().UnixNano())
	other := pgtest.CreateDatabase(t, db)
	schema, err := postgres.Open(t.Context(), other, postgres.Options{DisablePurger: true}) // Cerulean's schema in it
	if err != nil {
		t.Fatal(err)
	}
	schema.Close()
	replica, err := pgtest.DatabaseURL(prompt, db)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logLines{}
	e := open(t, postgres.Options{
		ReplicaURLs: []string{replica},
		ReplicaPoll: 10 * time.Millisecond,
		Logger:      slog.New(slog.NewTextHandler(logs, nil)),
	})
	waitRotation(t, e, 1)
	c, err := pgx.Connect(t.Context(), pgtest.PrimaryURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(t.Context(), "drop database "+db+" with (force)"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for logs.count("recovery conflict") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery conflict logged 10 s after the drop:\n%s", strings.Join(logs.lines, ""))
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if n := logs.count("unreachable", "conflict with recovery"); n > 0 {
		t.Fatalf("a recovery conflict was logged as unreachable:\n%s", strings.Join(logs.lines, ""))
	}
	t.Logf("logged:\n%s", strings.Join(logs.lines, ""))
}
