package pebble

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// syncRecorder is a WAL file that counts its SyncData calls and answers them with err.
type syncRecorder struct {
	vfs.File
	fd    uintptr
	syncs int
	err   error
}

func (f *syncRecorder) Fd() uintptr { return f.fd }

func (f *syncRecorder) SyncData() error {
	f.syncs++
	return f.err
}

// TestWALSyncerFallsBack checks walSyncer's choice of call: raw syncs while they are
// quick, a blocking one after a sync over the limit, raw again after a quick one, and
// each call's error returned. The limit is long, so that a loaded machine does not make
// a quick sync slow.
func TestWALSyncerFallsBack(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("raw syncs need two Ps")
	}
	var rawCalls []uintptr
	rawDelay, rawErr := time.Duration(0), error(nil)
	w := &walSyncer{limit: 100 * time.Millisecond, raw: func(fd uintptr) error {
		rawCalls = append(rawCalls, fd)
		time.Sleep(rawDelay)
		return rawErr
	}}
	f := &syncRecorder{fd: 7}
	file := &walFile{File: f, sync: w}

	step := func(name string, wantRaw, wantBlocking int) {
		t.Helper()
		if len(rawCalls) != wantRaw || f.syncs != wantBlocking {
			t.Errorf("%s: %d raw syncs and %d blocking, want %d and %d", name, len(rawCalls), f.syncs, wantRaw, wantBlocking)
		}
		if got := w.blockingSyncs.Load(); got != uint64(wantBlocking) {
			t.Errorf("%s: blockingSyncs = %d, want %d", name, got, wantBlocking)
		}
	}
	if err := file.SyncData(); err != nil {
		t.Fatal(err)
	}
	step("quick raw sync", 1, 0)
	if rawCalls[0] != 7 {
		t.Errorf("raw sync of fd %d, want 7", rawCalls[0])
	}

	rawDelay = w.limit + 10*time.Millisecond
	rawErr = syscall.EIO
	if err := file.SyncData(); !errors.Is(err, syscall.EIO) {
		t.Errorf("slow raw sync: err = %v, want EIO", err)
	}
	step("slow raw sync", 2, 0)

	f.err = errors.New("blocking failed")
	if err := file.SyncData(); err != f.err {
		t.Errorf("sync after a slow one: err = %v, want the file's", err)
	}
	step("sync after a slow one", 2, 1)

	f.err, rawDelay, rawErr = nil, 0, nil
	if err := file.SyncData(); err != nil {
		t.Fatal(err)
	}
	step("sync after a quick blocking one", 3, 1)
}

// TestWALSyncerWithoutRawSync checks the cases that sync through the file itself: no
// descriptor (an in-memory file system), one P, and no raw sync on the platform.
func TestWALSyncerWithoutRawSync(t *testing.T) {
	raws := 0
	w := &walSyncer{raw: func(uintptr) error { raws++; return nil }}
	f := &syncRecorder{fd: vfs.InvalidFd}
	if err := (&walFile{File: f, sync: w}).SyncData(); err != nil || f.syncs != 1 {
		t.Errorf("no descriptor: err %v, %d file syncs, want the file's", err, f.syncs)
	}

	f = &syncRecorder{fd: 7}
	prev := runtime.GOMAXPROCS(1)
	err := (&walFile{File: f, sync: w}).SyncData()
	runtime.GOMAXPROCS(prev)
	if err != nil || f.syncs != 1 {
		t.Errorf("one P: err %v, %d file syncs, want the file's", err, f.syncs)
	}

	f = &syncRecorder{fd: 7}
	if err := (&walFile{File: f, sync: &walSyncer{}}).SyncData(); err != nil || f.syncs != 1 {
		t.Errorf("no raw sync: err %v, %d file syncs, want the file's", err, f.syncs)
	}
	if err := (&walFile{File: f}).SyncData(); err != nil || f.syncs != 2 {
		t.Errorf("no syncer: err %v, %d file syncs, want the file's", err, f.syncs)
	}
	if raws != 0 || w.blockingSyncs.Load() != 0 {
		t.Errorf("%d raw syncs and %d blocking counted, want none", raws, w.blockingSyncs.Load())
	}
}

// TestRawFdatasync syncs a real file, and reports a closed descriptor's EBADF.
func TestRawFdatasync(t *testing.T) {
	raw := newWALSyncer().raw
	if raw == nil {
		t.Skip("no raw sync on " + runtime.GOOS)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "wal"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("record")); err != nil {
		t.Fatal(err)
	}
	fd := f.Fd()
	if err := raw(fd); err != nil {
		t.Errorf("rawFdatasync: %v", err)
	}
	f.Close()
	if err := raw(fd); !errors.Is(err, syscall.EBADF) {
		t.Errorf("rawFdatasync of a closed file: %v, want EBADF", err)
	}
}

// TestEngineSyncsWALRaw checks that an on-disk engine's synced writes go through its
// walSyncer: on Linux as raw syncs, none of them blocking on this machine's disk unless
// a sync was slow.
func TestEngineSyncsWALRaw(t *testing.T) {
	if newWALSyncer().raw == nil || runtime.GOMAXPROCS(0) < 2 {
		t.Skip("no raw syncs here")
	}
	e := openTest(t, t.TempDir(), Options{})
	ctx := context.Background()
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	before := e.wal.rawSyncs.Load() + e.wal.blockingSyncs.Load()
	for i := range 5 {
		muts := []storage.Mutation{{Op: storage.Insert, RowKey: string(rune('a' + i)), Props: []entity.Property{{Name: "N", Value: entity.Int32Value(int32(i))}}}}
		if _, err := e.Apply(ctx, "acct", "T", "p", muts); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.wal.rawSyncs.Load() + e.wal.blockingSyncs.Load() - before; got < 5 {
		t.Errorf("%d WAL syncs through the syncer for 5 synced writes, want at least 5", got)
	}
	if e.wal.rawSyncs.Load() == 0 {
		t.Error("no raw WAL syncs")
	}
	st, err := e.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.WALBlockingSyncs != e.wal.blockingSyncs.Load() {
		t.Errorf("Stats.WALBlockingSyncs = %d, want %d", st.WALBlockingSyncs, e.wal.blockingSyncs.Load())
	}
}
