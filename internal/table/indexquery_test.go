package table_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/table"
)

// The index query suite checks the query path's index plans (docs/indexes-design.md §4)
// against brute force, as the query suite checks key plans: random entities of mixed
// types with missing properties, random filters on indexed properties combined with key
// predicates, random $top, all pages; with concurrent writers too. It is written against
// storage.Engine, so both engines run it.

func TestIndexQueryPebble(t *testing.T) { runIndexQuerySuite(t, openPebble) }

func TestIndexQueryPostgres(t *testing.T) { runIndexQuerySuite(t, openPostgres) }

func runIndexQuerySuite(t *testing.T, open engineFactory) {
	t.Run("Differential", func(t *testing.T) {
		t.Parallel()
		testIndexDifferential(t, open(t), querySeed+10)
	})
	t.Run("ConcurrentWriters", func(t *testing.T) {
		t.Parallel()
		testIndexConcurrentWriters(t, open(t), querySeed+11)
	})
	t.Run("PlanChosen", func(t *testing.T) {
		t.Parallel()
		testIndexPlanChosen(t, open(t))
	})
	t.Run("LargeSelections", func(t *testing.T) {
		testIndexLargeSelections(t, open(t))
	})
	t.Run("Tokens", func(t *testing.T) {
		t.Parallel()
		testIndexTokens(t, open(t))
	})
	t.Run("PlanSwitch", func(t *testing.T) {
		t.Parallel()
		testIndexPlanSwitch(t, open(t))
	})
	t.Run("DroppedMeanwhile", func(t *testing.T) {
		t.Parallel()
		testIndexDroppedMeanwhile(t, open(t))
	})
	t.Run("SettingsReads", func(t *testing.T) {
		t.Parallel()
		testIndexSettingsReads(t, open(t))
	})
	t.Run("PageBytes", func(t *testing.T) {
		t.Parallel()
		testIndexPageBytes(t, open(t))
	})
}

// testIndexes are the suite's indexes over testProps: single-property ones of every
// type, and a compound one.
var testIndexes = []storage.IndexDef{
	{Name: "ByStr", Properties: []string{"Str"}},
	{Name: "ByNum", Properties: []string{"Num"}},
	{Name: "ByFlag", Properties: []string{"Flag"}},
	{Name: "ByWhen", Properties: []string{"When"}},
	{Name: "ById", Properties: []string{"Id"}},
	{Name: "ByBin", Properties: []string{"Bin"}},
	{Name: "ByRatioBig", Properties: []string{"Ratio", "Big"}},
}

// createIndexed creates an elastic table declaring defs (ready at once: it is empty).
func createIndexed(t *testing.T, svc *table.Service, account, tbl string, defs []storage.IndexDef) {
	t.Helper()
	st := storage.TableSettings{Elastic: true, Indexes: slices.Clone(defs)}
	if err := svc.CreateTable(context.Background(), account, tbl, &st); err != nil {
		t.Fatalf("create %s: %v", tbl, err)
	}
}

// indexedFilter writes a random filter that an index may answer: comparisons of an
// indexed property (points, ranges, their ands, ors and nots), often combined with key
// predicates or a residual predicate; sometimes any filter at all.
func (g *filterGen) indexedFilter() string {
	r := g.r
	if r.IntN(10) == 0 {
		return g.filter()
	}
	x := g.indexedTerm()
	switch r.IntN(8) {
	case 0, 1:
		x = "(" + x + ") and " + pick(r, []string{
			"PartitionKey eq " + g.keyLiteral(true),
			"PartitionKey ge " + g.keyLiteral(true),
			"RowKey lt " + g.keyLiteral(false),
			"(" + g.keyRange() + ")",
		})
	case 2:
		x = "(" + x + ") and " + g.propCompare()
	case 3:
		x = "(" + x + ") or (" + g.indexedTerm() + ")"
	}
	return x
}

