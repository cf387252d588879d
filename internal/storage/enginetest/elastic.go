package enginetest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Elastic tables: settings in the catalogue, expiry computed at write time with
// storage.Expiry, expired rows invisible everywhere, and their background removal.
//
// Time-to-live tests use TTLs of 1–3 s and never rely on exact timing: a row must be gone
// only once this process's clock is ExpirySkew past its expiry (computed from the
// version the write returned), and must still be there only when the read returned while
// this process's clock was ExpirySkew before it (see early); a read on a machine too
// slow for that window is not judged. Tests that wait run in parallel.

func elastic(ttl int32) storage.TableSettings {
	return storage.TableSettings{Elastic: true, DefaultTTL: ttl}
}

func i32(name string, v int32) entity.Property { return prop(name, entity.Int32Value(v)) }

// ttl is the standard TTL property.
func ttl(v int32) entity.Property { return i32(storage.DefaultTTLProperty, v) }

func (x *env) createWith(name string, s storage.TableSettings) string {
	x.t.Helper()
	if err := x.e.CreateTable(x.ctx, x.acct, name, s); err != nil {
		x.t.Fatalf("CreateTable(%q, %+v): %v", name, s, err)
	}
	return name
}

func (x *env) wantSettings(what, table string, want storage.TableSettings) {
	x.t.Helper()
	info, err := x.e.GetTable(x.ctx, x.acct, table)
	if err != nil {
		x.t.Fatalf("%s: GetTable(%q): %v", what, table, err)
	}
	if !info.Settings.Equal(want) {
		x.t.Fatalf("%s: GetTable(%q).Settings = %+v, want %+v", what, table, info.Settings, want)
	}
}

// wantListed checks that ListTables (whole and in pages of one) reports exactly want.
func (x *env) wantListed(what string, want map[string]storage.TableSettings) {
	x.t.Helper()
	for _, limit := range []int{1000, 1} {
		got := map[string]storage.TableSettings{}
		from := ""
		for pages := 0; ; pages++ {
			if pages > len(want)+2 {
				x.t.Fatalf("%s: ListTables paging does not end", what)
			}
			list, next, err := x.e.ListTables(x.ctx, x.acct, from, limit)
			if err != nil {
				x.t.Fatalf("%s: ListTables: %v", what, err)
			}
			for _, ti := range list {
				got[ti.Name] = ti.Settings
			}
			if next == "" {
				break
			}
			from = next
		}
		if len(got) != len(want) {
			x.t.Fatalf("%s: ListTables (limit %d) = %+v, want %+v", what, limit, got, want)
		}
		for name, s := range want {
			if g, ok := got[name]; !ok || !g.Equal(s) {
				x.t.Fatalf("%s: ListTables (limit %d) reports %q with %+v (listed %v), want %+v", what, limit, name, g, ok, s)
			}
		}
	}
}

// expiryAt is when a row written at version with a TTL of seconds expires.
func expiryAt(version int64, seconds int) time.Time {
	return entity.TicksToTime(version).Add(time.Duration(seconds) * time.Second)
}

// early reports whether a read that has just returned surely ran before the engine's
// clock reached at: only then may the suite require it to see a row expiring at at.
func (x *env) early(at time.Time) bool {
	if time.Now().Add(x.h.ExpirySkew).Before(at) {
		return true
	}
	x.t.Logf("too slow to check visibility before the expiry at %s; check skipped", at.Format(time.RFC3339Nano))
	return false
}

// waitPast sleeps until the engine's clock is surely past at.
func (x *env) waitPast(at time.Time) {
	time.Sleep(time.Until(at.Add(x.h.ExpirySkew)))
}

// visibleUntil gets a row that expires at at and fails if it is missing while the read
// surely ran before then. It reports whether the row was seen.
func (x *env) visibleUntil(table, pk, rk string, at time.Time) bool {
	x.t.Helper()
	_, err := x.e.Get(x.ctx, x.acct, table, pk, rk)
	switch {
	case err == nil:
		return true
	case errors.Is(err, storage.ErrNotFound):
		if x.early(at) {
			x.t.Fatalf("Get(%q, %q, %q) = ErrNotFound before its expiry at %s", table, pk, rk, at.Format(time.RFC3339Nano))
		}
		return false
	default:
		x.t.Fatalf("Get(%q, %q, %q): %v", table, pk, rk, err)
		return false
	}
}

// liveKeys scans the whole table and returns its keys, checking the paging contract.
func (x *env) liveKeys(table string, page int) []storage.Key {
	x.t.Helper()
	return recordKeys(x.scanAll(table, storage.Key{}, nil, page))
}

