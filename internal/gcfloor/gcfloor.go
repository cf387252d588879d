// Package gcfloor keeps a floor under the Go garbage collector's heap goal: the heap may
// grow by at least a fixed headroom over the live heap before a collection starts.
//
// The collector starts a cycle once the heap has grown by GOGC percent (100 by default)
// over what the last cycle found live. A server's live heap is small — a few MiB, since
// Pebble's block cache and memtables are allocated outside the Go heap — while every
// request allocates a few KiB; at tens of thousands of requests a second the default
// collects dozens of times a second, and marking, assists, write barriers and sweeping
// take a tenth of the server's CPU. With a floor of 64 MiB cycles are some fifteen times
// rarer. Once the live heap is large (above headroom × 100 / GOGC) the floor is below the
// proportional goal and GOGC governs alone, so memory never grows by more than the
// headroom beyond what the default would use; a GOMEMLIMIT still caps the heap.
//
// The runtime has no setting for a minimum heap. A ballast (a large never-touched
// allocation) gives one too, but shows as live memory in every heap figure; this package
// instead raises GOGC after each cycle, from the live heap that cycle measured.
package gcfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultHeadroom is the floor the server keeps: 64 MiB of growth between collections.
const DefaultHeadroom = 64 << 20

// minHeap is the runtime's minimum heap goal at GOGC=100 (defaultHeapMinimum in
// runtime/mgcpacer.go). The runtime scales it with GOGC, so below a live heap of this size
// the goal is minHeap × GOGC / 100 rather than live × (1 + GOGC / 100): a percentage
// computed from a tiny live heap (or none, before the first cycle) would put the goal at
// gigabytes.
const minHeap = 4 << 20

var (
	mu      sync.Mutex
	active  *floor
	samples = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
)

type floor struct {
	headroom uint64
	base     int // GOGC when Start was called: the percentage below the floor
	stopped  bool
}

// sentinel is an object nobody references: the first collection after it is allocated
// runs its cleanup, which adjusts GOGC and allocates the next one. It holds a pointer so
// that it is not batched with other small objects by the tiny allocator, which would
// delay the cleanup.
type sentinel struct{ _ *floor }

// Start keeps the heap goal headroom bytes above the live heap (see Percent) until the
// returned stop is called, which restores GOGC as it was. The percentage set never falls
// below the GOGC in force at Start (the environment's, or 100), and GOGC=off (a negative
// percentage) is left alone. One floor is active at a time: a second Start replaces the
// first, and the first's stop then does nothing.
func Start(headroom uint64) (stop func()) {
	mu.Lock()
	defer mu.Unlock()
	if active != nil {
		active.stopped = true
		debug.SetGCPercent(active.base)
		active = nil
	}
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base < 0 || headroom == 0 {
		return func() {}
	}
	f := &floor{headroom: headroom, base: base}
	active = f
	f.adjustLocked()
	f.arm()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if active == f {
			f.stopped = true
			debug.SetGCPercent(f.base)
			active = nil
		}
	}
}

func (f *floor) arm() {
	s := &sentinel{}
	runtime.AddCleanup(s, func(f *floor) {
		mu.Lock()
		defer mu.Unlock()
		if f.stopped {
			return
		}
		f.adjustLocked()
		f.arm()
	}, f)
}

// adjustLocked sets GOGC from the live heap the last cycle measured (none before the
// first cycle, which Percent treats as the minimum heap).
func (f *floor) adjustLocked() {
	debug.SetGCPercent(Percent(liveHeap(), f.headroom, f.base))
}

// Percent is the GOGC that lets a heap of live bytes grow by headroom before the next
// collection, and by no less than base percent. Above the runtime's minimum heap (4 MiB)
// the goal is then at least live + headroom; below it, the scaled minimum makes the goal
// headroom itself.
func Percent(live, headroom uint64, base int) int {
	p := math.Ceil(float64(headroom) * 100 / float64(max(live, minHeap)))
	return max(base, int(min(p, math.MaxInt32)))
}

func liveHeap() uint64 {
	metrics.Read(samples)
	if samples[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return samples[0].Value.Uint64()
}
