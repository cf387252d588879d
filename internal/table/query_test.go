package table_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
	"github.com/ceruleandb/cerulean/internal/table"
)

// The query suite checks the planned, paged query path (odata key ranges, residual filter,
// point fast path, continuation) against brute force: every stored entity, read with one
// full Scan, filtered with odata.Filter.Match. It is written against storage.Engine, so
// every engine runs the same suite:
//
//	func TestQueryPostgres(t *testing.T) { runQuerySuite(t, openPostgres) }
//
// where openPostgres is an engineFactory. Everything random is seeded (querySeed), so a
// failure names its seed, filter and page size and replays exactly.

// engineFactory opens an empty engine for one test and arranges (t.Cleanup) for it to be
// closed. It may hand out a shared engine: the suite works in accounts of its own.
type engineFactory func(t *testing.T) storage.Engine

func openPebble(t *testing.T) storage.Engine {
	t.Helper()
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatalf("pebble.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := eng.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return eng
}

func TestQueryPebble(t *testing.T) { runQuerySuite(t, openPebble) }

// openPostgres opens the postgres engine on the database scripts/test starts
// (CERULEAN_TEST_POSTGRES_URL). Without one it skips, except in CI, where it fails.
func openPostgres(t *testing.T) storage.Engine {
	t.Helper()
	url := os.Getenv("CERULEAN_TEST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CERULEAN_TEST_POSTGRES_URL is not set (scripts/test starts PostgreSQL and sets it)")
		}
		t.Skip("CERULEAN_TEST_POSTGRES_URL is not set; scripts/test starts PostgreSQL and sets it")
	}
	eng, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := eng.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return eng
}

func TestQueryPostgres(t *testing.T) { runQuerySuite(t, openPostgres) }

// querySeed seeds every random choice of the suite. It is fixed so that failures
// reproduce; CERULEAN_QUERY_SEED overrides it to explore other cases (the entities'
// Timestamps, and so Timestamp literals, still differ from run to run).
const querySeed = 20260401

// runQuerySuite runs the query suite against engines from open.
func runQuerySuite(t *testing.T, open engineFactory) {
	querySeed := uint64(querySeed)
	if s := os.Getenv("CERULEAN_QUERY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CERULEAN_QUERY_SEED=%q: %v", s, err)
		}
		querySeed = n
	}
	t.Run("Differential", func(t *testing.T) {
		t.Parallel()
		testQueryDifferential(t, open(t), querySeed)
	})
	t.Run("WritesBetweenPages", func(t *testing.T) {
		t.Parallel()
		testWritesBetweenPages(t, open(t), querySeed+1)
	})
	t.Run("ListTables", func(t *testing.T) {
		t.Parallel()
		testListTablesDifferential(t, open(t), querySeed+2)
	})
	t.Run("ListTablesRangeEnd", func(t *testing.T) {
		t.Parallel()
		testListTablesRangeEnd(t, open(t))
	})
	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		testQueryErrors(t, open(t))
	})
	t.Run("TopNone", func(t *testing.T) {
		t.Parallel()
		testTopNone(t, open(t))
	})
	t.Run("PageBytes", func(t *testing.T) {
		t.Parallel()
		testQueryPageBytes(t, open(t))
	})
	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()
		testQueryCancelled(t, open(t))
	})
}

// testQueryPageBytes: a page of large entities ends at PageBytes (plus at most one
// entity), whatever $top says, and its continuation — inside a key range or between the
// ranges of a filter — resumes so that paging yields every match once, in order.
func testQueryPageBytes(t *testing.T, eng storage.Engine) {
	const tbl = "big"
	account := fmt.Sprintf("pagebytes%x", rand.Uint64())
	ctx := context.Background()
	svc := table.New(eng, nil)
	if err := svc.CreateTable(ctx, account, tbl, nil); err != nil {
		t.Fatal(err)
	}
	// 3 partitions × 12 entities of 300 KB (five 60 KB Binary properties): 10.8 MB.
	chunk := make([]byte, 60_000)
	for i := range chunk {
		chunk[i] = byte(i * 31)
	}
	var props []entity.Property
	for i := range 5 {
		props = append(props, entity.Property{Name: fmt.Sprintf("B%d", i), Value: entity.BinaryValue(chunk)})
	}
	for _, pk := range []string{"a", "b", "c"} {
		var muts []storage.Mutation
		for i := range 12 {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%02d", i), Props: props})
		}
		if _, err := eng.Apply(ctx, account, tbl, pk, muts); err != nil {
			t.Fatal(err)
		}
	}
	one := storage.RecordSize(&storage.Record{Entity: entity.Entity{PartitionKey: "a", RowKey: "r00", Props: props}})
	for _, c := range []struct {
		filter string
		want   int
	}{
		{"", 36},
		{"PartitionKey eq 'a' or PartitionKey eq 'c'", 24}, // two ranges
		{"B0 eq X'00'", 0}, // residual filter: every entity examined, none kept
	} {
		q := table.Query{Filter: odata.MustParse(c.filter), Top: 1000}
		var got []storage.Key
		pages := 0
		for {
			page, err := svc.QueryEntities(ctx, account, tbl, q)
			if err != nil {
				t.Fatalf("%q: %v", c.filter, err)
			}
			pages++
			size := 0
			for i := range page.Records {
				size += storage.RecordSize(&page.Records[i])
				got = append(got, keyOf(page.Records[i]))
			}
			if size > table.PageBytes+one {
				t.Fatalf("%q: page of %d entities holds %d bytes, over PageBytes (%d) plus one entity", c.filter, len(page.Records), size, table.PageBytes)
			}
			if page.NextPartitionKey == "" {
				break
			}
			if pages > 100 {
				t.Fatalf("%q: paging does not end", c.filter)
			}
			q.NextPartitionKey, q.NextRowKey = page.NextPartitionKey, page.NextRowKey
		}
		if len(got) != c.want || !slices.IsSortedFunc(got, func(a, b storage.Key) int {
			if a.Less(b) {
				return -1
			}
			return 1
		}) {
			t.Fatalf("%q: %d entities in %d pages (%q); want %d, each once, in order", c.filter, len(got), pages, got, c.want)
		}
		if min := c.want * one / (table.PageBytes + one); pages < min {
			t.Fatalf("%q: %d pages; a page of at most PageBytes needs at least %d", c.filter, pages, min)
		}
	}
}

