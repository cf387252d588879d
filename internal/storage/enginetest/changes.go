package enginetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Change feed conformance (docs/change-feed-design.md): every committed change recorded
// once, in commit order per row, nothing that did not commit, readable from any
// continuation without a gap or a repeat.

// feed returns the engine's storage.ChangeFeed.
func (x *env) feed() storage.ChangeFeed { return x.e }

// feedTable creates a table with the change feed on (retention one hour).
func (x *env) feedTable(name string, s storage.TableSettings) string {
	x.t.Helper()
	s.ChangeFeed = 3600
	return x.createWith(name, s)
}

// readFeed reads table's feed from after to its horizon in pages of page records,
// checking that every page is in Seq order and ends its Next at or past its last
// record, and returns the records and the final Next.
func (x *env) readFeed(table string, feedID, after uint64, page int) ([]storage.Change, uint64) {
	x.t.Helper()
	var out []storage.Change
	for {
		p, err := x.feed().ReadChanges(x.ctx, x.acct, table, storage.ChangesRequest{FeedID: feedID, After: after, Limit: page})
		if err != nil {
			x.t.Fatalf("ReadChanges(%q, after %d): %v", table, after, err)
		}
		if feedID != 0 && p.FeedID != feedID {
			x.t.Fatalf("ReadChanges(%q) answered feed %d, asked %d", table, p.FeedID, feedID)
		}
		if len(p.Changes) > page {
			x.t.Fatalf("ReadChanges(limit %d) returned %d records", page, len(p.Changes))
		}
		for _, c := range p.Changes {
			if c.Seq <= after {
				x.t.Fatalf("ReadChanges(after %d) returned Seq %d", after, c.Seq)
			}
			if c.Seq > p.Next {
				x.t.Fatalf("ReadChanges returned Seq %d past its Next %d", c.Seq, p.Next)
			}
			after = c.Seq
			out = append(out, c)
		}
		if p.Next < after {
			x.t.Fatalf("ReadChanges: Next %d before the last record %d", p.Next, after)
		}
		after = p.Next
		if len(p.Changes) < page {
			return out, after
		}
	}
}

// feedID is the table's current feed id.
func (x *env) feedID(table string) uint64 {
	x.t.Helper()
	p, err := x.feed().ReadChanges(x.ctx, x.acct, table, storage.ChangesRequest{After: storage.AfterNow, Limit: 1})
	if err != nil {
		x.t.Fatalf("ReadChanges(%q, now): %v", table, err)
	}
	return p.FeedID
}

// wantChange is an expected record: op, keys, and for a write its version and state.
type wantChange struct {
	op      storage.ChangeOp
	pk, rk  string
	version int64
	props   []entity.Property
}

func (x *env) wantChanges(what string, got []storage.Change, want []wantChange) {
	x.t.Helper()
	if len(got) != len(want) {
		x.t.Fatalf("%s: %d records %s, want %d", what, len(got), describeChanges(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Op != w.op || g.PartitionKey != w.pk || g.RowKey != w.rk {
			x.t.Fatalf("%s: record %d is %v (%q, %q), want %v (%q, %q); all %s", what, i, g.Op, g.PartitionKey, g.RowKey, w.op, w.pk, w.rk, describeChanges(got))
		}
		if i > 0 && g.Seq <= got[i-1].Seq {
			x.t.Fatalf("%s: record %d has Seq %d after %d", what, i, g.Seq, got[i-1].Seq)
		}
		if w.version != 0 && g.Version != w.version {
			x.t.Fatalf("%s: record %d (%v %q) has version %d, want %d", what, i, g.Op, g.RowKey, g.Version, w.version)
		}
		isWrite := g.Op < storage.ChangeExpire && g.Op != storage.ChangeOp(storage.Delete)
		if isWrite {
			if g.At != g.Version || g.Version == 0 {
				x.t.Fatalf("%s: write record %d has version %d and At %d", what, i, g.Version, g.At)
			}
			x.sameProps(fmt.Sprintf("%s: record %d (%v %q)", what, i, g.Op, g.RowKey), g.Props, w.props)
		} else {
			if g.Props != nil || g.Version != 0 || g.At == 0 {
				x.t.Fatalf("%s: record %d (%v) has props %v, version %d, At %d", what, i, g.Op, g.Props, g.Version, g.At)
			}
		}
	}
}

func describeChanges(cs []storage.Change) string {
	s := "["
	for i, c := range cs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%d:%v %q/%q", c.Seq, c.Op, c.PartitionKey, c.RowKey)
	}
	return s + "]"
}

func w(op storage.Op, pk, rk string, version int64, props ...entity.Property) wantChange {
	return wantChange{op: storage.ChangeOp(op), pk: pk, rk: rk, version: version, props: props}
}

// testChangesOff: a table without the feed has none, and a feed setting is stored.
func testChangesOff(t *testing.T, x *env) {
	f := x.feed()
	t.Parallel()
	x.createTable("Plain")
	x.apply("Plain", "p", mut(storage.Insert, "r", str("S", "x")))
	if _, err := f.ReadChanges(x.ctx, x.acct, "Plain", storage.ChangesRequest{Limit: 10}); !errors.Is(err, storage.ErrFeedOff) {
		t.Fatalf("ReadChanges of a table without the feed = %v, want ErrFeedOff", err)
	}
	if _, err := f.ReadChanges(x.ctx, x.acct, "Missing", storage.ChangesRequest{Limit: 10}); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("ReadChanges of a missing table = %v, want ErrTableNotFound", err)
	}
	tbl := x.feedTable("Feed", storage.TableSettings{})
	x.wantSettings("feed table", tbl, storage.TableSettings{ChangeFeed: 3600})
	if got, next := x.readFeed(tbl, 0, 0, 10); len(got) != 0 || next == 0 {
		t.Fatalf("a new feed holds %s, Next %d (must not be 0, which means the beginning)", describeChanges(got), next)
	}
	if _, err := f.ReadChanges(x.ctx, x.acct, tbl, storage.ChangesRequest{}); err == nil {
		t.Fatal("ReadChanges with limit 0 succeeded")
	}
}

