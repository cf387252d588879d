package server

import (
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

// A flooding code gets one info-level line per window, which counts the answers left out
// since the previous one; each code has its own window.
func TestFailureLogAdmit(t *testing.T) {
	var f failureLog
	t0 := time.Unix(1000, 0)
	step := func(code azerr.Code, at time.Duration, wantShow bool, wantOmitted int64) {
		t.Helper()
		show, omitted := f.admit(code, t0.Add(at))
		if show != wantShow || omitted != wantOmitted {
			t.Errorf("admit(%s, +%v) = %v, %d; want %v, %d", code, at, show, omitted, wantShow, wantOmitted)
		}
	}
	step(azerr.ServerBusy, 0, true, 0)
	for i := 1; i <= 500; i++ {
		step(azerr.ServerBusy, time.Duration(i)*time.Millisecond, false, 0)
	}
	step(azerr.OperationTimedOut, time.Second, true, 0) // another code, its own window
	step(azerr.ServerBusy, failureLogWindow-time.Nanosecond, false, 0)
	step(azerr.ServerBusy, failureLogWindow, true, 501)
	step(azerr.ServerBusy, 3*failureLogWindow, true, 0)
}
