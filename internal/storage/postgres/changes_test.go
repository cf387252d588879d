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

// TestChangeFeedWriteOverExpired: every write path that can write over a stored row
// whose time-to-live has passed (the single statements, alone and merged in a group of
// the coalescer, a batch of inserts or of upserts over arrays, a mixed batch's
// statements, ApplyEach's group and its single statements) records that row's expiry
// right before its own record, in the mutations' order, with the write's exact version
// and expiry; a write over a live row that fails records nothing.
func TestChangeFeedWriteOverExpired(t *testing.T) {
	ctx := t.Context()
	e := open(t, postgres.Options{DisablePurger: true})
	acct := newAccount()
	if err := e.CreateTable(ctx, acct, "Over", storage.TableSettings{Elastic: true, DefaultTTL: 1, ChangeFeed: 3600}); err != nil {
		t.Fatal(err)
	}
	never := i64(storage.DefaultTTLProperty, -1)
	apply := func(pk string, muts ...storage.Mutation) []int64 {
		t.Helper()
		res, err := e.Apply(ctx, acct, "Over", pk, muts)
		if err != nil {
			t.Fatalf("Apply %s: %v", pk, err)
		}
		return res.Versions
	}
	// Rows that expire in a second, and one that lives.
	var muts []storage.Mutation
	for _, rk := range []string{"single", "upsert", "g1", "g2", "g3", "m1", "m2", "u1", "u2", "x1", "x2", "e1", "e2", "f1", "f2"} {
		muts = append(muts, mut(storage.Insert, rk, i64("N", 0)))
	}
	apply("p", muts...)
	apply("p", mut(storage.Insert, "live", i64("N", 0), never))
	_, start := followFeed(t, func(r storage.ChangesRequest) (storage.ChangesPage, error) {
		return e.ReadChanges(ctx, acct, "Over", r)
	}, 0)
	time.Sleep(1500 * time.Millisecond)

	type want struct {
		op      storage.ChangeOp
		rk      string
		version int64
	}
	var wants []want
	wrote := func(op storage.Op, rk string, v int64) {
		wants = append(wants, want{storage.ChangeExpire, rk, 0}, want{storage.ChangeOp(op), rk, v})
	}
	// Single statements, alone.
	v := apply("p", mut(storage.Insert, "single", i64("N", 1), never))
	wrote(storage.Insert, "single", v[0])
	v = apply("p", mut(storage.InsertOrReplace, "upsert", i64("N", 1), never))
	wrote(storage.InsertOrReplace, "upsert", v[0])
	// Single inserts at once, merged by the coalescer when they queue together.
	var wg sync.WaitGroup
	gv := make([]int64, 3)
	for i, rk := range []string{"g1", "g2", "g3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.Apply(ctx, acct, "Over", "p", []storage.Mutation{mut(storage.Insert, rk, i64("N", 1), never)})
			if err != nil {
				t.Error(err)
				return
			}
			gv[i] = res.Versions[0]
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	groupWants := map[string]int64{"g1": gv[0], "g2": gv[1], "g3": gv[2]}
	// Batches: inserts over arrays, upserts over arrays (out of RowKey order: records
	// go in the mutations' order), mixed kinds.
	v = apply("p", mut(storage.Insert, "m2", i64("N", 1), never), mut(storage.Insert, "m1", i64("N", 1), never))
	wrote(storage.Insert, "m2", v[0])
	wrote(storage.Insert, "m1", v[1])
	v = apply("p", mut(storage.InsertOrReplace, "u2", i64("N", 1), never), mut(storage.InsertOrReplace, "u1", i64("N", 1), never))
	wrote(storage.InsertOrReplace, "u2", v[0])
	wrote(storage.InsertOrReplace, "u1", v[1])
	v = apply("p", mut(storage.InsertOrReplace, "x2", i64("N", 1), never), mut(storage.Insert, "x1", i64("N", 1), never))
	wrote(storage.InsertOrReplace, "x2", v[0])
	wrote(storage.Insert, "x1", v[1])
	// ApplyEach: a group of inserts, one failing on the live row; then mixed kinds.
	each, err := e.ApplyEach(ctx, acct, "Over", "p", []storage.Mutation{
		mut(storage.Insert, "e2", i64("N", 1), never), mut(storage.Insert, "live", i64("N", 1)), mut(storage.Insert, "e1", i64("N", 1), never)})
	if err != nil || each.Errs[0] != nil || !errors.Is(each.Errs[1], storage.ErrExists) || each.Errs[2] != nil {
		t.Fatalf("ApplyEach = %+v, %v", each, err)
	}
	wrote(storage.Insert, "e2", each.Versions[0])
	wrote(storage.Insert, "e1", each.Versions[2])
	each, err = e.ApplyEach(ctx, acct, "Over", "p", []storage.Mutation{
		mut(storage.InsertOrReplace, "f2", i64("N", 1), never), mut(storage.Insert, "f1", i64("N", 1), never)})
	if err != nil || each.Errs[0] != nil || each.Errs[1] != nil {
		t.Fatalf("ApplyEach = %+v, %v", each, err)
	}
	wrote(storage.InsertOrReplace, "f2", each.Versions[0])
	wrote(storage.Insert, "f1", each.Versions[1])

	got, _ := followFeed(t, func(r storage.ChangesRequest) (storage.ChangesPage, error) {
		return e.ReadChanges(ctx, acct, "Over", r)
	}, start)
	// The group's records (three pairs, in any order between them) follow the two
	// single statements'.
	var rest []storage.Change
	for i := 0; i < len(got); i++ {
		c := got[i]
		if gv, ok := groupWants[c.RowKey]; ok {
			if c.Op != storage.ChangeExpire || i+1 >= len(got) || got[i+1].RowKey != c.RowKey || got[i+1].Op != storage.ChangeOp(storage.Insert) || got[i+1].Version != gv {
				t.Fatalf("group write of %s: records %v", c.RowKey, got[i:min(i+2, len(got))])
			}
			delete(groupWants, c.RowKey)
			i++
			continue
		}
		rest = append(rest, c)
	}
	if len(groupWants) != 0 {
		t.Fatalf("no records of the group's writes %v in %v", groupWants, got)
	}
	if len(rest) != len(wants) {
		t.Fatalf("%d records besides the group's, want %d: %v", len(rest), len(wants), rest)
	}
	for i, w := range wants {
		c := rest[i]
		if c.Op != w.op || c.RowKey != w.rk || c.Version != w.version || c.PartitionKey != "p" {
			t.Fatalf("record %d = %s %s v%d, want %s %s v%d (all: %v)", i, c.Op, c.RowKey, c.Version, w.op, w.rk, w.version, rest)
		}
		if w.op == storage.ChangeExpire {
			if c.Props != nil || c.Expiry != 0 || c.At == 0 || c.At > rest[i+1].Version {
				t.Fatalf("expiry record %d = %+v", i, c)
			}
			continue
		}
		if c.At != c.Version || c.Expiry != 0 || len(c.Props) != 2 {
			t.Fatalf("record %d = %+v, want At = Version, no expiry, the written properties", i, c)
		}
	}
}

// TestChangeFeedWriteOverConcurrent: a write over a row that another transaction
// created after the write's snapshot, already expired (an exact copy of an expired
// entity, say), must record that row's expiry before its own record. The write's
// statement knows the row written over only as its snapshot holds it (not at all
// here), so it must not write over it: it runs again, and then sees it. Without that
// guard the feed had the insert without the expiry (a consumer saw an insert of a key
// it believed present).
func TestChangeFeedWriteOverConcurrent(t *testing.T) {
	ctx := t.Context()
	e := open(t, postgres.Options{DisablePurger: true})
	acct := newAccount()
	if err := e.CreateTable(ctx, acct, "Race", storage.TableSettings{Elastic: true, ChangeFeed: 3600}); err != nil {
		t.Fatal(err)
	}
	read := func(r storage.ChangesRequest) (storage.ChangesPage, error) {
		return e.ReadChanges(ctx, acct, "Race", r)
	}
	for _, batch := range []bool{false, true} {
		pk := fmt.Sprintf("batch=%v", batch)
		_, start := followFeed(t, read, 0)
		conn, err := pgx.Connect(ctx, testURL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Another writer creates row r, already expired, and has not committed yet.
		if _, err := tx.Exec(ctx, `INSERT INTO cerulean_entities (table_id, pk, rk, version, props, expiry)
			SELECT id, $2::BYTEA, 'r'::BYTEA, 1, ''::BYTEA, 2 FROM cerulean_tables WHERE account = $1 AND name = 'Race'`, []byte(acct), []byte(pk)); err != nil {
			t.Fatal(err)
		}
		muts := []storage.Mutation{mut(storage.Insert, "r", i64("N", 1))}
		if batch {
			muts = append(muts, mut(storage.Insert, "s", i64("N", 1)))
		}
		done := make(chan error, 1)
		var res storage.Applied
		go func() {
			var err error
			res, err = e.Apply(ctx, acct, "Race", pk, muts)
			done <- err
		}()
		waitLockWait(t, conn.Config().Database) // the write waits for the other's row
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		got, _ := followFeed(t, read, start)
		want := []string{"expire r", "insert r"}
		if batch {
			want = append(want, "insert s")
		}
		var have []string
		for _, c := range got {
			have = append(have, fmt.Sprintf("%s %s", c.Op, c.RowKey))
		}
		if !slices.Equal(have, want) {
			t.Fatalf("%s: the feed after the write holds %v, want %v", pk, have, want)
		}
		if got[1].Version != res.Versions[0] {
			t.Fatalf("%s: recorded version %d, the write's %d", pk, got[1].Version, res.Versions[0])
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
				e := open(b, postgres.Options{DisablePurger: true}) // the purge of the previous runs' tables would write meanwhile
				ctx := context.Background()
				acct := newAccount()
				if err := e.CreateTable(ctx, acct, "F", storage.TableSettings{ChangeFeed: feed}); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = e.DeleteTable(context.Background(), acct, "F") })
				var writer atomic.Int64
				b.SetParallelism(max(1, shape.writers/runtime.GOMAXPROCS(0)))
				wal0 := walBytes(b)
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
				b.ReportMetric(float64(walBytes(b)-wal0)/float64(b.N*shape.batch), "WAL-B/entity")
			})
		}
	}
}

