// Package enginetest is the conformance suite every storage.Engine must pass: the
// contracts of storage.Engine checked from outside, so the Pebble and PostgreSQL engines
// (and any later one) behave the same.
//
// An engine's tests call Run with a Harness:
//
//	func TestConformance(t *testing.T) {
//		enginetest.Run(t, enginetest.Harness{
//			Open:   func(t *testing.T) storage.Engine { ... },
//			Reopen: func(t *testing.T, e storage.Engine) storage.Engine { ... }, // optional
//		})
//	}
//
// Every subtest works in accounts with fresh random names, so a harness may hand out a new
// engine per subtest or one shared engine (a shared PostgreSQL database, say).
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Harness tells the suite how to get engines.
type Harness struct {
	// Open returns an engine ready for use, and arranges for it to be closed when the test
	// ends (t.Cleanup). It may return a shared engine: the suite only touches accounts
	// whose names it makes up at random.
	Open func(t *testing.T) storage.Engine
	// Reopen, if set, closes e and returns an engine over the same stored data, as after
	// a restart, arranging for the new one to be closed too. Without it the durability
	// tests are skipped.
	Reopen func(t *testing.T, e storage.Engine) storage.Engine
	// ClockSkew is how far a version may be from this process's wall clock (default 5 s).
	// An engine that takes time from a database server may need more.
	ClockSkew time.Duration
	// CASDuration is how long the concurrent compare-and-set test runs (default 1 s).
	CASDuration time.Duration
	// Seed, if non-zero, seeds every subtest's random choices; otherwise each draws a
	// seed and logs it, so a failure can be replayed.
	Seed uint64
	// ExpirySkew is how far the clock that decides expiry (the engine's) may be from this
	// process's wall clock (default 200 ms). The time-to-live tests wait that much past an
	// expiry before requiring a row to be gone, and check that a row is still there only
	// when the read surely happened that much before its expiry.
	ExpirySkew time.Duration
	// PurgeExpired, if set, runs the engine's removal of expired rows now and returns when
	// it is done. Without it (or without StoredRows) the purge tests are skipped.
	PurgeExpired func(t *testing.T, e storage.Engine)
	// StoredRows, if set, counts the rows the engine physically stores for a table,
	// expired ones included, so the suite can see that the purge removes them.
	StoredRows func(t *testing.T, e storage.Engine, account, table string) int
}