func (x *env) wantKeys(what string, got []storage.Key, want []storage.Key) {
	x.t.Helper()
	want = sortedKeys(want)
	if !slices.Equal(got, want) {
		x.t.Fatalf("%s: keys %q, want %q", what, got, want)
	}
}

func keys(pk string, rks ...string) []storage.Key {
	out := make([]storage.Key, len(rks))
	for i, rk := range rks {
		out[i] = storage.Key{PartitionKey: pk, RowKey: rk}
	}
	return out
}

func testSettingsCatalogue(t *testing.T, x *env) {
	want := map[string]storage.TableSettings{
		"Alpha": {Elastic: true, DefaultTTL: 3600, TTLProperty: "Life"},
		"beta":  elastic(storage.TTLNever),
		"Gamma": {Elastic: true},
		"delta": {},
		"Eps":   {Elastic: true, DefaultTTL: math.MaxInt32},
	}
	for name, s := range want {
		x.createWith(name, s)
	}
	for name, s := range want {
		x.wantSettings("after create", strings.ToUpper(name), s)
	}
	x.wantListed("after create", want)
	// Another account's table of the same name has its own settings.
	other := x.newAccount()
	if err := x.e.CreateTable(x.ctx, other, "Alpha", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if info, err := x.e.GetTable(x.ctx, other, "alpha"); err != nil || !info.Settings.IsStandard() {
		t.Fatalf("other account's Alpha = %+v, %v; want a standard table", info, err)
	}
	x.wantSettings("after another account's create", "alpha", want["Alpha"])
}

func testSettingsSet(t *testing.T, x *env) {
	x.createWith("T", elastic(60))
	x.createWith("U", elastic(storage.TTLNever))
	for _, s := range []storage.TableSettings{
		{Elastic: true, DefaultTTL: 5, TTLProperty: "Expires"},
		{Elastic: true},
		{},
		elastic(storage.TTLNever),
	} {
		if err := x.e.SetTableSettings(x.ctx, x.acct, "t", s); err != nil {
			t.Fatalf("SetTableSettings(%+v): %v", s, err)
		}
		x.wantSettings("after set", "T", s)
		x.wantListed("after set", map[string]storage.TableSettings{"T": s, "U": elastic(storage.TTLNever)})
	}
	if err := x.e.SetTableSettings(x.ctx, x.acct, "Missing", elastic(1)); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("SetTableSettings on a missing table = %v, want ErrTableNotFound", err)
	}
	if err := x.e.SetTableSettings(x.ctx, x.newAccount(), "T", elastic(1)); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("SetTableSettings in another account = %v, want ErrTableNotFound", err)
	}
	if err := x.e.DeleteTable(x.ctx, x.acct, "U"); err != nil {
		t.Fatal(err)
	}
	if err := x.e.SetTableSettings(x.ctx, x.acct, "U", elastic(1)); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("SetTableSettings on a deleted table = %v, want ErrTableNotFound", err)
	}
	x.wantListed("after delete", map[string]storage.TableSettings{"T": elastic(storage.TTLNever)})
}

func testSettingsDeleteRecreate(t *testing.T, x *env) {
	first := storage.TableSettings{Elastic: true, DefaultTTL: 30, TTLProperty: "Life"}
	x.createWith("Re", first)
	x.apply("Re", "p", mut(storage.Insert, "r", str("A", "x")))
	for i, s := range []storage.TableSettings{{}, elastic(storage.TTLNever), first, {}} {
		if err := x.e.DeleteTable(x.ctx, x.acct, "re"); err != nil {
			t.Fatal(err)
		}
		x.createWith("RE", s)
		x.wantSettings(fmt.Sprintf("created again (%d)", i), "Re", s)
		x.wantListed(fmt.Sprintf("created again (%d)", i), map[string]storage.TableSettings{"RE": s})
		if err := x.e.SetTableSettings(x.ctx, x.acct, "RE", first); err != nil {
			t.Fatal(err)
		}
		x.wantSettings("set after create again", "re", first)
	}
}

func testSettingsReopen(t *testing.T, x *env) {
	if x.h.Reopen == nil {
		t.Skip("harness has no Reopen")
	}
	want := map[string]storage.TableSettings{
		"A": {Elastic: true, DefaultTTL: 3600, TTLProperty: "Life"},
		"B": elastic(storage.TTLNever),
		"C": {},
		"D": {Elastic: true},
	}
	for name, s := range want {
		x.createWith(name, s)
	}
	want["B"] = storage.TableSettings{Elastic: true, DefaultTTL: 10}
	if err := x.e.SetTableSettings(x.ctx, x.acct, "B", want["B"]); err != nil {
		t.Fatal(err)
	}
	want["D"] = storage.TableSettings{}
	if err := x.e.SetTableSettings(x.ctx, x.acct, "D", want["D"]); err != nil {
		t.Fatal(err)
	}
	x.reopen()
	for name, s := range want {
		x.wantSettings("after reopen", name, s)
	}
	x.wantListed("after reopen", want)
	// Deleted and created again before a restart: the new settings survive it.
	if err := x.e.DeleteTable(x.ctx, x.acct, "A"); err != nil {
		t.Fatal(err)
	}
	want["A"] = storage.TableSettings{}
	x.createWith("A", want["A"])
	x.reopen()
	x.wantListed("after a second reopen", want)
}