// walBytes is the database's WAL position in bytes: the WAL a benchmark's writes made is
// its difference (the test database serves nothing else meanwhile).
func walBytes(b *testing.B) int64 {
	conn, err := pgx.Connect(context.Background(), testURL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int64
	if err := conn.QueryRow(context.Background(), `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::BIGINT`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// TestChangeFeedUpsertFirstInsert: once a front end's InsertOrMerges mostly create their
// entities it tries a plain insert first (applyUpsert); on a feed table that insert's
// record still names the write as asked, InsertOrMerge, alone and when the coalescer
// groups such inserts.
func TestChangeFeedUpsertFirstInsert(t *testing.T) {
	ctx := t.Context()
	e := open(t, postgres.Options{DisablePurger: true})
	acct := newAccount()
	if err := e.CreateTable(ctx, acct, "UpsertFirst", storage.TableSettings{ChangeFeed: 3600}); err != nil {
		t.Fatal(err)
	}
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		if i == n/2 {
			wg.Wait() // the first half one after the other: the front end leans to insert first
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.Apply(ctx, acct, "UpsertFirst", "p", []storage.Mutation{mut(storage.InsertOrMerge, fmt.Sprintf("r%03d", i), i64("N", int64(i)))})
			errs <- err
		}()
		if i < n/2 {
			wg.Wait()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, _ := followFeed(t, func(r storage.ChangesRequest) (storage.ChangesPage, error) {
		return e.ReadChanges(ctx, acct, "UpsertFirst", r)
	}, 0)
	if len(got) != n {
		t.Fatalf("%d records, want %d", len(got), n)
	}
	for _, c := range got {
		if c.Op != storage.ChangeOp(storage.InsertOrMerge) {
			t.Fatalf("record %d of %s: op %v, want %v (the write as asked)", c.Seq, c.RowKey, c.Op, storage.ChangeOp(storage.InsertOrMerge))
		}
	}
}

// TestChangeFeedPurgedTable: a deleted table's rows are purged after its feed's
// records that hold their state by reference (lean records) got it: the old feed, read
// by its id, still holds every write's state after the purge.
func TestChangeFeedPurgedTable(t *testing.T) {
	ctx := t.Context()
	e := open(t, postgres.Options{DisablePurger: true})
	acct := newAccount()
	if err := e.CreateTable(ctx, acct, "Purged", storage.TableSettings{ChangeFeed: 3600}); err != nil {
		t.Fatal(err)
	}
	var muts []storage.Mutation
	for i := range 50 {
		muts = append(muts, mut(storage.Insert, fmt.Sprintf("r%03d", i), i64("N", int64(i))))
	}
	if _, err := e.Apply(ctx, acct, "Purged", "p", muts); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(ctx, acct, "Purged", "p", []storage.Mutation{mut(storage.InsertOrReplace, "r000", i64("N", 100))}); err != nil {
		t.Fatal(err)
	}
	start, err := e.ReadChanges(ctx, acct, "Purged", storage.ChangesRequest{After: storage.AfterNow, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteTable(ctx, acct, "Purged"); err != nil {
		t.Fatal(err)
	}
	if err := e.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := followFeed(t, func(req storage.ChangesRequest) (storage.ChangesPage, error) {
		req.FeedID = start.FeedID
		return e.ReadChanges(ctx, acct, "Purged", req)
	}, 0)
	if len(got) != 52 || got[51].Op != storage.ChangeTableDeleted {
		t.Fatalf("the purged table's feed holds %d records, want 50 inserts, an upsert and table-deleted", len(got))
	}
	for i, c := range got[:51] {
		want := int64(i)
		if i == 50 {
			want = 100
		}
		if len(c.Props) != 1 || c.Props[0].Value.Int != want {
			t.Fatalf("record %d (%v %s) holds %v, want N=%d", i, c.Op, c.RowKey, c.Props, want)
		}
	}
}
