package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// newStore creates a store with the given tables in a fresh directory, closes it and
// returns the directory.
func newStore(t *testing.T, tables ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	eng, err := pebble.Open(dir, pebble.Options{DiskReserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range tables {
		if err := eng.CreateTable(context.Background(), "acct", name, storage.TableSettings{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeManifest(t *testing.T, dir string, m Manifest) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestManifestChecks(t *testing.T) {
	good := Manifest{Format: Format, Engine: Engine, StoreFormat: pebble.FormatVersion, Tables: 3}
	for _, c := range []struct {
		name string
		m    *Manifest // nil: no manifest
		raw  string    // instead of m
		want string
	}{
		{"missing", nil, "", "not a Cerulean backup"},
		{"garbage", nil, "{", "unreadable manifest"},
		{"format", &Manifest{Format: 2, Engine: Engine, StoreFormat: 2}, "", "backup format 2 is not supported"},
		{"engine", &Manifest{Format: Format, Engine: "postgres", StoreFormat: 2}, "", `engine "postgres"`},
		{"newer store", &Manifest{Format: Format, Engine: Engine, StoreFormat: pebble.FormatVersion + 1}, "", "store format"},
		{"no store format", &Manifest{Format: Format, Engine: Engine}, "", "store format 0"},
		{"good", &good, "", ""},
	} {
		dir := t.TempDir()
		switch {
		case c.m != nil:
			writeManifest(t, dir, *c.m)
		case c.raw != "":
			if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte(c.raw), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		m, err := ReadManifest(dir)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want == "" && m != good:
			t.Errorf("%s: read %+v, want %+v", c.name, m, good)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}

// A local backup restores into an absent directory, an empty one, and with Force over a
// full one; without Force a full one is refused and left as it was.
func TestLocalBackupAndRestore(t *testing.T) {
	data := newStore(t, "one", "two", "three")
	to := filepath.Join(t.TempDir(), "b")
	m, err := Local(data, to)
	if err != nil {
		t.Fatal(err)
	}
	// A store without change feeds keeps format 2, which builds from before feeds read.
	if m.Tables != 3 || m.StoreFormat != 2 || m.Position == 0 {
		t.Errorf("manifest %+v: want 3 tables, store format 2 (no change feed) and a position", m)
	}
	if _, err := os.Stat(filepath.Join(to, StoreDir, "LOCK")); err == nil {
		t.Errorf("the backup holds a lock file")
	}

	absent := filepath.Join(t.TempDir(), "absent")
	empty := t.TempDir()
	for _, d := range []string{absent, empty} {
		if _, err := Restore(to, d, RestoreOptions{}); err != nil {
			t.Fatalf("restore into %s: %v", d, err)
		}
		info, err := pebble.Inspect(d)
		if err != nil || info.Tables != 3 {
			t.Errorf("restored %s: %+v, %v; want 3 tables", d, info, err)
		}
	}

	full := newStore(t, "other")
	if _, err := Restore(to, full, RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("restore over a full directory without Force: %v", err)
	}
	if info, err := pebble.Inspect(full); err != nil || info.Tables != 1 {
		t.Errorf("a refused restore changed the directory: %+v, %v", info, err)
	}
	if _, err := Restore(to, full, RestoreOptions{Force: true}); err != nil {
		t.Fatalf("restore with Force: %v", err)
	}
	if info, err := pebble.Inspect(full); err != nil || info.Tables != 3 {
		t.Errorf("after restore with Force: %+v, %v; want 3 tables", info, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(full), ".*restore*")); len(left) > 0 {
		t.Errorf("restore left %v behind", left)
	}

	if _, err := Local(data, filepath.Join(data, "b")); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("backup into the data directory: %v", err)
	}
	// A backup directory must be new or empty.
	if _, err := Local(data, to); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("backup into a full directory: %v", err)
	}
}

// Restore refuses a backup whose store does not hold what its manifest says, and a data
// directory a process holds (here: this one, through an open engine; the e2e tests cover
// another process, and backup's refusal).
func TestRestoreRefusals(t *testing.T) {
	data := newStore(t, "one")
	to := filepath.Join(t.TempDir(), "b")
	m, err := Local(data, to)
	if err != nil {
		t.Fatal(err)
	}
	m.Tables = 5
	if err := os.Remove(filepath.Join(to, ManifestName)); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, to, m)
	target := filepath.Join(t.TempDir(), "target")
	if _, err := Restore(to, target, RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "does not match its manifest") {
		t.Errorf("restore of a backup with a wrong table count: %v", err)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("a refused restore created %s (%v)", target, err)
	}
	empty := t.TempDir()
	if _, err := Restore(to, empty, RestoreOptions{}); err == nil {
		t.Errorf("restore of a backup with a wrong table count into an empty directory succeeded")
	}
	if entries, err := os.ReadDir(empty); err != nil || len(entries) > 0 {
		t.Errorf("a refused restore changed the empty directory: %v, %v", entries, err)
	}
	m.Tables = 1
	if err := os.Remove(filepath.Join(to, ManifestName)); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, to, m)

	eng, err := pebble.Open(data, pebble.Options{DiskReserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if _, err := Restore(to, data, RestoreOptions{Force: true}); !errors.Is(err, ErrInUse) {
		t.Errorf("restore over a held directory: %v, want ErrInUse", err)
	}
	if _, err := Restore(to, to, RestoreOptions{Force: true}); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("restore onto the backup itself: %v", err)
	}
}

// Fetch writes what Handler streams; a stream cut before the manifest leaves nothing.
func TestFetch(t *testing.T) {
	data := newStore(t, "one", "two")
	eng, err := pebble.Open(data, pebble.Options{DiskReserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(Handler(eng, data, log))
	defer srv.Close()
	to := filepath.Join(t.TempDir(), "b")
	m, err := Fetch(context.Background(), srv.URL, to)
	if err != nil {
		t.Fatal(err)
	}
	if m.Tables != 2 {
		t.Errorf("manifest %+v: want 2 tables", m)
	}
	if left, _ := filepath.Glob(filepath.Join(data, tmpPrefix+"*")); len(left) > 0 {
		t.Errorf("the server left %v behind", left)
	}
	if _, err := Restore(to, filepath.Join(t.TempDir(), "r"), RestoreOptions{}); err != nil {
		t.Errorf("restore of a fetched backup: %v", err)
	}

	// A stream cut off before its manifest.
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		Handler(eng, data, log).ServeHTTP(rec, r)
		b := rec.Body.Bytes()
		_, _ = w.Write(b[:len(b)-2048]) // drops the manifest and the end of the archive
	}))
	defer cut.Close()
	to2 := filepath.Join(t.TempDir(), "b2")
	if _, err := Fetch(context.Background(), cut.URL, to2); err == nil {
		t.Errorf("a cut-off stream was accepted")
	}
	if _, err := os.Stat(to2); !os.IsNotExist(err) {
		t.Errorf("a failed fetch left %s behind (%v)", to2, err)
	}

	// The postgres engine: 501 and the advice.
	pg := httptest.NewServer(Handler(nil, "", log))
	defer pg.Close()
	if _, err := Fetch(context.Background(), pg.URL, filepath.Join(t.TempDir(), "b3")); err == nil || !strings.Contains(err.Error(), "pg_basebackup") {
		t.Errorf("backup of postgres: %v", err)
	}
}

// A backup of a store whose data is in sstables and blob files as well as the write-ahead
// log holds every row: the checkpoint's links and copies make a whole store.
func TestBackupWithFlushedData(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	eng, err := pebble.Open(data, pebble.Options{DiskReserve: -1, MemTableSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx := context.Background()
	if err := eng.CreateTable(ctx, "acct", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	const partitions, rows = 40, 50
	big := strings.Repeat("x", 1000) // separated into blob files (256 bytes or more)
	for p := range partitions {
		muts := make([]storage.Mutation, rows)
		for i := range muts {
			muts[i] = storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%03d", i),
				Props: []entity.Property{{Name: "S", Value: entity.StringValue(big)}}}
		}
		if _, err := eng.Apply(ctx, "acct", "T", fmt.Sprintf("p%03d", p), muts); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(Handler(eng, data, slog.New(slog.NewTextHandler(io.Discard, nil))))
	defer srv.Close()
	to := filepath.Join(t.TempDir(), "b")
	if _, err := Fetch(ctx, srv.URL, to); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{"*.sst", "*.blob", "*.log"} {
		if found, _ := filepath.Glob(filepath.Join(to, StoreDir, ext)); len(found) == 0 {
			t.Errorf("the backup has no %s file: the test does not cover it", ext)
		}
	}
	restored := filepath.Join(t.TempDir(), "r")
	if _, err := Restore(to, restored, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	e2, err := pebble.Open(restored, pebble.Options{DiskReserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	n := 0
	for start := (storage.Key{}); ; {
		res, err := e2.Scan(ctx, "acct", "T", storage.ScanRequest{Start: start, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Records {
			if len(r.Entity.Props) != 1 || !r.Entity.Props[0].Value.Equal(entity.StringValue(big)) {
				t.Fatalf("row %s/%s: %v", r.Entity.PartitionKey, r.Entity.RowKey, r.Entity.Props)
			}
		}
		n += len(res.Records)
		if res.Next == nil {
			break
		}
		start = *res.Next
	}
	if n != partitions*rows {
		t.Errorf("restored %d rows, want %d", n, partitions*rows)
	}
}
