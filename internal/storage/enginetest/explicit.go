package enginetest

import (
	"errors"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Explicit expiry (storage.Mutation.Expiry) and the stored expiry every read reports
// (storage.Record.Expiry): what the data tools need to copy an elastic table exactly.

// at is a mutation with an explicit expiry.
func at(m storage.Mutation, expiry int64) storage.Mutation {
	m.Expiry = expiry
	return m
}

// hour is an hour in version ticks.
const hour = int64(time.Hour / 100)

// wantExpiry checks that every read path reports expiry for the live row (pk, rk) of
// table: Get, GetEncoded, Scan decoded and Encoded, and a View at every consistency
// level at position p (0: the levels that promise the latest state).
func (x *env) wantExpiry(what, table, pk, rk string, p storage.Position, expiry int64) {
	x.t.Helper()
	check := func(how string, rec storage.Record) {
		x.t.Helper()
		if rec.Expiry != expiry {
			x.t.Fatalf("%s: %s reports expiry %d (%s), want %d (%s)", what, how, rec.Expiry, fmtTicks(rec.Expiry), expiry, fmtTicks(expiry))
		}
	}
	check("Get", x.get(table, pk, rk))
	rec, err := x.e.GetEncoded(x.ctx, x.acct, table, pk, rk)
	if err != nil {
		x.t.Fatalf("%s: GetEncoded: %v", what, err)
	}
	check("GetEncoded", rec)
	for _, enc := range []bool{false, true} {
		req := storage.ScanRequest{Start: storage.Key{PartitionKey: pk, RowKey: rk}, Limit: 1, Encoded: enc}
		res, err := x.e.Scan(x.ctx, x.acct, table, req)
		if err != nil || len(res.Records) != 1 || keyOf(&res.Records[0]) != (storage.Key{PartitionKey: pk, RowKey: rk}) {
			x.t.Fatalf("%s: Scan (Encoded %v) from (%q, %q) = %s, %v", what, enc, pk, rk, keysOf(res.Records), err)
		}
		check("Scan", res.Records[0])
		storage.PutBlocks(res.Blocks)
	}
	// A filtered scan reads through the filters (Pebble's EncodedFilter path).
	res, err := x.e.Scan(x.ctx, x.acct, table, storage.ScanRequest{
		Start: storage.Key{PartitionKey: pk, RowKey: rk}, Limit: 1,
		Filter:        func(r *storage.Record) bool { return true },
		EncodedFilter: func(string, string, int64, []byte) (bool, error) { return true, nil },
	})
	if err != nil || len(res.Records) != 1 {
		x.t.Fatalf("%s: filtered Scan: %s, %v", what, keysOf(res.Records), err)
	}
	check("filtered Scan", res.Records[0])
	lv := levels
	if p == 0 {
		lv = []storage.Consistency{storage.Strong, storage.Session}
	}
	for _, level := range lv {
		v, err := x.e.ReadView(x.ctx, storage.ReadOptions{Consistency: level, At: p})
		if err != nil {
			x.t.Fatalf("%s: ReadView(%v, %d): %v", what, level, p, err)
		}
		rec, err := v.Get(x.ctx, x.acct, table, pk, rk)
		if err != nil {
			x.t.Fatalf("%s: ReadView(%v).Get: %v", what, level, err)
		}
		check("ReadView("+level.String()+").Get", rec)
		if rec, err = v.GetEncoded(x.ctx, x.acct, table, pk, rk); err != nil {
			x.t.Fatalf("%s: ReadView(%v).GetEncoded: %v", what, level, err)
		}
		check("ReadView("+level.String()+").GetEncoded", rec)
		res, err := v.Scan(x.ctx, x.acct, table, storage.ScanRequest{Start: storage.Key{PartitionKey: pk, RowKey: rk}, Limit: 1, Encoded: true})
		if err != nil || len(res.Records) != 1 {
			x.t.Fatalf("%s: ReadView(%v).Scan: %s, %v", what, level, keysOf(res.Records), err)
		}
		check("ReadView("+level.String()+").Scan", res.Records[0])
		storage.PutBlocks(res.Blocks)
	}
}

func fmtTicks(t int64) string {
	if t == 0 {
		return "never"
	}
	return entity.FormatTicks(t)
}

// applyPos runs an Apply that must succeed and returns its versions and position.
func (x *env) applyPos(table, pk string, muts ...storage.Mutation) ([]int64, storage.Position) {
	x.t.Helper()
	applied, err := x.e.Apply(x.ctx, x.acct, table, pk, muts)
	if err != nil {
		x.t.Fatalf("Apply(%q, %q, %v): %v", table, pk, describe(muts), err)
	}
	return applied.Versions, applied.Position
}

// testExplicitExpiry: every write kind takes an explicit instant or "never" in place of
// the computed expiry, on a table with time-to-live on, whatever the TTL property says
// (even a value time-to-live refuses); every read path reports the stored expiry; a later
// write without one computes it again.
func testExplicitExpiry(t *testing.T, x *env) {
	tbl := x.createWith("Explicit", elastic(3600))
	ins := x.apply(tbl, "p", mut(storage.Insert, "base", str("S", "x")))[0]
	x.wantExpiry("computed", tbl, "p", "base", 0, ins+hour)
	x.apply(x.createTable("Plain"), "p", mut(storage.Insert, "r", ttl(1)))
	x.wantExpiry("standard", "Plain", "p", "r", 0, 0)

	t1 := entity.TimeToTicks(time.Now().Add(50*time.Hour)) + 1234567
	bad := str(storage.DefaultTTLProperty, "not a number") // refused when computed
	vs, p := x.applyPos(tbl, "p",
		at(mut(storage.Insert, "insert", bad), t1),
		at(mut(storage.InsertOrReplace, "upsert", ttl(60)), storage.ExpiryNever),
		at(mut(storage.InsertOrMerge, "upsertMerge", ttl(-1)), t1+1),
	)
	x.wantExpiry("insert at t1", tbl, "p", "insert", p, t1)
	x.wantExpiry("insert-or-replace never, TTL 60", tbl, "p", "upsert", p, 0)
	x.wantExpiry("insert-or-merge at t1+1, TTL -1", tbl, "p", "upsertMerge", p, t1+1)
	x.sameProps("insert at t1", x.get(tbl, "p", "insert").Entity.Props, []entity.Property{bad})

	// Over existing rows, with and without If-Match.
	_, p = x.applyPos(tbl, "p",
		at(mutIf(storage.Replace, "insert", vs[0], str("R", "1")), t1+2),
		at(mut(storage.Merge, "upsert", str("M", "1")), t1+3),
		at(mut(storage.InsertOrReplace, "base", bad), storage.ExpiryNever),
		at(mut(storage.InsertOrMerge, "upsertMerge", str("M", "2")), storage.ExpiryNever),
	)
	x.wantExpiry("replace at t1+2", tbl, "p", "insert", p, t1+2)
	x.wantExpiry("merge at t1+3", tbl, "p", "upsert", p, t1+3)
	x.wantExpiry("upsert never over a computed one", tbl, "p", "base", p, 0)
	x.wantExpiry("insert-or-merge never", tbl, "p", "upsertMerge", p, 0)
	x.sameProps("merge at t1+3", x.get(tbl, "p", "upsert").Entity.Props, []entity.Property{ttl(60), str("M", "1")})

	// Later writes without one compute theirs: a merge too (it does not stick).
	v := x.apply(tbl, "p", mut(storage.Merge, "upsert", str("M", "3")))[0]
	x.wantExpiry("merge after an explicit expiry", tbl, "p", "upsert", 0, v+60*hour/3600)
	v = x.apply(tbl, "p", mut(storage.Replace, "upsertMerge", str("M", "4")))[0]
	x.wantExpiry("replace after never", tbl, "p", "upsertMerge", 0, v+hour)
	// The computed path still checks the TTL property it would skip.
	x.applyErr(tbl, "p", 0, nil, mut(storage.Replace, "insert", bad))

	// Survives a restart.
	x.reopenIfAble()
	x.wantExpiry("insert at t1+2 after a restart", tbl, "p", "insert", 0, t1+2)
	x.wantExpiry("never after a restart", tbl, "p", "base", 0, 0)
}

// reopenIfAble restarts the engine when the harness can.
func (x *env) reopenIfAble() {
	if x.h.Reopen != nil {
		x.e = x.h.Reopen(x.t, x.e)
	}
}

// testExplicitExpiryTTLOff: on an elastic table with time-to-live off an explicit
// instant is stored and kept, and the row expires at it, as one written while
// time-to-live was on does after it is turned off.
func testExplicitExpiryTTLOff(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.createWith("Off", storage.TableSettings{Elastic: true})
	exp := entity.TimeToTicks(time.Now().Add(1500 * time.Millisecond))
	_, p := x.applyPos(tbl, "p",
		at(mut(storage.Insert, "soon", ttl(1)), exp),
		at(mut(storage.Insert, "never"), storage.ExpiryNever),
		mut(storage.Insert, "plain", ttl(1)))
	when := entity.TicksToTime(exp)
	if x.early(when.Add(-500 * time.Millisecond)) {
		x.wantExpiry("TTL off, explicit", tbl, "p", "soon", p, exp)
	}
	x.wantExpiry("TTL off, never", tbl, "p", "never", p, 0)
	x.wantExpiry("TTL off, computed", tbl, "p", "plain", p, 0)
	x.waitPast(when)
	x.getMissing(tbl, "p", "soon")
	x.wantKeys("after the explicit expiry", x.liveKeys(tbl, 1000), keys("p", "never", "plain"))
}

// testExplicitExpiryPast: an explicit instant at or before the write is accepted and the
// row is expired at once — replacing a live row leaves none, later mutations of the same
// Apply see none — and the reported version is still above the old one.
func testExplicitExpiryPast(t *testing.T, x *env) {
	tbl := x.createWith("Past", elastic(3600))
	past := entity.TimeToTicks(time.Now().Add(-time.Hour))
	old := x.apply(tbl, "p", mut(storage.Insert, "live", str("S", "x")))[0]
	vs := x.apply(tbl, "p",
		at(mut(storage.Insert, "new", str("S", "y")), past),
		at(mut(storage.InsertOrReplace, "live", str("S", "z")), 1))
	if vs[1] <= old {
		t.Fatalf("a write expired at once reported version %d, not above the row's %d", vs[1], old)
	}
	x.getMissing(tbl, "p", "new")
	x.getMissing(tbl, "p", "live")
	x.wantKeys("after writes expired at once", x.liveKeys(tbl, 1000), nil)
	// Later mutations of the same Apply see no row.
	x.applyErr(tbl, "p", 1, storage.ErrNotFound,
		at(mut(storage.Insert, "again", str("S", "1")), past),
		mut(storage.Merge, "again", str("S", "2")))
	vs = x.apply(tbl, "p",
		at(mut(storage.Insert, "again", str("S", "1")), past),
		mut(storage.Insert, "again", str("S", "2")))
	x.sameProps("an insert after one expired at once", x.get(tbl, "p", "again").Entity.Props, []entity.Property{str("S", "2")})
	if vs[1] <= vs[0] {
		t.Fatalf("versions %v do not increase", vs)
	}
	// Preconditions still apply to it.
	x.applyErr(tbl, "p", 0, storage.ErrExists, at(mut(storage.Insert, "again"), past))
	x.applyErr(tbl, "p", 0, storage.ErrNotFound, at(mut(storage.Replace, "missing"), past))
}

// testExplicitExpiryRefused: an explicit expiry on a standard table fails its mutation
// with 400 InvalidInput and nothing of the Apply is written; a Delete takes none, and a
// value below ExpiryNever is not valid.
func testExplicitExpiryRefused(t *testing.T, x *env) {
	tbl := x.createTable("Standard")
	future := entity.TimeToTicks(time.Now().Add(time.Hour))
	for _, e := range []int64{future, storage.ExpiryNever} {
		for _, op := range []storage.Op{storage.Insert, storage.InsertOrReplace, storage.InsertOrMerge} {
			ae := x.applyErr(tbl, "p", 1, nil, mut(storage.Insert, "first"), at(mut(op, "r"), e))
			if az, ok := azerr.As(ae.Err); !ok || az.Code != azerr.InvalidInput {
				t.Fatalf("%v with expiry %d on a standard table: %v, want 400 InvalidInput", op, e, ae.Err)
			}
		}
	}
	x.wantKeys("after refused explicit expiries", x.liveKeys(tbl, 1000), nil)
	el := x.createWith("Elastic", elastic(60))
	v := x.apply(el, "p", mut(storage.Insert, "r"))[0]
	x.applyErr(el, "p", 0, nil, at(mutIf(storage.Delete, "r", v), future))
	x.applyErr(el, "p", 0, nil, at(mut(storage.Insert, "s"), -2))
	x.get(el, "p", "r")
	x.getMissing(el, "p", "s")
}

// testEachExplicitExpiry: ApplyEach takes explicit expiries as Apply does, each mutation
// on its own: one refused on a standard table fails alone.
func testEachExplicitExpiry(t *testing.T, x *env) {
	tbl := x.createWith("EachExplicit", elastic(3600))
	x.apply(tbl, "p", mut(storage.Insert, "merge", str("A", "1")), mut(storage.Insert, "expired", str("A", "1")), mut(storage.Insert, "exists"))
	t1 := entity.TimeToTicks(time.Now().Add(20*time.Hour)) + 7
	muts := []storage.Mutation{
		at(mut(storage.Insert, "at", str(storage.DefaultTTLProperty, "x")), t1),
		at(mut(storage.InsertOrReplace, "never", ttl(5)), storage.ExpiryNever),
		mut(storage.Insert, "computed"),
		at(mut(storage.Merge, "merge", str("B", "2")), t1+1),
		at(mut(storage.InsertOrMerge, "upsertMerge"), t1+2),
		at(mut(storage.Insert, "exists"), t1), // fails alone
		at(mut(storage.InsertOrReplace, "expired"), 1),
		at(mut(storage.Insert, "pastNew"), 1),
	}
	res := x.applyEach(tbl, "p", muts...)
	for i, err := range res.Errs {
		if (i == 5) != (err != nil) {
			t.Fatalf("mutation %d (%v %q): %v", i, muts[i].Op, muts[i].RowKey, err)
		}
	}
	if !errors.Is(res.Errs[5], storage.ErrExists) {
		t.Fatalf("insert of an existing row with an explicit expiry: %v, want ErrExists", res.Errs[5])
	}
	x.wantExpiry("ApplyEach insert at t1", tbl, "p", "at", res.Position, t1)
	x.wantExpiry("ApplyEach never", tbl, "p", "never", res.Position, 0)
	x.wantExpiry("ApplyEach computed", tbl, "p", "computed", res.Position, res.Versions[2]+hour)
	x.wantExpiry("ApplyEach merge at t1+1", tbl, "p", "merge", res.Position, t1+1)
	x.wantExpiry("ApplyEach insert-or-merge at t1+2", tbl, "p", "upsertMerge", res.Position, t1+2)
	x.sameProps("ApplyEach merge", x.get(tbl, "p", "merge").Entity.Props, []entity.Property{str("A", "1"), str("B", "2")})
	x.getMissing(tbl, "p", "expired")
	x.getMissing(tbl, "p", "pastNew")

	std := x.createTable("EachStandard")
	res = x.applyEach(std, "p", mut(storage.Insert, "a"), at(mut(storage.Insert, "b"), t1), mut(storage.Insert, "c"))
	if res.Errs[0] != nil || res.Errs[2] != nil {
		t.Fatalf("ApplyEach on a standard table: %v", res.Errs)
	}
	if az, ok := azerr.As(res.Errs[1]); !ok || az.Code != azerr.InvalidInput {
		t.Fatalf("ApplyEach explicit expiry on a standard table: %v, want 400 InvalidInput", res.Errs[1])
	}
	x.wantKeys("standard table after ApplyEach", x.liveKeys(std, 1000), keys("p", "a", "c"))
}

// testExplicitExpiryBatch: a batch of inserts only, or of insert-or-replaces only, each
// with an explicit expiry (the data tools' changesets, which an engine may write with one
// statement) keeps every rule of a single write: all or nothing, the instants stored as
// given, one past expired at once, an existing row refused to an insert, a table made
// standard since the last write refused.
func testExplicitExpiryBatch(t *testing.T, x *env) {
	tbl := x.createWith("ExplicitBatch", elastic(3600))
	t1 := entity.TimeToTicks(time.Now().Add(30*time.Hour)) + 99
	past := entity.TimeToTicks(time.Now().Add(-time.Hour))
	bad := str(storage.DefaultTTLProperty, "x")
	_, p := x.applyPos(tbl, "p",
		at(mut(storage.Insert, "a", bad), t1),
		at(mut(storage.Insert, "b"), storage.ExpiryNever),
		at(mut(storage.Insert, "c", str("S", "1")), past))
	x.wantExpiry("batch insert at t1", tbl, "p", "a", p, t1)
	x.wantExpiry("batch insert never", tbl, "p", "b", p, 0)
	x.getMissing(tbl, "p", "c")
	_, p = x.applyPos(tbl, "p",
		at(mut(storage.InsertOrReplace, "a", str("S", "2")), storage.ExpiryNever),
		at(mut(storage.InsertOrReplace, "b", str("S", "3")), t1+1),
		at(mut(storage.InsertOrReplace, "c", str("S", "4")), t1+2),
		at(mut(storage.InsertOrReplace, "d"), past))
	x.wantExpiry("batch upsert never over t1", tbl, "p", "a", p, 0)
	x.wantExpiry("batch upsert t1+1 over never", tbl, "p", "b", p, t1+1)
	x.wantExpiry("batch upsert over a row expired at once", tbl, "p", "c", p, t1+2)
	x.sameProps("batch upsert", x.get(tbl, "p", "c").Entity.Props, []entity.Property{str("S", "4")})
	x.getMissing(tbl, "p", "d")
	// An insert over the row an upsert just expired at once succeeds.
	x.apply(tbl, "p", at(mut(storage.InsertOrReplace, "b", str("S", "5")), past), at(mut(storage.InsertOrReplace, "e"), t1))
	x.getMissing(tbl, "p", "b")
	x.apply(tbl, "p", at(mut(storage.Insert, "b", str("S", "6")), t1), at(mut(storage.Insert, "f"), t1))
	x.wantExpiry("insert over a row expired at once", tbl, "p", "b", 0, t1)
	// All or nothing.
	x.applyErr(tbl, "p", 1, storage.ErrExists, at(mut(storage.Insert, "g"), t1), at(mut(storage.Insert, "a"), t1))
	x.getMissing(tbl, "p", "g")
	// A table made standard since: refused, nothing written.
	if err := x.e.SetTableSettings(x.ctx, x.acct, tbl, storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	ae := x.applyErr(tbl, "p", 0, nil, at(mut(storage.InsertOrReplace, "h"), t1), at(mut(storage.InsertOrReplace, "i"), t1))
	if az, ok := azerr.As(ae.Err); !ok || az.Code != azerr.InvalidInput {
		t.Fatalf("explicit expiries on a table made standard: %v, want 400 InvalidInput", ae.Err)
	}
	x.getMissing(tbl, "p", "h")
	x.wantExpiry("a row keeps its expiry when the table is made standard", tbl, "p", "b", 0, t1)
}
