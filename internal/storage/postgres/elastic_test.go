package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tests of the elastic-table machinery the conformance suite cannot see from outside:
// the expiry stored by each write path, expired rows on the batch and array paths, the
// settings cache across front ends, positions across front ends, and the purge of
// expired rows by several front ends at once.

const tick = 10_000_000 // version ticks per second

func ttlProp(v int64) entity.Property { return i64(storage.DefaultTTLProperty, v) }

func testDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db, err := pgxpool.New(context.Background(), testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

type storedRow struct {
	version int64
	expiry  *int64
}

// stored reads a partition's rows as the database holds them, expired ones included.
func stored(t *testing.T, db *pgxpool.Pool, acct, table, pk string) map[string]storedRow {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT rk, version, expiry FROM cerulean_entities
		WHERE table_id = (SELECT id FROM cerulean_tables WHERE account = $1 AND key = $2) AND pk = $3`,
		[]byte(acct), []byte(storage.TableKey(table)), []byte(pk))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]storedRow{}
	for rows.Next() {
		var (
			rk []byte
			r  storedRow
		)
		if err := rows.Scan(&rk, &r.version, &r.expiry); err != nil {
			t.Fatal(err)
		}
		out[string(rk)] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantExpiry checks that a row is stored with the given version and expiry = version +
// seconds (seconds < 0: never).
func wantExpiry(t *testing.T, rows map[string]storedRow, rk string, version int64, seconds int64) {
	t.Helper()
	r, ok := rows[rk]
	switch {
	case !ok:
		t.Fatalf("%s: not stored", rk)
	case r.version != version:
		t.Fatalf("%s: stored version %d, Apply returned %d", rk, r.version, version)
	case seconds < 0 && r.expiry != nil:
		t.Fatalf("%s: expiry %d, want none", rk, *r.expiry)
	case seconds >= 0 && (r.expiry == nil || *r.expiry != version+seconds*tick):
		t.Fatalf("%s: expiry %v, want version %d + %d s", rk, r.expiry, version, seconds)
	}
}

// expire makes rows expired now without waiting: their expiry becomes their version.
func expire(t *testing.T, db *pgxpool.Pool, acct, table, pk string, rks ...string) {
	t.Helper()
	for _, rk := range rks {
		tag, err := db.Exec(context.Background(), `UPDATE cerulean_entities SET expiry = version
			WHERE table_id = (SELECT id FROM cerulean_tables WHERE account = $1 AND key = $2) AND pk = $3 AND rk = $4`,
			[]byte(acct), []byte(storage.TableKey(table)), []byte(pk), []byte(rk))
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("expire %s: %v, %d rows", rk, err, tag.RowsAffected())
		}
	}
}

func mustApply(t *testing.T, e storage.Engine, acct, table, pk string, muts ...storage.Mutation) storage.Applied {
	t.Helper()
	a, err := e.Apply(context.Background(), acct, table, pk, muts)
	if err != nil {
		t.Fatalf("Apply %v: %v", muts, err)
	}
	if len(a.Versions) != len(muts) || a.Position == 0 {
		t.Fatalf("Apply: %+v", a)
	}
	return a
}

func wantApplyErr(t *testing.T, e storage.Engine, acct, table, pk string, index int, want error, muts ...storage.Mutation) {
	t.Helper()
	_, err := e.Apply(context.Background(), acct, table, pk, muts)
	var ae *storage.ApplyError
	if !errors.As(err, &ae) || ae.Index != index {
		t.Fatalf("Apply %v = %v, want an ApplyError at %d", muts, err, index)
	}
	var az *azerr.Error
	if (want == nil && !errors.As(err, &az)) || (want != nil && !errors.Is(err, want)) {
		t.Fatalf("Apply %v = %v, want %v (nil: a validation error)", muts, err, want)
	}
}

// TestExpiryStored checks that every write path stores expiry = version + TTL exactly,
// with the table default, the entity's own TTL, and none.
func TestExpiryStored(t *testing.T) {
	e := open(t, postgres.Options{DisablePurger: true})
	db := testDB(t)
	acct := newAccount()
	if err := e.CreateTable(t.Context(), acct, "T", storage.TableSettings{Elastic: true, DefaultTTL: 3600}); err != nil {
		t.Fatal(err)
	}
	p := func(pk string) map[string]storedRow { return stored(t, db, acct, "T", pk) }

	// Single statements.
	v := mustApply(t, e, acct, "T", "s", mut(storage.Insert, "ins")).Versions[0]
	wantExpiry(t, p("s"), "ins", v, 3600)
	v = mustApply(t, e, acct, "T", "s", mut(storage.InsertOrReplace, "ior", ttlProp(60))).Versions[0]
	wantExpiry(t, p("s"), "ior", v, 60)
	v = mustApply(t, e, acct, "T", "s", mut(storage.InsertOrReplace, "ior", ttlProp(-1))).Versions[0]
	wantExpiry(t, p("s"), "ior", v, -1)
	v = mustApply(t, e, acct, "T", "s", mut(storage.Replace, "ins", ttlProp(5))).Versions[0]
	wantExpiry(t, p("s"), "ins", v, 5)
	v = mustApply(t, e, acct, "T", "s", mut(storage.InsertOrMerge, "iom", ttlProp(7))).Versions[0] // insert first
	wantExpiry(t, p("s"), "iom", v, 7)
	// Merges: the merged properties decide (the TTL stays unless changed).
	v = mustApply(t, e, acct, "T", "s", mut(storage.InsertOrMerge, "iom", i64("N", 1))).Versions[0]
	wantExpiry(t, p("s"), "iom", v, 7)
	v = mustApply(t, e, acct, "T", "s", mut(storage.Merge, "ins", ttlProp(-1))).Versions[0]
	wantExpiry(t, p("s"), "ins", v, -1)

	// A batch of statements, and the array statements.
	vs := mustApply(t, e, acct, "T", "b", mut(storage.Insert, "a"), mut(storage.Insert, "b", ttlProp(9))).Versions
	wantExpiry(t, p("b"), "a", vs[0], 3600)
	wantExpiry(t, p("b"), "b", vs[1], 9)
	vs = mustApply(t, e, acct, "T", "b", mut(storage.InsertOrReplace, "b"), mut(storage.InsertOrReplace, "c", ttlProp(-1))).Versions
	wantExpiry(t, p("b"), "b", vs[0], 3600)
	wantExpiry(t, p("b"), "c", vs[1], -1)
	vs = mustApply(t, e, acct, "T", "b", mut(storage.Replace, "a", ttlProp(11)), mut(storage.Insert, "d"),
		mut(storage.InsertOrReplace, "c", ttlProp(12)), mut(storage.Delete, "b")).Versions
	rows := p("b")
	wantExpiry(t, rows, "a", vs[0], 11)
	wantExpiry(t, rows, "d", vs[1], 3600)
	wantExpiry(t, rows, "c", vs[2], 12)
	if _, ok := rows["b"]; ok || vs[3] != 0 {
		t.Fatalf("deleted row still stored, or version %d", vs[3])
	}
	// Read-modify-write with several mutations of one row: the final properties decide.
	vs = mustApply(t, e, acct, "T", "b", mut(storage.Insert, "e", ttlProp(13)), mut(storage.Merge, "e", i64("N", 1)),
		mut(storage.Merge, "a", i64("N", 1)), mut(storage.InsertOrMerge, "f")).Versions
	rows = p("b")
	wantExpiry(t, rows, "e", vs[1], 13)
	wantExpiry(t, rows, "a", vs[2], 11)
	wantExpiry(t, rows, "f", vs[3], 3600)

	// A standard table stores no expiry, whatever the properties say.
	if err := e.CreateTable(t.Context(), acct, "Std", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	vs = mustApply(t, e, acct, "Std", "p", mut(storage.Insert, "a", ttlProp(1)), mut(storage.Insert, "b", ttlProp(0))).Versions
	rows = stored(t, db, acct, "Std", "p")
	wantExpiry(t, rows, "a", vs[0], -1)
	wantExpiry(t, rows, "b", vs[1], -1)
}

// TestExpiredRowsAllPaths makes rows expired (without waiting) and writes over them on
// every path: inserts succeed with a greater version, conditional writes fail as on a
// missing row at the right index, and reads never see them.
func TestExpiredRowsAllPaths(t *testing.T) {
	e := open(t, postgres.Options{DisablePurger: true})
	db := testDB(t)
	ctx, acct := t.Context(), newAccount()
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{Elastic: true, DefaultTTL: 3600}); err != nil {
		t.Fatal(err)
	}
	var muts []storage.Mutation
	rks := []string{"i1", "i2", "m1", "m2", "u1", "u2", "r1", "d1", "b1", "b2", "live"}
	for _, rk := range rks {
		muts = append(muts, mut(storage.Insert, rk, i64("Old", 1)))
	}
	vs := mustApply(t, e, acct, "T", "p", muts...).Versions
	old := map[string]int64{}
	for i, rk := range rks {
		old[rk] = vs[i]
	}
	expire(t, db, acct, "T", "p", rks[:len(rks)-1]...)

	// Reads.
	for _, rk := range rks[:len(rks)-1] {
		if _, err := e.Get(ctx, acct, "T", "p", rk); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("Get of expired %s: %v", rk, err)
		}
	}
	if recs := scanAll(t, e, acct, "T"); len(recs) != 1 || recs[0].Entity.RowKey != "live" {
		t.Fatalf("scan shows %d rows", len(recs))
	}
	// Conditional writes: single statements, and a batch at every position.
	for _, op := range []storage.Op{storage.Replace, storage.Delete, storage.Merge} {
		wantApplyErr(t, e, acct, "T", "p", 0, storage.ErrNotFound, mut(op, "r1"))
		wantApplyErr(t, e, acct, "T", "p", 0, storage.ErrNotFound, storage.Mutation{Op: op, RowKey: "d1", IfMatch: old["d1"]})
		wantApplyErr(t, e, acct, "T", "p", 1, storage.ErrNotFound, mut(storage.InsertOrReplace, "x"), mut(op, "r1"), mut(storage.Replace, "live"))
		wantApplyErr(t, e, acct, "T", "p", 2, storage.ErrNotFound, mut(storage.Insert, "y"), mut(storage.Replace, "live"), mut(op, "d1"))
	}
	// Inserts over expired rows: a single statement, a batch of statements, the array
	// statements (insert and insert-or-replace), read-modify-write.
	newer := func(rk string, v int64) {
		t.Helper()
		if v <= old[rk] {
			t.Fatalf("%s: version %d not above the expired row's %d", rk, v, old[rk])
		}
		r, err := e.Get(ctx, acct, "T", "p", rk)
		if err != nil || r.Version != v {
			t.Fatalf("%s after the write: %+v, %v", rk, r, err)
		}
		if _, ok := r.Entity.Get("Old"); ok {
			t.Fatalf("%s kept the expired row's properties", rk)
		}
	}
	newer("i1", mustApply(t, e, acct, "T", "p", mut(storage.Insert, "i1", i64("New", 1))).Versions[0])
	vs = mustApply(t, e, acct, "T", "p", mut(storage.Insert, "b1", i64("New", 1)), mut(storage.Replace, "live", i64("New", 1))).Versions
	newer("b1", vs[0])
	vs = mustApply(t, e, acct, "T", "p", mut(storage.Insert, "m1", i64("New", 1)), mut(storage.Insert, "m2", i64("New", 1)), mut(storage.Insert, "zz", i64("New", 1))).Versions
	newer("m1", vs[0])
	newer("m2", vs[1])
	vs = mustApply(t, e, acct, "T", "p", mut(storage.InsertOrReplace, "u1", i64("New", 1)), mut(storage.InsertOrReplace, "u2", i64("New", 1))).Versions
	newer("u1", vs[0])
	newer("u2", vs[1])
	vs = mustApply(t, e, acct, "T", "p", mut(storage.Insert, "i2", i64("New", 1)), mut(storage.Merge, "i2", i64("M", 1)), mut(storage.InsertOrMerge, "b2", i64("New", 1))).Versions
	newer("i2", vs[1])
	newer("b2", vs[2])
	// An insert over a live row still fails, on the array path too.
	wantApplyErr(t, e, acct, "T", "p", 1, storage.ErrExists, mut(storage.Insert, "n1"), mut(storage.Insert, "live"), mut(storage.Insert, "n2"))
	wantApplyErr(t, e, acct, "T", "p", 0, storage.ErrExists, mut(storage.Insert, "i1"))
	// Each row is stored once: the writes replaced the expired rows.
	if rows := stored(t, db, acct, "T", "p"); len(rows) != len(rks)+1 {
		t.Fatalf("%d rows stored, want %d", len(rows), len(rks)+1)
	}
}

// TestSettingsFrontEnds changes a table's settings through one front end and writes
// through another whose cache holds the old settings: on every write path the next
// write uses the new ones — the expiry it stores, the TTL properties it refuses or
// accepts — and a table deleted and created again is a new table.
func TestSettingsFrontEnds(t *testing.T) {
	a := open(t, postgres.Options{DisablePurger: true})
	b := open(t, postgres.Options{DisablePurger: true})
	db := testDB(t)
	ctx, acct := t.Context(), newAccount()
	if err := a.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	set := func(s storage.TableSettings) {
		t.Helper()
		if err := b.SetTableSettings(ctx, acct, "t", s); err != nil {
			t.Fatal(err)
		}
	}
	type path struct {
		name string
		muts func(i int, p ...entity.Property) []storage.Mutation
	}
	paths := []path{
		{"single insert", func(i int, p ...entity.Property) []storage.Mutation {
			return []storage.Mutation{mut(storage.Insert, fmt.Sprintf("s%d", i), p...)}
		}},
		{"single insert-or-replace", func(i int, p ...entity.Property) []storage.Mutation {
			return []storage.Mutation{mut(storage.InsertOrReplace, fmt.Sprintf("s%d", i), p...)}
		}},
		{"insert-or-merge", func(i int, p ...entity.Property) []storage.Mutation {
			return []storage.Mutation{mut(storage.InsertOrMerge, fmt.Sprintf("m%d", i), p...)}
		}},
		{"array inserts", func(i int, p ...entity.Property) []storage.Mutation {
			return []storage.Mutation{mut(storage.Insert, fmt.Sprintf("a%d", i), p...), mut(storage.Insert, fmt.Sprintf("a%d-2", i))}
		}},
		{"batch", func(i int, p ...entity.Property) []storage.Mutation {
			return []storage.Mutation{mut(storage.InsertOrReplace, "anchor"), mut(storage.Insert, fmt.Sprintf("b%d", i), p...)}
		}},
		{"read-modify-write", func(i int, p ...entity.Property) []storage.Mutation {
			return []storage.Mutation{mut(storage.InsertOrMerge, "anchor2"), mut(storage.InsertOrReplace, fmt.Sprintf("r%d", i), p...)}
		}},
	}
	for i, pt := range paths {
		// Front end a caches the standard settings with a first write.
		mustApply(t, a, acct, "T", pt.name, pt.muts(100+i)...)
		// Changed elsewhere: a's next write stores the new default TTL.
		set(storage.TableSettings{Elastic: true, DefaultTTL: 100})
		muts := pt.muts(i)
		ap := mustApply(t, a, acct, "T", pt.name, muts...)
		k := len(muts) - 1
		if pt.name == "array inserts" {
			k = 0
		}
		wantExpiry(t, stored(t, db, acct, "T", pt.name), muts[k].RowKey, ap.Versions[k], 100)
		// Standard again elsewhere: a's cache (elastic) refuses a TTL of 0, the
		// current settings take it as an ordinary property.
		set(storage.TableSettings{})
		muts = pt.muts(300+i, ttlProp(0))
		ap = mustApply(t, a, acct, "T", pt.name, muts...)
		wantExpiry(t, stored(t, db, acct, "T", pt.name), muts[k].RowKey, ap.Versions[k], -1)
		// Time-to-live on without a default elsewhere: a's cache (standard) takes a TTL
		// of 0, the current settings refuse it.
		set(storage.TableSettings{Elastic: true, DefaultTTL: storage.TTLNever})
		wantApplyErr(t, a, acct, "T", pt.name, k, nil, pt.muts(200+i, ttlProp(0))...)
	}
	// Deleted and created again elsewhere with other settings: a new table.
	mustApply(t, a, acct, "T", "re", mut(storage.Insert, "x"))
	if err := b.DeleteTable(ctx, acct, "T"); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTable(ctx, acct, "T", storage.TableSettings{Elastic: true, DefaultTTL: 50}); err != nil {
		t.Fatal(err)
	}
	v := mustApply(t, a, acct, "T", "re", mut(storage.Insert, "x")).Versions[0]
	wantExpiry(t, stored(t, db, acct, "T", "re"), "x", v, 50)
	// Deleted elsewhere: a's cached entry does not keep it alive.
	if err := b.DeleteTable(ctx, acct, "T"); err != nil {
		t.Fatal(err)
	}
	for _, muts := range [][]storage.Mutation{
		{mut(storage.Insert, "y")}, {mut(storage.Insert, "y"), mut(storage.Insert, "z")},
		{mut(storage.Replace, "y"), mut(storage.Insert, "z")}, {mut(storage.InsertOrMerge, "y")},
	} {
		if _, err := a.Apply(ctx, acct, "T", "re", muts); !errors.Is(err, storage.ErrTableNotFound) {
			t.Fatalf("Apply %v on a table deleted elsewhere: %v", muts, err)
		}
	}
}

// TestPositionsFrontEnds writes through three front ends in turn: positions increase
// across them, and each front end's ReadView serves another's position promptly.
func TestPositionsFrontEnds(t *testing.T) {
	engines := []*postgres.Engine{open(t, postgres.Options{}), open(t, postgres.Options{}), open(t, postgres.Options{})}
	ctx, acct := t.Context(), newAccount()
	if err := engines[0].CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	var last storage.Position
	var took []time.Duration
	for i := range 30 {
		w, r := engines[i%3], engines[(i+1)%3]
		rk := fmt.Sprintf("r%02d", i)
		ap := mustApply(t, w, acct, "T", "p", mut(storage.Insert, rk))
		if ap.Position <= last {
			t.Fatalf("write %d: position %d after %d", i, ap.Position, last)
		}
		last = ap.Position
		start := time.Now()
		rd, err := r.ReadView(ctx, storage.ReadOptions{At: ap.Position})
		if err != nil {
			t.Fatalf("ReadView(%d) on another front end: %v", ap.Position, err)
		}
		took = append(took, time.Since(start))
		if rec, err := rd.Get(ctx, acct, "T", "p", rk); err != nil || rec.Version != ap.Versions[0] {
			t.Fatalf("read through another front end: %+v, %v", rec, err)
		}
	}
	// A position already committed is served at once, not after the position wait (about
	// a second): judged by the median, since a loaded machine stalls any one read.
	slices.Sort(took)
	if took[len(took)/2] > 100*time.Millisecond || took[len(took)-1] > 900*time.Millisecond {
		t.Fatalf("ReadView on another front end took %v (median) and %v (slowest)", took[len(took)/2], took[len(took)-1])
	}
	// A position far ahead fails after the wait, not before.
	e := open(t, postgres.Options{PositionWait: 100 * time.Millisecond})
	start := time.Now()
	if _, err := e.ReadView(ctx, storage.ReadOptions{At: last + 1<<40}); !errors.Is(err, storage.ErrFuturePosition) {
		t.Fatalf("ReadView(future) = %v", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("ReadView(future) returned after %v", d)
	}
}

// TestPurgeExpiredFrontEnds purges 5,000 expired rows from three front ends at once:
// every expired row goes, live rows stay, and no front end fails or waits for another.
func TestPurgeExpiredFrontEnds(t *testing.T) {
	engines := []*postgres.Engine{open(t, postgres.Options{DisablePurger: true}), open(t, postgres.Options{DisablePurger: true}),
		open(t, postgres.Options{DisablePurger: true})}
	db := testDB(t)
	ctx, acct := t.Context(), newAccount()
	if err := engines[0].CreateTable(ctx, acct, "T", storage.TableSettings{Elastic: true, DefaultTTL: 3600}); err != nil {
		t.Fatal(err)
	}
	// Purge what other tests left expired first, so the counts below are this test's.
	for _, e := range engines {
		if _, err := e.PurgeExpired(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var id int64
	if err := db.QueryRow(ctx, `SELECT id FROM cerulean_tables WHERE account = $1 AND key = 't'::BYTEA`, []byte(acct)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	// Expired rows (expiry in the past), rows expiring in an hour, rows that never do.
	if _, err := db.Exec(ctx, `INSERT INTO cerulean_entities (table_id, pk, rk, version, props, expiry)
		SELECT $1, 'p'::BYTEA, convert_to(lpad(i::TEXT, 6, '0'), 'UTF8'), 1, '\x00'::BYTEA,
			CASE WHEN i <= $2 THEN 1 + i WHEN i <= $2 + 100 THEN (EXTRACT(EPOCH FROM now())::BIGINT + 3600) * 10000000 END
		FROM generate_series(1, $2 + 200) i`, id, n); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	counts := make([]int, len(engines))
	errs := make([]error, len(engines))
	for i, e := range engines {
		wg.Go(func() { counts[i], errs[i] = e.PurgeExpired(ctx) })
	}
	wg.Wait()
	total := 0
	for i := range engines {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		total += counts[i]
	}
	t.Logf("purged per front end: %v", counts)
	// Rows of other tests may expire meanwhile and count too.
	if total < n {
		t.Fatalf("front ends purged %d rows in all, want at least %d", total, n)
	}
	if got := storedRows(t, db, acct, "T"); got != 200 {
		t.Fatalf("%d rows stored after the purge, want 200", got)
	}
}