// testQueryCancelled: a query whose context is cancelled fails instead of answering a
// page, so no work goes on for a client that has gone.
func testQueryCancelled(t *testing.T, eng storage.Engine) {
	const tbl = "cancelled"
	account := fmt.Sprintf("cancelled%x", rand.Uint64())
	svc := table.New(eng, nil)
	if err := svc.CreateTable(context.Background(), account, tbl, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Apply(context.Background(), account, tbl, "p", []storage.Mutation{{Op: storage.Insert, RowKey: "r"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, f := range []string{"", "PartitionKey eq 'p' or PartitionKey eq 'q'", "X eq 1"} {
		page, err := svc.QueryEntities(ctx, account, tbl, table.Query{Filter: odata.MustParse(f)})
		if err == nil || len(page.Records) != 0 {
			t.Errorf("%q with a cancelled context: %d entities, %v; want an error", f, len(page.Records), err)
		}
	}
}

// ---------------------------------------------------------------------------------------
// Random entities

// Partition keys and the alphabet row keys are drawn from: quotes, '%', spaces, non-ASCII
// (two-, three- and four-byte UTF-8) and the empty string, so that escaping, byte order
// and empty keys all get exercised.
var (
	testPartitions = []string{"", "a", "a'b", "b%", "b%25", "é", "日本", "z😀"}
	keyAlphabet    = []string{"a", "b", "Z", "0", "'", "%", " ", "~", "é", "😀"}
)

// randKeyString returns a string of 0–3 symbols of keyAlphabet.
func randKeyString(r *rand.Rand) string {
	var b strings.Builder
	for n := r.IntN(4); n > 0; n-- {
		b.WriteString(keyAlphabet[r.IntN(len(keyAlphabet))])
	}
	return b.String()
}

// Custom properties: each has a usual type, but an entity may carry it with any other
// type, or not at all.
var testProps = []struct {
	name string
	typ  entity.Type
}{
	{"A", entity.String},
	{"Str", entity.String},
	{"Num", entity.Int32},
	{"Big", entity.Int64},
	{"Ratio", entity.Double},
	{"Flag", entity.Boolean},
	{"When", entity.DateTime},
	{"Id", entity.GUID},
	{"Bin", entity.Binary},
}

// Value pools, small so that equalities are common. Literals are drawn from the same pools
// plus values no entity holds.
var (
	poolStrings = []string{"", "a", "b", "ab", "B", "O'Neil", "100%", "é", "😀", "a b"}
	poolInt32   = []int64{0, 1, -1, 2, 7, 100, math.MaxInt32, math.MinInt32}
	poolInt64   = []int64{0, 1, -1, 7, 100, 1 << 40, 1<<53 + 1, math.MaxInt64, math.MinInt64}
	poolDoubles = []float64{0, math.Copysign(0, -1), 0.5, 1, -1.5, 2.5, 7, 100, 1e300, 1 << 53,
		math.NaN(), math.Inf(1), math.Inf(-1)}
	poolTimes = []int64{
		entity.MinDateTime,
		entity.TimeToTicks(time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)),
		entity.TimeToTicks(time.Date(2000, 1, 1, 0, 0, 0, 123456700, time.UTC)),
		entity.TimeToTicks(time.Date(2000, 1, 1, 0, 0, 0, 123456700, time.UTC)) + 1,
		entity.TimeToTicks(time.Date(2024, 2, 29, 12, 30, 0, 0, time.UTC)),
		entity.MaxDateTime,
	}
	poolGUIDs = [][]byte{
		mustGUID("00000000-0000-0000-0000-000000000000"),
		mustGUID("0f8fad5b-d9cb-469f-a165-70867728950e"),
		mustGUID("7c9e6679-7425-40de-944b-e07fc1f90ae7"),
		mustGUID("ffffffff-ffff-ffff-ffff-ffffffffffff"),
	}
	poolBinaries = [][]byte{{}, {0}, {1}, {1, 2}, {0xff}, {0x0a, 0x0b, 0x0c}}
)

func mustGUID(s string) []byte {
	g, err := entity.ParseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

var allTypes = []entity.Type{entity.String, entity.Boolean, entity.Int32, entity.Int64,
	entity.Double, entity.DateTime, entity.GUID, entity.Binary}

func randValue(r *rand.Rand, t entity.Type) entity.Value {
	switch t {
	case entity.String:
		return entity.StringValue(pick(r, poolStrings))
	case entity.Boolean:
		return entity.BoolValue(r.IntN(2) == 0)
	case entity.Int32:
		return entity.Int32Value(int32(pick(r, poolInt32)))
	case entity.Int64:
		return entity.Int64Value(pick(r, poolInt64))
	case entity.Double:
		return entity.DoubleValue(pick(r, poolDoubles))
	case entity.DateTime:
		return entity.Value{Type: entity.DateTime, Int: pick(r, poolTimes)}
	case entity.GUID:
		return entity.Value{Type: entity.GUID, Bytes: pick(r, poolGUIDs)}
	case entity.Binary:
		return entity.BinaryValue(pick(r, poolBinaries))
	}
	panic("bad type")
}

// randProps returns a random property set: each property present with probability 0.6,
// of its usual type 70% of the time.
func randProps(r *rand.Rand) []entity.Property {
	var props []entity.Property
	for _, p := range testProps {
		if r.IntN(10) >= 6 {
			continue
		}
		typ := p.typ
		if r.IntN(10) >= 7 {
			typ = pick(r, allTypes)
		}
		props = append(props, entity.Property{Name: p.name, Value: randValue(r, typ)})
	}
	r.Shuffle(len(props), func(i, j int) { props[i], props[j] = props[j], props[i] })
	return props
}

// load inserts n random entities (plus an empty RowKey in every partition) into the table
// through the engine, grouped into multi-row Applies per partition so that loading costs
// a few dozen synced commits rather than thousands. It returns the keys inserted.
func load(t *testing.T, eng storage.Engine, account, tbl string, r *rand.Rand, partitions []string, n int) map[storage.Key]bool {
	t.Helper()
	keys := map[storage.Key]bool{}
	batches := map[string][]storage.Mutation{}
	add := func(pk, rk string) {
		k := storage.Key{PartitionKey: pk, RowKey: rk}
		if keys[k] {
			return
		}
		keys[k] = true
		batches[pk] = append(batches[pk], storage.Mutation{Op: storage.Insert, RowKey: rk, Props: randProps(r)})
	}
	for _, pk := range partitions {
		add(pk, "")
	}
	for len(keys) < n {
		add(pick(r, partitions), randKeyString(r))
	}
	for _, pk := range partitions {
		muts := batches[pk]
		for len(muts) > 0 {
			m := min(len(muts), 100)
			if _, err := eng.Apply(context.Background(), account, tbl, pk, muts[:m]); err != nil {
				t.Fatalf("loading partition %q: %v", pk, err)
			}
			muts = muts[m:]
		}
	}
	return keys
}

// scanAll reads the whole table with one Scan.
func scanAll(t *testing.T, eng storage.Engine, account, tbl string) []storage.Record {
	t.Helper()
	res, err := eng.Scan(context.Background(), account, tbl, storage.ScanRequest{Limit: math.MaxInt32})
	if err != nil {
		t.Fatalf("full scan: %v", err)
	}
	if res.Next != nil {
		t.Fatalf("full scan stopped early at %v", *res.Next)
	}
	for i := 1; i < len(res.Records); i++ {
		if !keyOf(res.Records[i-1]).Less(keyOf(res.Records[i])) {
			t.Fatalf("full scan out of order at %d: %v then %v", i, keyOf(res.Records[i-1]), keyOf(res.Records[i]))
		}
	}
	return res.Records
}

func keyOf(rec storage.Record) storage.Key {
	return storage.Key{PartitionKey: rec.Entity.PartitionKey, RowKey: rec.Entity.RowKey}
}

func bruteForce(all []storage.Record, f *odata.Filter) []storage.Record {
	var out []storage.Record
	for i := range all {
		if f.Match(&all[i].Entity, all[i].Version) {
			out = append(out, all[i])
		}
	}
	return out
}

// sameRecord compares keys, version and properties (encoded, so that NaN equals NaN).
func sameRecord(a, b storage.Record) bool {
	return a.Entity.PartitionKey == b.Entity.PartitionKey && a.Entity.RowKey == b.Entity.RowKey &&
		a.Version == b.Version &&
		string(entity.AppendProps(nil, a.Entity.Props)) == string(entity.AppendProps(nil, b.Entity.Props))
}

// ---------------------------------------------------------------------------------------
// Random filters, generated as text

// filterGen writes random $filter expressions over the suite's keys and properties, in
// every literal form the grammar has.
type filterGen struct {
	r *rand.Rand
	// pairs are stored keys, so that points and range bounds hit real entities.
	pairs []storage.Key
	// tsLo and tsHi bound the stored Timestamps.
	tsLo, tsHi int64
}

var ops = []string{"eq", "ne", "gt", "ge", "lt", "le"}

func (g *filterGen) op() string {
	o := pick(g.r, ops)
	if g.r.IntN(40) == 0 {
		o = strings.ToUpper(o) // keywords are accepted in any case
	}
	return o
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// keyLiteral returns a quoted key-like string: a stored key, a partition name, or random.
func (g *filterGen) keyLiteral(pkSide bool) string {
	r := g.r
	switch r.IntN(4) {
	case 0:
		return quote(pick(r, testPartitions))
	case 1:
		k := pick(r, g.pairs)
		if pkSide {
			return quote(k.PartitionKey)
		}
		return quote(k.RowKey)
	}
	return quote(randKeyString(r))
}

func (g *filterGen) int32Literal() string { return strconv.FormatInt(pick(g.r, poolInt32), 10) }

func (g *filterGen) int64Literal() string {
	suffix := "L"
	if g.r.IntN(4) == 0 {
		suffix = "l"
	}
	return strconv.FormatInt(pick(g.r, poolInt64), 10) + suffix
}

func (g *filterGen) doubleLiteral() string {
	var f float64
	for {
		f = pick(g.r, poolDoubles)
		if !math.IsNaN(f) && !math.IsInf(f, 0) {
			break
		}
	}
	var s string
	switch g.r.IntN(4) {
	case 0:
		s = strconv.FormatFloat(f, 'e', -1, 64) // 1e+300, 5e-01
	case 1:
		s = strconv.FormatFloat(f, 'E', -1, 64)
	default:
		s = strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
	}
	if g.r.IntN(5) == 0 {
		s += pick(g.r, []string{"d", "D"})
	}
	return s
}

// dateLiteral renders ticks as a datetime'…' literal with 0–7 fraction digits (truncating)
// and a Z, no zone, or a numeric offset.
func (g *filterGen) dateLiteral(ticks int64) string {
	r := g.r
	t := entity.TicksToTime(ticks)
	frac := fmt.Sprintf("%07d", ((ticks%10_000_000)+10_000_000)%10_000_000)
	digits := r.IntN(8)
	var zone *time.Location
	suffix := pick(r, []string{"Z", "", "z", "offset"})
	if suffix == "offset" {
		if t.Year() > 1601 && t.Year() < 9999 {
			zone = time.FixedZone("", pick(r, []int{5*3600 + 1800, -8 * 3600, 0}))
		} else {
			suffix = "Z"
		}
	}
	var b strings.Builder
	b.WriteString(pick(r, []string{"datetime", "datetime", "DateTime"}))
	b.WriteByte('\'')
	if zone != nil {
		t = t.In(zone)
	}
	if digits == 0 && t.Second() == 0 && r.IntN(2) == 0 {
		b.WriteString(t.Format("2006-01-02T15:04"))
	} else {
		b.WriteString(t.Format("2006-01-02T15:04:05"))
		if digits > 0 {
			b.WriteString("." + frac[:digits])
		}
	}
	if zone != nil {
		b.WriteString(t.Format("-07:00"))
	} else {
		b.WriteString(suffix)
	}
	b.WriteByte('\'')
	return b.String()
}

func (g *filterGen) timestampTicks() int64 {
	r := g.r
	switch r.IntN(6) {
	case 0:
		return g.tsLo
	case 1:
		return g.tsHi
	case 2:
		return pick(r, poolTimes)
	}
	return g.tsLo + r.Int64N(g.tsHi-g.tsLo+1)
}

func (g *filterGen) guidLiteral() string {
	s := entity.FormatGUID(pick(g.r, poolGUIDs))
	if g.r.IntN(2) == 0 {
		s = strings.ToUpper(s)
	}
	return pick(g.r, []string{"guid", "guid", "GUID"}) + "'" + s + "'"
}

func (g *filterGen) binaryLiteral() string {
	h := fmt.Sprintf("%x", pick(g.r, poolBinaries))
	if g.r.IntN(2) == 0 {
		h = strings.ToUpper(h)
	}
	return pick(g.r, []string{"X", "x", "binary", "Binary"}) + "'" + h + "'"
}

func (g *filterGen) literal(t entity.Type) string {
	switch t {
	case entity.String:
		if g.r.IntN(3) == 0 {
			return quote(randKeyString(g.r))
		}
		return quote(pick(g.r, poolStrings))
	case entity.Boolean:
		return pick(g.r, []string{"true", "false"})
	case entity.Int32:
		return g.int32Literal()
	case entity.Int64:
		return g.int64Literal()
	case entity.Double:
		return g.doubleLiteral()
	case entity.DateTime:
		return g.dateLiteral(pick(g.r, poolTimes))
	case entity.GUID:
		return g.guidLiteral()
	case entity.Binary:
		return g.binaryLiteral()
	}
	panic("bad type")
}

// compare writes "left op right", or with the operands swapped (and the operator
// mirrored, so the meaning is the same) — the parser must accept the property on either
// side.
func (g *filterGen) compare(prop, op, lit string) string {
	if g.r.IntN(4) == 0 {
		mirror := map[string]string{"eq": "eq", "ne": "ne", "gt": "lt", "ge": "le", "lt": "gt", "le": "ge"}
		return lit + " " + mirror[strings.ToLower(op)] + " " + prop
	}
	return prop + " " + op + " " + lit
}

// keyRange writes a RowKey range inside one partition.
func (g *filterGen) keyRange() string {
	r := g.r
	k := pick(r, g.pairs)
	pk := quote(k.PartitionKey)
	if r.IntN(4) == 0 {
		pk = g.keyLiteral(true)
	}
	lo, hi := g.keyLiteral(false), g.keyLiteral(false)
	s := "PartitionKey eq " + pk + " and " + g.compare("RowKey", pick(r, []string{"gt", "ge"}), lo)
	if r.IntN(4) > 0 {
		s += " and " + g.compare("RowKey", pick(r, []string{"lt", "le"}), hi)
	}
	return s
}

// point writes "PartitionKey eq … and RowKey eq …", mostly of a stored entity, sometimes
// with a residual predicate.
func (g *filterGen) point() string {
	r := g.r
	k := pick(r, g.pairs)
	rk := quote(k.RowKey)
	if r.IntN(4) == 0 {
		rk = g.keyLiteral(false)
	}
	s := "PartitionKey eq " + quote(k.PartitionKey) + " and RowKey eq " + rk
	if r.IntN(2) == 0 {
		s = "RowKey eq " + rk + " and PartitionKey eq " + quote(k.PartitionKey)
	}
	if r.IntN(3) == 0 {
		s += " and " + g.propCompare()
	}
	return s
}

func (g *filterGen) propCompare() string {
	r := g.r
	p := pick(r, testProps)
	typ := p.typ
	if r.IntN(3) == 0 {
		typ = pick(r, allTypes)
	}
	return g.compare(p.name, g.op(), g.literal(typ))
}

// atom writes one comparison or bare operand.
func (g *filterGen) atom() string {
	r := g.r
	switch r.IntN(20) {
	case 0, 1, 2:
		return g.compare("PartitionKey", g.op(), g.keyLiteral(true))
	case 3, 4, 5:
		return g.compare("RowKey", g.op(), g.keyLiteral(false))
	case 6:
		return "(" + g.keyRange() + ")"
	case 7:
		return "(" + g.point() + ")"
	case 8:
		return g.compare("Timestamp", g.op(), g.dateLiteral(g.timestampTicks()))
	case 9, 10, 11, 12, 13:
		return g.propCompare()
	case 14:
		// A key compared with a non-string: never true, plans to nothing.
		return g.compare(pick(r, []string{"PartitionKey", "RowKey"}), g.op(), g.literal(pick(r, allTypes[1:])))
	case 15:
		// A property no entity has: unknown for every operator, ne included.
		return g.compare("Missing", g.op(), g.literal(pick(r, allTypes)))
	case 16:
		// Two properties.
		a, b := pick(r, testProps), pick(r, testProps)
		return a.name + " " + g.op() + " " + b.name
	case 17:
		// Two literals.
		typ := pick(r, allTypes)
		return g.literal(typ) + " " + g.op() + " " + g.literal(typ)
	case 18:
		return pick(r, []string{"Flag", "Flag", "A", "Missing", "true", "false"})
	}
	return g.compare("PartitionKey", pick(r, []string{"ge", "gt"}), g.keyLiteral(true)) + " and " +
		g.compare("PartitionKey", pick(r, []string{"le", "lt"}), g.keyLiteral(true))
}

// expr writes a random expression of at most depth levels of and/or/not.
func (g *filterGen) expr(depth int) string {
	r := g.r
	if depth <= 0 || r.IntN(4) == 0 {
		return g.atom()
	}
	switch r.IntN(7) {
	case 0:
		x := g.expr(depth - 1)
		if r.IntN(3) > 0 || !isSimple(x) {
			x = "(" + x + ")"
		}
		return "not " + x
	case 1, 2:
		return g.join("and", depth)
	case 3, 4:
		return g.join("or", depth)
	case 5:
		return "(" + g.expr(depth-1) + ")"
	}
	// An or of key ranges across partitions, possibly with a residual.
	n := 2 + r.IntN(3)
	terms := make([]string, n)
	for i := range terms {
		switch r.IntN(3) {
		case 0:
			terms[i] = "(" + g.point() + ")"
		case 1:
			terms[i] = "PartitionKey eq " + g.keyLiteral(true)
		default:
			terms[i] = "(" + g.keyRange() + ")"
		}
	}
	s := strings.Join(terms, " or ")
	if r.IntN(3) == 0 {
		s = "(" + s + ") and " + g.propCompare()
	}
	return s
}

// isSimple reports an expression without and/or at the top, which "not" may precede
// without parentheses (not binds tighter than and/or).
func isSimple(x string) bool {
	return !strings.Contains(x, " and ") && !strings.Contains(x, " or ") &&
		!strings.Contains(x, " AND ") && !strings.Contains(x, " OR ")
}

func (g *filterGen) join(kw string, depth int) string {
	r := g.r
	n := 2 + r.IntN(2)
	var b strings.Builder
	for i := range n {
		x := g.expr(depth - 1)
		if r.IntN(2) == 0 {
			x = "(" + x + ")"
		}
		if i > 0 {
			sep := " " + kw + " "
			prev := b.String()
			switch {
			case strings.HasSuffix(prev, ")") && strings.HasPrefix(x, "(") && r.IntN(4) == 0:
				sep = kw // "(…)or(…)": no spaces needed around parentheses
			case r.IntN(30) == 0:
				sep = " " + strings.ToUpper(kw) + " "
			}
			b.WriteString(sep)
		}
		b.WriteString(x)
	}
	return b.String()
}

// filter returns one random filter text; a few are empty (no filter at all).
func (g *filterGen) filter() string {
	switch g.r.IntN(40) {
	case 0:
		return ""
	case 1:
		return "   "
	case 2, 3, 4:
		return g.point()
	case 5, 6:
		return g.keyRange()
	}
	return g.expr(3)
}

// ---------------------------------------------------------------------------------------
// Paging

// randTop returns a page size: 1–50, the maximum 1000, or 0 (the default, 1000).
func randTop(r *rand.Rand) int {
	switch r.IntN(10) {
	case 0:
		return 1000
	case 1:
		return 0
	}
	return 1 + r.IntN(50)
}

// pager pages through one query, checking every page's shape.
type pager struct {
	t        *testing.T
	svc      *table.Service
	account  string
	tbl      string
	q        table.Query
	describe func() string

	pages int
	done  bool
}

// next fetches the next page.
func (p *pager) next() []storage.Record {
	t := p.t
	t.Helper()
	start := time.Now()
	page, err := p.svc.QueryEntities(context.Background(), p.account, p.tbl, p.q)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("%s: page %d: QueryEntities: %v", p.describe(), p.pages, err)
	}
	p.pages++
	top := p.q.Top
	if top == 0 {
		top = table.MaxPageSize
	}
	if len(page.Records) > top {
		t.Fatalf("%s: page %d holds %d entities, more than $top %d", p.describe(), p.pages, len(page.Records), top)
	}
	if (page.NextPartitionKey == "") != (page.NextRowKey == "") {
		t.Fatalf("%s: page %d: continuation NextPartitionKey=%q NextRowKey=%q: both or neither must be set",
			p.describe(), p.pages, page.NextPartitionKey, page.NextRowKey)
	}
	if page.NextPartitionKey == "" {
		p.done = true
	} else if len(page.Records) < top && elapsed < table.PageBudget {
		// A page ends early only at PageBudget (5 s), which a query this small does not
		// reach: a short page with a continuation means the pager split a page for no
		// reason (a client then pays a round trip per key range).
		t.Errorf("%s: page %d holds %d < $top %d entities yet has a continuation", p.describe(), p.pages, len(page.Records), top)
	}
	p.q.NextPartitionKey, p.q.NextRowKey = page.NextPartitionKey, page.NextRowKey
	return page.Records
}

// queryAll pages through q to the end and returns every entity in the order received.
func queryAll(t *testing.T, svc *table.Service, account, tbl string, q table.Query, limit int, describe func() string) ([]storage.Record, int) {
	t.Helper()
	p := &pager{t: t, svc: svc, account: account, tbl: tbl, q: q, describe: describe}
	var got []storage.Record
	for !p.done {
		got = append(got, p.next()...)
		if p.pages > limit {
			t.Fatalf("%s: more than %d pages: runaway continuation", describe(), limit)
		}
	}
	return got, p.pages
}

// diffRecords reports how got differs from want: order, duplicates, missing, extra.
func diffRecords(got, want []storage.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "got %d entities, want %d", len(got), len(want))
	wantSet := map[storage.Key]bool{}
	for _, r := range want {
		wantSet[keyOf(r)] = true
	}
	gotSet := map[storage.Key]int{}
	for i, r := range got {
		k := keyOf(r)
		gotSet[k]++
		if gotSet[k] == 2 {
			fmt.Fprintf(&b, "\n  duplicate %v (second at %d)", k, i)
		}
		if i > 0 && !keyOf(got[i-1]).Less(k) && gotSet[k] == 1 {
			fmt.Fprintf(&b, "\n  out of order at %d: %v after %v", i, k, keyOf(got[i-1]))
		}
	}
	shown := 0
	for _, r := range want {
		if gotSet[keyOf(r)] == 0 && shown < 10 {
			fmt.Fprintf(&b, "\n  missing %v %v", keyOf(r), r.Entity.Props)
			shown++
		}
	}
	shown = 0
	for _, r := range got {
		if !wantSet[keyOf(r)] && shown < 10 {
			fmt.Fprintf(&b, "\n  extra %v %v", keyOf(r), r.Entity.Props)
			shown++
		}
	}
	for i := range min(len(got), len(want)) {
		if !sameRecord(got[i], want[i]) {
			fmt.Fprintf(&b, "\n  first difference at %d: got %v v%d %v, want %v v%d %v", i,
				keyOf(got[i]), got[i].Version, got[i].Entity.Props, keyOf(want[i]), want[i].Version, want[i].Entity.Props)
			break
		}
	}
	return b.String()
}

func describePlan(f *odata.Filter) string {
	if f == nil {
		return "no filter"
	}
	rs := f.KeyRanges()
	parts := make([]string, 0, min(len(rs), 8))
	for i, r := range rs {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("… %d ranges", len(rs)))
			break
		}
		parts = append(parts, r.String())
	}
	pk, rk, point := f.IsPoint()
	s := fmt.Sprintf("parsed %s; ranges %s; exact %v", f, strings.Join(parts, " "), f.Exact())
	if point {
		s += fmt.Sprintf("; point (%q, %q)", pk, rk)
	}
	return s
}

// ---------------------------------------------------------------------------------------
// The differential test

func testQueryDifferential(t *testing.T, eng storage.Engine, seed uint64) {
	const (
		account  = "querydiff"
		tbl      = "Diff"
		entities = 3000
		filters  = 600
	)
	ctx := context.Background()
	svc := table.New(eng, nil)
	if err := svc.CreateTable(ctx, account, tbl, nil); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 1))
	start := time.Now()
	keys := load(t, eng, account, tbl, r, testPartitions, entities)
	all := scanAll(t, eng, account, tbl)
	if len(all) != len(keys) {
		t.Fatalf("full scan returned %d entities, %d were inserted", len(all), len(keys))
	}
	t.Logf("seed %d: loaded %d entities in %v", seed, len(all), time.Since(start).Round(time.Millisecond))

	g := &filterGen{r: r, tsLo: all[0].Version, tsHi: all[0].Version}
	for _, rec := range all {
		g.pairs = append(g.pairs, keyOf(rec))
		g.tsLo, g.tsHi = min(g.tsLo, rec.Version), max(g.tsHi, rec.Version)
	}

	start = time.Now()
	var totalPages, totalMatched, nonEmpty, points, exact, multi, failures int
	for i := range filters {
		text := g.filter()
		f, err := odata.Parse(text)
		if err != nil {
			t.Fatalf("seed %d filter %d: generated filter does not parse: %v\n  %s", seed, i, err, text)
		}
		top := randTop(r)
		describe := func() string {
			return fmt.Sprintf("seed %d filter %d $top=%d\n  $filter=%s\n  %s", seed, i, top, text, describePlan(f))
		}
		want := bruteForce(all, f)
		got, pages := queryAll(t, svc, account, tbl, table.Query{Filter: f, Top: top}, len(all)+10, describe)
		if len(got) != len(want) || !slices.EqualFunc(got, want, sameRecord) {
			t.Errorf("%s\n  %s", describe(), diffRecords(got, want))
			if failures++; failures == 10 {
				t.Fatalf("stopping after %d failing filters", failures)
			}
			continue
		}
		totalPages += pages
		totalMatched += len(want)
		if len(want) > 0 {
			nonEmpty++
		}
		if _, _, ok := f.IsPoint(); ok {
			points++
		}
		if f.Exact() {
			exact++
		}
		if len(f.KeyRanges()) > 1 {
			multi++
		}
	}
	t.Logf("%d filters (%d matching something, %d points, %d with several key ranges, %d exact plans): %d entities in %d pages, %v",
		filters, nonEmpty, points, multi, exact, totalMatched, totalPages, time.Since(start).Round(time.Millisecond))
	if nonEmpty < filters/4 {
		t.Errorf("only %d of %d filters matched anything: the generator is too selective to test much", nonEmpty, filters)
	}
}

