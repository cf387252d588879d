package pebble

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// logRecorder is a slog handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// lines returns "LEVEL message" for each record.
func (r *logRecorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		out = append(out, rec.Level.String()+" "+rec.Message)
	}
	return out
}

// fakeVolume is a volume whose free space a test sets, with a clock it moves.
type fakeVolume struct {
	avail atomic.Uint64
	reads atomic.Int64
	fail  atomic.Bool
	mu    sync.Mutex
	now   time.Time
}

func newFakeVolume(avail uint64) *fakeVolume {
	v := &fakeVolume{now: time.Unix(1_000_000, 0)}
	v.avail.Store(avail)
	return v
}

func (v *fakeVolume) statfs() (uint64, error) {
	v.reads.Add(1)
	if v.fail.Load() {
		return 0, errors.New("statfs failed")
	}
	return v.avail.Load(), nil
}

func (v *fakeVolume) clock() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

func (v *fakeVolume) advance(d time.Duration) {
	v.mu.Lock()
	v.now = v.now.Add(d)
	v.mu.Unlock()
}

const mib = 1 << 20

// testGuard builds a guard with a 32 MiB reserve (ballast 8, floor 24, resume 28 MiB) on a
// fake volume, in a temporary directory that holds the ballast.
func testGuard(t *testing.T, avail uint64) (*spaceGuard, *fakeVolume, *logRecorder) {
	t.Helper()
	v := newFakeVolume(avail)
	rec := &logRecorder{}
	g, err := newSpaceGuard(t.TempDir(), newSpaceConfig(32*mib), v.statfs, slog.New(rec), func() (uint64, error) {
		t.Fatal("replayed() called without WAL files")
		return 0, nil
	})
	if err != nil {
		t.Fatalf("newSpaceGuard: %v", err)
	}
	g.now = v.clock
	return g, v, rec
}

func TestSpaceConfig(t *testing.T) {
	c := newSpaceConfig(128 * mib)
	if c.ballast != 32*mib || c.floor != 96*mib || c.resume != 112*mib {
		t.Errorf("newSpaceConfig(128 MiB) = %+v, want ballast 32, floor 96, resume 112 MiB", c)
	}
	// The default reserve is twice what the memtables hold.
	var o Options
	o.MemTableSize, o.MemTableStopWritesThreshold = DefaultMemTableSize, DefaultMemTableStopWritesThreshold
	if got := 2 * o.MemTableSize * uint64(o.MemTableStopWritesThreshold); got != 128*mib {
		t.Errorf("default reserve %d, want 128 MiB", got)
	}
}

func TestSpaceGuardAdmitsAboveTheFloor(t *testing.T) {
	g, v, rec := testGuard(t, 100*mib)
	// Far from the floor, the guard reads the volume once per refresh interval, not per write.
	v.reads.Store(0)
	for range 1000 {
		if err := g.admit(1024); err != nil {
			t.Fatalf("admit: %v", err)
		}
		g.done(1024)
	}
	if n := v.reads.Load(); n != 1 {
		t.Errorf("%d free-space readings for 1000 small writes within one interval, want 1", n)
	}
	v.advance(spaceRefreshEvery)
	if err := g.admit(1024); err != nil {
		t.Fatal(err)
	}
	g.done(1024)
	if n := v.reads.Load(); n != 2 {
		t.Errorf("%d readings after the interval passed, want 2", n)
	}
	// Bytes admitted since the last reading count against the floor: with 100 MiB free and
	// a 24 MiB floor, 76 MiB can be admitted before the next reading, not more.
	v.advance(spaceRefreshEvery)
	total := uint64(0)
	for {
		if err := g.admit(mib); err != nil {
			break
		}
		total += mib
		if total > 100*mib {
			t.Fatal("admitted more than the volume holds")
		}
	}
	if total != 76*mib {
		t.Errorf("admitted %d MiB without the volume changing, want 76", total/mib)
	}
	if got := rec.lines(); len(got) != 1 || !strings.HasPrefix(got[0], "WARN disk full") {
		t.Errorf("log = %q, want one WARN line", got)
	}
}

