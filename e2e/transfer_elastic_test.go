package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/client"
)

// Export, import and copy carry an elastic table's settings and each entity's exact
// expiry (issue 42): the target table has the source's settings (so bulk writes and
// time-to-live work there), every entity has exactly the source's properties and expiry
// (the cerulean.expiry annotation, read and written with x-cerulean-expiry) instead of
// starting its TTL again, and one that expired before it would be written is not
// written. CSV, which has no place for them, refuses an elastic table; a target table
// with other settings is refused; --settings=false moves the entities alone.
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

	// checkTarget compares the target's tables with the source's: the same settings, the
	// same entities with the same properties (the TTL properties as they are) and the
	// same expiries; gone lists the entities of Events that must have expired (true), or
	// may have (false).
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
		for name := range tables {
			want, got := sdkEntities(t, svc.NewClient(name)), sdkEntities(t, newServiceClient(t, dst).NewClient(name))
			wantExp, gotExp := tableExpiries(t, src, name), tableExpiries(t, dst, name)
			if name == "Events" {
				for rk, must := range gone {
					key := fmt.Sprintf("%q/%q", "p", rk)
					_, ok := got[key]
					if must && ok {
						t.Errorf("%s expired before it was written and was written: %v", rk, got[key])
					}
					if must || !ok { // gone (at the source too, by now): not compared
						delete(want, key)
						delete(got, key)
						delete(wantExp, key)
						delete(gotExp, key)
					}
				}
			}
			sameEntities(t, name, want, got)
			sameExpiries(t, name, wantExp, gotExp)
		}
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