// testChangesRecords: each kind of write, each mutation of a batch and each committed
// one of an ApplyEach is recorded once, in order, with its whole new state and version;
// nothing of a failed Apply or a failed ApplyEach mutation is.
func testChangesRecords(t *testing.T, x *env) {
	x.feed()
	t.Parallel()
	tbl := x.feedTable("Records", storage.TableSettings{Elastic: true})
	var want []wantChange
	v := x.apply(tbl, "p", mut(storage.Insert, "a", str("S", "x"), i64("N", 1)))
	want = append(want, w(storage.Insert, "p", "a", v[0], str("S", "x"), i64("N", 1)))
	v = x.apply(tbl, "p", mut(storage.Merge, "a", i64("N", 2), str("T", "y")))
	want = append(want, w(storage.Merge, "p", "a", v[0], str("S", "x"), i64("N", 2), str("T", "y")))
	v = x.apply(tbl, "p", mutIf(storage.Replace, "a", v[0], str("R", "z")))
	want = append(want, w(storage.Replace, "p", "a", v[0], str("R", "z")))
	v = x.apply(tbl, "p", mut(storage.InsertOrReplace, "b", str("S", "1")))
	want = append(want, w(storage.InsertOrReplace, "p", "b", v[0], str("S", "1")))
	v = x.apply(tbl, "p", mut(storage.InsertOrMerge, "b", str("T", "2")))
	want = append(want, w(storage.InsertOrMerge, "p", "b", v[0], str("S", "1"), str("T", "2")))
	v = x.apply(tbl, "p", mut(storage.InsertOrMerge, "c", str("T", "3")))
	want = append(want, w(storage.InsertOrMerge, "p", "c", v[0], str("T", "3")))
	x.apply(tbl, "p", mut(storage.Delete, "c"))
	want = append(want, w(storage.Delete, "p", "c", 0))

	// A batch: each mutation in order, two of one row included.
	v = x.apply(tbl, "q",
		mut(storage.Insert, "x", str("S", "1")),
		mut(storage.Insert, "y", str("S", "2")),
		mut(storage.Merge, "x", str("T", "3")),
		mut(storage.Delete, "y"))
	want = append(want,
		w(storage.Insert, "q", "x", v[0], str("S", "1")),
		w(storage.Insert, "q", "y", v[1], str("S", "2")),
		w(storage.Merge, "q", "x", v[2], str("S", "1"), str("T", "3")),
		w(storage.Delete, "q", "y", 0))

	// Nothing of a failed Apply.
	x.applyErr(tbl, "q", 1, storage.ErrExists, mut(storage.Insert, "z", str("S", "x")), mut(storage.Insert, "x"))
	x.applyErr(tbl, "p", 0, storage.ErrVersionMismatch, mutIf(storage.Replace, "a", 1, str("S", "x")))

	// ApplyEach: the committed ones, in the mutations' order.
	each := x.applyEach(tbl, "r",
		mut(storage.Insert, "e1", str("S", "1")),
		mut(storage.Replace, "missing", str("S", "2")),
		mut(storage.InsertOrReplace, "e3", str("S", "3")))
	if each.Errs[0] != nil || each.Errs[1] == nil || each.Errs[2] != nil {
		t.Fatalf("ApplyEach errs %v", each.Errs)
	}
	want = append(want,
		w(storage.Insert, "r", "e1", each.Versions[0], str("S", "1")),
		w(storage.InsertOrReplace, "r", "e3", each.Versions[2], str("S", "3")))

	got, next := x.readFeed(tbl, 0, 0, 1000)
	x.wantChanges("the feed", got, want)
	if next != got[len(got)-1].Seq {
		t.Fatalf("Next %d after reading everything, last Seq %d", next, got[len(got)-1].Seq)
	}
	// Any page size and any starting point give the same records.
	for _, page := range []int{1, 2, 3, 7} {
		paged, _ := x.readFeed(tbl, 0, 0, page)
		x.wantChanges(fmt.Sprintf("pages of %d", page), paged, want)
	}
	for i := range got {
		rest, _ := x.readFeed(tbl, 0, got[i].Seq, 4)
		x.wantChanges(fmt.Sprintf("after record %d", i), rest, want[i+1:])
	}
	// Now is the end; a read from it sees only later changes.
	p, err := x.feed().ReadChanges(x.ctx, x.acct, tbl, storage.ChangesRequest{After: storage.AfterNow, Limit: 10})
	if err != nil || len(p.Changes) != 0 || p.Next != next || p.FeedID == 0 {
		t.Fatalf("ReadChanges(now) = %+v, %v; want no records, Next %d", p, err, next)
	}
	v = x.apply(tbl, "p", mut(storage.Insert, "late", str("S", "x")))
	later, _ := x.readFeed(tbl, p.FeedID, p.Next, 10)
	x.wantChanges("after now", later, []wantChange{w(storage.Insert, "p", "late", v[0], str("S", "x"))})
}