// ---------------------------------------------------------------------------------------
// Writes between pages

// testWritesBetweenPages pages through random queries with small pages and, between
// pages, inserts entities (right after the last entity returned, and elsewhere), deletes
// some (the next entity the query would return, others ahead and behind) and replaces
// some. Whatever is written, the query must return its entities in strictly increasing key
// order (so none twice), every entity it returns must match, every entity that existed
// unchanged throughout and matches must be returned, and an entity deleted before the
// query reached its key must not be.
func testWritesBetweenPages(t *testing.T, eng storage.Engine, seed uint64) {
	const (
		account  = "querywrites"
		tbl      = "Writes"
		entities = 800
		queries  = 40
	)
	ctx := context.Background()
	svc := table.New(eng, nil)
	if err := svc.CreateTable(ctx, account, tbl, nil); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 2))
	parts := testPartitions[:5]
	load(t, eng, account, tbl, r, parts, entities)
	serial := 0
	start := time.Now()
	var totalWrites, totalPages int

	for qi := range queries {
		before := scanAll(t, eng, account, tbl)
		current := make([]storage.Key, len(before))
		for i, rec := range before {
			current[i] = keyOf(rec)
		}
		g := &filterGen{r: r, tsLo: before[0].Version, tsHi: before[0].Version}
		for _, rec := range before {
			g.pairs = append(g.pairs, keyOf(rec))
			g.tsLo, g.tsHi = min(g.tsLo, rec.Version), max(g.tsHi, rec.Version)
		}
		// Filters that match a good share of the table, so the query spans many pages.
		var text string
		switch r.IntN(5) {
		case 0:
			text = ""
		case 1:
			text = "PartitionKey ge " + quote(pick(r, parts)) + " or " + g.propCompare()
		case 2:
			text = "not (" + g.propCompare() + ")"
		case 3:
			text = "(" + g.keyRange() + ") or (" + g.keyRange() + ") or PartitionKey eq " + quote(pick(r, parts))
		default:
			text = g.expr(2)
		}
		f, err := odata.Parse(text)
		if err != nil {
			t.Fatalf("generated filter does not parse: %v\n  %s", err, text)
		}
		top := 3 + r.IntN(40)
		describe := func() string {
			return fmt.Sprintf("seed %d query %d $top=%d\n  $filter=%s\n  %s", seed, qi, top, text, describePlan(f))
		}

		unstable := map[storage.Key]bool{}     // deleted or replaced during the query
		deletedAhead := map[storage.Key]bool{} // deleted before the query reached them
		var got []storage.Record
		p := &pager{t: t, svc: svc, account: account, tbl: tbl, q: table.Query{Filter: f, Top: top}, describe: describe}
		for !p.done {
			page := p.next()
			for _, rec := range page {
				if deletedAhead[keyOf(rec)] && !t.Failed() {
					t.Errorf("%s\n  page %d returned %v, deleted before the query reached it", describe(), p.pages, keyOf(rec))
				}
			}
			got = append(got, page...)
			if p.pages > 2*entities {
				t.Fatalf("%s: runaway continuation", describe())
			}
			if p.done {
				break
			}
			// The position: the last key returned so far (or the start).
			var pos *storage.Key
			if len(got) > 0 {
				k := keyOf(got[len(got)-1])
				pos = &k
			}
			totalWrites += writeBetweenPages(t, eng, account, tbl, r, parts, &current, pos, &serial, unstable, deletedAhead)
		}
		totalPages += p.pages

		// Strictly increasing keys: no repeats, no reordering.
		bad := 0
		for i := 1; i < len(got); i++ {
			if !keyOf(got[i-1]).Less(keyOf(got[i])) {
				if bad++; bad <= 10 {
					t.Errorf("%s\n  entity %d %v follows %v: repeated or out of order", describe(), i, keyOf(got[i]), keyOf(got[i-1]))
				}
			}
		}
		gotSet := map[storage.Key]bool{}
		for _, rec := range got {
			gotSet[keyOf(rec)] = true
			if !f.Match(&rec.Entity, rec.Version) {
				if bad++; bad <= 10 {
					t.Errorf("%s\n  returned %v %v which does not match", describe(), keyOf(rec), rec.Entity.Props)
				}
			}
		}
		// Every entity that existed unchanged throughout and matches: returned.
		missing := 0
		for _, rec := range bruteForce(before, f) {
			if k := keyOf(rec); !unstable[k] && !gotSet[k] {
				if missing < 10 {
					t.Errorf("%s\n  skipped %v, which existed unchanged throughout and matches", describe(), k)
				}
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("%s\n  %d stable matching entities skipped", describe(), missing)
		}
		if t.Failed() {
			t.Fatalf("stopping after the first failing query")
		}
	}
	t.Logf("seed %d: %d queries, %d pages, %d writes between pages, %v", seed, queries, totalPages, totalWrites,
		time.Since(start).Round(time.Millisecond))
}