// indexedTerm writes comparisons of one indexed property.
func (g *filterGen) indexedTerm() string {
	r := g.r
	def := pick(r, testIndexes)
	prop := def.Properties[0]
	typ := slices.IndexFunc(testProps, func(p struct {
		name string
		typ  entity.Type
	}) bool {
		return p.name == prop
	})
	lit := func() string {
		t := testProps[typ].typ
		if r.IntN(5) == 0 {
			t = pick(r, allTypes)
		}
		return g.literal(t)
	}
	switch r.IntN(7) {
	case 0, 1:
		return g.compare(prop, "eq", lit())
	case 2:
		n := 2 + r.IntN(3)
		terms := make([]string, n)
		for i := range terms {
			terms[i] = g.compare(prop, "eq", lit())
		}
		return strings.Join(terms, " or ")
	case 3:
		return g.compare(prop, pick(r, []string{"gt", "ge"}), lit()) + " and " + g.compare(prop, pick(r, []string{"lt", "le"}), lit())
	case 4:
		return g.compare(prop, g.op(), lit())
	case 5:
		return "not (" + g.compare(prop, "ne", lit()) + ")"
	}
	if prop == "Flag" {
		return pick(r, []string{"Flag", "not Flag", "Flag eq true", "Flag eq false"})
	}
	if len(def.Properties) > 1 {
		// Both properties: a point of the first narrowed by the second (a point of the
		// whole key too, half the time).
		op := pick(r, []string{"eq", g.op()})
		first := g.compare(prop, "eq", lit())
		switch r.IntN(4) {
		case 0:
			first = "(" + first + " or " + g.compare(prop, "eq", lit()) + ")"
		case 1:
			first = g.compare(prop, g.op(), lit())
		}
		return first + " and " + g.compare(def.Properties[1], op, g.literal(entity.Int64))
	}
	return g.compare(prop, "ne", lit())
}

// planKind is what a plan name says: "keys", "points" (an equality plan: Azure's order)
// or "range" (index order).
func planKind(plan string) string {
	switch {
	case strings.HasPrefix(plan, "keys") || plan == "none":
		return "keys"
	case strings.HasSuffix(plan, "point") || strings.HasSuffix(plan, "points"):
		return "points"
	}
	return "range"
}

// indexPages pages through q to the end (at most limit pages) and returns every entity
// in the order received and the first page's plan; a range plan keeps its plan on every
// page, and the others stay on keys or equality plans (whose orders agree).
func indexPages(t *testing.T, svc *table.Service, account, tbl string, q table.Query, limit int, describe func() string) ([]storage.Record, string) {
	t.Helper()
	var got []storage.Record
	var first string
	for pages := 0; ; pages++ {
		if pages > limit {
			t.Fatalf("%s: more than %d pages: runaway continuation", describe(), limit)
		}
		page, err := svc.QueryEntities(context.Background(), account, tbl, q)
		if err != nil {
			t.Fatalf("%s: page %d: %v", describe(), pages, err)
		}
		if page.Plan == "" {
			t.Fatalf("%s: page %d names no plan", describe(), pages)
		}
		if pages == 0 {
			first = page.Plan
		} else if (planKind(first) == "range") != (planKind(page.Plan) == "range") {
			t.Fatalf("%s: page %d's plan %q after %q", describe(), pages, page.Plan, first)
		}
		if (page.NextPartitionKey == "") != (page.NextRowKey == "") {
			t.Fatalf("%s: page %d: continuation %q %q: both or neither", describe(), pages, page.NextPartitionKey, page.NextRowKey)
		}
		top := q.Top
		if top == 0 {
			top = table.MaxPageSize
		}
		if len(page.Records) > top {
			t.Fatalf("%s: page %d holds %d > $top %d", describe(), pages, len(page.Records), top)
		}
		got = append(got, page.Records...)
		if page.NextPartitionKey == "" {
			return got, first
		}
		q.NextPartitionKey, q.NextRowKey = page.NextPartitionKey, page.NextRowKey
	}
}

// sortedByKey returns recs in key order.
func sortedByKey(recs []storage.Record) []storage.Record {
	out := slices.Clone(recs)
	slices.SortFunc(out, func(a, b storage.Record) int { return compareKeys(keyOf(a), keyOf(b)) })
	return out
}

// testIndexDifferential: for random filters and page sizes, every page of the plan the
// service picks, put together, is what brute force finds — in Azure's order for key and
// equality plans, as a set (each entity once) for range plans — and index plans of both
// kinds were picked often enough for that to mean something.
func testIndexDifferential(t *testing.T, eng storage.Engine, seed uint64) {
	account := uniqueAccount("indexdiff")
	const (
		tbl      = "Diff"
		entities = 3000
		filters  = 600
	)
	svc := table.New(eng, nil)
	createIndexed(t, svc, account, tbl, testIndexes)
	r := rand.New(rand.NewPCG(seed, 1))
	load(t, eng, account, tbl, r, testPartitions, entities)
	all := scanAll(t, eng, account, tbl)
	g := &filterGen{r: r, tsLo: all[0].Version, tsHi: all[0].Version}
	for _, rec := range all {
		g.pairs = append(g.pairs, keyOf(rec))
		g.tsLo, g.tsHi = min(g.tsLo, rec.Version), max(g.tsHi, rec.Version)
	}
	kinds := map[string]int{}
	failures := 0
	for i := range filters {
		text := g.indexedFilter()
		f, err := odata.Parse(text)
		if err != nil {
			t.Fatalf("filter %d does not parse: %v\n  %s", i, err, text)
		}
		top := randTop(r)
		var plan string
		describe := func() string {
			return fmt.Sprintf("seed %d filter %d $top=%d plan %q\n  $filter=%s", seed, i, top, plan, text)
		}
		want := bruteForce(all, f)
		got, plan := indexPages(t, svc, account, tbl, table.Query{Filter: f, Top: top}, len(all)+10, describe)
		kind := planKind(plan)
		kinds[kind]++
		if kind == "range" {
			got = sortedByKey(got) // index order; a duplicate shows as a difference
		}
		if !slices.EqualFunc(got, want, sameRecord) {
			t.Errorf("%s\n  %s", describe(), diffRecords(got, want))
			if failures++; failures == 10 {
				t.Fatalf("stopping after %d failing filters", failures)
			}
		}
	}
	t.Logf("plans: %v", kinds)
	if kinds["points"] < filters/10 || kinds["range"] < filters/10 {
		t.Errorf("index plans picked too seldom to test them (%v)", kinds)
	}
}