// testChangesTypes: a record holds every EDM value exactly.
func testChangesTypes(t *testing.T, x *env) {
	x.feed()
	t.Parallel()
	tbl := x.feedTable("Types", storage.TableSettings{})
	props := allTypes()
	v := x.apply(tbl, "p", mut(storage.Insert, "r", props...))
	got, _ := x.readFeed(tbl, 0, 0, 10)
	x.wantChanges("typed record", got, []wantChange{w(storage.Insert, "p", "r", v[0], props...)})
}

// testChangesPartitionRange: a PartitionKey range keeps its partitions' records, and
// consumers of disjoint ranges see every record once between them.
func testChangesPartitionRange(t *testing.T, x *env) {
	f := x.feed()
	t.Parallel()
	tbl := x.feedTable("Range", storage.TableSettings{})
	for i := range 30 {
		x.apply(tbl, fmt.Sprintf("p%02d", i%6), mut(storage.InsertOrReplace, fmt.Sprintf("r%02d", i), i64("N", int64(i))))
	}
	all, _ := x.readFeed(tbl, 0, 0, 100)
	bounds := []string{"", "p02", "p04", ""}
	seen := map[uint64]int{}
	for b := 0; b+1 < len(bounds); b++ {
		var req storage.ChangesRequest
		if bounds[b] != "" {
			req.StartPK = &bounds[b]
		}
		if bounds[b+1] != "" {
			req.EndPK = &bounds[b+1]
		}
		req.Limit = 2
		for {
			p, err := f.ReadChanges(x.ctx, x.acct, tbl, req)
			if err != nil {
				t.Fatalf("ReadChanges(range %d): %v", b, err)
			}
			for _, c := range p.Changes {
				if (req.StartPK != nil && c.PartitionKey < *req.StartPK) || (req.EndPK != nil && c.PartitionKey >= *req.EndPK) {
					t.Fatalf("range [%q, %q) returned partition %q", bounds[b], bounds[b+1], c.PartitionKey)
				}
				seen[c.Seq]++
			}
			if p.Next < req.After {
				t.Fatalf("Next %d went back from %d", p.Next, req.After)
			}
			if len(p.Changes) < req.Limit && p.Next == all[len(all)-1].Seq {
				break
			}
			req.After = p.Next
		}
	}
	for _, c := range all {
		if seen[c.Seq] != 1 {
			t.Fatalf("record %d (%q) seen %d times across the ranges", c.Seq, c.PartitionKey, seen[c.Seq])
		}
	}
}

// testChangesExpiry: removal by time-to-live is recorded as an expiry — by the purge,
// before a write over an expired row, and after a write whose explicit expiry passed.
func testChangesExpiry(t *testing.T, x *env) {
	x.feed()
	x.purgeHooks()
	t.Parallel()
	tbl := x.feedTable("Expiry", elastic(1))
	v := x.apply(tbl, "p",
		mut(storage.Insert, "gone", str("S", "1")),
		mut(storage.Insert, "over", str("S", "2")),
		mut(storage.Insert, "keep", str("S", "3"), ttl(-1)))
	x.waitPast(expiryAt(slices.Max(v), 1))
	o := x.apply(tbl, "p", mut(storage.Insert, "over", str("S", "new"), ttl(-1)))
	x.h.PurgeExpired(t, x.e)
	past := x.apply(tbl, "q", storage.Mutation{Op: storage.InsertOrReplace, RowKey: "past", Props: []entity.Property{str("S", "x")}, Expiry: 1})
	got, _ := x.readFeed(tbl, 0, 0, 100)
	x.wantChanges("expiries", got, []wantChange{
		w(storage.Insert, "p", "gone", v[0], str("S", "1")),
		w(storage.Insert, "p", "over", v[1], str("S", "2")),
		w(storage.Insert, "p", "keep", v[2], str("S", "3"), ttl(-1)),
		{op: storage.ChangeExpire, pk: "p", rk: "over"},
		w(storage.Insert, "p", "over", o[0], str("S", "new"), ttl(-1)),
		{op: storage.ChangeExpire, pk: "p", rk: "gone"},
		w(storage.InsertOrReplace, "q", "past", past[0], str("S", "x")),
		{op: storage.ChangeExpire, pk: "q", rk: "past"},
	})
	if got[0].Expiry != expiryTicks(v[0], 1) || got[2].Expiry != 0 || got[6].Expiry != 1 {
		t.Fatalf("recorded expiries %d, %d, %d; want %d, 0, 1", got[0].Expiry, got[2].Expiry, got[6].Expiry, expiryTicks(v[0], 1))
	}
	// A second purge finds nothing more to record.
	x.h.PurgeExpired(t, x.e)
	again, _ := x.readFeed(tbl, 0, got[len(got)-1].Seq, 100)
	x.wantChanges("after a second purge", again, nil)
}