// testExpiryInvalid checks that a TTL property the rules refuse fails the Apply with an
// *ApplyError carrying an *azerr.Error that names the property, and writes nothing.
func testExpiryInvalid(t *testing.T, x *env) {
	x.createWith("Never", elastic(storage.TTLNever))
	x.createWith("Hour", storage.TableSettings{Elastic: true, DefaultTTL: 3600, TTLProperty: "Life"})
	bad := []entity.Value{
		entity.Int32Value(0), entity.Int64Value(0), entity.Int32Value(-2), entity.Int64Value(-2),
		entity.Int32Value(math.MinInt32), entity.Int64Value(math.MaxInt32 + 1), entity.Int64Value(math.MinInt64),
		entity.StringValue("60"), entity.DoubleValue(60), entity.BoolValue(true),
	}
	check := func(ae *storage.ApplyError, name string) {
		t.Helper()
		var az *azerr.Error
		if !errors.As(ae.Err, &az) {
			t.Fatalf("invalid TTL: error %v (%T), want an *azerr.Error", ae.Err, ae.Err)
		}
		if !strings.Contains(az.Message, name) {
			t.Fatalf("invalid TTL: message %q does not name the property %q", az.Message, name)
		}
	}
	for _, c := range []struct{ table, name string }{{"Never", storage.DefaultTTLProperty}, {"Hour", "Life"}} {
		x.apply(c.table, "p", mut(storage.Insert, "existing", i64(c.name, 60), str("A", "a")))
		before := x.snapshot(c.table)
		for i, v := range bad {
			p := prop(c.name, v)
			for _, m := range []storage.Mutation{
				mut(storage.Insert, "new", p),
				mut(storage.InsertOrReplace, "new", p),
				mut(storage.InsertOrMerge, "new", p),
				mut(storage.Replace, "existing", p),
				mut(storage.Merge, "existing", p),
				mut(storage.InsertOrMerge, "existing", p),
			} {
				check(x.applyErr(c.table, "p", 0, nil, m), c.name)
			}
			// Later in a multi-mutation Apply: nothing of the earlier ones is written.
			ae := x.applyErr(c.table, "p", 3, nil,
				mut(storage.Insert, fmt.Sprintf("ok%d", i), i64(c.name, 60)),
				mut(storage.Merge, "existing", str("B", "b")),
				mut(storage.Delete, "existing"),
				mut(storage.InsertOrReplace, "other", str("X", "x"), p))
			check(ae, c.name)
		}
		x.sameRecords(c.table+" after refused Applies", x.snapshot(c.table), before)
		// The largest valid values are accepted.
		x.apply(c.table, "p", mut(storage.Insert, "max32", i32(c.name, math.MaxInt32)), mut(storage.Insert, "max64", i64(c.name, math.MaxInt32)),
			mut(storage.Insert, "never", i64(c.name, -1)), mut(storage.Insert, "one", i32(c.name, 1)))
	}
	// The name is exact: on the Hour table TTLInSeconds is an ordinary property.
	x.apply("Hour", "p", mut(storage.Insert, "plain", prop(storage.DefaultTTLProperty, entity.StringValue("x"))), mut(storage.Insert, "zero", ttl(0)))
}