// testIndexConcurrentWriters pages through random index queries with small pages while
// writers insert, replace, merge and delete a third of the keys. Every entity returned
// must match (as it was read) and come once — in key order on key and equality plans;
// on range plans an entity written meanwhile may come twice — and every entity of the
// other two thirds, never written, that matches must come, once.
func testIndexConcurrentWriters(t *testing.T, eng storage.Engine, seed uint64) {
	account := uniqueAccount("indexwrites")
	const (
		tbl      = "Writes"
		entities = 1500
		queries  = 120
	)
	ctx := context.Background()
	svc := table.New(eng, nil)
	createIndexed(t, svc, account, tbl, testIndexes)
	r := rand.New(rand.NewPCG(seed, 2))
	keys := load(t, eng, account, tbl, r, testPartitions, entities)
	var volatile []storage.Key
	stable := map[storage.Key]bool{}
	for k := range keys {
		if r.IntN(3) == 0 {
			volatile = append(volatile, k)
		} else {
			stable[k] = true
		}
	}
	slices.SortFunc(volatile, compareKeys)
	for i := range 200 { // keys that come and go, never loaded
		volatile = append(volatile, storage.Key{PartitionKey: pick(r, testPartitions), RowKey: fmt.Sprintf("w%03d", i)})
	}
	all := scanAll(t, eng, account, tbl)
	g := &filterGen{r: r, tsLo: all[0].Version, tsHi: all[0].Version}
	for _, rec := range all {
		g.pairs = append(g.pairs, keyOf(rec))
		g.tsLo, g.tsHi = min(g.tsLo, rec.Version), max(g.tsHi, rec.Version)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := rand.New(rand.NewPCG(seed, uint64(100+w)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				// A few keys of one partition per commit, so that many writes land
				// between pages however slow a synced commit is.
				pk := volatile[wr.IntN(len(volatile))].PartitionKey
				var muts []storage.Mutation
				for _, k := range volatile {
					if k.PartitionKey == pk && wr.IntN(8) == 0 {
						op := pick(wr, []storage.Op{storage.InsertOrReplace, storage.InsertOrReplace, storage.Merge, storage.Delete})
						muts = append(muts, storage.Mutation{Op: op, RowKey: k.RowKey, Props: randProps(wr)})
					}
				}
				if _, err := eng.ApplyEach(ctx, account, tbl, pk, muts); err == nil {
					writes.Add(int64(len(muts)))
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	kinds := map[string]int{}
	for i := range queries {
		text := g.indexedFilter()
		f, err := odata.Parse(text)
		if err != nil {
			t.Fatalf("filter %d does not parse: %v\n  %s", i, err, text)
		}
		top := 1 + r.IntN(20)
		var plan string
		describe := func() string {
			return fmt.Sprintf("seed %d filter %d $top=%d plan %q\n  $filter=%s", seed, i, top, plan, text)
		}
		got, plan := indexPages(t, svc, account, tbl, table.Query{Filter: f, Top: top}, 4*len(all), describe)
		kinds[planKind(plan)]++
		seen := map[storage.Key]bool{}
		for j, rec := range got {
			k := keyOf(rec)
			// A range plan reads in the order of values that writes change: an entity
			// written between pages may come again (its value moved past the cursor),
			// one never written must not.
			if seen[k] && (stable[k] || planKind(plan) != "range") {
				t.Fatalf("%s: %v returned twice", describe(), k)
			}
			seen[k] = true
			if !f.MatchRecord(&got[j]) {
				t.Fatalf("%s: %v returned but does not match: %v", describe(), k, rec.Entity.Props)
			}
			if planKind(plan) != "range" && j > 0 && !keyOf(got[j-1]).Less(k) {
				t.Fatalf("%s: %v after %v: out of order", describe(), k, keyOf(got[j-1]))
			}
		}
		for _, rec := range bruteForce(all, f) {
			if k := keyOf(rec); stable[k] && !seen[k] {
				t.Fatalf("%s: %v, never written, matches but was not returned", describe(), k)
			}
		}
	}
	t.Logf("plans %v, %d writes meanwhile", kinds, writes.Load())
	if kinds["points"] < queries/10 || kinds["range"] < queries/10 {
		t.Errorf("index plans picked too seldom to test them (%v)", kinds)
	}
	if writes.Load() < 4*queries {
		t.Errorf("only %d writes ran during %d queries", writes.Load(), queries)
	}
}

// planTable is a table of n entities over 10 partitions: Email unique per entity
// (unique index ByEmail), Num = i % 100 (index ByNum), Cat = i % 7 as a string (alone, no
// index; with Num, index ByCatNum).
func planTable(t *testing.T, eng storage.Engine, account, tbl string, n int) *table.Service {
	t.Helper()
	svc := table.New(eng, nil)
	createIndexed(t, svc, account, tbl, []storage.IndexDef{
		{Name: "ByEmail", Properties: []string{"Email"}, Unique: true},
		{Name: "ByNum", Properties: []string{"Num"}},
		{Name: "ByCatNum", Properties: []string{"Cat", "Num"}},
	})
	batches := map[string][]storage.Mutation{}
	for i := range n {
		pk := fmt.Sprintf("p%d", i%10)
		batches[pk] = append(batches[pk], storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("%05d", i), Props: []entity.Property{
			{Name: "Email", Value: entity.StringValue(fmt.Sprintf("u%d@example.com", i))},
			{Name: "Num", Value: entity.Int32Value(int32(i % 100))},
			{Name: "Cat", Value: entity.StringValue(fmt.Sprint(i % 7))},
		}})
	}
	for pk, muts := range batches {
		for len(muts) > 0 {
			m := min(len(muts), 100)
			if _, err := eng.Apply(context.Background(), account, tbl, pk, muts[:m]); err != nil {
				t.Fatal(err)
			}
			muts = muts[m:]
		}
	}
	return svc
}

// testIndexPlanChosen: a selective filter on an indexed property runs on its index and
// reads about what it returns; filters an index cannot answer, or answers with too many
// entities, run on the keys, as the plan names say.
func testIndexPlanChosen(t *testing.T, eng storage.Engine) {
	account := uniqueAccount("indexplan")
	const tbl, n = "Plan", 3000
	svc := planTable(t, eng, account, tbl, n)
	for _, c := range []struct {
		filter     string
		plan       string
		matches    int
		maxScanned int
	}{
		{"Email eq 'u5@example.com'", "index ByEmail: 1 point", 1, 2},
		{"Email eq 'u5@example.com' or Email eq 'u2999@example.com' or Email eq 'nobody'", "index ByEmail: 3 points", 2, 4},
		{"Num eq 42", "index ByNum: 1 point", 30, 31},
		{"Num eq 42 or Num eq 7", "index ByNum: 2 points", 60, 62},
		// A number's span holds the values that round to it (the evaluator tells them
		// apart), so "lt 12" reads the 12s too.
		{"Num ge 10 and Num lt 12", "index ByNum: range", 60, 90},
		{"(Num lt 1 or Num ge 99) and Cat eq '3'", "index ByCatNum: 2 ranges", 9, 14},
		{"PartitionKey eq 'p3' and Num eq 13", "index ByNum: 1 point", 30, 31},
		{"Num eq 42 and Num eq 43", "index ByNum: 0 points", 0, 0},
		// A compound index: its first property's points narrowed by the second's spans.
		{"Cat eq '3' and Num eq 10", "index ByCatNum: 1 point", 5, 5},
		{"(Cat eq '3' or Cat eq '4') and (Num eq 10 or Num eq 20)", "index ByCatNum: 4 points", 17, 17},
		{"Cat eq '3' and Num ge 10 and Num lt 13", "index ByCatNum: range", 13, 17},
		// A range of the first property is not narrowed: its keys go on with any second.
		{"Cat ge '3' and Cat le '4' and Num ge 10 and Num lt 60", "index ByCatNum: range", 429, 857},
		{"Cat eq '3'", "keys", 429, n},
		// The key plan reads 10 rows, the index 30 entries: the keys win.
		{"PartitionKey eq 'p3' and RowKey lt '00100' and Num eq 43", "keys", 1, 10},
		{"Num ge 0", "keys", table.MaxPageSize, table.MaxPageSize},
		{"Num eq 42 or Cat eq '1'", "keys", 30 + 429 - 4, n},
		{"(PartitionKey eq 'p1' or PartitionKey eq 'p2') and Cat eq '1'", "keys: 2 ranges", 86, 600},
		{"PartitionKey eq 'p1' and RowKey eq '00001'", "keys: point", 1, 1},
	} {
		f, err := odata.Parse(c.filter)
		if err != nil {
			t.Fatal(err)
		}
		page, err := svc.QueryEntities(context.Background(), account, tbl, table.Query{Filter: f})
		if err != nil {
			t.Fatalf("%s: %v", c.filter, err)
		}
		if page.Plan != c.plan {
			t.Errorf("%s: plan %q, want %q", c.filter, page.Plan, c.plan)
		}
		if len(page.Records) != c.matches {
			t.Errorf("%s: %d entities, want %d", c.filter, len(page.Records), c.matches)
		}
		if page.Scanned > c.maxScanned {
			t.Errorf("%s: scanned %d entities, want at most %d", c.filter, page.Scanned, c.maxScanned)
		}
		if page.NextPartitionKey != "" && c.matches < table.MaxPageSize {
			t.Errorf("%s: a continuation on a single page", c.filter)
		}
	}
	// An index declared on a table with data is built before queries use it.
	ctx := context.Background()
	info, _, err := svc.TableSettings(ctx, account, tbl, table.Read{})
	if err != nil {
		t.Fatal(err)
	}
	st := info.Settings
	st.Indexes = append(slices.Clone(st.Indexes), storage.IndexDef{Name: "ByCat", Properties: []string{"Cat"}})
	if err := svc.SetTableSettings(ctx, account, tbl, st); err != nil {
		t.Fatal(err)
	}
	if info, _, err = svc.TableSettings(ctx, account, tbl, table.Read{}); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(info.Settings.Indexes, func(d storage.IndexDef) bool { return d.Name == "ByCat" }); info.Settings.Indexes[i].State != storage.IndexReady {
		f, _ := odata.Parse("Cat eq '3' or Cat eq '4'")
		if page, err := svc.QueryEntities(ctx, account, tbl, table.Query{Filter: f}); err != nil || page.Plan != "keys" {
			t.Errorf("on an index %s: plan %q, %v; want keys", info.Settings.Indexes[i].State, page.Plan, err)
		}
	}
	// The same with a page of 7: pages resume on their plan, and equality plans give
	// Azure's order.
	for _, text := range []string{"Num eq 42 or Num eq 7", "Num ge 10 and Num lt 12"} {
		f, _ := odata.Parse(text)
		got, plan := indexPages(t, svc, account, tbl, table.Query{Filter: f, Top: 7}, 100, func() string { return text })
		want := bruteForce(scanAll(t, eng, account, tbl), f)
		if planKind(plan) == "range" {
			got = sortedByKey(got)
		}
		if !slices.EqualFunc(got, want, sameRecord) {
			t.Errorf("%s in pages of 7 (%s): %s", text, plan, diffRecords(got, want))
		}
	}
	// A shared access signature's key range confines an index plan too.
	f, _ := odata.Parse("Num eq 42 or Num ge 98")
	bound := &odata.KeyRange{Start: storage.Key{PartitionKey: "p2"}, End: &storage.Key{PartitionKey: "p4", RowKey: "01000"}}
	for _, top := range []int{3, 0} {
		got, plan := indexPages(t, svc, account, tbl, table.Query{Filter: f, Top: top, Bound: bound}, 100, func() string { return "bound" })
		var want []storage.Record
		for _, rec := range bruteForce(scanAll(t, eng, account, tbl), f) {
			if bound.Contains(keyOf(rec)) {
				want = append(want, rec)
			}
		}
		if !strings.HasPrefix(plan, "index ByNum") {
			t.Errorf("bound: plan %q", plan)
		}
		if got = sortedByKey(got); !slices.EqualFunc(got, want, sameRecord) {
			t.Errorf("bound, $top=%d: %s", top, diffRecords(got, want))
		}
	}
}

// testIndexLargeSelections: the probes grow with the selections, so an index selecting
// thousands of entities still wins over a key plan reading many times more, and one
// selecting nearly the whole table loses to it.
func testIndexLargeSelections(t *testing.T, eng storage.Engine) {
	account := uniqueAccount("indexlarge")
	const tbl, n = "Large", 24000
	svc := planTable(t, eng, account, tbl, n)
	all := scanAll(t, eng, account, tbl)
	for _, c := range []struct{ filter, plan string }{
		{"Cat eq '3' and Num ge 0", "index ByCatNum: range"},         // 1 in 7: the key plan reads 7 times more
		{"Cat eq '3' and Num ge 0 and PartitionKey eq 'p1'", "keys"}, // a partition of 2,400 rows against 3,429 entries
		{"(Num eq 1 or Num eq 2 or Num eq 3 or Num eq 4) and Cat ne 'x'", "index ByNum: 4 points"},
		{"Num ge 1", "keys"}, // 99 in 100: the keys win
	} {
		f, err := odata.Parse(c.filter)
		if err != nil {
			t.Fatal(err)
		}
		got, plan := indexPages(t, svc, account, tbl, table.Query{Filter: f}, 100, func() string { return c.filter })
		if plan != c.plan {
			t.Errorf("%s: plan %q, want %q", c.filter, plan, c.plan)
		}
		if want := bruteForce(all, f); !slices.EqualFunc(sortedByKey(got), want, sameRecord) {
			t.Errorf("%s (%s): %s", c.filter, plan, diffRecords(sortedByKey(got), want))
		}
	}
}

// testIndexTokens: an index token resumes only the index read it came from: once its
// index is dropped, or with a filter that does not plan on it, it is 400 InvalidInput; a
// malformed one too; and a standard token whose PartitionKey starts like an index token
// is still a standard token.
func testIndexTokens(t *testing.T, eng storage.Engine) {
	account := uniqueAccount("indextokens")
	const tbl = "Tok"
	ctx := context.Background()
	svc := planTable(t, eng, account, tbl, 1000)
	f, _ := odata.Parse("Num ge 10 and Num lt 20")
	first, err := svc.QueryEntities(ctx, account, tbl, table.Query{Filter: f, Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first.NextPartitionKey, "ix1.") || !strings.HasPrefix(first.NextRowKey, "1!0!") {
		t.Fatalf("range plan's continuation %q %q", first.NextPartitionKey, first.NextRowKey)
	}
	if p := first.Served.Position; p != 0 && first.NextRowKey != fmt.Sprintf("1!0!!%d", p) {
		t.Errorf("NextRowKey %q does not carry the page's position %d", first.NextRowKey, p)
	}
	invalid := func(what string, q table.Query) {
		t.Helper()
		_, err := svc.QueryEntities(ctx, account, tbl, q)
		if e, ok := azerr.As(err); !ok || e.Code != azerr.InvalidInput {
			t.Errorf("%s: %v, want InvalidInput", what, err)
		}
	}
	resume := table.Query{Filter: f, Top: 5, NextPartitionKey: first.NextPartitionKey, NextRowKey: first.NextRowKey}
	if _, err := svc.QueryEntities(ctx, account, tbl, resume); err != nil {
		t.Fatalf("resuming: %v", err)
	}
	other, _ := odata.Parse("Cat eq '1'")
	invalid("another filter", table.Query{Filter: other, NextPartitionKey: first.NextPartitionKey, NextRowKey: first.NextRowKey})
	invalid("no filter", table.Query{NextPartitionKey: first.NextPartitionKey, NextRowKey: first.NextRowKey})
	for _, bad := range []string{"ix1.", "ix1.!!", "ix1.AA", "ix1.AQI", first.NextPartitionKey + "!"} {
		invalid("token "+bad, table.Query{Filter: f, NextPartitionKey: bad, NextRowKey: first.NextRowKey})
	}
	invalid("no NextRowKey", table.Query{Filter: f, NextPartitionKey: first.NextPartitionKey})

	// Drop ByNum: its token is refused, and the filter runs on the keys again.
	info, _, err := svc.TableSettings(ctx, account, tbl, table.Read{})
	if err != nil {
		t.Fatal(err)
	}
	st := info.Settings
	st.Indexes = slices.DeleteFunc(slices.Clone(st.Indexes), func(d storage.IndexDef) bool { return d.Name == "ByNum" })
	if err := svc.SetTableSettings(ctx, account, tbl, st); err != nil {
		t.Fatal(err)
	}
	invalid("dropped index", resume)
	page, err := svc.QueryEntities(ctx, account, tbl, table.Query{Filter: f})
	if err != nil || page.Plan != "keys" || len(page.Records) != 100 {
		t.Errorf("after the drop: plan %q, %d entities, %v", page.Plan, len(page.Records), err)
	}

	// A PartitionKey that looks like an index token pages as any other.
	plain := "Plain"
	if err := svc.CreateTable(ctx, account, plain, nil); err != nil {
		t.Fatal(err)
	}
	var muts []storage.Mutation
	for i := range 5 {
		muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprint(i)})
	}
	if _, err := eng.Apply(ctx, account, plain, "ix1.AQE", muts); err != nil {
		t.Fatal(err)
	}
	got, _ := indexPages(t, svc, account, plain, table.Query{Top: 1}, 10, func() string { return "ix1. partition" })
	if len(got) != 5 {
		t.Errorf("ix1. partition: %d entities, want 5", len(got))
	}
}

// testIndexPageBytes: a range plan's page of large entities ends at PageBytes, and a
// page cut short (CutAt, the cut fault) resumes after its last entity, so paging yields
// each match once either way.
func testIndexPageBytes(t *testing.T, eng storage.Engine) {
	account := uniqueAccount("indexbytes")
	const tbl = "Big"
	ctx := context.Background()
	svc := table.New(eng, nil)
	createIndexed(t, svc, account, tbl, []storage.IndexDef{{Name: "ByNum", Properties: []string{"Num"}}})
	blob := entity.BinaryValue(make([]byte, 256<<10))
	for i := range 60 {
		if _, err := eng.Apply(ctx, account, tbl, "p", []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprintf("%03d", i), Props: []entity.Property{
			{Name: "Num", Value: entity.Int32Value(int32(i % 30))}, {Name: "Blob", Value: blob}}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 { // small entities the index plan wins over
		if _, err := eng.Apply(ctx, account, tbl, "q", []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprintf("%03d", i), Props: []entity.Property{
			{Name: "Num", Value: entity.Int32Value(int32(100 + i))}}}}); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := odata.Parse("Num lt 25")
	want := bruteForce(scanAll(t, eng, account, tbl), f)
	q := table.Query{Filter: f}
	var got []storage.Record
	pages := 0
	for {
		page, err := svc.QueryEntities(ctx, account, tbl, q)
		if err != nil {
			t.Fatal(err)
		}
		if page.Plan != "index ByNum: range" {
			t.Fatalf("plan %q", page.Plan)
		}
		if size := len(page.Records) * (256 << 10); size > table.PageBytes+(256<<10)+4096 {
			t.Fatalf("page of %d entities: past PageBytes by more than one", len(page.Records))
		}
		if pages%2 == 1 && len(page.Records) > 1 {
			page.CutAt(pages % len(page.Records))
		}
		got = append(got, page.Records...)
		pages++
		if page.NextPartitionKey == "" {
			break
		}
		q.NextPartitionKey, q.NextRowKey = page.NextPartitionKey, page.NextRowKey
	}
	if got = sortedByKey(got); !slices.EqualFunc(got, want, sameRecord) {
		t.Errorf("%s", diffRecords(got, want))
	}
	if pages < 3 {
		t.Errorf("%d pages: PageBytes did not end any", pages)
	}
}

func compareKeys(a, b storage.Key) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	}
	return 0
}

// testIndexPlanSwitch: a query whose first page ran on the keys keeps Azure's order when
// writes between pages make a range plan on an index the cheaper one: a key continuation
// is never taken up by a range plan (which would start over, in another order).
func testIndexPlanSwitch(t *testing.T, eng storage.Engine) {
	account := uniqueAccount("indexswitch")
	const tbl = "Switch"
	ctx := context.Background()
	svc := table.New(eng, nil)
	createIndexed(t, svc, account, tbl, []storage.IndexDef{{Name: "ByNum", Properties: []string{"Num"}}})
	var muts []storage.Mutation
	for i := range 100 {
		muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("%03d", i), Props: []entity.Property{
			{Name: "Num", Value: entity.Int32Value(int32(i % 4))}}})
	}
	if _, err := eng.Apply(ctx, account, tbl, "a", muts); err != nil {
		t.Fatal(err)
	}
	f, _ := odata.Parse("Num gt 0 and Num lt 3")
	want := bruteForce(scanAll(t, eng, account, tbl), f)
	q := table.Query{Filter: f, Top: 5}
	page, err := svc.QueryEntities(ctx, account, tbl, q)
	if err != nil || page.Plan != "keys" {
		t.Fatalf("first page: plan %q, %v; want keys", page.Plan, err)
	}
	got := page.Records
	// 1000 entities without Num ahead of the cursor: the index now reads far less.
	for b := range 10 {
		muts = muts[:0]
		for i := range 100 {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("%d-%03d", b, i)})
		}
		if _, err := eng.Apply(ctx, account, tbl, "b", muts); err != nil {
			t.Fatal(err)
		}
	}
	if fresh, err := svc.QueryEntities(ctx, account, tbl, table.Query{Filter: f, Top: 5}); err != nil || fresh.Plan != "index ByNum: range" {
		t.Fatalf("a fresh query: plan %q, %v; want the range plan", fresh.Plan, err)
	}
	q.NextPartitionKey, q.NextRowKey = page.NextPartitionKey, page.NextRowKey
	rest, _ := indexPages(t, svc, account, tbl, q, 100, func() string { return "after the switch" })
	if got = append(got, rest...); !slices.EqualFunc(got, want, sameRecord) {
		t.Errorf("%s", diffRecords(got, want))
	}
}

