package pebble

import (
	"strings"
	"sync"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
)

// Write stalls: the times Pebble held every write back because its memtables or L0
// were full (DB.maybeInduceWriteStall). A stall stops all writes of the engine at once,
// for as long as a flush or a compaction takes, so it shows as a step in write latency
// that no single request explains; the engine counts them and their length for the
// metrics (Stats.WriteStalls).

// StallReason names why Pebble stalled writes.
type StallReason int

const (
	// StallMemtables: the memtables waiting to be flushed, with the one being filled, hold
	// MemTableStopWritesThreshold × MemTableSize; writes wait for a flush.
	StallMemtables StallReason = iota
	// StallL0: L0 has L0StopWritesThreshold sublevels; writes wait for a compaction out
	// of L0.
	StallL0
	numStallReasons
)

// String is the reason's label in metrics.
func (r StallReason) String() string {
	switch r {
	case StallMemtables:
		return "memtables"
	case StallL0:
		return "l0"
	}
	return "unknown"
}

// WriteStalls is how many write stalls began for one reason, and how long they have
// lasted in all (a stall in progress included, up to the time of reading).
type WriteStalls struct {
	Count    uint64
	Duration time.Duration
}

// stallTracker counts the stalls Pebble reports. Pebble reports one stall at a time
// (it begins and ends it under its commit mutex), so one start time suffices.
type stallTracker struct {
	mu     sync.Mutex
	now    func() time.Time
	began  time.Time // zero: no stall in progress
	reason StallReason
	stalls [numStallReasons]WriteStalls
}

func newStallTracker() *stallTracker { return &stallTracker{now: time.Now} }

// stallReason maps Pebble's reason text (db.go) to a StallReason.
func stallReason(text string) StallReason {
	if strings.HasPrefix(text, "L0") {
		return StallL0
	}
	return StallMemtables
}

func (t *stallTracker) begin(info pebbledb.WriteStallBeginInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reason = stallReason(info.Reason)
	t.began = t.now()
	t.stalls[t.reason].Count++
}

func (t *stallTracker) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.began.IsZero() {
		return
	}
	t.stalls[t.reason].Duration += t.now().Sub(t.began)
	t.began = time.Time{}
}

// read returns the stalls by reason, a stall in progress counted up to now.
func (t *stallTracker) read() [numStallReasons]WriteStalls {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.stalls
	if !t.began.IsZero() {
		s[t.reason].Duration += t.now().Sub(t.began)
	}
	return s
}