func TestSpaceGuardRefusesBelowTheFloorAndRecovers(t *testing.T) {
	g, v, rec := testGuard(t, 100*mib)
	if err := g.admit(mib); err != nil {
		t.Fatal(err)
	}
	g.done(mib)

	// The volume fills (another writer): the next reading refuses the write.
	v.avail.Store(24*mib - 1)
	v.advance(spaceRefreshEvery)
	err := g.admit(100)
	if !errors.Is(err, storage.ErrNoSpace) {
		t.Fatalf("admit on a full volume: %v, want ErrNoSpace", err)
	}
	// Every later write is refused at once, without reading the volume, and without a
	// line in the log per write.
	reads := v.reads.Load()
	for range 10000 {
		if err := g.admit(100); !errors.Is(err, storage.ErrNoSpace) {
			t.Fatalf("admit while full: %v", err)
		}
	}
	if v.reads.Load() != reads {
		t.Errorf("refusals read the volume")
	}
	// Space above the floor but below the resume point is not enough (hysteresis).
	v.avail.Store(28*mib - 1)
	v.advance(time.Second)
	g.poll()
	if !g.isFull() {
		t.Fatalf("recovered %d bytes below the resume point", 1)
	}
	// An hour full: reminders come every spaceReportEvery, not more often.
	for range 3600 * 4 {
		v.advance(spacePollEvery)
		g.poll()
	}
	v.avail.Store(28 * mib)
	g.poll()
	if g.isFull() {
		t.Fatal("still full with the resume point free")
	}
	if err := g.admit(100); err != nil {
		t.Fatalf("admit after recovery: %v", err)
	}
	lines := rec.lines()
	want := []string{"WARN disk full"}
	for range 6 {
		want = append(want, "WARN disk still full")
	}
	want = append(want, "INFO disk space available again")
	if len(lines) != len(want) {
		t.Fatalf("log:\n%s\nwant %d lines (%q)", strings.Join(lines, "\n"), len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("log line %d = %q, want %q…", i, lines[i], want[i])
		}
	}
	// The recovery line counts what was refused.
	rec.mu.Lock()
	last := rec.recs[len(rec.recs)-1]
	rec.mu.Unlock()
	last.Attrs(func(a slog.Attr) bool {
		if a.Key == "refused_writes" && a.Value.Uint64() != 10001 {
			t.Errorf("refused_writes = %v, want 10001", a.Value)
		}
		return true
	})
}

func TestSpaceGuardInflightWritesStayCounted(t *testing.T) {
	g, v, _ := testGuard(t, 40*mib)
	// 10 MiB admitted and not yet committed: a new reading (which does not show them yet)
	// must not hand that room out again.
	if err := g.admit(10 * mib); err != nil {
		t.Fatal(err)
	}
	v.advance(spaceRefreshEvery)
	if err := g.admit(6 * mib); err != nil {
		t.Fatal(err)
	}
	v.advance(spaceRefreshEvery)
	if err := g.admit(mib); !errors.Is(err, storage.ErrNoSpace) {
		t.Fatalf("admitted beyond the floor while 16 MiB were in flight: %v", err)
	}
}

func TestSpaceGuardStatfsErrorDoesNotRefuse(t *testing.T) {
	g, v, rec := testGuard(t, 100*mib)
	v.fail.Store(true)
	for range 5 {
		v.advance(spaceRefreshEvery)
		if err := g.admit(mib); err != nil {
			t.Fatalf("admit when statfs fails: %v", err)
		}
		g.done(mib)
	}
	if got := rec.lines(); len(got) != 1 || !strings.HasPrefix(got[0], "ERROR cannot read") {
		t.Errorf("log = %q, want one ERROR line", got)
	}
}