func expiryTicks(version int64, seconds int64) int64 { return version + seconds*10_000_000 }

// testChangesSettings: turning the feed off records the gap's mark and stops recording;
// turning it on again continues the numbering; a reader with the feed id reads on.
func testChangesSettings(t *testing.T, x *env) {
	f := x.feed()
	t.Parallel()
	tbl := x.feedTable("Settings", storage.TableSettings{})
	id := x.feedID(tbl)
	v1 := x.apply(tbl, "p", mut(storage.Insert, "a", str("S", "1")))
	if err := x.e.SetTableSettings(x.ctx, x.acct, tbl, storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	x.apply(tbl, "p", mut(storage.Insert, "unrecorded", str("S", "2")))
	if _, err := f.ReadChanges(x.ctx, x.acct, tbl, storage.ChangesRequest{Limit: 10}); !errors.Is(err, storage.ErrFeedOff) {
		t.Fatalf("ReadChanges with the feed off = %v, want ErrFeedOff", err)
	}
	got, _ := x.readFeed(tbl, id, 0, 10)
	x.wantChanges("feed off", got, []wantChange{w(storage.Insert, "p", "a", v1[0], str("S", "1")), {op: storage.ChangeFeedOff}})
	if err := x.e.SetTableSettings(x.ctx, x.acct, tbl, storage.TableSettings{ChangeFeed: 60}); err != nil {
		t.Fatal(err)
	}
	if x.feedID(tbl) != id {
		t.Fatalf("the feed turned on again has id %d, was %d", x.feedID(tbl), id)
	}
	v3 := x.apply(tbl, "p", mut(storage.Insert, "b", str("S", "3")))
	all, _ := x.readFeed(tbl, 0, 0, 10)
	x.wantChanges("feed on again", all, []wantChange{
		w(storage.Insert, "p", "a", v1[0], str("S", "1")),
		{op: storage.ChangeFeedOff},
		w(storage.Insert, "p", "b", v3[0], str("S", "3")),
	})
}

// testChangesTableDeleted: deleting the table records its end; the old feed stays
// readable by its id to that end, and a table created again has a feed of its own.
func testChangesTableDeleted(t *testing.T, x *env) {
	f := x.feed()
	t.Parallel()
	tbl := x.feedTable("Dropped", storage.TableSettings{})
	id := x.feedID(tbl)
	v := x.apply(tbl, "p", mut(storage.Insert, "a", str("S", "1")))
	first, _ := x.readFeed(tbl, 0, 0, 10)
	if err := x.e.DeleteTable(x.ctx, x.acct, tbl); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadChanges(x.ctx, x.acct, tbl, storage.ChangesRequest{Limit: 10}); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("ReadChanges of the deleted table without a feed id = %v, want ErrTableNotFound", err)
	}
	p, err := f.ReadChanges(x.ctx, x.acct, tbl, storage.ChangesRequest{FeedID: id, After: first[0].Seq, Limit: 10})
	if err != nil || !p.Ended || len(p.Changes) != 1 || p.Changes[0].Op != storage.ChangeTableDeleted {
		t.Fatalf("ReadChanges of the deleted table's feed = %+v, %v; want its table-deleted record", p, err)
	}
	x.feedTable(tbl, storage.TableSettings{})
	if x.feedID(tbl) == id {
		t.Fatalf("the table created again has the old feed id %d", id)
	}
	if got, _ := x.readFeed(tbl, 0, 0, 10); len(got) != 0 {
		t.Fatalf("the new table's feed holds %s", describeChanges(got))
	}
	old, _ := x.readFeed(tbl, id, 0, 10)
	x.wantChanges("the old feed", old, []wantChange{w(storage.Insert, "p", "a", v[0], str("S", "1")), {op: storage.ChangeTableDeleted}})
	// A feed id is the table's: another account or table name cannot read it.
	other := x.newAccount()
	if _, err := f.ReadChanges(x.ctx, other, tbl, storage.ChangesRequest{FeedID: id, Limit: 10}); !errors.Is(err, storage.ErrChangesExpired) {
		t.Fatalf("another account reading the feed id = %v, want ErrChangesExpired", err)
	}
	if _, err := f.ReadChanges(x.ctx, x.acct, "Other", storage.ChangesRequest{FeedID: id, Limit: 10}); !errors.Is(err, storage.ErrChangesExpired) {
		t.Fatalf("another table name reading the feed id = %v, want ErrChangesExpired", err)
	}
}