// testExpiryTableDefault: the table's default TTL expires rows without their own TTL;
// a row with TTL -1 and rows of other tables stay.
func testExpiryTableDefault(t *testing.T, x *env) {
	t.Parallel()
	x.createWith("T", elastic(1))
	x.createWith("Std", storage.TableSettings{})
	x.createWith("NoDefault", elastic(storage.TTLNever))
	vs := x.apply("T", "p", mut(storage.Insert, "a", str("S", "a")), mut(storage.Insert, "keep", ttl(-1)),
		mut(storage.Insert, "b", str("S", "b")), mut(storage.InsertOrReplace, "c", i64("N", 3)))
	x.apply("T", "q", mut(storage.Insert, "keep2", prop(storage.DefaultTTLProperty, entity.Int64Value(-1))))
	x.apply("Std", "p", mut(storage.Insert, "a", ttl(1)))
	x.apply("NoDefault", "p", mut(storage.Insert, "a", str("S", "a")))
	at := expiryAt(slices.Max(vs), 1)
	for _, rk := range []string{"a", "b", "c"} {
		x.visibleUntil("T", "p", rk, at)
	}
	if got := x.liveKeys("T", 1000); x.early(at) {
		x.wantKeys("before expiry", got, append(keys("p", "a", "b", "c", "keep"), keys("q", "keep2")...))
	}
	x.waitPast(at)
	for _, rk := range []string{"a", "b", "c"} {
		x.getMissing("T", "p", rk)
	}
	x.get("T", "p", "keep")
	x.wantKeys("after expiry", x.liveKeys("T", 1000), append(keys("p", "keep"), keys("q", "keep2")...))
	x.wantKeys("after expiry, page 1", x.liveKeys("T", 1), append(keys("p", "keep"), keys("q", "keep2")...))
	x.get("Std", "p", "a")
	x.get("NoDefault", "p", "a")
}

// testExpiryEntityTTL: an entity's TTL property (Int32 or Int64) overrides the table's
// default, both ways.
func testExpiryEntityTTL(t *testing.T, x *env) {
	t.Parallel()
	x.createWith("Never", elastic(storage.TTLNever))
	x.createWith("Hour", elastic(3600))
	vs := x.apply("Never", "p",
		mut(storage.Insert, "i32", ttl(1)),
		mut(storage.Insert, "i64", i64(storage.DefaultTTLProperty, 1)),
		mut(storage.Insert, "none", str("S", "x")),
		mut(storage.Insert, "never", ttl(-1)),
		mut(storage.Insert, "long", i64(storage.DefaultTTLProperty, 3600)))
	vs = append(vs, x.apply("Hour", "p",
		mut(storage.Insert, "short", ttl(1)),
		mut(storage.Insert, "dflt", str("S", "x")),
		mut(storage.Insert, "never", i64(storage.DefaultTTLProperty, -1)))...)
	at := expiryAt(slices.Max(vs), 1)
	x.visibleUntil("Never", "p", "i32", at)
	x.visibleUntil("Never", "p", "i64", at)
	x.visibleUntil("Hour", "p", "short", at)
	x.waitPast(at)
	x.getMissing("Never", "p", "i32")
	x.getMissing("Never", "p", "i64")
	x.getMissing("Hour", "p", "short")
	x.wantKeys("Never after expiry", x.liveKeys("Never", 2), keys("p", "none", "never", "long"))
	x.wantKeys("Hour after expiry", x.liveKeys("Hour", 2), keys("p", "dflt", "never"))
	r := x.get("Never", "p", "long")
	x.sameProps("long-lived row", r.Entity.Props, []entity.Property{i64(storage.DefaultTTLProperty, 3600)})
}

// testExpiryCustomProperty: a table's TTLProperty names the overriding property, and
// TTLInSeconds is then an ordinary one.
func testExpiryCustomProperty(t *testing.T, x *env) {
	t.Parallel()
	x.createWith("Life", storage.TableSettings{Elastic: true, DefaultTTL: storage.TTLNever, TTLProperty: "Life"})
	x.createWith("LifeDefault", storage.TableSettings{Elastic: true, DefaultTTL: 1, TTLProperty: "Life"})
	vs := x.apply("Life", "p",
		mut(storage.Insert, "life", i32("Life", 1)),
		mut(storage.Insert, "ttl", ttl(1)),
		mut(storage.Insert, "str", prop(storage.DefaultTTLProperty, entity.StringValue("1"))))
	vs = append(vs, x.apply("LifeDefault", "p",
		mut(storage.Insert, "keep", i64("Life", -1)),
		mut(storage.Insert, "ttlNever", ttl(-1)))...)
	at := expiryAt(slices.Max(vs), 1)
	x.visibleUntil("Life", "p", "life", at)
	x.visibleUntil("LifeDefault", "p", "ttlNever", at)
	x.waitPast(at)
	x.wantKeys("Life after expiry", x.liveKeys("Life", 1000), keys("p", "str", "ttl"))
	x.wantKeys("LifeDefault after expiry", x.liveKeys("LifeDefault", 1000), keys("p", "keep"))
}

