package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// With --durable-floor and --engine-floor every write workload also runs against the
// durable floor and the engine floor (and only the write workloads), each round
// error-free; the ratios are the rates' quotients, the text report names both floors and
// compares them, and the log file and the engine's directory are gone after the run.
func TestDurableFloorAgainstFake(t *testing.T) {
	forClients(t, func(t *testing.T, client string) {
		_, cs := newFake(t)
		dir := diskDir(t)
		o := quick(cs)
		o.Client, o.DurableFloor, o.EngineFloor, o.Rounds = client, dir, dir, 2
		o.Workloads = []string{WorkloadInsert, WorkloadRead, WorkloadUpsert, WorkloadUpdate}
		rs, out := runLogged(t, o)
		for _, r := range rs {
			if r.FloorPerSec <= 0 || r.Errors != 0 || strings.Contains(r.Notes, "floor") {
				t.Errorf("%s: %+v", r.Workload, r)
			}
			if !writes(r.Workload) {
				if r.DurableFloorPerSec != 0 || r.EngineFloorPerSec != 0 {
					t.Errorf("%s: a durable or engine floor for a read workload: %+v", r.Workload, r)
				}
				continue
			}
			for _, f := range []struct {
				name          string
				perSec, ratio float64
			}{{"durable", r.DurableFloorPerSec, r.DurableFloorRatio}, {"engine", r.EngineFloorPerSec, r.EngineFloorRatio}} {
				if f.perSec <= 0 {
					t.Errorf("%s: no %s floor: %+v", r.Workload, f.name, r)
				} else if d := f.ratio - r.EntitiesPerSec/f.perSec; d > 1e-9 || d < -1e-9 {
					t.Errorf("%s: %s floor ratio %v, want %v / %v", r.Workload, f.name, f.ratio, r.EntitiesPerSec, f.perSec)
				}
			}
		}
		text := out.String()
		for _, s := range []string{"server/durable floor = ", "server/engine floor = ", "engine floor/durable floor = "} {
			if n := strings.Count(text, s); n != 3 {
				t.Errorf("text report has %q %d times, want 3 (insert, upsert, update):\n%s", s, n, text)
			}
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("left in the floors' directory: %v", left)
		}
	})
}

// The directory must exist, and be on a disk: not in memory, where a sync writes nothing.
func TestDurableFloorDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, filepath.Join(t.TempDir(), "missing")} {
		if _, err := ParseFlags([]string{"--durable-floor", dir}); err == nil || !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("--durable-floor %s: %v", dir, err)
		}
	}
	if shm := "/dev/shm"; inMemory(shm) {
		if _, err := ParseFlags([]string{"--durable-floor", shm}); err == nil || !strings.Contains(err.Error(), "in memory") {
			t.Errorf("--durable-floor %s (tmpfs): %v", shm, err)
		}
	} else {
		t.Logf("no tmpfs at %s: the in-memory check not exercised", shm)
	}
	o, err := ParseFlags([]string{"--durable-floor", diskDir(t)})
	if err != nil || !o.Floor {
		t.Errorf("--durable-floor implies --floor: %+v, %v", o, err)
	}
}

// diskDir is a new directory on a disk for a durable floor: t.TempDir() unless that is in
// memory (a tmpfs /tmp), else one in the package's directory. It is removed after the test.
func diskDir(t *testing.T) string {
	t.Helper()
	if dir := t.TempDir(); !inMemory(dir) {
		return dir
	}
	dir, err := os.MkdirTemp(".", "durable-floor-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Concurrent appends each return once their record is written and synced: every record
// is in the file after the appends return, and the appends shared syncs (at most one per
// append).
func TestDurableLogAppends(t *testing.T) {
	l, err := openDurableLog(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- l.append([]byte(fmt.Sprintf("<record %d:", i)), []byte(strings.Repeat("x", i)+">"))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	data, err := os.ReadFile(l.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != l.size {
		t.Errorf("file is %d bytes, want %d", len(data), l.size)
	}
	for i := range n {
		if want := fmt.Sprintf("<record %d:%s>", i, strings.Repeat("x", i)); !bytes.Contains(data, []byte(want)) {
			t.Errorf("record %d not in the file", i)
		}
	}
	name := l.f.Name()
	l.close()
	if l.syncs < 1 || l.syncs > n {
		t.Errorf("%d syncs for %d appends", l.syncs, n)
	}
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Errorf("log file left after close: %v", err)
	}
	if err := l.append([]byte("late")); err == nil {
		t.Error("append after close succeeded")
	}
}

// The log is written round and round: a record that reaches the end of the file goes on
// at its start.
func TestDurableLogWraps(t *testing.T) {
	l, err := openDurableLog(t.TempDir(), 100)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	for _, c := range "abc" {
		if err := l.append(bytes.Repeat([]byte{byte(c)}, 40)); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(l.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("c", 20) + strings.Repeat("a", 20) + strings.Repeat("b", 40) + strings.Repeat("c", 20)
	if string(data) != want {
		t.Errorf("file %q, want %q", data, want)
	}
}