// testChangesReopen: records survive a restart, and numbering continues past them.
func testChangesReopen(t *testing.T, x *env) {
	x.feed()
	if x.h.Reopen == nil {
		t.Skip("harness has no Reopen")
	}
	tbl := x.feedTable("Reopen", storage.TableSettings{})
	v := x.apply(tbl, "p", mut(storage.Insert, "a", str("S", "1")), mut(storage.Insert, "b", str("S", "2")))
	before, next := x.readFeed(tbl, 0, 0, 10)
	x.reopen()
	after, next2 := x.readFeed(tbl, 0, 0, 10)
	x.wantChanges("after a restart", after, []wantChange{w(storage.Insert, "p", "a", v[0], str("S", "1")), w(storage.Insert, "p", "b", v[1], str("S", "2"))})
	if next2 != next || after[1].Seq != before[1].Seq {
		t.Fatalf("after a restart Next %d, last Seq %d; before %d, %d", next2, after[1].Seq, next, before[1].Seq)
	}
	u := x.apply(tbl, "p", mut(storage.Insert, "c", str("S", "3")))
	more, _ := x.readFeed(tbl, 0, next, 10)
	x.wantChanges("written after the restart", more, []wantChange{w(storage.Insert, "p", "c", u[0], str("S", "3"))})
}

// testChangesConcurrent: writers on shared and own rows, several partitions, Applies
// and ApplyEachs, while readers follow the feed in small pages: each reader's sequence
// holds every acknowledged write exactly once, in version order per row (commit order),
// and nothing else. A reader that read past a change still in flight would lose it (the
// classic gap of numbers taken before an out-of-order commit).
func testChangesConcurrent(t *testing.T, x *env) {
	x.feed()
	t.Parallel()
	tbl := x.feedTable("Concurrent", storage.TableSettings{})
	const writers, rounds = 6, 40
	type ack struct{ pk, rk string }
	var mu sync.Mutex
	acked := map[ack][]int64{}
	done := make(chan struct{})
	var readers sync.WaitGroup
	results := make([][]storage.Change, 3)
	for r := range results {
		readers.Add(1)
		go func() {
			defer readers.Done()
			var after uint64
			for {
				finished := false
				select {
				case <-done:
					finished = true
				default:
				}
				p, err := x.feed().ReadChanges(x.ctx, x.acct, tbl, storage.ChangesRequest{After: after, Limit: 1 + r*3})
				if err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
				results[r] = append(results[r], p.Changes...)
				after = p.Next
				if finished && len(p.Changes) == 0 {
					return
				}
			}
		}()
	}
	var writersWG sync.WaitGroup
	for wr := range writers {
		writersWG.Add(1)
		go func() {
			defer writersWG.Done()
			for i := range rounds {
				pk := fmt.Sprintf("p%d", i%3)
				shared := fmt.Sprintf("s%d", i%2)
				own := fmt.Sprintf("w%d-%d", wr, i%5)
				var muts []storage.Mutation
				if i%4 == 3 {
					muts = []storage.Mutation{mut(storage.InsertOrReplace, shared, i64("W", int64(wr))), mut(storage.InsertOrMerge, own, i64("I", int64(i)))}
				} else {
					muts = []storage.Mutation{mut(storage.InsertOrReplace, own, i64("I", int64(i)))}
				}
				var vs []int64
				if i%5 == 4 {
					each, err := x.e.ApplyEach(x.ctx, x.acct, tbl, pk, muts)
					if err != nil {
						t.Errorf("ApplyEach: %v", err)
						return
					}
					vs = each.Versions
				} else {
					applied, err := x.e.Apply(x.ctx, x.acct, tbl, pk, muts)
					if err != nil {
						t.Errorf("Apply: %v", err)
						return
					}
					vs = applied.Versions
				}
				mu.Lock()
				for j, m := range muts {
					k := ack{pk, m.RowKey}
					acked[k] = append(acked[k], vs[j])
				}
				mu.Unlock()
			}
		}()
	}
	writersWG.Wait()
	close(done)
	readers.Wait()
	if t.Failed() {
		return
	}
	total := 0
	for _, vs := range acked {
		total += len(vs)
	}
	for r, got := range results {
		if len(got) != total {
			t.Fatalf("reader %d saw %d records, %d writes were acknowledged", r, len(got), total)
		}
		seen := map[ack][]int64{}
		for i, c := range got {
			if i > 0 && c.Seq <= got[i-1].Seq {
				t.Fatalf("reader %d: Seq %d after %d", r, c.Seq, got[i-1].Seq)
			}
			k := ack{c.PartitionKey, c.RowKey}
			seen[k] = append(seen[k], c.Version)
		}
		for k, vs := range acked {
			want := slices.Clone(vs)
			slices.Sort(want)
			if !slices.Equal(seen[k], want) {
				t.Fatalf("reader %d: row %v has versions %v in the feed, acknowledged (in version order) %v", r, k, seen[k], want)
			}
		}
	}
}