// writeBetweenPages applies one round of writes, one Apply per partition (run
// concurrently, so they share commits), and returns how many mutations it made. current
// is the table's key set, sorted, which it keeps up to date; pos is the last key the query
// returned (nil before the first entity).
func writeBetweenPages(t *testing.T, eng storage.Engine, account, tbl string, r *rand.Rand, parts []string,
	current *[]storage.Key, pos *storage.Key, serial *int, unstable, deletedAhead map[storage.Key]bool) int {
	t.Helper()
	cmp := func(a, b storage.Key) int {
		switch {
		case a.Less(b):
			return -1
		case b.Less(a):
			return 1
		}
		return 0
	}
	keys := *current
	// next is the index of the first key after pos: where the query resumes.
	next := 0
	if pos != nil {
		var found bool
		next, found = slices.BinarySearchFunc(keys, *pos, cmp)
		if found {
			next++
		}
	}
	muts := map[string][]storage.Mutation{}
	touched := map[storage.Key]bool{}
	var inserted, deleted []storage.Key
	newKey := func(pk, rk string) storage.Key {
		*serial++
		return storage.Key{PartitionKey: pk, RowKey: rk + "~" + strconv.Itoa(*serial)}
	}
	insert := func(k storage.Key) {
		touched[k] = true
		inserted = append(inserted, k)
		muts[k.PartitionKey] = append(muts[k.PartitionKey], storage.Mutation{Op: storage.Insert, RowKey: k.RowKey, Props: randProps(r)})
	}
	del := func(i int) {
		k := keys[i]
		if touched[k] {
			return
		}
		touched[k] = true
		unstable[k] = true
		deleted = append(deleted, k)
		if i >= next {
			deletedAhead[k] = true
		}
		muts[k.PartitionKey] = append(muts[k.PartitionKey], storage.Mutation{Op: storage.Delete, RowKey: k.RowKey})
	}
	replace := func(i int) {
		k := keys[i]
		if touched[k] {
			return
		}
		touched[k] = true
		unstable[k] = true
		muts[k.PartitionKey] = append(muts[k.PartitionKey], storage.Mutation{Op: storage.Replace, RowKey: k.RowKey, Props: randProps(r)})
	}

	// Inserts: right after the position (between the last entity returned and the one the
	// query resumes at), right after the resume point, and anywhere.
	if pos != nil {
		insert(newKey(pos.PartitionKey, pos.RowKey))
	}
	if next < len(keys) && r.IntN(2) == 0 {
		insert(newKey(keys[next].PartitionKey, keys[next].RowKey))
	}
	for range r.IntN(3) {
		insert(newKey(pick(r, parts), randKeyString(r)))
	}
	// Deletes: the entity the query resumes at, one further ahead, one behind.
	if next < len(keys) && r.IntN(3) > 0 {
		del(next)
	}
	if n := len(keys) - next; n > 1 && r.IntN(2) == 0 {
		del(next + 1 + r.IntN(n-1))
	}
	if next > 0 && r.IntN(3) == 0 {
		del(r.IntN(next))
	}
	// Replace one entity somewhere with new properties (it may start or stop matching).
	if len(keys) > 0 && r.IntN(2) == 0 {
		replace(r.IntN(len(keys)))
	}

	errs := make(chan error, len(muts))
	n := 0
	for pk, ms := range muts {
		n += len(ms)
		go func() {
			_, err := eng.Apply(context.Background(), account, tbl, pk, ms)
			if err != nil {
				err = fmt.Errorf("writes between pages in partition %q: %w", pk, err)
			}
			errs <- err
		}()
	}
	for range muts {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	for _, k := range deleted {
		if i, found := slices.BinarySearchFunc(keys, k, cmp); found {
			keys = slices.Delete(keys, i, i+1)
		}
	}
	for _, k := range inserted {
		i, _ := slices.BinarySearchFunc(keys, k, cmp)
		keys = slices.Insert(keys, i, k)
	}
	*current = keys
	return n
}

// ---------------------------------------------------------------------------------------
// Query Tables

// testListTablesDifferential creates ~100 tables with random mixed-case names and checks
// ListTables with random TableName filters and page sizes against brute force over the
// catalogue: MatchTableName on every name, in case-insensitive order.
func testListTablesDifferential(t *testing.T, eng storage.Engine, seed uint64) {
	const (
		account = "querytables"
		tables  = 100
		filters = 400
	)
	ctx := context.Background()
	svc := table.New(eng, nil)
	r := rand.New(rand.NewPCG(seed, 3))
	// A small alphabet with both cases, so that names share prefixes and differ in case;
	// the upper-case letters straddle the lower-case ones in byte order only partly.
	const first = "abcxABCXz"
	const rest = "abcxABCXz019"
	seen := map[string]bool{}
	var names []string
	for len(names) < tables {
		var b strings.Builder
		b.WriteByte(first[r.IntN(len(first))])
		for n := 2 + r.IntN(5); n > 0; n-- {
			b.WriteByte(rest[r.IntN(len(rest))])
		}
		name := b.String()
		if seen[strings.ToLower(name)] || strings.ToLower(name) == "tables" {
			continue
		}
		seen[strings.ToLower(name)] = true
		names = append(names, name)
		if err := svc.CreateTable(ctx, account, name, nil); err != nil {
			t.Fatalf("CreateTable(%s): %v", name, err)
		}
	}
	// Another account's tables must never show.
	if err := svc.CreateTable(ctx, account+"other", "aaa", nil); err != nil {
		t.Fatal(err)
	}
	sorted := slices.Clone(names)
	slices.SortFunc(sorted, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })

	nameLiteral := func() string {
		switch r.IntN(6) {
		case 0:
			return quote(pick(r, names)) // a name as created
		case 1:
			return quote(strings.ToUpper(pick(r, names))) // another case
		case 2:
			return quote(strings.ToLower(pick(r, names)))
		case 3:
			// A prefix of a name, so ranges cut through the catalogue.
			n := pick(r, names)
			return quote(n[:1+r.IntN(len(n))])
		}
		// Characters that sort between, before and after letters and digits.
		const odd = "abcxABCXz019[_`{~ '"
		var b strings.Builder
		for n := r.IntN(4); n > 0; n-- {
			b.WriteByte(odd[r.IntN(len(odd))])
		}
		return quote(b.String())
	}
	atom := func() string {
		switch r.IntN(12) {
		case 0:
			return "TableName ge " + nameLiteral() + " and TableName lt " + nameLiteral()
		case 1:
			// Not a table property: missing, so no table matches (ne included).
			return pick(r, []string{"PartitionKey", "RowKey", "Foo"}) + " " + pick(r, ops) + " " + nameLiteral()
		case 2:
			return "TableName " + pick(r, ops) + " " + pick(r, []string{"1", "1L", "2.5", "true", "datetime'2020-01-01T00:00Z'"})
		case 3:
			return pick(r, []string{"true", "false"})
		case 4:
			return nameLiteral() + " " + pick(r, ops) + " TableName"
		}
		return "TableName " + pick(r, ops) + " " + nameLiteral()
	}
	var expr func(depth int) string
	expr = func(depth int) string {
		if depth == 0 || r.IntN(3) == 0 {
			return atom()
		}
		switch r.IntN(4) {
		case 0:
			return "not (" + expr(depth-1) + ")"
		case 1:
			return "(" + expr(depth-1) + ") and (" + expr(depth-1) + ")"
		case 2:
			return "(" + expr(depth-1) + ") or (" + expr(depth-1) + ")"
		}
		return expr(depth-1) + " or " + expr(depth-1)
	}

	nonEmpty, failures := 0, 0
	for i := range filters {
		text := expr(2)
		if i%50 == 0 {
			text = "" // no filter
		}
		f, err := odata.Parse(text)
		if err != nil {
			t.Fatalf("generated filter does not parse: %v\n  %s", err, text)
		}
		top := randTop(r)
		var want []string
		for _, n := range sorted {
			if f.MatchTableName(n) {
				want = append(want, n)
			}
		}
		if len(want) > 0 {
			nonEmpty++
		}
		pageTop := top
		if pageTop == 0 {
			pageTop = table.MaxPageSize
		}
		var got []string
		next := ""
		pages := 0
		for {
			start := time.Now()
			tp, err := svc.ListTables(ctx, account, f, next, top, table.Read{})
			page, tok := tp.Tables, tp.NextTableName
			elapsed := time.Since(start)
			if err != nil {
				t.Fatalf("seed %d filter %d: ListTables(%q, top %d, next %q): %v", seed, i, text, top, next, err)
			}
			pages++
			if len(page) > pageTop {
				t.Errorf("seed %d filter %d: page of %d tables exceeds $top %d", seed, i, len(page), pageTop)
			}
			if tok != "" && len(page) < pageTop && elapsed < table.PageBudget {
				t.Errorf("seed %d filter %d ($filter=%s, $top=%d): page %d holds %d tables yet has a continuation",
					seed, i, text, top, pages, len(page))
			}
			for _, ti := range page {
				got = append(got, ti.Name)
			}
			if tok == "" {
				break
			}
			// A continuation promises a table that matches after the last one returned
			// (issue 42 item 16), unless the page budget cut the page.
			if len(got) >= len(want) && elapsed < table.PageBudget {
				t.Errorf("seed %d filter %d ($filter=%s, $top=%d): page %d carries a continuation though no table that matches follows",
					seed, i, text, top, pages)
			}
			next = tok
			if pages > tables+2 {
				t.Fatalf("seed %d filter %d: runaway NextTableName paging", seed, i)
			}
		}
		if !slices.Equal(got, want) {
			from, to := f.TableKeyRange()
			toS := "end"
			if to != nil {
				toS = strconv.Quote(*to)
			}
			t.Errorf("seed %d filter %d $top=%d\n  $filter=%s\n  plan [%q, %s)\n  got  %q\n  want %q",
				seed, i, top, text, from, toS, got, want)
			if failures++; failures == 10 {
				t.Fatalf("stopping after %d failing filters", failures)
			}
		}
	}
	if nonEmpty < filters/4 {
		t.Errorf("only %d of %d table filters matched anything", nonEmpty, filters)
	}
}

