package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/index"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// openIndexTest opens an engine on the test database, without background loops (the
// tests run the purges and builds themselves).
func openIndexTest(t testing.TB) *Engine {
	t.Helper()
	url := os.Getenv("CERULEAN_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("CERULEAN_TEST_POSTGRES_URL is not set; scripts/test starts PostgreSQL and sets it")
	}
	e, err := Open(context.Background(), url, Options{DisablePurger: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// storedEntry is an index entry as the tests compare them.
type storedEntry struct {
	id       uint32
	key      string
	pk, rk   string
	isUnique bool
}

func (s storedEntry) String() string {
	return fmt.Sprintf("%d/%x/%q/%q/%v", s.id, s.key, s.pk, s.rk, s.isUnique)
}

// tableIDOf reads a table's id.
func tableIDOf(t testing.TB, e *Engine, account, table string) int64 {
	t.Helper()
	var id int64
	if err := e.pool.QueryRow(context.Background(), e.q.tableExists, []byte(account), []byte(storage.TableKey(table))).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// storedEntries reads every entry of table id, sorted.
func storedEntries(t testing.TB, e *Engine, id int64) []storedEntry {
	t.Helper()
	var out []storedEntry
	for i, tab := range []string{"cerulean_index_entries", "cerulean_unique_entries"} {
		rows, err := e.pool.Query(context.Background(), `SELECT index_id, key, pk, rk FROM `+tab+` WHERE table_id = $1`, id)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var (
				idx         int32
				key, pk, rk []byte
			)
			if err := rows.Scan(&idx, &key, &pk, &rk); err != nil {
				t.Fatal(err)
			}
			out = append(out, storedEntry{uint32(idx), string(key), string(pk), string(rk), i == 1})
		}
		rows.Close()
	}
	sortEntries(out)
	return out
}

func sortEntries(s []storedEntry) {
	slices.SortFunc(s, func(a, b storedEntry) int { return strings.Compare(a.String(), b.String()) })
}

// wantEntries computes the entries table id's stored rows (expired ones included) call
// for in defs.
func wantEntries(t testing.TB, e *Engine, id int64, defs []storage.IndexDef) []storedEntry {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT pk, rk, props FROM cerulean_entities WHERE table_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedEntry
	for rows.Next() {
		var pk, rk, props []byte
		if err := rows.Scan(&pk, &rk, &props); err != nil {
			t.Fatal(err)
		}
		ps, err := entity.DecodeProps(props)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range rowEntries(defs, ps) {
			out = append(out, storedEntry{en.id, string(en.key), string(pk), string(rk), en.unique})
		}
	}
	sortEntries(out)
	return out
}

// checkEntries fails unless table's stored entries are exactly those its rows call for.
func checkEntries(t testing.TB, e *Engine, account, table string, when string) {
	t.Helper()
	info, err := e.GetTable(context.Background(), account, table)
	if err != nil {
		t.Fatal(err)
	}
	id := tableIDOf(t, e, account, table)
	got, want := storedEntries(t, e, id), wantEntries(t, e, id, maintained(info.Settings))
	if !slices.Equal(got, want) {
		t.Fatalf("%s: stored entries\n%v\nwant\n%v", when, got, want)
	}
}

func testTableName(prefix string) string {
	return fmt.Sprintf("%s%08x", prefix, rand.Uint32())
}

// dropAfter deletes table when the test ends and purges its rows and entries, so that
// the database the tests share is left without them (plan tests read its statistics).
func dropAfter(t testing.TB, e *Engine, table string) {
	t.Cleanup(func() {
		ctx := context.Background()
		if err := e.DeleteTable(ctx, "acct", table); err != nil && !errors.Is(err, storage.ErrTableNotFound) {
			t.Error(err)
		}
		if err := e.purgePending(ctx); err != nil {
			t.Error(err)
		}
	})
}

// randomProps are properties of random types, some missing, for indexes on A and (B, A).
func randomProps(r *rand.Rand) []entity.Property {
	var ps []entity.Property
	switch r.IntN(4) {
	case 0:
		ps = append(ps, entity.Property{Name: "A", Value: entity.Int32Value(int32(r.IntN(5)))})
	case 1:
		ps = append(ps, entity.Property{Name: "A", Value: entity.StringValue(fmt.Sprint("s", r.IntN(5)))})
	case 2:
		ps = append(ps, entity.Property{Name: "A", Value: entity.DoubleValue(float64(r.IntN(5)) / 2)})
	}
	if r.IntN(3) > 0 {
		ps = append(ps, entity.Property{Name: "B", Value: entity.StringValue(fmt.Sprint("b", r.IntN(3)))})
	}
	if r.IntN(2) == 0 {
		ps = append(ps, entity.Property{Name: "C", Value: entity.Int64Value(r.Int64())})
	}
	return ps
}

// TestIndexMaintenance makes random writes of every kind — single mutations, batches,
// ApplyEach, merges, writes over expired rows, explicit expiries (some past already),
// on tables with and without the change feed — and checks after each that the stored
// entries are exactly those the stored rows call for; then the expiry purge and the
// table purge.
func TestIndexMaintenance(t *testing.T) {
	e := openIndexTest(t)
	ctx := context.Background()
	for _, feed := range []bool{false, true} {
		t.Run(fmt.Sprint("feed=", feed), func(t *testing.T) {
			table := testTableName("ixm")
			settings := storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{
				{Name: "ByA", Properties: []string{"A"}},
				{Name: "ByBA", Properties: []string{"B", "A"}},
				{Name: "ByC", Properties: []string{"C"}, Unique: true},
			}}
			if feed {
				settings.ChangeFeed = 1
			}
			if err := e.CreateTable(ctx, "acct", table, settings); err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, uint64(len(table))))
			ops := []storage.Op{storage.Insert, storage.Replace, storage.Merge, storage.Delete, storage.InsertOrReplace, storage.InsertOrMerge}
			mutation := func(rk string) storage.Mutation {
				m := storage.Mutation{Op: ops[r.IntN(len(ops))], RowKey: rk, Props: randomProps(r)}
				switch r.IntN(8) {
				case 0:
					m.Expiry = 1 // expired at once: the row goes (or is never stored)
				case 1:
					// Expires soon: stored, with its entries, until purged.
					m.Expiry = time.Now().Add(200*time.Millisecond).UnixNano() / 100
				case 2:
					m.Expiry = storage.ExpiryNever
				}
				return m
			}
			for round := range 150 {
				pk := fmt.Sprint("p", r.IntN(2))
				switch r.IntN(3) {
				case 0:
					_, _ = e.Apply(ctx, "acct", table, pk, []storage.Mutation{mutation(fmt.Sprint("r", r.IntN(8)))})
				case 1:
					var muts []storage.Mutation
					for range 1 + r.IntN(4) {
						muts = append(muts, mutation(fmt.Sprint("r", r.IntN(8))))
					}
					_, _ = e.Apply(ctx, "acct", table, pk, muts)
				default:
					var muts []storage.Mutation
					for _, i := range r.Perm(8)[:1+r.IntN(5)] {
						muts = append(muts, mutation(fmt.Sprint("r", i)))
					}
					if _, err := e.ApplyEach(ctx, "acct", table, pk, muts); err != nil {
						t.Fatal(err)
					}
				}
				checkEntries(t, e, "acct", table, fmt.Sprint("round ", round))
			}
			// Rows that expire now, for the purge to remove with their entries.
			soon := time.Now().Add(200*time.Millisecond).UnixNano() / 100
			props := []entity.Property{{Name: "A", Value: entity.Int32Value(1)}, {Name: "B", Value: entity.StringValue("x")}}
			if _, err := e.Apply(ctx, "acct", table, "p2", []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: "x", Props: props, Expiry: soon}}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Apply(ctx, "acct", table, "p2", []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: "y", Props: props, Expiry: soon},
				{Op: storage.InsertOrReplace, RowKey: "z", Props: props, Expiry: soon}}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			checkEntries(t, e, "acct", table, "expired, before the expiry purge")
			if n, err := e.PurgeExpired(ctx); err != nil || n == 0 {
				t.Fatalf("PurgeExpired = %d, %v; want some rows", n, err)
			}
			checkEntries(t, e, "acct", table, "after the expiry purge")
			id := tableIDOf(t, e, "acct", table)
			if len(storedEntries(t, e, id)) == 0 {
				t.Fatal("no entries left to purge with the table")
			}
			if err := e.DeleteTable(ctx, "acct", table); err != nil {
				t.Fatal(err)
			}
			if err := e.purgePending(ctx); err != nil {
				t.Fatal(err)
			}
			if got := storedEntries(t, e, id); len(got) != 0 {
				t.Fatalf("entries of a purged table: %v", got)
			}
		})
	}
}