// testChangesRetention: records older than the retention are removed; a continuation
// before them fails with ErrChangesExpired, one at or after them reads on, and the
// beginning is the oldest record retained. A deleted table's feed goes once its last
// record has.
func testChangesRetention(t *testing.T, x *env) {
	f := x.feed()
	t.Parallel()
	tbl := x.createWith("Retention", storage.TableSettings{ChangeFeed: 2})
	id := x.feedID(tbl)
	v := x.apply(tbl, "p", mut(storage.Insert, "a", str("S", "1")))
	u := x.apply(tbl, "p", mut(storage.Insert, "b", str("S", "2")))
	old, _ := x.readFeed(tbl, 0, 0, 10)
	if old[0].Version != v[0] || old[1].Version != u[0] {
		t.Fatalf("records %s before the trim", describeChanges(old))
	}
	x.waitPast(expiryAt(u[0], 2))
	c := x.apply(tbl, "p", mut(storage.Insert, "c", str("S", "3")))
	n, err := f.TrimChanges(x.ctx)
	if err != nil || n < 2 {
		t.Fatalf("TrimChanges = %d, %v; want at least the 2 old records", n, err)
	}
	young := []wantChange{w(storage.Insert, "p", "c", c[0], str("S", "3"))}
	got, _ := x.readFeed(tbl, 0, 0, 10)
	x.wantChanges("from the beginning after the trim", got, young)
	got, _ = x.readFeed(tbl, 0, old[1].Seq, 10)
	x.wantChanges("from the last removed record", got, young)
	if _, err := f.ReadChanges(x.ctx, x.acct, tbl, storage.ChangesRequest{After: old[0].Seq, Limit: 10}); !errors.Is(err, storage.ErrChangesExpired) {
		t.Fatalf("ReadChanges after a removed record = %v, want ErrChangesExpired", err)
	}
	// Nothing more to remove: the young record stays.
	if _, err := f.TrimChanges(x.ctx); err != nil {
		t.Fatal(err)
	}
	got, _ = x.readFeed(tbl, 0, 0, 10)
	x.wantChanges("after a second trim", got, young)

	if err := x.e.DeleteTable(x.ctx, x.acct, tbl); err != nil {
		t.Fatal(err)
	}
	end, _ := x.readFeed(tbl, id, 0, 10)
	x.wantChanges("the deleted table's feed", end, append(young, wantChange{op: storage.ChangeTableDeleted}))
	x.waitPast(entity.TicksToTime(end[1].At).Add(2 * time.Second))
	if _, err := f.TrimChanges(x.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadChanges(x.ctx, x.acct, tbl, storage.ChangesRequest{FeedID: id, Limit: 10}); !errors.Is(err, storage.ErrChangesExpired) {
		t.Fatalf("ReadChanges of a deleted table's feed past its retention = %v, want ErrChangesExpired", err)
	}
}

// testChangesWait: WaitChanges returns once a change commits past the given Seq (woken,
// not after its deadline), at once when records are already past it, with the
// context's error when nothing commits, and with ErrFeedOff on a table without the feed.
func testChangesWait(t *testing.T, x *env) {
	f := x.feed()
	tbl := x.feedTable("Wait", storage.TableSettings{})
	_, next := x.readFeed(tbl, 0, 0, 10)
	short, cancel := context.WithTimeout(x.ctx, 200*time.Millisecond)
	err := f.WaitChanges(short, x.acct, tbl, 0, next)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitChanges with nothing written = %v, want the deadline", err)
	}
	woke := make(chan error, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(x.ctx, 30*time.Second)
		defer cancel()
		woke <- f.WaitChanges(ctx, x.acct, tbl, 0, next)
	}()
	time.Sleep(100 * time.Millisecond)
	v := x.apply(tbl, "p", mut(storage.Insert, "a", str("S", "1")))
	if err := <-woke; err != nil {
		t.Fatalf("WaitChanges woken by a write = %v", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("WaitChanges returned %v after a write, not woken by it", d)
	}
	got, _ := x.readFeed(tbl, 0, next, 10)
	x.wantChanges("after the wait", got, []wantChange{w(storage.Insert, "p", "a", v[0], str("S", "1"))})
	if err := f.WaitChanges(x.ctx, x.acct, tbl, 0, next); err != nil {
		t.Fatalf("WaitChanges with a record already past = %v", err)
	}
	plain := x.createWith("WaitPlain", storage.TableSettings{})
	if err := f.WaitChanges(x.ctx, x.acct, plain, 0, 0); !errors.Is(err, storage.ErrFeedOff) {
		t.Fatalf("WaitChanges on a table without the feed = %v, want ErrFeedOff", err)
	}
}

// testChangesOffThenDeleted: a table whose feed was turned off and which is then
// deleted still ends its feed with table-deleted (after feed-off), and retention then
// removes the whole feed: nothing is kept forever.
func testChangesOffThenDeleted(t *testing.T, x *env) {
	f := x.feed()
	t.Parallel()
	tbl := x.createWith("OffDeleted", storage.TableSettings{ChangeFeed: 1})
	id := x.feedID(tbl)
	v := x.apply(tbl, "p", mut(storage.Insert, "a", str("S", "1")))
	if err := x.e.SetTableSettings(x.ctx, x.acct, tbl, storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if err := x.e.DeleteTable(x.ctx, x.acct, tbl); err != nil {
		t.Fatal(err)
	}
	end, _ := x.readFeed(tbl, id, 0, 10)
	x.wantChanges("the feed turned off, then its table deleted", end, []wantChange{
		w(storage.Insert, "p", "a", v[0], str("S", "1")), {op: storage.ChangeFeedOff}, {op: storage.ChangeTableDeleted}})
	x.waitPast(entity.TicksToTime(end[2].At).Add(time.Second))
	if _, err := f.TrimChanges(x.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadChanges(x.ctx, x.acct, tbl, storage.ChangesRequest{FeedID: id, Limit: 10}); !errors.Is(err, storage.ErrChangesExpired) {
		t.Fatalf("ReadChanges of the feed past its retention = %v, want ErrChangesExpired (the feed removed)", err)
	}
}

// expiredTogether allows for a purge by a test running alongside (a purge removes
// every table's expired rows, on PostgreSQL those of every engine on the database):
// it can remove x1 and x2 together before x2 is written again, so that x1's expire
// record comes just before x2's instead of after the write over x2. Both orders are
// right; when got shows the first, want is reordered to it.
func expiredTogether(got []storage.Change, want []wantChange) []wantChange {
	at := func(cs []wantChange, rk string) int {
		return slices.IndexFunc(cs, func(c wantChange) bool { return c.op == storage.ChangeExpire && c.rk == rk })
	}
	g1 := slices.IndexFunc(got, func(c storage.Change) bool { return c.Op == storage.ChangeExpire && c.RowKey == "x1" })
	g2 := slices.IndexFunc(got, func(c storage.Change) bool { return c.Op == storage.ChangeExpire && c.RowKey == "x2" })
	w1, w2 := at(want, "x1"), at(want, "x2")
	if g1 < 0 || g2 < 0 || g1 > g2 || w1 < w2 {
		return want
	}
	out := slices.Clone(want)
	x1 := out[w1]
	out = slices.Delete(out, w1, w1+1)
	return slices.Insert(out, w2, x1)
}

// testChangesOverwritten: a record keeps the state its write left whatever changes or
// removes the row later — each kind of write over it, alone, in a batch and in an
// ApplyEach, the expiry purge, a write over the expired row, and writes made after the
// feed was turned off. (An engine may keep a record's state in the row until the row
// changes; this is where it must hand the state over.)
func testChangesOverwritten(t *testing.T, x *env) {
	x.feed()
	x.purgeHooks()
	t.Parallel()
	tbl := x.feedTable("Overwritten", elastic(-1))
	id := x.feedID(tbl)
	var want []wantChange
	// The first states: single writes, a batch and an ApplyEach.
	for _, rk := range []string{"r1", "r2", "r3", "r4", "r9"} {
		v := x.apply(tbl, "p", mut(storage.Insert, rk, str("S", rk+"-1")))
		want = append(want, w(storage.Insert, "p", rk, v[0], str("S", rk+"-1")))
	}
	v := x.apply(tbl, "p", mut(storage.Insert, "b1", str("S", "b1-1")), mut(storage.Insert, "b2", str("S", "b2-1")),
		mut(storage.InsertOrReplace, "b3", str("S", "b3-1")), mut(storage.InsertOrReplace, "b4", str("S", "b4-1")))
	want = append(want, w(storage.Insert, "p", "b1", v[0], str("S", "b1-1")), w(storage.Insert, "p", "b2", v[1], str("S", "b2-1")),
		w(storage.InsertOrReplace, "p", "b3", v[2], str("S", "b3-1")), w(storage.InsertOrReplace, "p", "b4", v[3], str("S", "b4-1")))
	each := x.applyEach(tbl, "p", mut(storage.InsertOrReplace, "e1", str("S", "e1-1")), mut(storage.Insert, "e2", str("S", "e2-1")))
	want = append(want, w(storage.InsertOrReplace, "p", "e1", each.Versions[0], str("S", "e1-1")),
		w(storage.Insert, "p", "e2", each.Versions[1], str("S", "e2-1")))
	x1 := x.apply(tbl, "p", mut(storage.Insert, "x1", str("S", "x1-1"), ttl(1)), mut(storage.Insert, "x2", str("S", "x2-1"), ttl(1)))
	want = append(want, w(storage.Insert, "p", "x1", x1[0], str("S", "x1-1"), ttl(1)), w(storage.Insert, "p", "x2", x1[1], str("S", "x2-1"), ttl(1)))

	// Each written over or removed, each way.
	v = x.apply(tbl, "p", mut(storage.Replace, "r1", str("S", "r1-2")))
	want = append(want, w(storage.Replace, "p", "r1", v[0], str("S", "r1-2")))
	v = x.apply(tbl, "p", mut(storage.InsertOrReplace, "r2", str("S", "r2-2")))
	want = append(want, w(storage.InsertOrReplace, "p", "r2", v[0], str("S", "r2-2")))
	v = x.apply(tbl, "p", mut(storage.Merge, "r3", str("T", "r3-2")))
	want = append(want, w(storage.Merge, "p", "r3", v[0], str("S", "r3-1"), str("T", "r3-2")))
	x.apply(tbl, "p", mut(storage.Delete, "r4"))
	want = append(want, w(storage.Delete, "p", "r4", 0))
	v = x.apply(tbl, "p", mut(storage.Merge, "b1", str("T", "b1-2")), mut(storage.Delete, "b2"))
	want = append(want, w(storage.Merge, "p", "b1", v[0], str("S", "b1-1"), str("T", "b1-2")), w(storage.Delete, "p", "b2", 0))
	v = x.apply(tbl, "p", mut(storage.InsertOrReplace, "b3", str("S", "b3-2")), mut(storage.InsertOrReplace, "b4", str("S", "b4-2")))
	want = append(want, w(storage.InsertOrReplace, "p", "b3", v[0], str("S", "b3-2")), w(storage.InsertOrReplace, "p", "b4", v[1], str("S", "b4-2")))
	each = x.applyEach(tbl, "p", mut(storage.InsertOrReplace, "e1", str("S", "e1-2")), mut(storage.Merge, "e2", str("T", "e2-2")))
	want = append(want, w(storage.InsertOrReplace, "p", "e1", each.Versions[0], str("S", "e1-2")),
		w(storage.Merge, "p", "e2", each.Versions[1], str("S", "e2-1"), str("T", "e2-2")))
	x.waitPast(expiryAt(x1[1], 1))
	v = x.apply(tbl, "p", mut(storage.Insert, "x2", str("S", "x2-2")))
	want = append(want, wantChange{op: storage.ChangeExpire, pk: "p", rk: "x2"}, w(storage.Insert, "p", "x2", v[0], str("S", "x2-2")))
	x.h.PurgeExpired(t, x.e)
	want = append(want, wantChange{op: storage.ChangeExpire, pk: "p", rk: "x1"})

	// The feed off: writes no longer recorded change rows whose records are the last.
	if err := x.e.SetTableSettings(x.ctx, x.acct, tbl, elastic(-1)); err != nil {
		t.Fatal(err)
	}
	want = append(want, wantChange{op: storage.ChangeFeedOff})
	x.apply(tbl, "p", mut(storage.Replace, "r9", str("S", "r9-2")))
	x.apply(tbl, "p", mut(storage.Delete, "r2"))
	x.apply(tbl, "p", mut(storage.InsertOrReplace, "b3", str("S", "b3-3")), mut(storage.Merge, "b4", str("T", "b4-3")))
	x.applyEach(tbl, "p", mut(storage.InsertOrReplace, "e1", str("S", "e1-3")))
	x.apply(tbl, "p", mut(storage.InsertOrReplace, "x2", str("S", "x2-3")))

	got, _ := x.readFeed(tbl, id, 0, 7)
	want = expiredTogether(got, want)
	x.wantChanges("records of rows changed since", got, want)
	// And on again: the rows written while it was off are written over again.
	if err := x.e.SetTableSettings(x.ctx, x.acct, tbl, storage.TableSettings{Elastic: true, DefaultTTL: -1, ChangeFeed: 3600}); err != nil {
		t.Fatal(err)
	}
	v = x.apply(tbl, "p", mut(storage.InsertOrReplace, "r9", str("S", "r9-4")))
	v2 := x.apply(tbl, "p", mut(storage.Replace, "r9", str("S", "r9-5")))
	want = append(want, w(storage.InsertOrReplace, "p", "r9", v[0], str("S", "r9-4")), w(storage.Replace, "p", "r9", v2[0], str("S", "r9-5")))
	got, _ = x.readFeed(tbl, id, 0, 1000)
	x.wantChanges("records after the feed was on again", got, want)
}