// ---------------------------------------------------------------------------------------
// $top=0

// testTopNone: $top=0 (TopNone) answers an empty page without continuation, whatever the
// table holds and wherever a continuation points, so a pager makes one request and stops;
// a missing table and a forged continuation token are still refused.
func testTopNone(t *testing.T, eng storage.Engine) {
	const account = "topnone"
	ctx := context.Background()
	svc := table.New(eng, nil)
	if err := svc.CreateTable(ctx, account, "full", nil); err != nil {
		t.Fatal(err)
	}
	for _, pk := range []string{"a", "b"} {
		if _, err := eng.Apply(ctx, account, "full", pk, []storage.Mutation{{Op: storage.Insert, RowKey: "r"}}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := svc.QueryEntities(ctx, account, "full", table.Query{Top: 1})
	if err != nil || first.NextPartitionKey == "" {
		t.Fatalf("$top=1 page: %+v, %v", first, err)
	}
	for _, q := range []table.Query{
		{Top: table.TopNone},
		{Top: table.TopNone, Filter: odata.MustParse("PartitionKey eq 'a'")},
		{Top: table.TopNone, Filter: odata.MustParse("PartitionKey eq 'a' and RowKey eq 'r'")},
		{Top: table.TopNone, NextPartitionKey: first.NextPartitionKey, NextRowKey: first.NextRowKey},
		{Top: table.TopNone, Bound: &odata.KeyRange{Start: storage.Key{PartitionKey: "a"}}},
	} {
		page, err := svc.QueryEntities(ctx, account, "full", q)
		if err != nil || len(page.Records) != 0 || page.NextPartitionKey != "" || page.NextRowKey != "" {
			t.Errorf("TopNone query %+v: %d records, next (%q, %q), %v; want an empty final page",
				q, len(page.Records), page.NextPartitionKey, page.NextRowKey, err)
		}
	}
	code := func(err error) azerr.Code {
		var ae *azerr.Error
		if errors.As(err, &ae) {
			return ae.Code
		}
		return ""
	}
	if _, err := svc.QueryEntities(ctx, account, "nosuchtable", table.Query{Top: table.TopNone}); code(err) != azerr.TableNotFound {
		t.Errorf("TopNone on a missing table: %v, want TableNotFound", err)
	}
	if _, err := svc.QueryEntities(ctx, account, "full", table.Query{Top: table.TopNone, NextPartitionKey: "garbage", NextRowKey: "x"}); code(err) != azerr.InvalidInput {
		t.Errorf("TopNone with a forged continuation: %v, want InvalidInput", err)
	}
	tp, err := svc.ListTables(ctx, account, nil, "", table.TopNone, table.Read{})
	tables, next := tp.Tables, tp.NextTableName
	if err != nil || len(tables) != 0 || next != "" {
		t.Errorf("ListTables TopNone: %v, next %q, %v; want an empty final page", tables, next, err)
	}
	if _, err := svc.ListTables(ctx, account, nil, "not a token", table.TopNone, table.Read{}); code(err) != azerr.InvalidInput {
		t.Errorf("ListTables TopNone with a forged token: %v, want InvalidInput", err)
	}
}

// testListTablesRangeEnd: a page that ends with the last table inside the filter's range
// carries no continuation, whatever tables lie past the range (issue 42 item 16: tables
// zzza1..zzza4 and zzzb4, TableName ge 'zzza' and TableName lt 'zzzb', $top=2 gave the
// second page a NextTableName naming zzzb4, so every SDK fetched a third, empty page).
func testListTablesRangeEnd(t *testing.T, eng storage.Engine) {
	const account = "rangeend"
	ctx := context.Background()
	svc := table.New(eng, nil)
	for _, n := range []string{"zzza1", "zzza2", "zzza3", "zzza4", "zzzb4"} {
		if err := svc.CreateTable(ctx, account, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		filter string
		top    int
		pages  []string
	}{
		{"TableName ge 'zzza' and TableName lt 'zzzb'", 2, []string{"zzza1,zzza2", "zzza3,zzza4"}},
		{"TableName ge 'zzza' and TableName le 'zzza4'", 4, []string{"zzza1,zzza2,zzza3,zzza4"}},
		{"TableName ge 'zzza2' and TableName lt 'zzza4'", 1, []string{"zzza2", "zzza3"}},
		{"TableName ge 'zzza' and TableName lt 'zzzc'", 2, []string{"zzza1,zzza2", "zzza3,zzza4", "zzzb4"}},
		{"TableName eq 'zzza1' or TableName eq 'zzza3'", 1, []string{"zzza1", "zzza3"}},
	} {
		f := odata.MustParse(c.filter)
		next := ""
		for i, want := range c.pages {
			tp, err := svc.ListTables(ctx, account, f, next, c.top, table.Read{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ti := range tp.Tables {
				got = append(got, ti.Name)
			}
			if strings.Join(got, ",") != want {
				t.Errorf("%s $top=%d page %d: %v, want %s", c.filter, c.top, i+1, got, want)
			}
			if last := i == len(c.pages)-1; last != (tp.NextTableName == "") {
				t.Errorf("%s $top=%d page %d of %d: continuation %q", c.filter, c.top, i+1, len(c.pages), tp.NextTableName)
				break
			}
			next = tp.NextTableName
		}
	}
}

// ---------------------------------------------------------------------------------------
// Errors

func testQueryErrors(t *testing.T, eng storage.Engine) {
	const account = "queryerrors"
	ctx := context.Background()
	svc := table.New(eng, nil)
	if err := svc.CreateTable(ctx, account, "errs", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Apply(ctx, account, "errs", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "r"}}); err != nil {
		t.Fatal(err)
	}
	code := func(err error) azerr.Code {
		var ae *azerr.Error
		if errors.As(err, &ae) {
			return ae.Code
		}
		return ""
	}
	for _, text := range []string{"", "PartitionKey eq 'p'", "PartitionKey eq 'p' and RowKey eq 'r'", "PartitionKey eq 1"} {
		_, err := svc.QueryEntities(ctx, account, "nosuchtable", table.Query{Filter: odata.MustParse(text)})
		if code(err) != azerr.TableNotFound {
			t.Errorf("query %q of a missing table: %v, want TableNotFound", text, err)
		}
	}
	for _, tok := range [][2]string{
		{"garbage", "garbage"},
		{"1!4!cA", "1!0!"},
		{"1!2!cA", "2!0!"},
		{"1!3!c$$", "1!0!"},
	} {
		_, err := svc.QueryEntities(ctx, account, "errs", table.Query{NextPartitionKey: tok[0], NextRowKey: tok[1]})
		if code(err) != azerr.InvalidInput {
			t.Errorf("continuation %q: %v, want InvalidInput", tok, err)
		}
	}
	if _, err := svc.ListTables(ctx, account, nil, "not a token", 0, table.Read{}); code(err) != azerr.InvalidInput {
		t.Errorf("NextTableName garbage: %v, want InvalidInput", err)
	}
	// The continuation of a $top=1 page resumes at the second entity; the empty RowKey
	// still gets a non-empty token.
	if _, err := eng.Apply(ctx, account, "errs", "q", []storage.Mutation{{Op: storage.Insert, RowKey: ""}}); err != nil {
		t.Fatal(err)
	}
	page, err := svc.QueryEntities(ctx, account, "errs", table.Query{Top: 1})
	if err != nil || len(page.Records) != 1 || page.NextPartitionKey == "" || page.NextRowKey == "" {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	page, err = svc.QueryEntities(ctx, account, "errs", table.Query{Top: 1, NextPartitionKey: page.NextPartitionKey, NextRowKey: page.NextRowKey})
	if err != nil || len(page.Records) != 1 || keyOf(page.Records[0]) != (storage.Key{PartitionKey: "q"}) || page.NextPartitionKey != "" {
		t.Fatalf("second page: %+v, %v", page, err)
	}
}
