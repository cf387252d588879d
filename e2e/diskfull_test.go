//go:build linux

package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// A full disk on the pebble engine (issue 10, item E). Each test mounts a small tmpfs as
// the data directory's volume, so it needs root and mount(8); it skips otherwise. The
// server runs with --disk-reserve 32MiB: a ballast of 8 MiB, writes refused while less
// than 24 MiB is free, accepted again from 28 MiB. Its memtables are 8 MiB
// (--memtable-size), so that the reserve is twice what they hold, as the defaults keep it:
// with larger ones a flush on the full volume would not fit in the reserve.

const diskReserveArg = "32MiB"

// diskArgs are the server flags of the full-disk tests.
var diskArgs = []string{"--disk-reserve", diskReserveArg, "--memtable-size", "8MiB"}

// mountTmpfs mounts a tmpfs of the given size (mount(8) syntax, e.g. "96m") on a fresh
// directory and unmounts it when the test ends, after the servers started later stop.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if strings.Contains(os.Getenv("CERULEAN_TEST_ENGINE_ARGS"), "postgres") {
		t.Skip("a full disk is tested on the pebble engine (the pass without CERULEAN_TEST_ENGINE_ARGS)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs as a small volume")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount of a tmpfs not permitted here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
			if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
				t.Errorf("umount -l %s: %v: %s", dir, err, out)
			}
		}
	})
	return dir
}

// withDataDir runs the server on dir instead of a fresh temporary directory.
func withDataDir(dir string) serverOption {
	return func(c *serverConfig) { c.dataDir = dir }
}

// freeBytes is the free space of the volume holding dir.
func freeBytes(t *testing.T, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return st.Bavail * uint64(st.Frsize)
}

// writeFiller writes a file of n random bytes (n < 0: until the volume is full) and
// returns how many it wrote.
func writeFiller(t *testing.T, path string, n int64) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	rand.Read(buf)
	var written int64
	for n < 0 || written < n {
		chunk := buf
		if n >= 0 {
			chunk = buf[:min(int64(len(buf)), n-written)]
		}
		m, err := f.Write(chunk)
		written += int64(m)
		if err != nil {
			if n < 0 && errors.Is(err, syscall.ENOSPC) {
				if len(chunk) > 4096 {
					buf = buf[:4096] // fill the last pages too
					continue
				}
				return written
			}
			t.Fatalf("write %s: %v", path, err)
		}
	}
	return written
}

// diskEntityJSON is durableEntity(rk) with ~2 KiB of incompressible data added, as the
// SDK encodes it.
func diskEntityJSON(t *testing.T, pk, rk string) []byte {
	props := withoutKeys(durableEntity(rk))
	pad := make([]byte, 2048)
	rand.Read(pad)
	props["Pad"] = aztables.EDMBinary(pad)
	return marshal(t, aztables.EDMEntity{Entity: aztables.Entity{PartitionKey: pk, RowKey: rk}, Properties: props})
}

// filler inserts entities from several workers and keeps the outcome of each.
type diskFiller struct {
	c      *aztables.Client
	prefix string

	mu       sync.Mutex
	acked    map[string]bool
	next     atomic.Int64
	refused  atomic.Int64 // 503 ServerBusy answers
	firstErr *azcore.ResponseError
}

func newDiskFiller(c *aztables.Client, prefix string) *diskFiller {
	return &diskFiller{c: c, prefix: prefix, acked: map[string]bool{}}
}

