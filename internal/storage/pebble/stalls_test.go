package pebble

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestWriteStallsCounted holds every flush back (the sstables and blob files it writes
// block) until two small memtables are full, so that Pebble stalls the writer, and checks
// the engine's stall figures: the stall counts while it lasts, and its length once it
// ends.
func TestWriteStallsCounted(t *testing.T) {
	ctx := context.Background()
	gate := &flushGate{FS: vfs.NewMem(), release: make(chan struct{})}
	defer gate.open() // a failing test must not leave Close waiting on a flush
	e := openTest(t, "db", Options{FS: gate, MemTableSize: 256 << 10, MemTableStopWritesThreshold: 2})
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	payload := entity.StringValue(strings.Repeat("x", 1000))
	done := make(chan error, 1)
	go func() {
		// 2,000 entities of 1 KB: several times what two 256 KiB memtables hold.
		for i := range 2000 {
			_, err := e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: fmt.Sprintf("%06d", i),
				Props: []entity.Property{{Name: "V", Value: payload}}}})
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var during [numStallReasons]WriteStalls
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st, err := e.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.WriteStalls[StallMemtables].Count > 0 && st.WriteStalls[StallMemtables].Duration >= 20*time.Millisecond {
			during = st.WriteStalls
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the writes ended (%v) with no stall counted: %+v", err, st.WriteStalls)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no memtable stall counted with flushes held back: %+v", st.WriteStalls)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the writes ended (%v) during the stall", err)
	default:
	}
	gate.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st, err := e.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := st.WriteStalls[StallMemtables]
	if got.Count < during[StallMemtables].Count || got.Duration < during[StallMemtables].Duration {
		t.Errorf("memtable stalls after = %+v, below during = %+v", got, during[StallMemtables])
	}
	if st.WriteStalls[StallL0].Count != 0 {
		t.Errorf("L0 stalls = %+v, want none", st.WriteStalls[StallL0])
	}
}

func TestStallReason(t *testing.T) {
	// The texts of Pebble v2.1.7's DB.maybeInduceWriteStall.
	for text, want := range map[string]StallReason{
		"memtable count limit reached": StallMemtables,
		"L0 file count limit exceeded": StallL0,
	} {
		if got := stallReason(text); got != want {
			t.Errorf("stallReason(%q) = %v, want %v", text, got, want)
		}
	}
	tr := newStallTracker()
	now := time.Unix(0, 0)
	tr.now = func() time.Time { return now }
	tr.end() // an end without a begin changes nothing
	tr.begin(pebbledb.WriteStallBeginInfo{Reason: "L0 file count limit exceeded"})
	now = now.Add(3 * time.Second)
	if s := tr.read(); s[StallL0] != (WriteStalls{Count: 1, Duration: 3 * time.Second}) {
		t.Errorf("during: %+v", s)
	}
	now = now.Add(time.Second)
	tr.end()
	now = now.Add(time.Hour)
	if s := tr.read(); s[StallL0] != (WriteStalls{Count: 1, Duration: 4 * time.Second}) || s[StallMemtables] != (WriteStalls{}) {
		t.Errorf("after: %+v", s)
	}
}

// flushGate is a vfs.FS whose sstables and blob files (what flushes and compactions
// write) block on their first write until open is called.
type flushGate struct {
	vfs.FS
	release chan struct{}
	opened  bool
}

func (g *flushGate) open() {
	if !g.opened {
		g.opened = true
		close(g.release)
	}
}

func (g *flushGate) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.Create(name, category)
	if err == nil && (strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")) {
		f = flushGatedFile{File: f, release: g.release}
	}
	return f, err
}

type flushGatedFile struct {
	vfs.File
	release chan struct{}
}

func (f flushGatedFile) Write(p []byte) (int, error) {
	<-f.release
	return f.File.Write(p)
}