// TestUniqueViolation checks a unique index's conflict in each write path: the failing
// mutation's error names the index and the holder, and nothing of the Apply is written.
func TestUniqueViolation(t *testing.T) {
	e := openIndexTest(t)
	ctx := context.Background()
	table := testTableName("ixu")
	if err := e.CreateTable(ctx, "acct", table, storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{
		{Name: "ByEmail", Properties: []string{"Email"}, Unique: true}}}); err != nil {
		t.Fatal(err)
	}
	dropAfter(t, e, table)
	email := func(s string) []entity.Property {
		return []entity.Property{{Name: "Email", Value: entity.StringValue(s)}}
	}
	if _, err := e.Apply(ctx, "acct", table, "p", []storage.Mutation{{Op: storage.Insert, RowKey: "a", Props: email("x")}}); err != nil {
		t.Fatal(err)
	}
	want := func(err error, index int, pk, rk string) {
		t.Helper()
		var ae *storage.ApplyError
		var uv *storage.UniqueViolation
		if !errors.As(err, &ae) || ae.Index != index || !errors.As(err, &uv) || uv.Index != "ByEmail" || uv.PartitionKey != pk || uv.RowKey != rk {
			t.Fatalf("error %v; want the unique violation of mutation %d, held by (%q, %q)", err, index, pk, rk)
		}
	}
	for _, op := range []storage.Op{storage.Insert, storage.InsertOrReplace, storage.InsertOrMerge} {
		_, err := e.Apply(ctx, "acct", table, "q", []storage.Mutation{{Op: op, RowKey: "b", Props: email("x")}})
		want(err, 0, "p", "a")
	}
	// In a batch, the failing mutation is named and the others are not written.
	_, err := e.Apply(ctx, "acct", table, "p", []storage.Mutation{
		{Op: storage.Insert, RowKey: "c", Props: email("y")},
		{Op: storage.Insert, RowKey: "d", Props: email("x")},
	})
	want(err, 1, "p", "a")
	if _, err := e.Get(ctx, "acct", table, "p", "c"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a mutation of a failed batch was written: %v", err)
	}
	// Two mutations of one batch taking one value: the later fails, naming the earlier.
	_, err = e.Apply(ctx, "acct", table, "p", []storage.Mutation{
		{Op: storage.Insert, RowKey: "e", Props: email("z")},
		{Op: storage.Insert, RowKey: "f", Props: email("z")},
	})
	want(err, 1, "p", "e")
	// A value passed from one entity to another in one batch, and one kept, is no conflict.
	if _, err := e.Apply(ctx, "acct", table, "p", []storage.Mutation{
		{Op: storage.Replace, RowKey: "a", Props: email("w")},
		{Op: storage.Insert, RowKey: "g", Props: email("x")},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(ctx, "acct", table, "p", []storage.Mutation{{Op: storage.Merge, RowKey: "g", Props: []entity.Property{{Name: "N", Value: entity.Int32Value(1)}}}}); err != nil {
		t.Fatal(err)
	}
	// ApplyEach: per mutation.
	each, err := e.ApplyEach(ctx, "acct", table, "p", []storage.Mutation{
		{Op: storage.Insert, RowKey: "h", Props: email("v")},
		{Op: storage.Insert, RowKey: "i", Props: email("w")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var uv *storage.UniqueViolation
	if each.Errs[0] != nil || !errors.As(each.Errs[1], &uv) || uv.RowKey != "a" || !storage.PerMutation(each.Errs[1]) {
		t.Fatalf("ApplyEach errors %v; want nil and the violation held by a", each.Errs)
	}
	// A deleted holder frees its value.
	if _, err := e.Apply(ctx, "acct", table, "p", []storage.Mutation{{Op: storage.Delete, RowKey: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(ctx, "acct", table, "p", []storage.Mutation{{Op: storage.Insert, RowKey: "i", Props: email("w")}}); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, e, "acct", table, "end")
}

// TestUniqueAcrossFrontEnds has three engines on one database (three front ends) insert
// one unique value at once, each on a key of its own, round after round: exactly one
// succeeds, the others get the violation naming it.
func TestUniqueAcrossFrontEnds(t *testing.T) {
	es := []*Engine{openIndexTest(t), openIndexTest(t), openIndexTest(t)}
	ctx := context.Background()
	table := testTableName("ixf")
	if err := es[0].CreateTable(ctx, "acct", table, storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{
		{Name: "ByEmail", Properties: []string{"Email"}, Unique: true}}}); err != nil {
		t.Fatal(err)
	}
	dropAfter(t, es[0], table)
	for round := range 60 {
		value := []entity.Property{{Name: "Email", Value: entity.StringValue(fmt.Sprint("v", round))}}
		errs := make([]error, len(es))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, e := range es {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				// Distinct partitions too: nothing but the value is shared.
				_, errs[i] = e.Apply(ctx, "acct", table, fmt.Sprint("p", i), []storage.Mutation{
					{Op: []storage.Op{storage.Insert, storage.InsertOrReplace, storage.InsertOrMerge}[i], RowKey: fmt.Sprint("r", round), Props: value}})
			}()
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			var uv *storage.UniqueViolation
			switch {
			case err == nil && won < 0:
				won = i
			case err == nil:
				t.Fatalf("round %d: front ends %d and %d both stored the value", round, won, i)
			case !errors.As(err, &uv):
				t.Fatalf("round %d: front end %d: %v", round, i, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no front end stored the value: %v", round, errs)
		}
		for i, err := range errs {
			var uv *storage.UniqueViolation
			if i != won && (!errors.As(err, &uv) || uv.PartitionKey != fmt.Sprint("p", won) || uv.RowKey != fmt.Sprint("r", round)) {
				t.Fatalf("round %d: front end %d: %v; want the value held by front end %d's entity", round, i, err, won)
			}
		}
	}
	checkEntries(t, es[0], "acct", table, "end")
}

// TestScanIndex reads an index through every part of a request: spans, the cursor, the
// limit, the key filter, expired rows skipped, on the engine and on a view; and the
// errors of a missing table and index, and the counts.
func TestScanIndex(t *testing.T) {
	e := openIndexTest(t)
	ctx := context.Background()
	table := testTableName("ixs")
	if err := e.CreateTable(ctx, "acct", table, storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{
		{Name: "ByN", Properties: []string{"N"}}, {Name: "ByU", Properties: []string{"U"}, Unique: true}}}); err != nil {
		t.Fatal(err)
	}
	dropAfter(t, e, table)
	info, err := e.GetTable(ctx, "acct", table)
	if err != nil {
		t.Fatal(err)
	}
	byN, byU := info.Settings.Indexes[0].ID, info.Settings.Indexes[1].ID
	// 60 entities: N = i % 10, U = i; every seventh expired (stored until purged).
	soon := time.Now().Add(time.Second).UnixNano() / 100
	for i := range 60 {
		m := storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%02d", i), Props: []entity.Property{
			{Name: "N", Value: entity.Int32Value(int32(i % 10))}, {Name: "U", Value: entity.Int64Value(int64(i))}}}
		if i%7 == 0 {
			m.Expiry = soon
		}
		if _, err := e.Apply(ctx, "acct", table, fmt.Sprint("p", i%3), []storage.Mutation{m}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Until(time.Unix(0, soon*100)) + 50*time.Millisecond)
	key := func(n int) []byte { return index.AppendValue(nil, entity.Int32Value(int32(n))) }
	// Everything of N in [2, 5) or ≥ 8, with the key filter refusing partition p1, in index
	// order, read in pages of every size.
	spans := []index.Span{{Lo: key(2), Hi: key(5)}, {Lo: key(8)}}
	type ent struct {
		n      int
		pk, rk string
	}
	var want []ent
	for i := range 60 {
		if n := i % 10; (n >= 2 && n < 5 || n >= 8) && i%7 != 0 && i%3 != 1 {
			want = append(want, ent{n, fmt.Sprint("p", i%3), fmt.Sprintf("r%02d", i)})
		}
	}
	slices.SortFunc(want, func(a, b ent) int {
		if a.n != b.n {
			return a.n - b.n
		}
		if c := strings.Compare(a.pk, b.pk); c != 0 {
			return c
		}
		return strings.Compare(a.rk, b.rk)
	})
	view, err := e.ReadView(ctx, storage.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []storage.Reader{e, view} {
		for _, limit := range []int{1, 3, 7, 1000} {
			var got []ent
			req := storage.IndexScanRequest{Index: byN, Spans: spans, Limit: limit, KeyFilter: func(pk, rk string) bool { return pk != "p1" }}
			for pages := 0; ; pages++ {
				res, err := r.ScanIndex(ctx, "acct", table, req)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Records) > limit || pages > 100 {
					t.Fatalf("limit %d: a page of %d", limit, len(res.Records))
				}
				for _, rec := range res.Records {
					n := int(rec.Entity.Props[0].Value.Int)
					got = append(got, ent{n, rec.Entity.PartitionKey, rec.Entity.RowKey})
				}
				if res.Next == nil {
					break
				}
				if len(res.Records) != limit {
					t.Fatalf("limit %d: a page of %d with a continuation", limit, len(res.Records))
				}
				req.After = res.Next
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%T, limit %d: read %v\nwant %v", r, limit, got, want)
			}
		}
	}
	// A unique index, a point.
	res, err := e.ScanIndex(ctx, "acct", table, storage.IndexScanRequest{Index: byU, Limit: 10,
		Spans: []index.Span{{Lo: index.AppendValue(nil, entity.Int64Value(41)), Hi: index.PrefixEnd(index.AppendValue(nil, entity.Int64Value(41)))}}})
	if err != nil || len(res.Records) != 1 || res.Records[0].Entity.RowKey != "r41" || res.Next != nil {
		t.Fatalf("unique point read: %+v, %v", res, err)
	}
	// Counts: entries (expired ones count until purged) and rows.
	if n, err := e.CountIndex(ctx, "acct", table, byN, spans, 0); err != nil || n != 30 {
		t.Fatalf("CountIndex = %d, %v; want 30", n, err)
	}
	if n, err := view.CountIndex(ctx, "acct", table, byN, spans, 4); err != nil || n != 4 {
		t.Fatalf("CountIndex with limit 4 = %d, %v", n, err)
	}
	if n, err := e.CountRows(ctx, "acct", table, storage.Key{PartitionKey: "p1"}, &storage.Key{PartitionKey: "p2"}, 0); err != nil || n != 20 {
		t.Fatalf("CountRows of p1 = %d, %v; want 20", n, err)
	}
	if n, err := view.CountRows(ctx, "acct", table, storage.Key{}, nil, 7); err != nil || n != 7 {
		t.Fatalf("CountRows with limit 7 = %d, %v", n, err)
	}
	if _, err := e.ScanIndex(ctx, "acct", table, storage.IndexScanRequest{Index: 99, Limit: 1}); !errors.Is(err, storage.ErrIndexNotFound) {
		t.Fatalf("missing index: %v", err)
	}
	if _, err := view.ScanIndex(ctx, "acct", "nosuch", storage.IndexScanRequest{Index: byN, Limit: 1}); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("missing table: %v", err)
	}
	if _, err := e.CountRows(ctx, "acct", "nosuch", storage.Key{}, nil, 1); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("missing table: %v", err)
	}
}

// buildUntilDone runs BuildIndexes until it has nothing left, at most max passes.
func buildUntilDone(t testing.TB, e *Engine, max int) {
	t.Helper()
	for range max {
		n, err := e.BuildIndexes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatalf("BuildIndexes still busy after %d passes", max)
}

// TestIndexBuild adds indexes to a table with rows while a writer changes it: the build
// goes in chunks, survives a restart between them (its position and progress are
// stored with each chunk), and ends ready with exactly the entries the rows call for.
// A dropped index's entries go; a unique index built over a duplicate fails, naming the
// two entities, and its entries go too.
func TestIndexBuild(t *testing.T) {
	e := openIndexTest(t)
	ctx := context.Background()
	table := testTableName("ixb")
	if err := e.CreateTable(ctx, "acct", table, storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	dropAfter(t, e, table)
	const rows = 2500
	for b := 0; b < rows; b += 100 {
		var muts []storage.Mutation
		for i := b; i < b+100; i++ {
			ps := []entity.Property{{Name: "U", Value: entity.Int64Value(int64(i))}}
			if i%5 != 0 {
				ps = append(ps, entity.Property{Name: "A", Value: entity.Int32Value(int32(i % 50))})
			}
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%05d", i), Props: ps})
		}
		if _, err := e.Apply(ctx, "acct", table, fmt.Sprint("p", b/1000), muts); err != nil {
			t.Fatal(err)
		}
	}
	byA := storage.IndexDef{Name: "ByA", Properties: []string{"A"}}
	byU := storage.IndexDef{Name: "ByU", Properties: []string{"U"}, Unique: true}
	if err := e.SetTableSettings(ctx, "acct", table, storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{byA, byU}}); err != nil {
		t.Fatal(err)
	}
	info, err := e.GetTable(ctx, "acct", table)
	if err != nil || info.Settings.Indexes[0].State != storage.IndexBuilding || info.Settings.Indexes[1].State != storage.IndexBuilding {
		t.Fatalf("after adding the indexes: %+v, %v; want both building", info.Settings.Indexes, err)
	}

	// A writer changes the table throughout (unique values of its own: no duplicates).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var writes int
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(2, 3))
		for n := 0; ; n++ {
			select {
			case <-stop:
				writes = n
				return
			default:
			}
			i := r.IntN(rows + 200)
			pk, rk := fmt.Sprint("p", i/1000), fmt.Sprintf("r%05d", i)
			ps := []entity.Property{{Name: "A", Value: entity.Int32Value(int32(r.IntN(50)))}, {Name: "U", Value: entity.Int64Value(int64(1_000_000 + n))}}
			op := []storage.Op{storage.InsertOrReplace, storage.InsertOrMerge, storage.Delete, storage.Merge}[r.IntN(4)]
			if _, err := e.Apply(ctx, "acct", table, pk, []storage.Mutation{{Op: op, RowKey: rk, Props: ps}}); err != nil {
				var ae *storage.ApplyError
				if !errors.As(err, &ae) {
					t.Errorf("writer: %v", err)
					return
				}
			}
		}
	}()

	// One chunk, then a restart: the build goes on from where the chunk left it.
	if n, err := e.BuildIndexes(ctx); err != nil || n < buildChunk {
		t.Fatalf("first pass: %d rows, %v; want a chunk of %d (and any other table's)", n, err, buildChunk)
	}
	e2 := openIndexTest(t)
	info, err = e2.GetTable(ctx, "acct", table)
	if err != nil || info.Settings.Indexes[0].Progress != buildChunk || info.Settings.Indexes[0].State != storage.IndexBuilding {
		t.Fatalf("after the first chunk: %+v, %v; want building, %d rows passed", info.Settings.Indexes, err, buildChunk)
	}
	buildUntilDone(t, e2, 20)
	close(stop)
	wg.Wait()
	if writes == 0 {
		t.Fatal("the writer wrote nothing during the build")
	}
	info, err = e2.GetTable(ctx, "acct", table)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range info.Settings.Indexes {
		// Each row was passed once: the table held rows … rows+200 of them meanwhile.
		if d.State != storage.IndexReady || d.Progress < rows-200 || d.Progress > rows+200 {
			t.Fatalf("after the build: %+v; want ready, about %d rows passed", d, rows)
		}
	}
	checkEntries(t, e2, "acct", table, "after the build")

	// Dropped: its entries go, the other's stay.
	id := tableIDOf(t, e2, "acct", table)
	idA := info.Settings.Indexes[0].ID
	if err := e2.SetTableSettings(ctx, "acct", table, storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{byU}}); err != nil {
		t.Fatal(err)
	}
	buildUntilDone(t, e2, 20)
	for _, en := range storedEntries(t, e2, id) {
		if en.id == idA {
			t.Fatalf("an entry of the dropped index is left: %v", en)
		}
	}
	checkEntries(t, e2, "acct", table, "after the drop")

	// A unique index over a value two entities hold fails, and its entries go: those of
	// the chunks before the one that met the duplicate too.
	for b := 0; b < 1500; b += 100 {
		var muts []storage.Mutation
		for i := b; i < b+100; i++ {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("d%05d", i),
				Props: []entity.Property{{Name: "D", Value: entity.StringValue(fmt.Sprint(i))}}})
		}
		if _, err := e2.Apply(ctx, "acct", table, "q", muts); err != nil {
			t.Fatal(err)
		}
	}
	for _, rk := range []string{"dup1", "dup2"} {
		if _, err := e2.Apply(ctx, "acct", table, "q", []storage.Mutation{{Op: storage.Insert, RowKey: rk,
			Props: []entity.Property{{Name: "D", Value: entity.StringValue("same")}}}}); err != nil {
			t.Fatal(err)
		}
	}
	byD := storage.IndexDef{Name: "ByD", Properties: []string{"D"}, Unique: true}
	if err := e2.SetTableSettings(ctx, "acct", table, storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{byU, byD}}); err != nil {
		t.Fatal(err)
	}
	buildUntilDone(t, e2, 20)
	info, err = e2.GetTable(ctx, "acct", table)
	if err != nil {
		t.Fatal(err)
	}
	d := info.Settings.Indexes[1]
	if d.State != storage.IndexFailed || !strings.Contains(d.Failure, `"dup1"`) || !strings.Contains(d.Failure, `"dup2"`) {
		t.Fatalf("a unique index over a duplicate: %+v; want failed, naming dup1 and dup2", d)
	}
	for _, en := range storedEntries(t, e2, id) {
		if en.id == d.ID {
			t.Fatalf("an entry of the failed index is left: %v", en)
		}
	}
	// Writes go on, without maintaining the failed index (a third holder is no conflict).
	if _, err := e.Apply(ctx, "acct", table, "q", []storage.Mutation{{Op: storage.Insert, RowKey: "dup3",
		Props: []entity.Property{{Name: "D", Value: entity.StringValue("same")}}}}); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, e, "acct", table, "after the failure")
}