func TestSpaceGuardBallast(t *testing.T) {
	g, v, rec := testGuard(t, 100*mib)
	fi, err := os.Stat(g.ballastPath)
	if err != nil || fi.Size() != 8*mib {
		t.Fatalf("ballast: %v, %v; want a file of 8 MiB", fi, err)
	}
	g.start()
	defer g.close()

	// Pebble meets ENOSPC: the ballast goes at once and writes are refused.
	g.onDiskFull()
	if _, err := os.Stat(g.ballastPath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ballast still there after onDiskFull: %v", err)
	}
	if err := g.admit(1); !errors.Is(err, storage.ErrNoSpace) {
		t.Fatalf("admit after onDiskFull: %v", err)
	}
	g.onDiskFull() // a second ENOSPC changes nothing and logs nothing
	// Resuming needs room for the ballast too.
	v.avail.Store(28*mib + 8*mib - 1)
	g.poll()
	if !g.isFull() {
		t.Fatal("recovered without room for the ballast")
	}
	v.avail.Store(28*mib + 8*mib)
	g.poll()
	if g.isFull() {
		t.Fatal("not recovered with room for the ballast")
	}
	if fi, err := os.Stat(g.ballastPath); err != nil || fi.Size() != 8*mib {
		t.Errorf("ballast not put back: %v, %v", fi, err)
	}
	lines := rec.lines()
	if len(lines) != 2 || !strings.Contains(lines[0], "disk full") || !strings.Contains(lines[1], "available again") {
		t.Errorf("log = %q, want the full line and the recovery line", lines)
	}
}

func TestSpaceGuardStartup(t *testing.T) {
	noReplay := func() (uint64, error) { t.Fatal("replayed() called"); return 0, nil }
	open := func(dir string, avail uint64, replayed func() (uint64, error)) error {
		v := newFakeVolume(avail)
		_, err := newSpaceGuard(dir, newSpaceConfig(32*mib), v.statfs, slog.New(&logRecorder{}), replayed)
		return err
	}
	// A fresh directory needs the resume point plus the ballast it creates: 36 MiB.
	dir := t.TempDir()
	if err := open(dir, 36*mib-1, noReplay); !errors.Is(err, storage.ErrNoSpace) {
		t.Fatalf("start with 1 byte too little: %v, want ErrNoSpace", err)
	}
	err := open(dir, 35*mib, noReplay)
	if !errors.Is(err, storage.ErrNoSpace) {
		t.Fatalf("start with too little space: %v, want ErrNoSpace", err)
	}
	for _, want := range []string{dir, "has 35.0 MiB free", "needs 36.0 MiB free to start", "24.0 MiB kept free by its disk reserve of 32.0 MiB",
		"4.0 MiB above that to accept writes", "8.0 MiB for the reserve's ballast file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, BallastName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused start left a ballast: %v", err)
	}
	if err := open(dir, 36*mib, noReplay); err != nil {
		t.Fatalf("start with exactly enough: %v", err)
	}
	// With the ballast in place, 28 MiB is enough.
	if err := open(dir, 28*mib, noReplay); err != nil {
		t.Fatalf("restart with the ballast in place: %v", err)
	}
	// WAL files: their size counts, unless it does not fit, and then the replay is measured.
	if err := os.WriteFile(filepath.Join(dir, "000007.log"), make([]byte, 10*mib), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := open(dir, 38*mib, noReplay); err != nil {
		t.Fatalf("start with room for the WAL files: %v", err)
	}
	called := 0
	replay := func(n uint64) func() (uint64, error) {
		return func() (uint64, error) { called++; return n, nil }
	}
	if err := open(dir, 30*mib, replay(2*mib)); err != nil || called != 1 {
		t.Fatalf("start with room for the live WAL: %v (replay measured %d times)", err, called)
	}
	err = open(dir, 30*mib, replay(3*mib))
	if !errors.Is(err, storage.ErrNoSpace) || !strings.Contains(err.Error(), "3.0 MiB to replay the write-ahead log") {
		t.Fatalf("start without room for the live WAL: %v", err)
	}
	// Below the reserve itself, nothing is measured.
	called = 0
	if err := open(dir, 27*mib, replay(0)); !errors.Is(err, storage.ErrNoSpace) || called != 0 {
		t.Fatalf("start below the reserve: %v (replay measured %d times)", err, called)
	}
}

