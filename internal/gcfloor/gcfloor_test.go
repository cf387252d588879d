package gcfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/cputime"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live, headroom uint64
		base, want     int
	}{
		{live: 8 << 20, headroom: 64 << 20, base: 100, want: 800},
		{live: 6 << 20, headroom: 64 << 20, base: 100, want: 1067}, // rounded up: the goal is at least live + headroom
		{live: 64 << 20, headroom: 64 << 20, base: 100, want: 100},
		{live: 1 << 30, headroom: 64 << 20, base: 100, want: 100}, // a large heap: GOGC alone
		{live: 1 << 30, headroom: 64 << 20, base: 50, want: 50},
		{live: 16 << 20, headroom: 64 << 20, base: 800, want: 800}, // never below the environment's GOGC
		// Below the runtime's 4 MiB minimum heap, which it scales by GOGC: the goal is the headroom.
		{live: 4 << 20, headroom: 64 << 20, base: 100, want: 1600},
		{live: 100 << 10, headroom: 64 << 20, base: 100, want: 1600},
		{live: 0, headroom: 64 << 20, base: 100, want: 1600}, // before the first cycle
		{live: 0, headroom: 1 << 50, base: 100, want: math.MaxInt32},
	} {
		if got := Percent(c.live, c.headroom, c.base); got != c.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.live, c.headroom, c.base, got, c.want)
		}
	}
}

// read returns the runtime's current GOGC and heap goal, and the live heap the last
// cycle measured.
func read() (percent, goal, live uint64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/heap/goal:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()
}

// okGoal: the goal leaves headroom above the live heap, or, for a live heap below the
// runtime's minimum, is the headroom.
func okGoal(goal, live, headroom uint64) bool {
	return goal >= live+headroom || (live < minHeap && goal >= headroom)
}

// collect runs a collection and waits for the floor's cleanup to have set GOGC from it.
func collect(t *testing.T, headroom uint64, base int) (percent, goal, live uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		percent, goal, live = read()
		if int(percent) == Percent(live, headroom, base) || time.Now().After(deadline) {
			return percent, goal, live
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFloorFollowsLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const headroom = 32 << 20
	stop := Start(headroom)
	defer stop()

	// A small live heap: the goal is raised to the headroom (by way of the runtime's
	// minimum heap), and no further.
	percent, goal, live := collect(t, headroom, 100)
	if percent <= 100 || goal < headroom || goal > 2*headroom {
		t.Fatalf("live heap %d: GOGC %d, goal %d; want the goal about %d", live, percent, goal, headroom)
	}
	if !okGoal(goal, live, headroom) {
		t.Fatalf("live heap %d: goal %d, want at least %d more", live, goal, headroom)
	}

	// A live heap between the minimum and the headroom: at least live + headroom.
	mid := make([]*[1 << 20]byte, 12)
	for i := range mid {
		mid[i] = new([1 << 20]byte)
	}
	percent, goal, live = collect(t, headroom, 100)
	if percent <= 100 || goal < live+headroom || goal > 2*(live+headroom) {
		t.Fatalf("live heap %d: GOGC %d, goal %d; want about live + %d", live, percent, goal, headroom)
	}
	runtime.KeepAlive(mid)
	mid = nil

	// A live heap larger than the headroom: GOGC is back to its base, and the goal is
	// what the default gives.
	big := make([]*[1 << 20]byte, 96)
	for i := range big {
		big[i] = new([1 << 20]byte)
	}
	percent, goal, live = collect(t, headroom, 100)
	if percent != 100 || goal < 2*live {
		t.Fatalf("live heap %d: GOGC %d, goal %d; want GOGC 100", live, percent, goal)
	}
	runtime.KeepAlive(big)
	big = nil

	// Small again: raised again, so the floor goes on after every cycle.
	percent, _, live = collect(t, headroom, 100)
	if percent <= 100 {
		t.Fatalf("live heap %d after the large one was freed: GOGC %d, want above 100", live, percent)
	}

	stop()
	runtime.GC()
	time.Sleep(50 * time.Millisecond) // a cleanup queued before stop must not raise GOGC again
	runtime.GC()
	if percent, _, _ = read(); percent != 100 {
		t.Fatalf("after stop: GOGC %d, want 100 restored", percent)
	}
}

func TestFloorKeepsHigherBase(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	debug.SetGCPercent(5000)
	stop := Start(1 << 20)
	defer stop()
	percent, _, live := collect(t, 1<<20, 5000)
	if percent != 5000 {
		t.Fatalf("base GOGC 5000, live %d, headroom 1 MiB: GOGC %d; want 5000 kept", live, percent)
	}
	stop()
	if percent, _, _ = read(); percent != 5000 {
		t.Fatalf("after stop: GOGC %d, want 5000", percent)
	}
}

func TestFloorLeavesGCOff(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	stop := Start(DefaultHeadroom)
	defer stop()
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Fatalf("GOGC=off: Start set GOGC to %d", p)
	}
}

func TestSecondStartReplacesFirst(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	stop1 := Start(8 << 20)
	stop2 := Start(64 << 20)
	defer stop2()
	percent, goal, live := collect(t, 64<<20, 100)
	if !okGoal(goal, live, 64<<20) {
		t.Fatalf("after a second Start(64 MiB): GOGC %d, goal %d, live %d", percent, goal, live)
	}
	stop1() // replaced: does nothing
	percent, _, _ = collect(t, 64<<20, 100)
	if percent <= 100 {
		t.Fatalf("the replaced floor's stop undid the active one: GOGC %d", percent)
	}
	stop2()
	if percent, _, _ = read(); percent != 100 {
		t.Fatalf("after the active stop: GOGC %d, want 100", percent)
	}
}

// sink keeps the benchmark's allocations from being optimised away.
var sink []byte

// BenchmarkRequestGarbage allocates as a request does (a few KiB in small objects, none
// kept) over a live heap of 4 MiB, the server's size, with the runtime's default GOGC
// and with the floor. It reports collections per 1,000 requests and the process's CPU
// per request, which counts the collector's background workers too.
func BenchmarkRequestGarbage(b *testing.B) {
	live := make([][]byte, 1024)
	for i := range live {
		live[i] = make([]byte, 4<<10)
	}
	for _, floor := range []bool{false, true} {
		name := "GOGC=100"
		if floor {
			name = "floor=64MiB"
		}
		b.Run(name, func(b *testing.B) {
			defer debug.SetGCPercent(debug.SetGCPercent(100))
			if floor {
				defer Start(DefaultHeadroom)()
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			cpu := cputime.Process()
			b.ResetTimer()
			for b.Loop() {
				for j := 0; j < 37; j++ { // ~37 allocations a request, ~5 KiB
					sink = make([]byte, 16+j*8)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.NumGC-before.NumGC)*1000/float64(b.N), "gcs/1000req")
			b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/req")
		})
	}
	runtime.KeepAlive(live)
}