// testExpiryOff: with time-to-live off (a standard table, or an elastic one without a
// default) nothing expires, and TTL properties are ordinary properties, invalid values
// included.
func testExpiryOff(t *testing.T, x *env) {
	t.Parallel()
	x.createWith("Std", storage.TableSettings{})
	x.createWith("Off", storage.TableSettings{Elastic: true})
	x.createWith("OffNamed", storage.TableSettings{Elastic: true, TTLProperty: "Life"})
	var last int64
	for _, tbl := range []string{"Std", "Off", "OffNamed"} {
		vs := x.apply(tbl, "p",
			mut(storage.Insert, "one", ttl(1), i32("Life", 1)),
			mut(storage.Insert, "zero", ttl(0), i64("Life", 0)),
			mut(storage.Insert, "neg", i64(storage.DefaultTTLProperty, -5), i32("Life", -7)),
			mut(storage.Insert, "str", prop(storage.DefaultTTLProperty, entity.StringValue("x")), prop("Life", entity.DoubleValue(1))),
			mut(storage.Insert, "huge", i64(storage.DefaultTTLProperty, math.MaxInt64)))
		last = max(last, slices.Max(vs))
	}
	x.waitPast(expiryAt(last, 1))
	for _, tbl := range []string{"Std", "Off", "OffNamed"} {
		x.wantKeys(tbl, x.liveKeys(tbl, 1000), keys("p", "huge", "neg", "one", "str", "zero"))
		x.get(tbl, "p", "one")
	}
}

