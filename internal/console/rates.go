package console

import (
	"slices"
	"sync"
	"time"

	"github.com/ceruleandb/cerulean/internal/observe"
)

// Window is how far back Watch's request rates and latencies reach, in one-second
// buckets: the memory per account is bounded by Window × the operations seen (a fixed
// set: Storage Analytics names), whatever the load.
const Window = 300

// maxOperations bounds the operations one account keeps series for; the server's
// operation names are a small fixed set, this is a guard, not a working limit.
const maxOperations = 64

// Rates is an observe.Observer that keeps, per account and operation, the requests
// answered, those that failed (status ≥ 400) and their latency, in one-second buckets
// over the last Window seconds. Accounts it was not made for (a request that failed to
// name one) are not kept, so its memory is bounded by the configured accounts.
type Rates struct {
	now      func() time.Time
	accounts map[string]*accountRates
}

type accountRates struct {
	mu  sync.Mutex
	ops map[string]*series
}

// series is one operation's ring of buckets; bucket i holds second sec with sec%Window==i.
type series struct {
	b [Window]bucket
}

type bucket struct {
	sec      int64 // Unix second the bucket counts; 0: never used
	count    int64
	errors   int64
	latSum   time.Duration
	latMax   time.Duration
	entities int64
}

// NewRates makes a Rates for the named accounts; now is the clock (time.Now if nil).
func NewRates(accounts []string, now func() time.Time) *Rates {
	if now == nil {
		now = time.Now
	}
	r := &Rates{now: now, accounts: make(map[string]*accountRates, len(accounts))}
	for _, a := range accounts {
		r.accounts[a] = &accountRates{ops: make(map[string]*series)}
	}
	return r
}

// Observe counts one answered request (observe.Observer). It takes one account's lock
// for a map lookup and a few additions; it allocates only the first time an operation is
// seen.
func (r *Rates) Observe(q *observe.Request) {
	a := r.accounts[q.Account]
	if a == nil {
		return
	}
	sec := q.Start.Unix()
	if q.Start.IsZero() {
		sec = r.now().Unix()
	}
	a.mu.Lock()
	s := a.ops[q.Operation]
	if s == nil {
		if len(a.ops) >= maxOperations {
			a.mu.Unlock()
			return
		}
		s = &series{}
		a.ops[q.Operation] = s
	}
	b := &s.b[sec%Window]
	if b.sec != sec {
		*b = bucket{sec: sec}
	}
	b.count++
	if q.Status >= 400 {
		b.errors++
	}
	b.latSum += q.Latency
	b.latMax = max(b.latMax, q.Latency)
	b.entities += int64(q.EntitiesRead + q.EntitiesWritten)
	a.mu.Unlock()
}

// Snapshot is what Watch draws: per operation, one point per second from Start (a Unix
// second) for Seconds seconds, oldest first. The last, still counting, second is left
// out so that its partial count does not read as a drop.
type Snapshot struct {
	Start      int64             `json:"start"`
	Seconds    int               `json:"seconds"`
	Operations []OperationSeries `json:"operations"`
}

// OperationSeries is one operation's points: requests, failed requests, entities read
// or written, mean and slowest latency in milliseconds (0 where there were no requests).
type OperationSeries struct {
	Operation string    `json:"operation"`
	Requests  []int64   `json:"requests"`
	Errors    []int64   `json:"errors"`
	Entities  []int64   `json:"entities"`
	MeanMs    []float64 `json:"mean_ms"`
	MaxMs     []float64 `json:"max_ms"`
}

// Snapshot returns account's last seconds (at most Window-1), operations by name; an
// account it does not keep has none.
func (r *Rates) Snapshot(account string, seconds int) Snapshot {
	seconds = min(max(seconds, 1), Window-1)
	end := r.now().Unix() // exclusive: the current second is still counting
	snap := Snapshot{Start: end - int64(seconds), Seconds: seconds, Operations: []OperationSeries{}}
	a := r.accounts[account]
	if a == nil {
		return snap
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, s := range a.ops {
		os := OperationSeries{Operation: name, Requests: make([]int64, seconds), Errors: make([]int64, seconds),
			Entities: make([]int64, seconds), MeanMs: make([]float64, seconds), MaxMs: make([]float64, seconds)}
		any := false
		for i := range seconds {
			sec := snap.Start + int64(i)
			b := &s.b[sec%Window]
			if b.sec != sec || b.count == 0 {
				continue
			}
			any = true
			os.Requests[i], os.Errors[i], os.Entities[i] = b.count, b.errors, b.entities
			os.MeanMs[i] = float64(b.latSum) / float64(b.count) / 1e6
			os.MaxMs[i] = float64(b.latMax) / 1e6
		}
		if any {
			snap.Operations = append(snap.Operations, os)
		}
	}
	slices.SortFunc(snap.Operations, func(x, y OperationSeries) int {
		switch {
		case x.Operation < y.Operation:
			return -1
		case x.Operation > y.Operation:
			return 1
		}
		return 0
	})
	return snap
}