// ghostEngine's views report, besides the table's own indexes, a ready unique index the
// engine does not know: one dropped between the planner's settings read and its index
// read.
type ghostEngine struct{ storage.Engine }

type ghostView struct{ storage.View }

var ghostIndex = storage.IndexDef{Name: "Ghost", Properties: []string{"Num"}, Unique: true, ID: 999, State: storage.IndexReady}

func (e ghostEngine) ReadView(ctx context.Context, o storage.ReadOptions) (storage.View, error) {
	v, err := e.Engine.ReadView(ctx, o)
	return ghostView{v}, err
}

func (v ghostView) GetTable(ctx context.Context, account, table string) (storage.TableInfo, error) {
	ti, err := v.View.GetTable(ctx, account, table)
	ti.Settings.Indexes = append(slices.Clone(ti.Settings.Indexes), ghostIndex)
	return ti, err
}

// testIndexDroppedMeanwhile: an index dropped after the plan chose it leaves a first page
// (and a standard continuation) to the keys, and refuses its own index token.
func testIndexDroppedMeanwhile(t *testing.T, eng storage.Engine) {
	account := uniqueAccount("indexghost")
	const tbl = "Ghost"
	ctx := context.Background()
	planTable(t, eng, account, tbl, 300)
	svc := table.New(ghostEngine{eng}, nil)
	f, _ := odata.Parse("Num eq 5")
	want := bruteForce(scanAll(t, eng, account, tbl), f)
	got, plan := indexPages(t, svc, account, tbl, table.Query{Filter: f, Top: 2}, 10, func() string { return "ghost" })
	if plan != "keys" || !slices.EqualFunc(got, want, sameRecord) {
		t.Errorf("plan %q: %s", plan, diffRecords(got, want))
	}
	_, err := svc.QueryEntities(ctx, account, tbl, table.Query{Filter: f,
		NextPartitionKey: "ix1.5wcBARABYWI", NextRowKey: "1!0!"}) // index 999, after ("a", "b")
	if e, ok := azerr.As(err); !ok || e.Code != azerr.InvalidInput {
		t.Errorf("a token of the dropped index: %v, want InvalidInput", err)
	}
}