// TestIndexCoalescedWrites has many callers write single entities of an indexed table
// at once, so that their statements go out in groups merged into one statement
// (mergeSingles, ixInsertGroup and ixUpsertGroup) as well as one by one: the entries
// are then exactly those the rows call for, and a unique value lost in a group is the
// loser's own violation.
func TestIndexCoalescedWrites(t *testing.T) {
	for _, unique := range []bool{true, false} {
		t.Run(fmt.Sprint("unique=", unique), func(t *testing.T) { testIndexCoalescedWrites(t, unique) })
	}
}

// testIndexCoalescedWrites is TestIndexCoalescedWrites on a table with a unique index or
// without (whose statements have no unique entries).
func testIndexCoalescedWrites(t *testing.T, unique bool) {
	e := openIndexTest(t)
	ctx := context.Background()
	table := testTableName("ixc")
	defs := []storage.IndexDef{{Name: "ByA", Properties: []string{"A"}}, {Name: "ByBA", Properties: []string{"B", "A"}}}
	if unique {
		defs = append(defs, storage.IndexDef{Name: "ByC", Properties: []string{"C"}, Unique: true})
	}
	if err := e.CreateTable(ctx, "acct", table, storage.TableSettings{Elastic: true, Indexes: defs}); err != nil {
		t.Fatal(err)
	}
	dropAfter(t, e, table)
	merged := e.singles.merged.Load()
	var wg sync.WaitGroup
	var violations atomic.Int64
	for w := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range 60 {
				ps := randomProps(r)
				if r.IntN(4) == 0 {
					// A unique value others may take at once.
					ps = append(slices.DeleteFunc(ps, func(p entity.Property) bool { return p.Name == "C" }),
						entity.Property{Name: "C", Value: entity.Int64Value(int64(r.IntN(20)))})
				}
				op := []storage.Op{storage.Insert, storage.InsertOrReplace, storage.InsertOrReplace, storage.Replace, storage.Delete}[r.IntN(5)]
				_, err := e.Apply(ctx, "acct", table, fmt.Sprint("p", w%3), []storage.Mutation{{Op: op, RowKey: fmt.Sprintf("w%02d-%d", w, i%15), Props: ps}})
				var ae *storage.ApplyError
				var uv *storage.UniqueViolation
				switch {
				case errors.As(err, &uv):
					violations.Add(1)
				case err != nil && !errors.As(err, &ae):
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e.singles.merged.Load() == merged {
		t.Error("no group of writes was merged into one statement")
	}
	if unique && violations.Load() == 0 {
		t.Error("no write met a unique value held by another")
	}
	checkEntries(t, e, "acct", table, "after the writes")
}

// TestSwapAfterDeclaration: a read-modify-write that read a table without indexes and
// swaps after an index was declared and built loses its swap (and runs again with the
// index) rather than leave the row's entry stale: a single merge, a batch of several
// writes (a merge, an insert, a delete), and ApplyEach's merges.
func TestSwapAfterDeclaration(t *testing.T) {
	e := openIndexTest(t)
	ctx := context.Background()
	a := func(v int32) []entity.Property { return []entity.Property{{Name: "A", Value: entity.Int32Value(v)}} }
	for _, tc := range []struct {
		name string
		muts []storage.Mutation
	}{
		{"merge", []storage.Mutation{{Op: storage.Merge, RowKey: "a", Props: a(10)}}},
		{"batch", []storage.Mutation{{Op: storage.Merge, RowKey: "a", Props: a(10)}, {Op: storage.Insert, RowKey: "c", Props: a(11)},
			{Op: storage.Delete, RowKey: "b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The read, then the declaration and the whole build, then the swap.
			table, args, st := readThenDeclare(t, e, tc.muts, storage.Mutation{Op: storage.Insert, RowKey: "a", Props: a(1)},
				storage.Mutation{Op: storage.Insert, RowKey: "b", Props: a(2)})
			checkEntries(t, e, "acct", table, "after the build")
			if _, err := e.swapRows(ctx, &args, st); !errors.Is(err, errConflict) {
				t.Fatalf("swap after the declaration: %v, want errConflict (the Apply reads again)", err)
			}
			checkEntries(t, e, "acct", table, "after the lost swap")
			if _, err := e.Apply(ctx, "acct", table, "p", tc.muts); err != nil {
				t.Fatal(err)
			}
			checkEntries(t, e, "acct", table, "after the Apply")
		})
	}
	t.Run("each", func(t *testing.T) {
		// ApplyEach's round with settings cached before the declaration: its merge's
		// swap carries the generation it read, and loses.
		table, args, st := readThenDeclare(t, e, []storage.Mutation{{Op: storage.Merge, RowKey: "a", Props: a(5)}},
			storage.Mutation{Op: storage.Insert, RowKey: "a", Props: a(1)})
		r := st.rows["a"]
		s := stmt{sql: e.q.casUpdate, args: []any{st.tableID, []byte("p"), []byte("a"), r.storedV, r.storedV + 1,
			entity.AppendProps(nil, a(5)), int64(0), st.gen}}
		if _, err := e.exec(ctx, []stmt{s}); err != nil || s.rows != 0 {
			t.Fatalf("ApplyEach's swap after the declaration: %d rows, %v; want none", s.rows, err)
		}
		checkEntries(t, e, "acct", table, "after the lost swap")
		each, err := e.ApplyEach(ctx, "acct", table, "p", args.muts)
		if err != nil || each.Errs[0] != nil {
			t.Fatal(err, each.Errs)
		}
		checkEntries(t, e, "acct", table, "after ApplyEach")
	})
}

// readThenDeclare makes an elastic table holding seed in partition "p", reads the rows
// muts (of "p") would change as a read-modify-write does, then declares an index on A and
// builds it whole: a swap of what was read now races the declaration.
func readThenDeclare(t *testing.T, e *Engine, muts []storage.Mutation, seed ...storage.Mutation) (string, applyArgs, *readState) {
	t.Helper()
	ctx := context.Background()
	table := testTableName("ixswap")
	if err := e.CreateTable(ctx, "acct", table, storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	dropAfter(t, e, table)
	if _, err := e.Apply(ctx, "acct", table, "p", seed); err != nil {
		t.Fatal(err)
	}
	args := applyArgs{acct: []byte("acct"), key: []byte(storage.TableKey(table)), pk: "p", muts: muts}
	st, err := e.readRows(ctx, &args, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetTableSettings(ctx, "acct", table, storage.TableSettings{Elastic: true,
		Indexes: []storage.IndexDef{{Name: "ByA", Properties: []string{"A"}}}}); err != nil {
		t.Fatal(err)
	}
	buildUntilDone(t, e, 10)
	return table, args, st
}

// TestBuildMeetsDrop: a build chunk that finds its index dropped after it read its
// position (the drop committed while the chunk waited for the catalogue row) leaves the
// drop's work alone, so the dropped index's entries are still removed.
func TestBuildMeetsDrop(t *testing.T) {
	e := openIndexTest(t)
	ctx := context.Background()
	table := testTableName("ixdrop")
	if err := e.CreateTable(ctx, "acct", table, storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	dropAfter(t, e, table)
	if _, err := e.Apply(ctx, "acct", table, "p", []storage.Mutation{{Op: storage.Insert, RowKey: "a",
		Props: []entity.Property{{Name: "A", Value: entity.Int32Value(1)}}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.SetTableSettings(ctx, "acct", table, storage.TableSettings{Elastic: true,
		Indexes: []storage.IndexDef{{Name: "ByA", Properties: []string{"A"}}}}); err != nil {
		t.Fatal(err)
	}
	tid := tableIDOf(t, e, "acct", table)
	info, err := e.GetTable(ctx, "acct", table)
	if err != nil {
		t.Fatal(err)
	}
	idx := int32(info.Settings.Indexes[0].ID)
	if _, err := e.pool.Exec(ctx, `UPDATE cerulean_index_work SET waited = TRUE WHERE table_id = $1`, tid); err != nil {
		t.Fatal(err)
	}
	// The drop, as SetTableSettings makes it, held uncommitted while the chunk starts.
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	dropped := storage.TableSettings{Elastic: true, IndexIDs: info.Settings.IndexIDs}
	for _, s := range []struct {
		sql  string
		args []any
	}{
		{e.q.ixLockTable, []any{tid}},
		{`UPDATE cerulean_tables SET settings = $2::BYTEA, gen = nextval('cerulean_table_gens') WHERE id = $1`, []any{tid, storage.MarshalSettings(dropped)}},
		{e.q.ixWorkDrop, []any{tid, idx}},
	} {
		if _, err := tx.Exec(ctx, s.sql, s.args...); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.buildChunk(ctx, tid, idx)
		done <- err
	}()
	// The chunk waits for the catalogue row; then the drop commits.
	for i := 0; ; i++ {
		var waiting int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if i == 500 {
			t.Fatal("the build chunk never waited for the catalogue row")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var kind int16
	if err := e.pool.QueryRow(ctx, `SELECT kind FROM cerulean_index_work WHERE table_id = $1 AND index_id = $2`, tid, idx).Scan(&kind); err != nil || kind != workDrop {
		t.Fatalf("the drop's work after the chunk: kind %d, %v; want %d", kind, err, workDrop)
	}
	buildUntilDone(t, e, 10)
	if got := storedEntries(t, e, tid); len(got) != 0 {
		t.Fatalf("entries of the dropped index left: %v", got)
	}
}
