//go:build linux

package pebble

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestBallastIsAllocated checks that the ballast's blocks are allocated, not a sparse file
// whose removal would free nothing.
func TestBallastIsAllocated(t *testing.T) {
	g, _, _ := testGuard(t, 100*mib)
	fi, err := os.Stat(g.ballastPath)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Blocks*512 < 8*mib {
		t.Errorf("ballast has %d bytes allocated, want 8 MiB", st.Blocks*512)
	}
}

// fatalRecorder is a pebble Logger whose Fatalf panics (Pebble's own exits the process),
// so that a test reaching Pebble's fatal path fails at once with its message.
type fatalRecorder struct {
	fatal atomic.Value
}

func (*fatalRecorder) Infof(string, ...any)  {}
func (*fatalRecorder) Errorf(string, ...any) {}
func (l *fatalRecorder) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.fatal.Store(msg)
	panic("pebble reached its fatal path: " + msg)
}

// TestEngineSurvivesENOSPC lets Pebble itself meet a full volume: a tmpfs, with the free
// space the guard reads overstated so that it admits every write. The ballast is released,
// the write that met ENOSPC is retried and completes, and later writes are refused; Pebble
// never reaches its fatal path, and nothing acknowledged is lost. Needs root (mount).
func TestEngineSurvivesENOSPC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("mount of a tmpfs not permitted: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	var lie atomic.Bool // overstate the free space
	statfs := func() (uint64, error) {
		if lie.Load() {
			return 1 << 40, nil
		}
		u, err := vfs.Default.GetDiskUsage(mnt)
		return u.AvailBytes, err
	}
	rec := &logRecorder{}
	logger := &fatalRecorder{}
	dir := filepath.Join(mnt, "data")
	e, err := Open(dir, Options{DiskReserve: 16 * mib, Log: slog.New(rec), Logger: logger, statfs: statfs})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }() // the engine open at the end, before the unmount
	ctx := context.Background()
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	pad := make([]byte, 4096)
	acked := map[string]bool{}
	next := 0
	// fill inserts, with the guard told the volume is empty, until a write is refused.
	fill := func() {
		t.Helper()
		lie.Store(true)
		defer lie.Store(false)
		for n := 0; ; n++ {
			rk := fmt.Sprintf("r%06d", next)
			next++
			_, err := e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: rk,
				Props: []entity.Property{{Name: "B", Value: entity.BinaryValue(pad)}}}})
			switch {
			case err == nil:
				acked[rk] = true
			case errors.Is(err, storage.ErrNoSpace):
				if n == 0 {
					t.Fatal("the first write was refused")
				}
				return
			default:
				t.Fatalf("insert %s: %v", rk, err)
			}
			if n > 100000 {
				t.Fatal("writes never refused")
			}
		}
	}
	fill()
	if f := logger.fatal.Load(); f != nil {
		t.Fatalf("pebble reached its fatal path: %v", f)
	}
	if _, err := os.Stat(filepath.Join(dir, BallastName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ballast not released: %v", err)
	}
	t.Logf("%d inserts acknowledged before the volume filled; log: %q", len(acked), rec.lines())
	count := func(what string) {
		t.Helper()
		res, err := e.Scan(ctx, "a", "T", storage.ScanRequest{Limit: len(acked) + 10})
		if err != nil {
			t.Fatalf("scan %s: %v", what, err)
		}
		if len(res.Records) != len(acked) {
			t.Errorf("scan %s found %d entities, %d acknowledged", what, len(res.Records), len(acked))
		}
	}
	count("on the full volume")

	// The volume grows: writes resume by themselves, the ballast is back, and a reopen
	// finds everything.
	if out, err := exec.Command("mount", "-o", "remount,size=96m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	lie.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "after",
			Props: []entity.Property{{Name: "B", Value: entity.BinaryValue(pad)}}}})
		if err == nil {
			acked["after"] = true
			break
		}
		if !errors.Is(err, storage.ErrNoSpace) || time.Now().After(deadline) {
			t.Fatalf("insert after the volume grew: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, BallastName)); err != nil {
		t.Errorf("ballast not put back: %v", err)
	}
	count("after recovery")
	if lines := rec.lines(); len(lines) != 2 {
		t.Errorf("log = %q, want the full line and the recovery line", lines)
	}

	// Full again; closed while full; a start on the full volume is refused at once, and
	// one after it grew finds everything.
	fill()
	if err := e.Close(); err != nil {
		t.Fatalf("Close on the full volume: %v", err)
	}
	began := time.Now()
	_, err = Open(dir, Options{DiskReserve: 16 * mib, Log: slog.New(rec), Logger: logger})
	if !errors.Is(err, storage.ErrNoSpace) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Open on the full volume: %v, want ErrNoSpace naming the directory", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Open on the full volume took %v to fail", took)
	}
	if out, err := exec.Command("mount", "-o", "remount,size=160m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	if e, err = Open(dir, Options{DiskReserve: 16 * mib, Log: slog.New(rec), Logger: logger}); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	count("after reopening")
	if f := logger.fatal.Load(); f != nil {
		t.Fatalf("pebble reached its fatal path: %v", f)
	}
}