// Run runs the conformance suite against engines from h.
func Run(t *testing.T, h Harness) {
	if h.Open == nil {
		t.Fatal("enginetest: Harness.Open is nil")
	}
	if h.ClockSkew <= 0 {
		h.ClockSkew = 5 * time.Second
	}
	if h.CASDuration <= 0 {
		h.CASDuration = time.Second
	}
	if h.ExpirySkew <= 0 {
		h.ExpirySkew = 200 * time.Millisecond
	}
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"Tables/CreateGet", testTableCreateGet},
		{"Tables/CreateExists", testTableCreateExists},
		{"Tables/List", testTableList},
		{"Tables/Delete", testTableDelete},
		{"Tables/AccountsIsolated", testAccountsIsolated},
		{"Tables/TablesIsolated", testTablesIsolated},
		{"Tables/DeleteRecreate", testDeleteRecreate},
		{"Tables/DeleteRacingApply", testDeleteRacingApply},
		{"Apply/Preconditions", testPreconditions},
		{"Apply/Merge", testMerge},
		{"Apply/Replace", testReplace},
		{"Apply/Versions", testVersions},
		{"Apply/MissingTable", testApplyMissingTable},
		{"Apply/Atomicity", testAtomicity},
		{"Apply/InOrder", testInOrder},
		{"Apply/MergeLimits", testMergeLimits},
		{"ApplyEach/Outcomes", testEachOutcomes},
		{"ApplyEach/FailuresAlone", testEachFailuresAlone},
		{"ApplyEach/Limits", testEachLimits},
		{"ApplyEach/Misuse", testEachMisuse},
		{"ApplyEach/Concurrent", testEachConcurrent},
		{"Keys/Ordering", testKeyOrdering},
		{"Scan/Bounds", testScanBounds},
		{"Scan/Paging", testScanPaging},
		{"Scan/Filter", testScanFilter},
		{"Scan/Deadline", testScanDeadline},
		{"Scan/MaxBytes", testScanMaxBytes},
		{"Scan/Cancel", testScanCancel},
		{"Scan/Encoded", testScanEncoded},
		{"Get/Encoded", testGetEncoded},
		{"Types/RoundTrip", testTypesRoundTrip},
		{"Concurrency/CompareAndSet", testCompareAndSet},
		{"Concurrency/Partitions", testConcurrentPartitions},
		{"Reopen/Durable", testReopen},
		{"Reopen/DeletedStayDeleted", testReopenDeleted},
		{"ACL/SetGetClear", testACL},
		{"ACL/MissingTable", testACLMissingTable},
		{"ACL/AccountsIsolated", testACLAccountsIsolated},
		{"ACL/RacingDelete", testACLRacingDelete},
		{"ServiceProperties/SetGetReplace", testServiceProperties},
		{"Reopen/ACLAndServiceProperties", testReopenACL},
		{"Settings/CreateGetList", testSettingsCatalogue},
		{"Settings/Set", testSettingsSet},
		{"Settings/DeleteRecreate", testSettingsDeleteRecreate},
		{"Settings/Reopen", testSettingsReopen},
		{"Expiry/Invalid", testExpiryInvalid},
		{"Expiry/TableDefault", testExpiryTableDefault},
		{"Expiry/EntityTTL", testExpiryEntityTTL},
		{"Expiry/CustomProperty", testExpiryCustomProperty},
		{"Expiry/Off", testExpiryOff},
		{"Expiry/SettingsChange", testExpirySettingsChange},
		{"Expiry/Scan", testExpiryScan},
		{"Expiry/Preconditions", testExpiryPreconditions},
		{"Expiry/UpdateRestartsClock", testExpiryRestart},
		{"Expiry/Purge", testExpiryPurge},
		{"Expiry/Reopen", testExpiryReopen},
		{"Expiry/Explicit", testExplicitExpiry},
		{"Expiry/ExplicitTTLOff", testExplicitExpiryTTLOff},
		{"Expiry/ExplicitPast", testExplicitExpiryPast},
		{"Expiry/ExplicitRefused", testExplicitExpiryRefused},
		{"Expiry/ExplicitBatch", testExplicitExpiryBatch},
		{"ApplyEach/ExplicitExpiry", testEachExplicitExpiry},
		{"Positions/Increasing", testPositions},
		{"Positions/Concurrent", testPositionsConcurrent},
		{"Positions/Future", testPositionsFuture},
		{"Positions/Views", testPositionsViews},
		{"Changes/Off", testChangesOff},
		{"Changes/Records", testChangesRecords},
		{"Changes/Types", testChangesTypes},
		{"Changes/PartitionRange", testChangesPartitionRange},
		{"Changes/Expiry", testChangesExpiry},
		{"Changes/Settings", testChangesSettings},
		{"Changes/TableDeleted", testChangesTableDeleted},
		{"Changes/Reopen", testChangesReopen},
		{"Changes/Concurrent", testChangesConcurrent},
		{"Changes/Retention", testChangesRetention},
		{"Changes/Wait", testChangesWait},
		{"Changes/OffThenDeleted", testChangesOffThenDeleted},
		{"Changes/Overwritten", testChangesOverwritten},
		{"Indexes/Declarations", testIndexDeclarations},
		{"Indexes/Count", testIndexCount},
		{"Indexes/Maintenance", testIndexMaintenance},
		{"Indexes/Unique", testIndexUnique},
		{"Indexes/UniqueExpiry", testIndexUniqueExpiry},
		{"Indexes/UniqueConcurrent", testIndexUniqueConcurrent},
		{"Indexes/Dropped", testIndexDropped},
		{"Indexes/Build", testIndexBuild},
		{"Indexes/BuildUnique", testIndexBuildUnique},
		{"Indexes/KeyFilter", testIndexKeyFilter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newEnv(t, h))
		})
	}
}

// env is one subtest's view: an engine, a fresh account, a seeded random source.
type env struct {
	t    *testing.T
	h    Harness
	e    storage.Engine
	ctx  context.Context
	acct string
	rnd  *rand.Rand
}