// testExpirySettingsChange: entities keep the expiry they were written with; a change of
// settings applies to later writes only.
func testExpirySettingsChange(t *testing.T, x *env) {
	t.Parallel()
	x.createWith("On", elastic(1))
	x.createWith("Off", storage.TableSettings{Elastic: true})
	v1 := x.apply("On", "p", mut(storage.Insert, "old", str("S", "x")))[0]
	v2 := x.apply("Off", "p", mut(storage.Insert, "old", ttl(1)))[0]
	if err := x.e.SetTableSettings(x.ctx, x.acct, "On", storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	if err := x.e.SetTableSettings(x.ctx, x.acct, "Off", elastic(storage.TTLNever)); err != nil {
		t.Fatal(err)
	}
	v3 := x.apply("On", "p", mut(storage.Insert, "new", str("S", "x"), ttl(1)))[0]
	v4 := x.apply("Off", "p", mut(storage.Insert, "new", ttl(1)))[0]
	x.waitPast(expiryAt(max(v1, v2, v3, v4), 1))
	x.wantKeys("On after expiry", x.liveKeys("On", 1000), keys("p", "new"))
	x.wantKeys("Off after expiry", x.liveKeys("Off", 1000), keys("p", "old"))
}

// testExpiryScan: scans skip expired rows on every path — paged across the expiry,
// bounded, filtered (plain and encoded), under a byte budget, with a small limit — and
// never return one, while rows without a TTL stay.
func testExpiryScan(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.createWith("Scan", elastic(1))
	big := entity.BinaryValue(make([]byte, 3000))
	var live, all []storage.Key
	var last int64
	for p := range 4 {
		pk := fmt.Sprintf("p%d", p)
		var muts []storage.Mutation
		for r := range 30 {
			rk := fmt.Sprintf("r%02d", r)
			k := storage.Key{PartitionKey: pk, RowKey: rk}
			all = append(all, k)
			if r%3 == 0 {
				live = append(live, k)
				muts = append(muts, mut(storage.Insert, rk, ttl(-1), i64("N", int64(r)), str("S", "live")))
			} else {
				muts = append(muts, mut(storage.Insert, rk, i64("N", int64(r)), prop("B", big)))
			}
		}
		last = max(last, slices.Max(x.apply(tbl, pk, muts...)))
	}
	// A partition of expiring rows only.
	var muts []storage.Mutation
	for r := range 50 {
		muts = append(muts, mut(storage.Insert, fmt.Sprintf("r%02d", r), i64("N", int64(r))))
	}
	last = max(last, slices.Max(x.apply(tbl, "pz", muts...)))
	at := expiryAt(last, 1)

	// Start a paged scan before the expiry and finish it after.
	res, err := x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Limit: 7})
	if err != nil {
		t.Fatal(err)
	}
	if x.early(at) {
		x.wantKeys("first page before expiry", recordKeys(res.Records), all[:7])
	}
	if res.Next == nil {
		t.Fatal("first page has no resume key")
	}
	x.waitPast(at)
	var rest []storage.Key
	for _, r := range x.scanAll(tbl, *res.Next, nil, 7) {
		if s, _ := r.Entity.Get("S"); s.Str != "live" {
			t.Fatalf("scan after expiry returned expired row %q", keyOf(&r))
		}
		rest = append(rest, keyOf(&r))
	}
	var wantRest []storage.Key
	for _, k := range live {
		if !k.Less(*res.Next) {
			wantRest = append(wantRest, k)
		}
	}
	x.wantKeys("pages after expiry", rest, wantRest)

	for _, page := range []int{1, 3, 1000} {
		x.wantKeys(fmt.Sprintf("whole scan, page %d", page), x.liveKeys(tbl, page), live)
	}
	// Bounded to partitions, and an all-expired partition.
	end := storage.Key{PartitionKey: "p2"}
	x.wantKeys("bounded scan", recordKeys(x.scanAll(tbl, storage.Key{PartitionKey: "p1", RowKey: "r01"}, &end, 2)), live[11:20])
	end = storage.Key{PartitionKey: "pz\x00"}
	if recs := x.scanAll(tbl, storage.Key{PartitionKey: "pz"}, &end, 5); len(recs) != 0 {
		t.Fatalf("scan of an expired partition returned %s", keysOf(recs))
	}
	res, err = x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Start: storage.Key{PartitionKey: "p0", RowKey: "r01"}, Limit: 1})
	if err != nil || len(res.Records) != 1 || keyOf(&res.Records[0]) != (storage.Key{PartitionKey: "p0", RowKey: "r03"}) {
		t.Fatalf("Scan(limit 1) from an expired row = %s, %v; want p0/r03", keysOf(res.Records), err)
	}

	// Filters, plain and encoded, see no expired row.
	even := func(n int64) bool { return n%2 == 0 }
	var wantEven []storage.Key
	for _, k := range live {
		var n int
		fmt.Sscanf(k.RowKey, "r%d", &n)
		if even(int64(n)) {
			wantEven = append(wantEven, k)
		}
	}
	for _, encoded := range []bool{false, true} {
		req := storage.ScanRequest{Limit: 4, Filter: func(r *storage.Record) bool {
			n, _ := r.Entity.Get("N")
			return even(n.Int)
		}}
		if encoded {
			req.EncodedFilter = func(pk, rk string, version int64, props []byte) (bool, error) {
				bag, err := entity.DecodeProps(props)
				if err != nil {
					return false, err
				}
				e := entity.Entity{PartitionKey: pk, RowKey: rk, Props: bag}
				return req.Filter(&storage.Record{Entity: e, Version: version}), nil
			}
		}
		var got []storage.Key
		start := storage.Key{}
		for pages := 0; ; pages++ {
			if pages > len(all) {
				t.Fatal("filtered scan does not end")
			}
			req.Start = start
			res, err := x.e.Scan(x.ctx, x.acct, tbl, req)
			if err != nil {
				t.Fatal(err)
			}
			x.checkPage(start, nil, req.Limit, res)
			got = append(got, recordKeys(res.Records)...)
			if res.Next == nil {
				break
			}
			start = *res.Next
		}
		x.wantKeys(fmt.Sprintf("filtered scan (encoded %v)", encoded), got, wantEven)
	}

	// A byte budget: expired rows (3 KB each) do not count against it, so a page holds
	// every live row that fits.
	live0 := x.get(tbl, "p0", "r00")
	size := storage.RecordSize(&live0)
	maxBytes := 3*size + size/2
	var got []storage.Key
	start := storage.Key{}
	for pages := 0; ; pages++ {
		if pages > len(all) {
			t.Fatal("MaxBytes scan does not end")
		}
		res, err := x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Start: start, Limit: 1000, MaxBytes: maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		x.checkPage(start, nil, 1000, res)
		total := 0
		for i := range res.Records {
			total += storage.RecordSize(&res.Records[i])
		}
		if res.Next != nil && len(res.Records) < 3 {
			t.Fatalf("MaxBytes %d: page of %d live records (%d bytes) ended at %q: expired rows count against the budget", maxBytes, len(res.Records), total, *res.Next)
		}
		got = append(got, recordKeys(res.Records)...)
		if res.Next == nil {
			break
		}
		start = *res.Next
	}
	x.wantKeys("MaxBytes scan", got, live)
}