func TestSpaceGuardBackgroundBackoff(t *testing.T) {
	g, v, rec := testGuard(t, 100*mib)
	g.start()
	defer g.close()
	if g.backgroundFailed(errors.New("checksum mismatch")) {
		t.Error("a failure other than ENOSPC was taken for a full disk")
	}
	enospc := fmt.Errorf("flush: %w", &os.PathError{Op: "write", Path: "000012.sst", Err: syscall.ENOSPC})
	for i := range 20 {
		if !g.backgroundFailed(enospc) {
			t.Fatal("ENOSPC not recognised")
		}
		wait := g.bgRetryAt.Sub(v.clock())
		if want := min(backgroundRetryMin<<min(i, 8), backgroundRetryMax); wait != want {
			t.Errorf("after %d failures the pause is %v, want %v", i+1, wait, want)
		}
	}
	if !g.isFull() {
		t.Error("a flush out of space did not stop writes")
	}
	// A paused flush resumes as soon as space returns.
	paused := make(chan time.Duration)
	go func() {
		began := time.Now()
		g.pauseBackground()
		paused <- time.Since(began)
	}()
	time.Sleep(50 * time.Millisecond)
	v.avail.Store(100 * mib)
	g.poll()
	select {
	case d := <-paused:
		if d > 5*time.Second {
			t.Errorf("pause lasted %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the paused flush was not woken by the recovery")
	}
	g.pauseBackground() // no failure since: no pause
	if got := rec.lines(); len(got) != 2 {
		t.Errorf("log = %q, want 2 lines for 20 failed flushes", got)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 36 * mib: "36.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestEngineRefusesWritesOnAFullDisk drives the engine with a fake volume: writes are
// refused whole, reads go on, and writes resume by themselves once space returns.
func TestEngineRefusesWritesOnAFullDisk(t *testing.T) {
	v := newFakeVolume(1 << 40)
	rec := &logRecorder{}
	dir := t.TempDir()
	e := openTest(t, dir, Options{DiskReserve: 32 * mib, Log: slog.New(rec), statfs: v.statfs})
	ctx := context.Background()
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	props := []entity.Property{{Name: "N", Value: entity.Int64Value(1)}}
	ins := func(pk, rk string) error {
		_, err := e.Apply(ctx, "acct", "T", pk, []storage.Mutation{{Op: storage.Insert, RowKey: rk, Props: props}})
		return err
	}
	if err := ins("p", "before"); err != nil {
		t.Fatal(err)
	}
	// The volume fills up; the next reading of it refuses writes.
	v.avail.Store(10 * mib)
	time.Sleep(spaceRefreshEvery)
	batch := []storage.Mutation{
		{Op: storage.Insert, RowKey: "b1", Props: props},
		{Op: storage.Insert, RowKey: "b2", Props: props},
	}
	if _, err := e.Apply(ctx, "acct", "T", "p", batch); !errors.Is(err, storage.ErrNoSpace) {
		t.Fatalf("Apply on a full disk: %v, want ErrNoSpace", err)
	}
	for name, err := range map[string]error{
		"CreateTable":          e.CreateTable(ctx, "acct", "U", storage.TableSettings{}),
		"DeleteTable":          e.DeleteTable(ctx, "acct", "T"),
		"SetTableACL":          e.SetTableACL(ctx, "acct", "T", []byte("acl")),
		"SetServiceProperties": e.SetServiceProperties(ctx, "acct", []byte("props")),
		"Insert":               ins("p", "during"),
	} {
		if !errors.Is(err, storage.ErrNoSpace) {
			t.Errorf("%s on a full disk: %v, want ErrNoSpace", name, err)
		}
	}
	// Reads are served; nothing refused was applied.
	if _, err := e.Get(ctx, "acct", "T", "p", "before"); err != nil {
		t.Errorf("Get on a full disk: %v", err)
	}
	res, err := e.Scan(ctx, "acct", "T", storage.ScanRequest{Limit: 100})
	if err != nil || len(res.Records) != 1 {
		t.Errorf("Scan on a full disk: %d records, %v; want 1", len(res.Records), err)
	}
	if _, err := e.GetTable(ctx, "acct", "T"); err != nil {
		t.Errorf("the refused DeleteTable was applied: %v", err)
	}
	// Space returns: writes resume without a reopen.
	v.avail.Store(1 << 40)
	deadline := time.Now().Add(10 * time.Second)
	for ins("p", "after") != nil {
		if time.Now().After(deadline) {
			t.Fatal("writes still refused 10 s after space returned")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, rk := range []string{"b1", "b2", "during"} {
		if _, err := e.Get(ctx, "acct", "T", "p", rk); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("refused write of %s was applied: %v", rk, err)
		}
	}
	lines := rec.lines()
	if len(lines) != 2 {
		t.Errorf("log = %q, want the full line and the recovery line", lines)
	}
	// Closing on a full disk skips the clock mark and closes cleanly.
	v.avail.Store(0)
	time.Sleep(spaceRefreshEvery)
	if err := ins("p", "refused"); !errors.Is(err, storage.ErrNoSpace) {
		t.Fatalf("insert: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close on a full disk: %v", err)
	}
	v.avail.Store(1 << 40)
	e = openTest(t, dir, Options{DiskReserve: 32 * mib, Log: slog.New(rec), statfs: v.statfs})
	for _, rk := range []string{"before", "after"} {
		if _, err := e.Get(ctx, "acct", "T", "p", rk); err != nil {
			t.Errorf("after reopening, %s: %v", rk, err)
		}
	}
}

// TestSpaceGuardHoldsBackgroundWorkWhileExhausted: once the ballast is gone, no flush or
// compaction starts until space returns; closing fails the held one instead of letting it
// write.
func TestSpaceGuardHoldsBackgroundWorkWhileExhausted(t *testing.T) {
	g, v, _ := testGuard(t, 100*mib)
	g.start()
	if err := g.pauseBackground(); err != nil {
		t.Fatalf("pause with space: %v", err)
	}
	// Full by the floor, ballast in place: background work goes on (it has the reserve).
	v.avail.Store(10 * mib)
	v.advance(spaceRefreshEvery)
	if err := g.admit(1); !errors.Is(err, storage.ErrNoSpace) {
		t.Fatal(err)
	}
	if err := g.pauseBackground(); err != nil {
		t.Fatalf("pause while full with the ballast in place: %v", err)
	}
	// The volume is exhausted: held until space returns.
	g.onDiskFull()
	held := make(chan error, 1)
	go func() { held <- g.pauseBackground() }()
	select {
	case err := <-held:
		t.Fatalf("background work not held on an exhausted volume: %v", err)
	case <-time.After(3 * spacePollEvery):
	}
	v.avail.Store(100 * mib)
	select {
	case err := <-held:
		if err != nil {
			t.Errorf("released with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("background work still held 10 s after space returned")
	}
	// Exhausted again, then closed: the held job fails rather than writes.
	v.avail.Store(0)
	v.advance(spaceRefreshEvery)
	_ = g.admit(1)
	g.onDiskFull() // the ballast goes again
	go func() { held <- g.pauseBackground() }()
	time.Sleep(2 * spacePollEvery)
	g.close()
	select {
	case err := <-held:
		if !errors.Is(err, storage.ErrNoSpace) {
			t.Errorf("held job released by close with %v, want ErrNoSpace", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("close did not release the held job")
	}
}
