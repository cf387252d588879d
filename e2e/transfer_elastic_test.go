package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/client"
)

// ttlOf is an entity's TTL property (name) as an integer, and whether it has one.
func ttlOf(t testing.TB, m map[string]any, name string) (int64, bool) {
	t.Helper()
	v, ok := m[name]
	if !ok {
		return 0, false
	}
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		s = x
	default:
		t.Fatalf("%s = %v (%T)", name, v, v)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s = %q: %v", name, s, err)
	}
	return n, true
}

// Export, import and copy carry an elastic table's settings and each entity's remaining
// lifetime (issue 42): the target table has the source's settings (so bulk writes and
// time-to-live work there), an entity keeps its expiry instead of starting its TTL
// again, and one that expired before it would be written is not written. CSV, which has
// no place for them, refuses an elastic table; a target table with other settings is
// refused; --settings=false moves the entities alone.
func TestTransferElastic(t *testing.T) {
	src := startOwnServer(t)
	sc := settingsClient(t, src)
	svc := newServiceClient(t, src)
	tables := map[string]client.TableSettings{
		"Events": {Elastic: true, DefaultTimeToLive: 3600},
		"Cache":  {Elastic: true, DefaultTimeToLive: -1, TimeToLiveProperty: "Life"},
		"Audit":  {Elastic: true},
		"Plain":  {},
	}
	for name, s := range tables {
		if err := sc.CreateTable(ctx(t), name, &s); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	written := time.Now()
	fillEntities(t, svc.NewClient("Events"), []string{
		`{"PartitionKey":"p","RowKey":"short","TTLInSeconds":4}`,
		`{"PartitionKey":"p","RowKey":"own","TTLInSeconds@odata.type":"Edm.Int64","TTLInSeconds":"600","X":1}`,
		`{"PartitionKey":"p","RowKey":"never","TTLInSeconds":-1}`,
		`{"PartitionKey":"p","RowKey":"default","X":2}`,
	})
	fillEntities(t, svc.NewClient("Cache"), []string{
		`{"PartitionKey":"c","RowKey":"life","Life":1000}`,
		`{"PartitionKey":"c","RowKey":"forever","TTLInSeconds":5}`,
	})
	fillEntities(t, svc.NewClient("Audit"), []string{`{"PartitionKey":"a","RowKey":"1","TTLInSeconds":"not a ttl"}`})
	fillEntities(t, svc.NewClient("Plain"), []string{`{"PartitionKey":"s","RowKey":"1","TTLInSeconds":1}`})
	shortExpiry := written.Add(4 * time.Second)

	// checkTarget compares the target's tables with the source's: the same settings and
	// entities, each TTL the lifetime left (at most the source's, at least what is left
	// minus slack); gone lists the entities that must have expired (true), or may have
	// (false).
	checkTarget := func(t *testing.T, dst *server, gone map[string]bool) {
		t.Helper()
		dc := settingsClient(t, dst)
		for name, want := range tables {
			got, err := dc.GetTableSettings(ctx(t), name)
			if err != nil {
				t.Fatalf("target table %s: %v", name, err)
			}
			if got.Elastic != want.Elastic || got.DefaultTimeToLive != want.DefaultTimeToLive || want.TimeToLiveProperty != "" && got.TimeToLiveProperty != want.TimeToLiveProperty {
				t.Errorf("target table %s has settings %+v, want %+v", name, got.TableSettings, want)
			}
		}
		ev := sdkEntities(t, newServiceClient(t, dst).NewClient("Events"))
		elapsed := int64(time.Since(written).Seconds()) + 2
		for rk, ttl := range map[string]int64{"short": 4, "own": 600, "default": 3600} {
			e, ok := ev[fmt.Sprintf("%q/%q", "p", rk)]
			if must, listed := gone[rk]; listed {
				if must && ok {
					t.Errorf("%s expired before the import and was written: %v", rk, e)
				}
				if must || !ok {
					continue
				}
			}
			if !ok {
				t.Errorf("%s is missing", rk)
				continue
			}
			got, has := ttlOf(t, e, "TTLInSeconds")
			if !has || got > ttl || got < ttl-elapsed {
				t.Errorf("%s: TTLInSeconds %d (present %v), want the lifetime left: %d…%d", rk, got, has, ttl-elapsed, ttl)
			}
		}
		if e := ev[`"p"/"never"`]; e == nil {
			t.Error("never is missing")
		} else if got, _ := ttlOf(t, e, "TTLInSeconds"); got != -1 {
			t.Errorf("never: TTLInSeconds %d, want -1", got)
		}
		cache := sdkEntities(t, newServiceClient(t, dst).NewClient("Cache"))
		if got, _ := ttlOf(t, cache[`"c"/"life"`], "Life"); got > 1000 || got < 1000-elapsed {
			t.Errorf("Cache life: Life %d, want about 1000", got)
		}
		if got, _ := ttlOf(t, cache[`"c"/"forever"`], "TTLInSeconds"); got != 5 || cache[`"c"/"forever"`]["Life"] != nil {
			t.Errorf("Cache forever: %v, want TTLInSeconds 5 (an ordinary property there) and no Life", cache[`"c"/"forever"`])
		}
		sameEntities(t, "Audit", sdkEntities(t, svc.NewClient("Audit")), sdkEntities(t, newServiceClient(t, dst).NewClient("Audit")))
		sameEntities(t, "Plain", sdkEntities(t, svc.NewClient("Plain")), sdkEntities(t, newServiceClient(t, dst).NewClient("Plain")))
		// Bulk writes need an elastic table: the copied one takes them.
		if _, err := dc.Bulk(ctx(t), "Events", []client.BulkOp{{Op: client.BulkUpsert, Entity: json.RawMessage(`{"PartitionKey":"b","RowKey":"1"}`)}}); err != nil {
			t.Errorf("bulk write into the target's Events: %v", err)
		}
	}

	t.Run("copy", func(t *testing.T) {
		dst := startOwnServer(t)
		st, _, errOut := runTool(t, time.Minute, nil, "copy", "--from", connString(src), "--to", connString(dst), "--quiet")
		if st != 0 {
			t.Fatalf("copy: status %d: %s", st, errOut)
		}
		checkTarget(t, dst, map[string]bool{"short": false}) // its 4 s may be over by now
	})

	file := filepath.Join(t.TempDir(), "all.jsonl")
	t.Run("export and a later import", func(t *testing.T) {
		st, _, errOut := runTool(t, time.Minute, nil, "export", "--from", connString(src), "--out", file, "--quiet")
		if st != 0 {
			t.Fatalf("export: status %d: %s", st, errOut)
		}
		b, _ := os.ReadFile(file)
		for _, w := range []string{
			`{"odata.table":"Events","odata.settings":{"Elastic":true,"DefaultTimeToLive":3600,"TimeToLiveProperty":"TTLInSeconds"}}`,
			`{"odata.table":"Cache","odata.settings":{"Elastic":true,"DefaultTimeToLive":-1,"TimeToLiveProperty":"Life"}}`,
			`{"odata.table":"Plain","odata.settings":{"Elastic":false}}`,
			`"RowKey":"short","Timestamp@odata.type":"Edm.DateTime","Timestamp":"`,
			`"odata.expiry":"`,
		} {
			if !strings.Contains(string(b), w) {
				t.Errorf("the export lacks %s:\n%s", w, b)
			}
		}
		if n := strings.Count(string(b), `"odata.expiry"`); n != 4 {
			t.Errorf("%d entities carry an expiry, want 4 (short, own, default, life):\n%s", n, b)
		}
		sleepUntil(shortExpiry.Add(time.Second))
		dst := startOwnServer(t)
		st, _, errOut = runTool(t, time.Minute, nil, "import", "--to", connString(dst), "--in", file)
		if st != 0 || !strings.Contains(errOut, "1 expired (not written)") {
			t.Fatalf("import: status %d: %s", st, errOut)
		}
		checkTarget(t, dst, map[string]bool{"short": true})
	})

	t.Run("refusals and --settings=false", func(t *testing.T) {
		st, _, errOut := runTool(t, time.Minute, nil, "export", "--from", connString(src), "--table", "Events", "--format", "csv", "--quiet")
		if st != 1 || !strings.Contains(errOut, "CSV cannot carry") || !strings.Contains(errOut, "--settings=false") {
			t.Errorf("CSV export of an elastic table: status %d: %s", st, errOut)
		}
		st, out, errOut := runTool(t, time.Minute, nil, "export", "--from", connString(src), "--table", "Events", "--format", "csv", "--settings=false", "--quiet")
		if st != 0 || strings.Count(out, "\n") != 4 {
			t.Errorf("CSV export with --settings=false: status %d: %s\n%s", st, errOut, out)
		}

		dst := startOwnServer(t)
		if err := settingsClient(t, dst).CreateTable(ctx(t), "Events", &client.TableSettings{Elastic: true, DefaultTimeToLive: 60}); err != nil {
			t.Fatal(err)
		}
		st, _, errOut = runTool(t, time.Minute, nil, "copy", "--from", connString(src), "--to", connString(dst), "--table", "Events", "--quiet", "--checkpoint", filepath.Join(t.TempDir(), "refused.checkpoint"))
		if st != 1 || !strings.Contains(errOut, "exists on the target as elastic, time-to-live 60 s") || !strings.Contains(errOut, "time-to-live 3600 s") {
			t.Errorf("copy into a table with other settings: status %d: %s", st, errOut)
		}
		st, _, errOut = runTool(t, time.Minute, nil, "copy", "--from", connString(src), "--to", connString(dst), "--table", "Events", "--settings=false", "--quiet")
		if st != 0 {
			t.Errorf("copy --settings=false: status %d: %s", st, errOut)
		}

		// A JSON Lines file without settings (an older export, or another source's)
		// imports as before: tables as an SDK creates them, nothing expires.
		old := filepath.Join(t.TempDir(), "old.jsonl")
		os.WriteFile(old, []byte(`{"odata.table":"Old","PartitionKey":"p","RowKey":"1","TTLInSeconds":1}`+"\n"), 0o644)
		if st, _, errOut := runTool(t, time.Minute, nil, "import", "--to", connString(dst), "--in", old, "--quiet"); st != 0 {
			t.Fatalf("import of a file without settings: status %d: %s", st, errOut)
		}
		if got, err := settingsClient(t, dst).GetTableSettings(ctx(t), "Old"); err != nil || got.Elastic {
			t.Errorf("Old: %+v, %v; want a standard table", got, err)
		}
	})
}