// testExpiryPreconditions: an expired row is absent for Apply's preconditions, and a
// version written over it exceeds its own.
func testExpiryPreconditions(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.createWith("Pre", elastic(1))
	rks := []string{"ins", "rep", "mrg", "del", "iom", "ior", "b1", "b2", "b3"}
	var muts []storage.Mutation
	for _, rk := range rks {
		muts = append(muts, mut(storage.Insert, rk, str("Old", rk)))
	}
	muts = append(muts, mut(storage.Insert, "keep", ttl(-1)))
	vs := x.apply(tbl, "p", muts...)
	old := map[string]int64{}
	for i, rk := range rks {
		old[rk] = vs[i]
	}
	at := expiryAt(slices.Max(vs), 1)
	x.visibleUntil(tbl, "p", "rep", at)
	x.waitPast(at)

	// Conditional writes fail as on a missing row, with or without If-Match.
	for _, rk := range []string{"rep", "mrg", "del"} {
		for _, op := range []storage.Op{storage.Replace, storage.Merge, storage.Delete} {
			x.applyErr(tbl, "p", 0, storage.ErrNotFound, mut(op, rk, ttl(-1)))
			x.applyErr(tbl, "p", 0, storage.ErrNotFound, mutIf(op, rk, old[rk], ttl(-1)))
		}
	}
	// Nothing of a failing Apply is written, an insert over an expired row included.
	x.applyErr(tbl, "p", 2, storage.ErrNotFound,
		mut(storage.Insert, "b1", ttl(-1)), mut(storage.Merge, "keep", str("X", "x")), mut(storage.Replace, "b2", ttl(-1)))
	x.getMissing(tbl, "p", "b1")
	if r := x.get(tbl, "p", "keep"); len(r.Entity.Props) != 1 {
		t.Fatalf("keep after a failed Apply: %v", r.Entity.Props)
	}

	// Unconditional writes succeed, as inserts, above the old version.
	newer := func(rk string, v int64) {
		t.Helper()
		if v <= old[rk] {
			t.Fatalf("%s: version %d written over an expired row is not above its %d", rk, v, old[rk])
		}
	}
	newer("ins", x.apply(tbl, "p", mut(storage.Insert, "ins", str("New", "x"), ttl(-1)))[0])
	newer("iom", x.apply(tbl, "p", mut(storage.InsertOrMerge, "iom", str("New", "x"), ttl(-1)))[0])
	newer("ior", x.apply(tbl, "p", mut(storage.InsertOrReplace, "ior", str("New", "x"), ttl(-1)))[0])
	vs = x.apply(tbl, "p", mut(storage.Insert, "b3", ttl(-1)), mut(storage.Merge, "b3", str("New", "x")), mut(storage.Delete, "b3"),
		mut(storage.InsertOrMerge, "b3", str("New", "x"), ttl(-1)))
	newer("b3", vs[0])
	for _, rk := range []string{"ins", "iom", "ior", "b3"} {
		r := x.get(tbl, "p", rk)
		x.sameProps(rk+" written over an expired row", r.Entity.Props, []entity.Property{str("New", "x"), ttl(-1)})
	}
	x.wantKeys("after the writes", x.liveKeys(tbl, 1000), keys("p", "b3", "ins", "iom", "ior", "keep"))
}

// testExpiryRestart: every write restarts an entity's clock, a merge included, and a
// merge keeps the entity's own TTL unless it changes it.
func testExpiryRestart(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.createWith("Restart", elastic(2))
	vs := x.apply(tbl, "p",
		mut(storage.Insert, "idle", str("S", "x")),
		mut(storage.Insert, "m", str("S", "x")),
		mut(storage.Insert, "r", str("S", "x")),
		mut(storage.Insert, "iom", str("S", "x")),
		mut(storage.Insert, "ior", str("S", "x")),
		mut(storage.Insert, "own", str("S", "x"), ttl(3)),
		mut(storage.Insert, "forever", str("S", "x"), ttl(3)))
	first := expiryAt(slices.Max(vs), 2)
	time.Sleep(time.Until(entity.TicksToTime(vs[0]).Add(1200 * time.Millisecond)))
	us := x.apply(tbl, "p",
		mut(storage.Merge, "m", str("T", "y")),
		mutIf(storage.Replace, "r", vs[2], str("T", "y")),
		mut(storage.InsertOrMerge, "iom", str("T", "y")),
		mut(storage.InsertOrReplace, "ior", str("T", "y")),
		mut(storage.Merge, "own", str("T", "y")),
		mut(storage.Merge, "forever", ttl(-1)))
	second := expiryAt(slices.Max(us), 2)
	x.waitPast(first)
	x.getMissing(tbl, "p", "idle")
	for i, rk := range []string{"m", "r", "iom", "ior", "own"} {
		x.visibleUntil(tbl, "p", rk, expiryAt(us[i], 2))
	}
	x.waitPast(second)
	for _, rk := range []string{"m", "r", "iom", "ior"} {
		x.getMissing(tbl, "p", rk)
	}
	own := expiryAt(us[4], 3)
	x.visibleUntil(tbl, "p", "own", own)
	x.waitPast(own)
	x.getMissing(tbl, "p", "own")
	x.wantKeys("after every expiry", x.liveKeys(tbl, 1000), keys("p", "forever"))
}

// purgeHooks skips the test unless the harness can purge and count stored rows.
func (x *env) purgeHooks() {
	if x.h.PurgeExpired == nil || x.h.StoredRows == nil {
		x.t.Skip("harness has no PurgeExpired or StoredRows")
	}
}

