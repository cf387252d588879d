package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
	"github.com/jackc/pgx/v5"
)

// followFeed reads tbl's feed from after to its horizon through read, and returns the
// records and the final Next.
func followFeed(t *testing.T, read func(storage.ChangesRequest) (storage.ChangesPage, error), after uint64) ([]storage.Change, uint64) {
	t.Helper()
	var out []storage.Change
	for {
		p, err := read(storage.ChangesRequest{After: after, Limit: 100})
		if err != nil {
			t.Fatalf("ReadChanges(after %d): %v", after, err)
		}
		out = append(out, p.Changes...)
		if p.Next < after {
			t.Fatalf("Next %d went back from %d", p.Next, after)
		}
		after = p.Next
		if len(p.Changes) < 100 {
			return out, after
		}
	}
}

// TestChangeFeedLateCommit is the classic gap of numbers taken out of commit order:
// transaction A writes a row, then waits for a row lock another connection holds;
// meanwhile B writes and commits, and a reader reads past B's records. When A commits,
// the reader, resuming after the last number it saw, must still see A's changes. With
// numbers taken when a change is written (a sequence, or a counter updated early) A's
// would be below B's and the reader would never see them; the counter updated as the
// transaction's last statement numbers A after B.
func TestChangeFeedLateCommit(t *testing.T) {
	ctx := t.Context()
	e := open(t, postgres.Options{DisablePurger: true})
	acct := newAccount()
	if err := e.CreateTable(ctx, acct, "Gap", storage.TableSettings{ChangeFeed: 3600}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(ctx, acct, "Gap", "p", []storage.Mutation{mut(storage.Insert, "a", i64("N", 0)), mut(storage.Insert, "b", i64("N", 0))}); err != nil {
		t.Fatal(err)
	}
	read := func(req storage.ChangesRequest) (storage.ChangesPage, error) {
		return e.ReadChanges(ctx, acct, "Gap", req)
	}
	before, next := followFeed(t, read, 0)
	if len(before) != 2 {
		t.Fatalf("%d records before, want 2", len(before))
	}

	// Another connection holds row b.
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var locked int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM cerulean_entities e JOIN cerulean_tables t ON t.id = e.table_id
		WHERE t.account = $1 AND e.pk = 'p' AND e.rk = 'b' FOR UPDATE OF e) l`, []byte(acct)).Scan(&locked); err != nil || locked != 1 {
		t.Fatalf("lock row b: %d rows, %v", locked, err)
	}

	// A writes a, then waits for b.
	aDone := make(chan error, 1)
	go func() {
		_, err := e.Apply(ctx, acct, "Gap", "p", []storage.Mutation{mut(storage.Replace, "a", i64("N", 1)), mut(storage.Replace, "b", i64("N", 1))})
		aDone <- err
	}()
	waitLockWait(t, conn.Config().Database)

	// B commits meanwhile; the reader reads past it.
	if _, err := e.Apply(ctx, acct, "Gap", "q", []storage.Mutation{mut(storage.Insert, "c", i64("N", 2))}); err != nil {
		t.Fatal(err)
	}
	mid, next2 := followFeed(t, read, next)
	if len(mid) != 1 || mid[0].RowKey != "c" {
		t.Fatalf("while A waits the reader saw %d records %v, want B's", len(mid), mid)
	}
	select {
	case err := <-aDone:
		t.Fatalf("A finished while row b was locked: %v", err)
	default:
	}

	// A commits; the reader resumes after B.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	late, _ := followFeed(t, read, next2)
	var keys []string
	for _, c := range late {
		keys = append(keys, c.RowKey)
	}
	if !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("after B the reader saw %v, want A's changes of a and b (its numbers must follow B's)", keys)
	}
	all, _ := followFeed(t, read, 0)
	if len(all) != 5 {
		t.Fatalf("the feed holds %d records, want 5", len(all))
	}
}

// waitLockWait waits until a backend of database db waits for a lock.
func waitLockWait(t *testing.T, db string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'`, db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no backend waits for the row lock after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestChangeFeedReplicaReads: a reader following a feed through views that read the
// replicas (the delayed one serves an older prefix) and the primary in turn, while
// writers write, sees every acknowledged write exactly once, in Seq order: a replica's
// snapshot holds a gap-free prefix, since records are numbered in commit order.
func TestChangeFeedReplicaReads(t *testing.T) {
	e := replicaEngine(t, postgres.Options{DisablePurger: true})
	ctx, acct := t.Context(), newAccount()
	if err := e.CreateTable(ctx, acct, "Feed", storage.TableSettings{ChangeFeed: 3600}); err != nil {
		t.Fatal(err)
	}
	waitDelay(t) // the delayed replica has the table
	const writers, rounds = 4, 30
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[string]bool{}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				rk := fmt.Sprintf("w%d-%d", w, i)
				if _, err := e.Apply(ctx, acct, "Feed", fmt.Sprintf("p%d", i%3), []storage.Mutation{mut(storage.InsertOrReplace, rk, i64("N", int64(i)))}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked[rk] = true
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var got []storage.Change
	var after uint64
	sources := map[string]int{}
	levels := []storage.ReadOptions{{Consistency: storage.Eventual}, {Consistency: storage.Strong}, {Consistency: storage.BoundedStaleness}}
	for i := 0; ; i++ {
		finished := false
		select {
		case <-done:
			finished = true
		default:
		}
		v, err := e.ReadView(ctx, levels[i%len(levels)])
		if err != nil {
			t.Fatal(err)
		}
		p, err := v.(storage.ChangeReader).ReadChanges(ctx, acct, "Feed", storage.ChangesRequest{After: after, Limit: 7})
		if err != nil {
			t.Fatalf("ReadChanges from %s: %v", v.Source(), err)
		}
		sources[v.Source()]++
		for _, c := range p.Changes {
			if c.Seq <= after {
				t.Fatalf("Seq %d after %d", c.Seq, after)
			}
			after = c.Seq
		}
		got = append(got, p.Changes...)
		after = max(after, p.Next)
		if finished && len(p.Changes) == 0 && v.Source() == storage.SourcePrimary {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if t.Failed() {
		return
	}
	seen := map[string]int{}
	for _, c := range got {
		seen[c.RowKey]++
	}
	for rk := range acked {
		if seen[rk] != 1 {
			t.Fatalf("write %s seen %d times", rk, seen[rk])
		}
	}
	if len(got) != len(acked) {
		t.Fatalf("%d records, %d writes", len(got), len(acked))
	}
	replicaReads := 0
	for s, n := range sources {
		if s != storage.SourcePrimary {
			replicaReads += n
		}
	}
	if replicaReads == 0 {
		t.Fatalf("no read was served by a replica: %v", sources)
	}

	// A replica's ErrFeedOff is an answer (served there), not a failure of the replica
	// that sends the read on to the primary.
	if err := e.CreateTable(ctx, acct, "Plain", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	waitDelay(t)
	fromReplica := 0
	for range 10 {
		v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: storage.Eventual})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.(storage.ChangeReader).ReadChanges(ctx, acct, "Plain", storage.ChangesRequest{Limit: 1}); !errors.Is(err, storage.ErrFeedOff) {
			t.Fatalf("ReadChanges of a table without the feed from %s = %v, want ErrFeedOff", v.Source(), err)
		}
		if v.Source() != storage.SourcePrimary {
			fromReplica++
		}
	}
	if fromReplica == 0 {
		t.Fatal("no replica answered ErrFeedOff: every read went on to the primary")
	}
	for _, st := range e.Replicas() {
		if !st.InRotation {
			t.Fatalf("replica %s left rotation after answering ErrFeedOff: %+v", st.Name, st)
		}
	}
}

// BenchmarkApplyChangeFeed compares single inserts (32 writers through the coalescer,
// one table) and 100-entity batches (8 writers) with the table's change feed off and
// on: the goal is a ratio of at least 0.85. Compare the entities/s of feed=off
// and feed=on of one run.
func BenchmarkApplyChangeFeed(b *testing.B) {
	for _, shape := range []struct {
		name    string
		writers int
		batch   int
	}{{"single/writers=32", 32, 1}, {"batch100/writers=8", 8, 100}} {
		for _, feed := range []int32{0, 3600} {
			b.Run(fmt.Sprintf("%s/feed=%v", shape.name, map[bool]string{false: "off", true: "on"}[feed > 0]), func(b *testing.B) {
				e := open(b, postgres.Options{})
				ctx := context.Background()
				acct := newAccount()
				if err := e.CreateTable(ctx, acct, "F", storage.TableSettings{ChangeFeed: feed}); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = e.DeleteTable(context.Background(), acct, "F") })
				var writer atomic.Int64
				b.SetParallelism(max(1, shape.writers/runtime.GOMAXPROCS(0)))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					w := writer.Add(1)
					for i := 0; pb.Next(); i++ {
						pk := fmt.Sprintf("w%03d-%04d", w, i/100)
						muts := make([]storage.Mutation, shape.batch)
						for j := range muts {
							n := i*shape.batch + j
							muts[j] = storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%08d", n), Props: benchProps(n)}
						}
						if _, err := e.Apply(ctx, acct, "F", pk, muts); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N*shape.batch)/b.Elapsed().Seconds(), "entities/s")
			})
		}
	}
}
