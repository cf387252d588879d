package pebble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// readAll reads the whole of the file name in fs.
func readAll(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkWAL checks that the file name holds logged and then zeros only, wantLen bytes in
// all.
func checkWAL(t *testing.T, fs vfs.FS, name string, logged []byte, wantLen int) {
	t.Helper()
	got := readAll(t, fs, name)
	if len(got) != wantLen {
		t.Fatalf("%s: %d bytes, want %d (%d logged)", name, len(got), wantLen, len(logged))
	}
	if !bytes.Equal(got[:len(logged)], logged) {
		t.Fatalf("%s: the logged bytes differ from what was written", name)
	}
	if i := bytes.IndexFunc(got[len(logged):], func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("%s: byte %d past the log is not zero", name, len(logged)+i)
	}
}

// nextChunk is the length a WAL file that has logged n bytes is extended to.
func nextChunk(n int) int { return (n/walFillChunk + 1) * walFillChunk }

// TestWALFileExtendsWithZeros writes a new WAL file through walFS on the operating
// system's file system, in writes of random sizes, some crossing several chunks: after
// each, the file must hold what was written and then zeros up to the first multiple of
// walFillChunk past it. A recycled file is written over from its start and extended only
// once a write reaches past its length.
func TestWALFileExtendsWithZeros(t *testing.T) {
	dir := t.TempDir()
	fs := walFS{FS: vfs.Default}
	name := filepath.Join(dir, "000001.log")
	f, err := fs.Create(name, "pebble-wal")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var logged []byte
	for len(logged) < 3*walFillChunk {
		p := make([]byte, 1+rng.IntN(40_000))
		if rng.IntN(20) == 0 {
			p = make([]byte, walFillChunk+rng.IntN(walFillChunk))
		}
		for i := range p {
			p[i] = byte(1 + rng.IntN(255))
		}
		if n, err := f.Write(p); err != nil || n != len(p) {
			t.Fatalf("Write: %d, %v", n, err)
		}
		logged = append(logged, p...)
		checkWAL(t, vfs.Default, name, logged, nextChunk(len(logged)))
	}
	if err := f.Preallocate(int64(len(logged)), 64<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncData(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	checkWAL(t, vfs.Default, name, logged, nextChunk(len(logged)))

	// Recycled: the new records overwrite the old file from its start.
	size := nextChunk(len(logged))
	recycled := filepath.Join(dir, "000002.log")
	f, err = fs.ReuseForWrite(name, recycled, "pebble-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := bytes.Repeat([]byte{7}, 1000)
	if _, err := f.Write(head); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, vfs.Default, recycled)
	if len(got) != size || !bytes.Equal(got[:1000], head) || !bytes.Equal(got[1000:], logged[1000:len(got)]) {
		t.Fatalf("recycled file after a small write: %d bytes, want %d with the old ones past the new", len(got), size)
	}
	tail := bytes.Repeat([]byte{9}, size)
	if _, err := f.Write(tail); err != nil {
		t.Fatal(err)
	}
	checkWAL(t, vfs.Default, recycled, append(head, tail...), nextChunk(len(head)+len(tail)))
}

// failingWriteAt is a file whose WriteAt fails, and whose preallocations are recorded.
type failingWriteAt struct {
	vfs.File
	prealloc [2]int64
}

func (f *failingWriteAt) WriteAt([]byte, int64) (int, error) { return 0, errors.New("no room") }
func (f *failingWriteAt) Preallocate(off, n int64) error {
	f.prealloc = [2]int64{off, n}
	return nil
}

// TestWALFileStopsFilling checks the two ways a file stops being extended ahead: a
// failed extension (the write still goes through, and preallocations reach the file
// again, capped), and a WriteAt, after which writes no longer extend it.
func TestWALFileStopsFilling(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "000001.log")
	base, err := vfs.Default.Create(name, "pebble-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	fw := &failingWriteAt{File: base}
	f := &walFile{File: fw, fill: true}
	if err := f.Preallocate(0, 17<<20); err != nil || fw.prealloc != [2]int64{} {
		t.Fatalf("Preallocate while filling reached the file: %v, %v", fw.prealloc, err)
	}
	if n, err := f.Write([]byte("record")); err != nil || n != 6 {
		t.Fatalf("Write after a failed extension: %d, %v", n, err)
	}
	if f.fill {
		t.Fatal("still filling after a failed extension")
	}
	_ = f.Preallocate(6, 17<<20)
	if fw.prealloc != [2]int64{6, walPreallocateMax} {
		t.Fatalf("Preallocate after a failed extension reached the file as %v", fw.prealloc)
	}
	checkWAL(t, vfs.Default, name, []byte("record"), 6)

	name2 := filepath.Join(dir, "000002.log")
	f2, err := walFS{FS: vfs.Default}.Create(name2, "pebble-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if _, err := f2.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := f2.WriteAt([]byte("b"), 0); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{1}, walFillChunk)
	if _, err := f2.Write(big); err != nil {
		t.Fatal(err)
	}
	checkWAL(t, vfs.Default, name2, append([]byte("b"), big...), 1+walFillChunk)
}

// TestWALZeroTailsSurviveCrashes crashes a store twice (only synced data survives) while
// its WAL files end in zeros: each time every acknowledged write must be back, the
// second time replaying a log the first recovery left.
func TestWALZeroTailsSurviveCrashes(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	acked := map[string]int64{}
	write := func(e *Engine, round, n int) {
		t.Helper()
		for i := range n {
			rk := fmt.Sprintf("r%d-%04d", round, i)
			a, err := e.Apply(ctx, "acct", "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: rk,
				Props: []entity.Property{{Name: "S", Value: entity.StringValue(strings.Repeat("x", 1000))}}}})
			if err != nil {
				t.Fatal(err)
			}
			acked[rk] = a.Versions[0]
		}
	}
	check := func(e *Engine, when string) {
		t.Helper()
		for rk, v := range acked {
			r, err := e.Get(ctx, "acct", "T", "p", rk)
			if err != nil || r.Version != v {
				t.Fatalf("%s: acknowledged write %s: version %d, %v; want %d", when, rk, r.Version, err, v)
			}
		}
	}
	zeroTail := func(fs vfs.FS) bool {
		names, _ := fs.List("db")
		for _, n := range names {
			if strings.HasSuffix(n, ".log") {
				if st, err := fs.Stat(fs.PathJoin("db", n)); err == nil && st.Size() > 0 && st.Size()%walFillChunk == 0 {
					return true
				}
			}
		}
		return false
	}

	e, err := Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	write(e, 1, 5000) // about 5 MB: the memtable then logs to a WAL file of several chunks
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = e.Close()
	if !zeroTail(crashed) {
		t.Fatal("no WAL file ends in a whole chunk: the test no longer exercises the zeros")
	}
	e2, err := Open("db", Options{FS: crashed})
	if err != nil {
		t.Fatalf("open after the first crash: %v", err)
	}
	check(e2, "after the first crash")
	write(e2, 2, 300)
	crashed2 := crashed.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = e2.Close()
	e3 := openTest(t, "db", Options{FS: crashed2})
	check(e3, "after the second crash")
}

func TestWALFileLimitsPreallocation(t *testing.T) {
	var got [2]int64
	f := &walFile{File: preallocRecorder{&got}}
	if err := f.Preallocate(0, 17<<20); err != nil {
		t.Fatal(err)
	}
	if got != [2]int64{0, walPreallocateMax} {
		t.Errorf("Preallocate(0, 17 MiB) reached the file as %v", got)
	}
	_ = f.Preallocate(4096, 512)
	if got != [2]int64{4096, 512} {
		t.Errorf("Preallocate(4096, 512) reached the file as %v", got)
	}
}

type preallocRecorder struct{ got *[2]int64 }

func (p preallocRecorder) Preallocate(off, n int64) error { *p.got = [2]int64{off, n}; return nil }
func (preallocRecorder) Close() error                     { return nil }
func (preallocRecorder) Read([]byte) (int, error)         { return 0, nil }
func (preallocRecorder) ReadAt([]byte, int64) (int, error) {
	return 0, nil
}
func (preallocRecorder) Write(b []byte) (int, error)            { return len(b), nil }
func (preallocRecorder) WriteAt(b []byte, _ int64) (int, error) { return len(b), nil }
func (preallocRecorder) Stat() (vfs.FileInfo, error)            { return nil, nil }
func (preallocRecorder) Sync() error                            { return nil }
func (preallocRecorder) SyncTo(int64) (bool, error)             { return false, nil }
func (preallocRecorder) SyncData() error                        { return nil }
func (preallocRecorder) Prefetch(int64, int64) error            { return nil }
func (preallocRecorder) Fd() uintptr                            { return vfs.InvalidFd }