func newEnv(t *testing.T, h Harness) *env {
	seed := h.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("enginetest seed %d (Harness.Seed replays it)", seed)
	x := &env{t: t, h: h, e: h.Open(t), ctx: t.Context(), rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	x.acct = x.newAccount()
	return x
}

// newAccount returns an account name no other test uses.
func (x *env) newAccount() string {
	return fmt.Sprintf("et%016x", rand.Uint64())
}

// reopen restarts the engine (skipping the test when the harness cannot).
func (x *env) reopen() {
	x.t.Helper()
	if x.h.Reopen == nil {
		x.t.Skip("harness has no Reopen")
	}
	x.e = x.h.Reopen(x.t, x.e)
}

func (x *env) createTable(name string) string {
	x.t.Helper()
	if err := x.e.CreateTable(x.ctx, x.acct, name, storage.TableSettings{}); err != nil {
		x.t.Fatalf("CreateTable(%q): %v", name, err)
	}
	return name
}

// apply runs an Apply that must succeed.
func (x *env) apply(table, pk string, muts ...storage.Mutation) []int64 {
	x.t.Helper()
	applied, err := x.e.Apply(x.ctx, x.acct, table, pk, muts)
	vs := applied.Versions
	if err != nil {
		x.t.Fatalf("Apply(%q, %q, %v): %v", table, pk, describe(muts), err)
	}
	if len(vs) != len(muts) {
		x.t.Fatalf("Apply returned %d versions for %d mutations", len(vs), len(muts))
	}
	for i, m := range muts {
		if (m.Op == storage.Delete) != (vs[i] == 0) {
			x.t.Fatalf("Apply: mutation %d (%v) returned version %d", i, m.Op, vs[i])
		}
	}
	return vs
}

// applyErr runs an Apply that must fail at mutation index with want (errors.Is) and
// returns the *ApplyError.
func (x *env) applyErr(table, pk string, index int, want error, muts ...storage.Mutation) *storage.ApplyError {
	x.t.Helper()
	vs, err := x.e.Apply(x.ctx, x.acct, table, pk, muts)
	if err == nil {
		x.t.Fatalf("Apply(%v) succeeded with versions %v, want mutation %d to fail with %v", describe(muts), vs, index, want)
	}
	var ae *storage.ApplyError
	if !errors.As(err, &ae) {
		x.t.Fatalf("Apply(%v) = %v (%T), want *storage.ApplyError", describe(muts), err, err)
	}
	if ae.Index != index {
		x.t.Fatalf("Apply(%v): failing index %d, want %d (err %v)", describe(muts), ae.Index, index, err)
	}
	if want != nil && !errors.Is(err, want) {
		x.t.Fatalf("Apply(%v) = %v, want errors.Is %v", describe(muts), err, want)
	}
	return ae
}

func (x *env) get(table, pk, rk string) storage.Record {
	x.t.Helper()
	r, err := x.e.Get(x.ctx, x.acct, table, pk, rk)
	if err != nil {
		x.t.Fatalf("Get(%q, %q, %q): %v", table, pk, rk, err)
	}
	if r.Entity.PartitionKey != pk || r.Entity.RowKey != rk {
		x.t.Fatalf("Get(%q, %q) returned keys (%q, %q)", pk, rk, r.Entity.PartitionKey, r.Entity.RowKey)
	}
	return r
}

func (x *env) getMissing(table, pk, rk string) {
	x.t.Helper()
	r, err := x.e.Get(x.ctx, x.acct, table, pk, rk)
	if !errors.Is(err, storage.ErrNotFound) {
		x.t.Fatalf("Get(%q, %q, %q) = %+v, %v; want ErrNotFound", table, pk, rk, r, err)
	}
}

// scanAll pages through [start, end) with the given page size and returns every record,
// checking the paging contract on the way.
func (x *env) scanAll(table string, start storage.Key, end *storage.Key, page int) []storage.Record {
	x.t.Helper()
	var out []storage.Record
	for pages := 0; ; pages++ {
		if pages > 1_000_000 {
			x.t.Fatal("scan does not terminate")
		}
		res, err := x.e.Scan(x.ctx, x.acct, table, storage.ScanRequest{Start: start, End: end, Limit: page})
		if err != nil {
			x.t.Fatalf("Scan(%q, start %q): %v", table, start, err)
		}
		x.checkPage(start, end, page, res)
		out = append(out, res.Records...)
		if res.Next == nil {
			return out
		}
		if len(res.Records) < page {
			x.t.Fatalf("Scan without filter or deadline returned %d < limit %d records and a resume key", len(res.Records), page)
		}
		start = *res.Next
	}
}

// checkPage checks one page: records in order within [start, end), at most limit of them,
// and a resume key after them and before end.
func (x *env) checkPage(start storage.Key, end *storage.Key, limit int, res storage.ScanResult) {
	x.t.Helper()
	if len(res.Records) > limit {
		x.t.Fatalf("Scan returned %d records, limit %d", len(res.Records), limit)
	}
	if res.Examined < len(res.Records) {
		x.t.Fatalf("Scan returned %d records but examined %d", len(res.Records), res.Examined)
	}
	prev := (*storage.Key)(nil)
	for i := range res.Records {
		k := keyOf(&res.Records[i])
		if k.Less(start) {
			x.t.Fatalf("Scan from %q returned earlier key %q", start, k)
		}
		if end != nil && !k.Less(*end) {
			x.t.Fatalf("Scan to %q returned key %q at or after the end", *end, k)
		}
		if prev != nil && !prev.Less(k) {
			x.t.Fatalf("Scan returned %q after %q: not in ascending order", k, *prev)
		}
		prev = &k
	}
	if res.Next != nil {
		if res.Next.Less(start) {
			x.t.Fatalf("Scan from %q returned resume key %q before its start", start, *res.Next)
		}
		if prev != nil && !prev.Less(*res.Next) {
			x.t.Fatalf("Scan resume key %q is not after the last record %q", *res.Next, *prev)
		}
	}
}

func keyOf(r *storage.Record) storage.Key {
	return storage.Key{PartitionKey: r.Entity.PartitionKey, RowKey: r.Entity.RowKey}
}

// snapshot returns every record of the table.
func (x *env) snapshot(table string) []storage.Record {
	x.t.Helper()
	return x.scanAll(table, storage.Key{}, nil, 1000)
}

// sameRecords fails unless a and b hold the same keys, versions and properties, in order.
func (x *env) sameRecords(what string, got, want []storage.Record) {
	x.t.Helper()
	if len(got) != len(want) {
		x.t.Fatalf("%s: %d records, want %d\n got: %s\nwant: %s", what, len(got), len(want), keysOf(got), keysOf(want))
	}
	for i := range got {
		g, w := &got[i], &want[i]
		if keyOf(g) != keyOf(w) || g.Version != w.Version {
			x.t.Fatalf("%s: record %d is %q v%d, want %q v%d", what, i, keyOf(g), g.Version, keyOf(w), w.Version)
		}
		if d := propsDiff(g.Entity.Props, w.Entity.Props); d != "" {
			x.t.Fatalf("%s: record %q: %s", what, keyOf(g), d)
		}
	}
}

func keysOf(rs []storage.Record) string {
	var b strings.Builder
	for i := range rs {
		fmt.Fprintf(&b, "%q ", keyOf(&rs[i]))
	}
	return b.String()
}

// propsDiff compares property bags as sets: an engine need not keep property order
// (a JSONB column does not).
func propsDiff(got, want []entity.Property) string {
	gm := make(map[string]entity.Value, len(got))
	for _, p := range got {
		if _, dup := gm[p.Name]; dup {
			return fmt.Sprintf("property %q appears twice", p.Name)
		}
		gm[p.Name] = p.Value
	}
	var diffs []string
	for _, p := range want {
		g, ok := gm[p.Name]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("missing %s=%v (%v)", p.Name, p.Value, p.Value.Type))
		case !g.Equal(p.Value):
			diffs = append(diffs, fmt.Sprintf("%s = %v (%v), want %v (%v)", p.Name, short(g), g.Type, short(p.Value), p.Value.Type))
		}
		delete(gm, p.Name)
	}
	for name, v := range gm {
		diffs = append(diffs, fmt.Sprintf("unexpected %s=%v", name, short(v)))
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

func short(v entity.Value) string {
	s := v.String()
	if len(s) > 80 {
		s = fmt.Sprintf("%s…(%d bytes)", s[:80], len(s))
	}
	return s
}

func (x *env) sameProps(what string, got, want []entity.Property) {
	x.t.Helper()
	if d := propsDiff(got, want); d != "" {
		x.t.Fatalf("%s: %s", what, d)
	}
}

func describe(muts []storage.Mutation) string {
	parts := make([]string, len(muts))
	for i, m := range muts {
		parts[i] = fmt.Sprintf("%v %q", m.Op, m.RowKey)
		if m.IfMatch != 0 {
			parts[i] += fmt.Sprintf(" if %d", m.IfMatch)
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Mutation and property shorthands.

func mut(op storage.Op, rk string, props ...entity.Property) storage.Mutation {
	return storage.Mutation{Op: op, RowKey: rk, Props: props}
}

func mutIf(op storage.Op, rk string, ifMatch int64, props ...entity.Property) storage.Mutation {
	return storage.Mutation{Op: op, RowKey: rk, IfMatch: ifMatch, Props: props}
}

func prop(name string, v entity.Value) entity.Property { return entity.Property{Name: name, Value: v} }

func str(name, v string) entity.Property { return prop(name, entity.StringValue(v)) }

func i64(name string, v int64) entity.Property { return prop(name, entity.Int64Value(v)) }

// checkVersionNearNow fails unless v is within the harness's clock skew of [before, after].
func (x *env) checkVersionNearNow(v int64, before, after time.Time) {
	x.t.Helper()
	lo := entity.TimeToTicks(before.Add(-x.h.ClockSkew))
	hi := entity.TimeToTicks(after.Add(x.h.ClockSkew))
	if v < lo || v > hi {
		x.t.Fatalf("version %d (%s) is not near the wall clock [%s, %s]", v, entity.FormatTicks(v),
			before.UTC().Format(time.RFC3339Nano), after.UTC().Format(time.RFC3339Nano))
	}
}

func sortedKeys(keys []storage.Key) []storage.Key {
	out := slices.Clone(keys)
	slices.SortFunc(out, func(a, b storage.Key) int {
		switch {
		case a.Less(b):
			return -1
		case b.Less(a):
			return 1
		}
		return 0
	})
	return out
}