func (x *env) wantStored(what, table string, want int) {
	x.t.Helper()
	if n := x.h.StoredRows(x.t, x.e, x.acct, table); n != want {
		x.t.Fatalf("%s: %s stores %d rows, want %d", what, table, n, want)
	}
}

// testExpiryPurge: the purge removes expired rows and nothing else — not a row written
// again over an expired one, nor one whose expiry an update moved.
func testExpiryPurge(t *testing.T, x *env) {
	x.purgeHooks()
	t.Parallel()
	tbl := x.createWith("Purge", elastic(2))
	x.createWith("Std", storage.TableSettings{})
	x.createWith("Hour", elastic(3600))
	var last int64
	for _, pk := range []string{"a", "b"} {
		var muts []storage.Mutation
		for r := range 25 {
			muts = append(muts, mut(storage.Insert, fmt.Sprintf("r%02d", r), i64("N", int64(r))))
		}
		for r := range 5 {
			muts = append(muts, mut(storage.Insert, fmt.Sprintf("keep%d", r), ttl(-1)))
		}
		last = max(last, slices.Max(x.apply(tbl, pk, muts...)))
	}
	x.apply("Std", "a", mut(storage.Insert, "r", ttl(1)), mut(storage.Insert, "s", str("S", "x")))
	x.apply("Hour", "a", mut(storage.Insert, "r", str("S", "x")), mut(storage.Insert, "s", ttl(3600)))
	// Moved before it expires: its first expiry passes with the rest.
	moved := x.apply(tbl, "a", mut(storage.Merge, "r00", ttl(3600)))[0]
	x.wantStored("before expiry", tbl, 60)
	x.waitPast(expiryAt(last, 2))
	// Written again over an expired row before the purge.
	again := x.apply(tbl, "b", mut(storage.Insert, "r00", ttl(-1)))[0]

	x.h.PurgeExpired(t, x.e)
	x.wantStored("after purge", tbl, 12)
	x.wantStored("after purge", "Std", 2)
	x.wantStored("after purge", "Hour", 2)
	recs := x.snapshot(tbl)
	want := append(keys("a", "keep0", "keep1", "keep2", "keep3", "keep4", "r00"), keys("b", "keep0", "keep1", "keep2", "keep3", "keep4", "r00")...)
	x.wantKeys("after purge", recordKeys(recs), want)
	if r := x.get(tbl, "a", "r00"); r.Version != moved {
		t.Fatalf("moved row: version %d, want %d", r.Version, moved)
	}
	if r := x.get(tbl, "b", "r00"); r.Version != again {
		t.Fatalf("row written again: version %d, want %d", r.Version, again)
	}
	x.h.PurgeExpired(t, x.e) // nothing left to do
	x.wantStored("after a second purge", tbl, 12)
	x.sameRecords("after a second purge", x.snapshot(tbl), recs)
}

// testExpiryReopen: expiry survives a restart — rows expire on time after it, rows that
// expired before it stay invisible, versions written over them still increase, and the
// purge after the restart removes them.
func testExpiryReopen(t *testing.T, x *env) {
	if x.h.Reopen == nil {
		t.Skip("harness has no Reopen")
	}
	t.Parallel()
	tbl := x.createWith("Reopen", elastic(1))
	v1 := x.apply(tbl, "p", mut(storage.Insert, "before", str("S", "x")), mut(storage.Insert, "keep", ttl(-1)))
	x.waitPast(expiryAt(v1[0], 1))
	v2 := x.apply(tbl, "p", mut(storage.Insert, "after", str("S", "x")), mut(storage.Insert, "own", ttl(2)))
	x.reopen()
	x.getMissing(tbl, "p", "before")
	x.wantSettings("after reopen", tbl, elastic(1))
	x.visibleUntil(tbl, "p", "after", expiryAt(v2[0], 1))
	x.visibleUntil(tbl, "p", "own", expiryAt(v2[1], 2))
	x.waitPast(expiryAt(v2[1], 2))
	x.wantKeys("after reopen and expiry", x.liveKeys(tbl, 1), keys("p", "keep"))
	if x.h.PurgeExpired != nil && x.h.StoredRows != nil {
		x.h.PurgeExpired(t, x.e)
		x.wantStored("purged after reopen", tbl, 1)
	}
	v := x.apply(tbl, "p", mut(storage.Insert, "before", ttl(-1)))[0]
	if v <= v1[0] {
		t.Fatalf("version %d written over a row expired before the restart is not above its %d", v, v1[0])
	}
	x.reopen()
	x.wantKeys("after a second reopen", x.liveKeys(tbl, 1000), keys("p", "before", "keep"))
}