// insertOne inserts a fresh entity; it reports whether it was acknowledged and fails the
// test on any answer other than success or 503 ServerBusy.
func (f *diskFiller) insertOne(t *testing.T) bool {
	i := f.next.Add(1)
	rk := fmt.Sprintf("%02x%s%08d", i%256, f.prefix, i)
	cx, cancel := ctxWithTimeout(30 * time.Second)
	defer cancel()
	_, err := f.c.AddEntity(cx, diskEntityJSON(t, "p"+rk[:2], rk), nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		f.acked[rk] = true
		return true
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusServiceUnavailable && re.ErrorCode == "ServerBusy" {
		f.refused.Add(1)
		if f.firstErr == nil {
			f.firstErr = re
		}
		return false
	}
	t.Errorf("insert %s: %v (want success or 503 ServerBusy)", rk, err)
	return false
}

// run inserts from workers until stop returns true; each worker pauses a little after a
// refusal, as a retrying client would.
func (f *diskFiller) run(t *testing.T, workers int, stop func() bool) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for !stop() && !t.Failed() {
				if !f.insertOne(t) {
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
}

// verify reads every acknowledged entity back, by a full scan and by point reads of a
// sample, and checks each is intact.
func (f *diskFiller) verify(t *testing.T, c *aztables.Client, what string) {
	t.Helper()
	found := map[string]bool{}
	for _, b := range listAll(t, c, nil) {
		e := decodeEDM(t, b)
		found[e.RowKey] = true
		if !strings.Contains(e.RowKey, f.prefix) {
			continue
		}
		if _, ok := e.Properties["Pad"].(aztables.EDMBinary); !ok {
			t.Errorf("%s: entity %s lost its Pad property", what, e.RowKey)
		}
		delete(e.Properties, "Pad")
		if msg := checkDurableEntity(e); msg != "" {
			t.Errorf("%s: entity %s corrupted: %s", what, e.RowKey, msg)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	missing := 0
	for rk := range f.acked {
		if !found[rk] {
			if missing < 10 {
				t.Errorf("%s: acknowledged insert %s is missing", what, rk)
			}
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%s: %d of %d acknowledged inserts are missing", what, missing, len(f.acked))
	}
}

// checkDiskFullError asserts a refused write's answer: 503 ServerBusy, Retry-After, and a
// message that says the disk is full.
func checkDiskFullError(t *testing.T, re *azcore.ResponseError) {
	t.Helper()
	if re == nil {
		t.Fatal("no write was refused")
	}
	if re.StatusCode != http.StatusServiceUnavailable || re.ErrorCode != "ServerBusy" {
		t.Errorf("refused write: %d %s, want 503 ServerBusy", re.StatusCode, re.ErrorCode)
	}
	if ra := re.RawResponse.Header.Get("Retry-After"); ra == "" {
		t.Errorf("refused write: no Retry-After header")
	}
	body, err := runtime.Payload(re.RawResponse)
	if err != nil {
		t.Fatalf("refused write: body: %v", err)
	}
	checkErrorBody(t, body, "ServerBusy")
	if !strings.Contains(string(body), "disk is full") {
		t.Errorf("refused write: message does not say the disk is full: %s", body)
	}
}

// logLinesSince counts the server's log lines at info level or above after mark (an
// offset in its output), and returns them.
func logLinesSince(s *server, mark int) []string {
	s.logs.mu.Lock()
	data := string(s.logs.buf.Bytes()[mark:])
	s.logs.mu.Unlock()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "level=") && !strings.Contains(l, "level=DEBUG") {
			out = append(out, l)
		}
	}
	return out
}

func logMark(s *server) int {
	s.logs.mu.Lock()
	defer s.logs.mu.Unlock()
	return s.logs.buf.Len()
}

// waitWritable inserts until one insert is acknowledged, for at most d; it returns how long
// that took.
func waitWritable(t *testing.T, f *diskFiller, d time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	for !f.insertOne(t) {
		if t.Failed() {
			t.FailNow()
		}
		if time.Since(began) > d {
			t.Fatalf("writes still refused %v after space was freed", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(began)
}

func TestDiskFull(t *testing.T) {
	began := time.Now()
	mnt := mountTmpfs(t, "96m")
	filler := filepath.Join(mnt, "filler")
	writeFiller(t, filler, 24<<20)
	data := filepath.Join(mnt, "data")
	srv := startServer(t, withDataDir(data), withArgs(diskArgs...))
	svc := newServiceClient(t, srv)
	c, table := newTable(t, svc)
	f := newDiskFiller(c, "full")

	// Fill the volume until writes are refused, then keep writing: every write is refused.
	mark := logMark(srv)
	fillBegan := time.Now()
	f.run(t, 8, func() bool { return f.refused.Load() >= 400 || time.Since(fillBegan) > 3*time.Minute })
	t.Logf("filled in %v: %d inserts acknowledged, %d refused; %s free", time.Since(fillBegan).Round(time.Millisecond),
		len(f.acked), f.refused.Load(), formatMiB(freeBytes(t, mnt)))
	if f.refused.Load() < 400 {
		t.Fatalf("writes were not refused after %v (%d acknowledged)", time.Since(fillBegan), len(f.acked))
	}
	if len(f.acked) < 1000 {
		t.Errorf("only %d inserts acknowledged before the disk was full", len(f.acked))
	}
	checkDiskFullError(t, f.firstErr)
	if !srv.running() {
		t.Fatal("the server exited on the full disk")
	}

	// Other writes are refused too, and nothing of them is applied.
	_, err := svc.CreateTable(ctx(t), tableName(t), nil)
	requireRespErr(t, err, http.StatusServiceUnavailable, "ServerBusy")
	batch := []aztables.TransactionAction{}
	for i := range 3 {
		e := diskEntityJSON(t, "batch", fmt.Sprintf("batch%d", i))
		batch = append(batch, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: e})
	}
	if _, err := c.SubmitTransaction(ctx(t), batch, nil); err == nil {
		t.Errorf("a batch was accepted on the full disk")
	} else if !strings.Contains(err.Error(), "ServerBusy") {
		t.Errorf("batch on the full disk: %v, want ServerBusy", err)
	}

	// Reads are served: point reads, a filtered query, the table list.
	f.mu.Lock()
	var sample []string
	for rk := range f.acked {
		if len(sample) == 20 {
			break
		}
		sample = append(sample, rk)
	}
	f.mu.Unlock()
	for _, rk := range sample {
		e, _ := getEDM(t, c, "p"+rk[:2], rk)
		delete(e.Properties, "Pad")
		if msg := checkDurableEntity(e); msg != "" {
			t.Errorf("read on the full disk: %s: %s", rk, msg)
		}
	}
	filter := "PartitionKey eq 'p" + sample[0][:2] + "'"
	if got := listAll(t, c, &aztables.ListEntitiesOptions{Filter: &filter}); len(got) == 0 {
		t.Errorf("query %s on the full disk found nothing", filter)
	}
	if len(listTableNames(t, svc)) == 0 {
		t.Errorf("no table listed on the full disk")
	}

	// The log says so once, not once per refused write.
	lines := logLinesSince(srv, mark)
	t.Logf("log while full (%d lines):\n%s", len(lines), strings.Join(lines, "\n"))
	if len(lines) == 0 || !strings.Contains(strings.Join(lines, "\n"), "disk full") {
		t.Errorf("the log does not say the disk is full")
	}
	if len(lines) > 6 {
		t.Errorf("%d log lines while full for %d refused writes, want at most 6", len(lines), f.refused.Load())
	}

	// Free space: writes are accepted again without a restart, and nothing was lost.
	mark = logMark(srv)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	took := waitWritable(t, f, 30*time.Second)
	t.Logf("writes accepted again %v after the filler was removed", took.Round(time.Millisecond))
	if lines := logLinesSince(srv, mark); !strings.Contains(strings.Join(lines, "\n"), "disk space available again") {
		t.Errorf("the log does not say the server recovered: %q", lines)
	}
	for range 50 {
		if !f.insertOne(t) {
			t.Fatalf("insert refused after recovery")
		}
	}
	f.verify(t, c, "after recovery")
	for _, a := range batch {
		e := decodeEDM(t, a.Entity)
		if _, err := c.GetEntity(ctx(t), e.PartitionKey, e.RowKey, nil); statusOf(err) != http.StatusNotFound {
			t.Errorf("entity %s of the refused batch: %v, want 404", e.RowKey, err)
		}
	}

	// A restart finds everything acknowledged.
	if exitErr, inTime := srv.terminate(30 * time.Second); !inTime || exitErr != nil {
		t.Fatalf("stop: %v (in time: %v)", exitErr, inTime)
	}
	srv.restart(t)
	c = newServiceClient(t, srv).NewClient(table)
	f.c = c
	f.verify(t, c, "after a restart")

	// Start-up on a full disk fails at once, saying where and how much space is needed.
	if exitErr, inTime := srv.terminate(30 * time.Second); !inTime || exitErr != nil {
		t.Fatalf("stop: %v (in time: %v)", exitErr, inTime)
	}
	writeFiller(t, filler, -1)
	out, took, exitErr := runServeOnce(t, data)
	t.Logf("start-up on a full disk: exit %v after %v:\n%s", exitErr, took.Round(time.Millisecond), out)
	if exitErr == nil {
		t.Errorf("start-up on a full disk succeeded")
	}
	if took > 10*time.Second {
		t.Errorf("start-up on a full disk took %v to fail, want < 10 s", took)
	}
	if !strings.Contains(out, data) || !strings.Contains(out, "free") || !strings.Contains(out, "needs") {
		t.Errorf("start-up failure does not name the data directory and the space needed:\n%s", out)
	}
	if n := strings.Count(out, "\n"); n > 10 {
		t.Errorf("start-up failure wrote %d lines", n)
	}

	// And with space back it starts, with every acknowledged write.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	srv.restart(t)
	f.verify(t, newServiceClient(t, srv).NewClient(table), "after start-up with space back")
	t.Logf("TestDiskFull took %v", time.Since(began).Round(time.Millisecond))
}

// TestDiskFullFilledByAnother fills the volume from outside the server while it takes
// writes, as another process writing to the same disk would: the server must stay up,
// refuse writes, lose nothing acknowledged, and recover once the other file is removed.
func TestDiskFullFilledByAnother(t *testing.T) {
	mnt := mountTmpfs(t, "96m")
	data := filepath.Join(mnt, "data")
	srv := startServer(t, withDataDir(data), withArgs(diskArgs...))
	svc := newServiceClient(t, srv)
	c, table := newTable(t, svc)
	f := newDiskFiller(c, "other")

	mark := logMark(srv)
	var filled atomic.Bool
	var fillerDone sync.WaitGroup
	fillerDone.Go(func() {
		time.Sleep(300 * time.Millisecond) // let writes start
		n := writeFiller(t, filepath.Join(mnt, "other"), -1)
		t.Logf("the other file took %s; %s free", formatMiB(uint64(n)), formatMiB(freeBytes(t, mnt)))
		filled.Store(true)
	})
	f.run(t, 8, func() bool { return filled.Load() && f.refused.Load() >= 200 })
	fillerDone.Wait()
	if !srv.running() {
		t.Fatal("the server exited when another file filled its disk")
	}
	checkDiskFullError(t, f.firstErr)
	lines := logLinesSince(srv, mark)
	t.Logf("log while full (%d lines, %d writes refused):\n%s", len(lines), f.refused.Load(), strings.Join(lines, "\n"))
	if len(lines) > 6 {
		t.Errorf("%d log lines while full, want at most 6", len(lines))
	}
	f.verify(t, c, "while full")

	if err := os.Remove(filepath.Join(mnt, "other")); err != nil {
		t.Fatal(err)
	}
	waitWritable(t, f, 30*time.Second)
	f.verify(t, c, "after recovery")
	if exitErr, inTime := srv.terminate(30 * time.Second); !inTime || exitErr != nil {
		t.Fatalf("stop: %v (in time: %v)", exitErr, inTime)
	}
	srv.restart(t)
	f.verify(t, newServiceClient(t, srv).NewClient(table), "after a restart")
}

// runServeOnce runs `cerulean serve` on dir, expecting it to exit by itself, and returns
// its output, run time and exit error (it is killed after 30 s).
func runServeOnce(t *testing.T, dir string) (string, time.Duration, error) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cx, binaryPath, append([]string{"serve", "--addr", fmt.Sprintf("127.0.0.1:%d", port),
		"--data", dir}, diskArgs...)...)
	cmd.Env = filterEnv(os.Environ())
	began := time.Now()
	out, err := cmd.CombinedOutput()
	return string(out), time.Since(began), err
}

func formatMiB(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// TestDiskReserveMinimum (issue 42, item 26): --disk-reserve 0 used to turn the guard off,
// and a full disk then failed writes with 500 InternalError, logged a "fatal commit
// error" and a line per failed flush and write (hundreds a second), or held writes
// unanswered until space returned. There is no safe "off", so a reserve under 4 MiB is
// refused at start (exit 2, saying why); the smallest reserve accepted answers a full disk
// as the default does: 503 ServerBusy, a bounded log, writes accepted again once space is
// freed, nothing acknowledged lost.
func TestDiskReserveMinimum(t *testing.T) {
	for _, v := range []string{"0", "1MiB"} {
		status, _, errOut := runTool(t, 20*time.Second, nil, "serve", "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--disk-reserve", v)
		if status != 2 || !strings.Contains(errOut, "--disk-reserve") || !strings.Contains(errOut, "want at least 4MiB") {
			t.Errorf("serve --disk-reserve %s: status %d, stderr %q; want 2 and the minimum named", v, status, errOut)
		}
	}

	mnt := mountTmpfs(t, "96m")
	filler := filepath.Join(mnt, "filler")
	writeFiller(t, filler, 40<<20)
	data := filepath.Join(mnt, "data")
	srv := startServer(t, withDataDir(data), withArgs("--disk-reserve", "4MiB", "--memtable-size", "8MiB"))
	c, _ := newTable(t, newServiceClient(t, srv))
	f := newDiskFiller(c, "min")
	mark := logMark(srv)
	began := time.Now()
	f.run(t, 8, func() bool { return f.refused.Load() >= 300 || time.Since(began) > 2*time.Minute })
	lines := logLinesSince(srv, mark)
	t.Logf("%d acknowledged, %d refused in %v; log (%d lines):\n%s", len(f.acked), f.refused.Load(), time.Since(began).Round(time.Millisecond),
		len(lines), strings.Join(lines, "\n"))
	if f.refused.Load() < 300 {
		t.Fatalf("writes were not refused on the full disk")
	}
	checkDiskFullError(t, f.firstErr)
	if !srv.running() {
		t.Fatal("the server exited on the full disk")
	}
	// Each refused write has a request line at WARN; the engine's own lines are few.
	engine := 0
	for _, l := range lines {
		if !strings.Contains(l, `msg="request failed"`) {
			engine++
		}
	}
	if engine > 6 {
		t.Errorf("%d engine log lines while full, want at most 6", engine)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitWritable(t, f, 30*time.Second)
	f.verify(t, c, "after recovery")
}
