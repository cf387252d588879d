package cputime

import (
	"runtime"
	"testing"
	"time"
)

// TestProcessCounts checks that busy work shows up in Process.
func TestProcessCounts(t *testing.T) {
	start := Process()
	if start < 0 {
		t.Skip("no process CPU time on " + runtime.GOOS)
	}
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); {
	}
	if used := Process() - start; used < 10*time.Millisecond {
		t.Fatalf("50 ms of busy work counted as %v of CPU", used)
	}
}
