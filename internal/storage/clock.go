package storage

import (
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
)

// Clock hands out versions: 100 ns ticks of the wall clock, strictly increasing across
// every call in the process, and strictly greater than a given previous version. An engine
// that owns its data in one process uses it to keep each entity's versions increasing even
// when the wall clock steps back or two writes fall in the same tick.
type Clock struct {
	last atomic.Int64
	now  func() time.Time
}

// NewClock returns a clock reading now (time.Now when nil).
func NewClock(now func() time.Time) *Clock {
	if now == nil {
		now = time.Now
	}
	return &Clock{now: now}
}

// Next returns a version greater than prev and than every version returned before.
func (c *Clock) Next(prev int64) int64 {
	t := entity.TimeToTicks(c.now())
	for {
		last := c.last.Load()
		v := max(t, last+1, prev+1)
		if c.last.CompareAndSwap(last, v) {
			return v
		}
	}
}

// Observe raises the clock to at least v, so versions found in storage after a restart
// (possibly written under a clock that ran ahead) are never handed out again.
func (c *Clock) Observe(v int64) {
	for {
		last := c.last.Load()
		if v <= last || c.last.CompareAndSwap(last, v) {
			return
		}
	}
}

// Now returns the current time in version ticks: the wall clock, or the last version
// handed out if that is later (after the wall clock stepped back, or after Observe). It
// is the clock against which an engine that owns its data decides expiry (Expired), so
// an entity's expiry (its version plus its time-to-live) is measured on the clock that
// gave it its version. Now hands nothing out and changes nothing.
func (c *Clock) Now() int64 {
	return max(entity.TimeToTicks(c.now()), c.last.Load())
}