// countingEngine counts its views' settings reads.
type countingEngine struct {
	storage.Engine
	reads *atomic.Int64
}

type countingView struct {
	storage.View
	reads *atomic.Int64
}

func (e countingEngine) ReadView(ctx context.Context, o storage.ReadOptions) (storage.View, error) {
	v, err := e.Engine.ReadView(ctx, o)
	return countingView{v, e.reads}, err
}

func (v countingView) GetTable(ctx context.Context, account, table string) (storage.TableInfo, error) {
	v.reads.Add(1)
	return v.View.GetTable(ctx, account, table)
}

// testIndexSettingsReads: a query no index can answer reads its table's settings at most
// once a second (what the planner last read says no index can answer it), a query an
// index may answer reads them every time, and a table this Service recreates with
// indexes is planned on them at once.
func testIndexSettingsReads(t *testing.T, eng storage.Engine) {
	account := uniqueAccount("indexreads")
	const tbl = "Reads"
	ctx := context.Background()
	var reads atomic.Int64
	svc := table.New(countingEngine{eng, &reads}, nil)
	if err := svc.CreateTable(ctx, account, tbl, &storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Apply(ctx, account, tbl, "p", []storage.Mutation{{Op: storage.Insert, RowKey: "1", Props: []entity.Property{{Name: "Num", Value: entity.Int32Value(5)}}}}); err != nil {
		t.Fatal(err)
	}
	query := func(filter, plan string) {
		t.Helper()
		f, _ := odata.Parse(filter)
		page, err := svc.QueryEntities(ctx, account, tbl, table.Query{Filter: f})
		if err != nil || page.Plan != plan {
			t.Fatalf("%s: plan %q, %v; want %s", filter, page.Plan, err, plan)
		}
	}
	for range 5 {
		query("Num eq 5", "keys")
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("5 queries no index answers read the settings %d times, want 1", n)
	}
	if err := svc.DeleteTable(ctx, account, tbl); err != nil {
		t.Fatal(err)
	}
	createIndexed(t, svc, account, tbl, []storage.IndexDef{{Name: "ByNum", Properties: []string{"Num"}}})
	if _, err := eng.Apply(ctx, account, tbl, "p", []storage.Mutation{{Op: storage.Insert, RowKey: "1", Props: []entity.Property{{Name: "Num", Value: entity.Int32Value(5)}}},
		{Op: storage.Insert, RowKey: "2", Props: []entity.Property{{Name: "Num", Value: entity.Int32Value(6)}}},
		{Op: storage.Insert, RowKey: "3", Props: []entity.Property{{Name: "Num", Value: entity.Int32Value(7)}}}}); err != nil {
		t.Fatal(err)
	}
	reads.Store(0)
	for range 3 {
		query("Num eq 5", "index ByNum: 1 point")
		query("Other eq 5", "keys")
	}
	if n := reads.Load(); n != 3 {
		t.Errorf("3 queries an index answers and 3 none does read the settings %d times, want 3", n)
	}
}

// uniqueAccount names an account of its own for one run of a test, so that the suite can
// run again on a database it ran on (PostgreSQL's is shared).
func uniqueAccount(prefix string) string { return fmt.Sprintf("%s%08x", prefix, rand.Uint32()) }
