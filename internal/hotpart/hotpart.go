// Package hotpart finds the hot partitions: per table, the PartitionKeys that took the
// most entity operations over the last minute, with their rate against the 2,000
// entities per second Azure's partitioning guide gives as one partition's target
// ("Scalability and performance targets for Table storage").
//
// A Tracker is an observe.Observer. It keeps no map of every key: the keys
// (account, table, PartitionKey) are spread by hash over shards, and each shard keeps
// one Space-Saving summary of a fixed number of counters per sub-window (six of 10 s by
// default); the minute's estimate merges the sub-windows. Memory is fixed when the
// Tracker is made, whatever the number of tables and partitions clients use, and every
// reported rate comes with the sketch's error bound. Only keys that take more than
// about 1/Counters of a shard's load are sure to be reported — which every partition
// near the target is, unless the server as a whole runs at hundreds of thousands of
// entities per second.
package hotpart

import (
	"cmp"
	"context"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ceruleandb/cerulean/internal/observe"
)

// Target is a partition's throughput target in entities per second (Azure's
// "Scalability and performance targets for Table storage": "Target throughput for a
// single table partition (1 KiB-entities): up to 2,000 entities per second").
const Target = 2000

// Options configure a Tracker; the zero value of each field picks its default.
type Options struct {
	// Window is how far back the rates reach (default one minute), in Buckets
	// sub-windows (default 6). The current sub-window counts as it fills, so a rate
	// covers between Window-Window/Buckets and Window.
	Window  time.Duration
	Buckets int
	// Shards is how many independently locked summaries the keys are spread over
	// (default 16); Counters how many keys each keeps per sub-window (default 64).
	Shards, Counters int

	// Warn is the rate, entities per second, above which a partition that stays there
	// for WarnAfter (default 30 s) is logged as a warning, again every WarnEvery
	// (default 5 min) while it lasts, and once more when it cools. 0 means Target;
	// negative disables the lines.
	Warn      float64
	WarnAfter time.Duration
	WarnEvery time.Duration
	// Logger gets the warning lines (default slog.Default()).
	Logger *slog.Logger

	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
}

// Tracker is the hot-partition observer. Its methods are safe for concurrent use.
type Tracker struct {
	opts   Options
	bucket time.Duration
	origin time.Time
	seed   maphash.Seed
	shards []shard

	// warnMu guards the warning state (Check).
	warnMu  sync.Mutex
	checked int64 // last sub-window Check looked at
	hot     map[string]*hotState
}

// shard is a ring of Buckets summaries, the one of sub-window e at e % Buckets.
type shard struct {
	mu      sync.Mutex
	buckets []summary
	_       [64]byte // keep shards' locks on separate cache lines
}

// New makes a Tracker; all its memory but the warning state is allocated here.
func New(o Options) *Tracker {
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	if o.Buckets <= 0 {
		o.Buckets = 6
	}
	if o.Shards <= 0 {
		o.Shards = 16
	}
	if o.Counters <= 0 {
		o.Counters = 64
	}
	if o.Warn == 0 {
		o.Warn = Target
	}
	if o.WarnAfter <= 0 {
		o.WarnAfter = 30 * time.Second
	}
	if o.WarnEvery <= 0 {
		o.WarnEvery = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	t := &Tracker{
		opts:    o,
		bucket:  o.Window / time.Duration(o.Buckets),
		origin:  o.Now(),
		seed:    maphash.MakeSeed(),
		shards:  make([]shard, o.Shards),
		checked: -1,
		hot:     make(map[string]*hotState),
	}
	for i := range t.shards {
		t.shards[i].buckets = make([]summary, o.Buckets)
		for j := range t.shards[i].buckets {
			t.shards[i].buckets[j] = newSummary(o.Counters)
		}
	}
	return t
}

// epoch is the sub-window now falls in.
func (t *Tracker) epoch(now time.Time) int64 {
	d := now.Sub(t.origin)
	if d < 0 {
		return 0
	}
	return int64(d / t.bucket)
}

// Weight is what a request counts for its partition: the entities it read and wrote,
// at least 1 when it names a partition (a failed or empty single-entity operation still
// reached it); 0 when it names none (the empty PartitionKey, valid but rare, is not told
// from none). A request refused before it reached storage
// (authentication 401 and 403, or 503 ServerBusy shedding) counts nothing.
func Weight(r *observe.Request) (pk string, w int) {
	pk = r.PartitionKey
	if pk == "" {
		pk = r.QueryPartition
	}
	if r.Table == "" || pk == "" {
		return "", 0
	}
	switch r.Status {
	case 401, 403, 503:
		return "", 0
	}
	return pk, max(1, r.EntitiesRead+r.EntitiesWritten)
}

// Observe counts the request for its partition (see Weight). It takes one shard's lock
// and allocates nothing once the counters have held keys as long.
func (t *Tracker) Observe(r *observe.Request) {
	pk, w := Weight(r)
	if w == 0 {
		return
	}
	now := r.Start.Add(r.Latency) // when it was answered, without another clock read
	if r.Start.IsZero() {
		now = t.opts.Now()
	}
	t.add(r.Account, r.Table, pk, int64(w), now)
}

func (t *Tracker) hash(account, table, pk string) uint64 {
	var h maphash.Hash
	h.SetSeed(t.seed)
	h.WriteString(account)
	h.WriteByte(0)
	h.WriteString(table)
	h.WriteByte(0)
	h.WriteString(pk)
	return h.Sum64()
}

func (t *Tracker) add(account, table, pk string, w int64, now time.Time) {
	h := t.hash(account, table, pk)
	e := t.epoch(now)
	sh := &t.shards[(h>>32)%uint64(len(t.shards))]
	sh.mu.Lock()
	b := &sh.buckets[e%int64(len(sh.buckets))]
	if b.epoch < e {
		b.reset(e)
	}
	b.add(h, account, table, pk, w)
	sh.mu.Unlock()
}

// Report is what /debug/partitions answers.
type Report struct {
	// WindowSeconds is the time the rates are over: the last minute, or less since
	// the server started.
	WindowSeconds float64 `json:"window_seconds"`
	// TargetPerSec is one partition's target, 2,000 entities per second.
	TargetPerSec float64 `json:"target_per_sec"`
	// EntitiesPerSec is the rate of entity operations on all partitions together.
	EntitiesPerSec float64 `json:"entities_per_sec"`
	// Tables are the tables with a tracked partition, busiest partition first.
	Tables []TableReport `json:"tables"`
}

// TableReport is one table's busiest partitions, busiest first.
type TableReport struct {
	Account    string      `json:"account"`
	Table      string      `json:"table"`
	Partitions []Partition `json:"partitions"`
}

// Partition is one partition's estimated rate. The true rate lies within ErrorPerSec
// of EntitiesPerSec (the sketch's bound for this key over the window).
type Partition struct {
	PartitionKey   string  `json:"partition_key"`
	EntitiesPerSec float64 `json:"entities_per_sec"`
	ErrorPerSec    float64 `json:"error_per_sec"`
	// OfTarget is EntitiesPerSec / TargetPerSec: 1 is a partition at its target.
	OfTarget float64 `json:"of_target"`
}

// Filter selects what a Report holds: one account's, one table's (empty: all), and at
// most Top partitions per table (0: all tracked).
type Filter struct {
	Account, Table string
	Top            int
}

type agg struct {
	account, table, pk string
	count, err, absent int64
}

// Report returns the busiest partitions per table over the window ending now.
func (t *Tracker) Report(f Filter) Report {
	now := t.opts.Now()
	cur := t.epoch(now)
	first := max(0, cur-int64(t.opts.Buckets)+1)
	window := now.Sub(t.origin)
	if w := now.Sub(t.origin.Add(time.Duration(first) * t.bucket)); w < window {
		window = w
	}
	window = max(window, time.Second)
	secs := window.Seconds()

	keys := make(map[string]*agg)
	var total int64
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		var missing int64 // sum of min over the shard's buckets
		var seen []*agg
		for j := range sh.buckets {
			b := &sh.buckets[j]
			if b.epoch < first || b.epoch > cur {
				continue
			}
			total += b.total
			m := b.min()
			missing += m
			for _, c := range b.counters[:b.n] {
				if (f.Account != "" && c.account() != f.Account) || (f.Table != "" && c.table() != f.Table) {
					continue
				}
				a := keys[string(c.key)]
				if a == nil {
					a = &agg{account: c.account(), table: c.table(), pk: c.partitionKey()}
					keys[string(c.key)] = a
					seen = append(seen, a)
				}
				a.count += c.count
				a.err += c.err
				a.absent -= m // removed again below: absent = Σ min over buckets without the key
			}
		}
		sh.mu.Unlock()
		for _, a := range seen {
			a.absent += missing
		}
	}

	byTable := make(map[[2]string]*TableReport)
	var tables []*TableReport
	for _, a := range keys {
		k := [2]string{a.account, a.table}
		tr := byTable[k]
		if tr == nil {
			tr = &TableReport{Account: a.account, Table: a.table}
			byTable[k] = tr
			tables = append(tables, tr)
		}
		rate := float64(a.count) / secs
		tr.Partitions = append(tr.Partitions, Partition{
			PartitionKey:   a.pk,
			EntitiesPerSec: rate,
			ErrorPerSec:    float64(max(a.err, a.absent)) / secs,
			OfTarget:       rate / Target,
		})
	}
	r := Report{WindowSeconds: secs, TargetPerSec: Target, EntitiesPerSec: float64(total) / secs, Tables: []TableReport{}}
	for _, tr := range tables {
		slices.SortFunc(tr.Partitions, func(a, b Partition) int {
			return cmp.Or(cmp.Compare(b.EntitiesPerSec, a.EntitiesPerSec), cmp.Compare(a.PartitionKey, b.PartitionKey))
		})
		if f.Top > 0 && len(tr.Partitions) > f.Top {
			tr.Partitions = tr.Partitions[:f.Top]
		}
		r.Tables = append(r.Tables, *tr)
	}
	slices.SortFunc(r.Tables, func(a, b TableReport) int {
		return cmp.Or(cmp.Compare(b.Partitions[0].EntitiesPerSec, a.Partitions[0].EntitiesPerSec),
			cmp.Compare(a.Account, b.Account), cmp.Compare(a.Table, b.Table))
	})
	return r
}

// Top returns the n busiest partitions of all tables, busiest first, as single-partition
// TableReports.
func (t *Tracker) Top(n int) []TableReport {
	var all []TableReport
	for _, tr := range t.Report(Filter{Top: n}).Tables {
		for _, p := range tr.Partitions {
			all = append(all, TableReport{Account: tr.Account, Table: tr.Table, Partitions: []Partition{p}})
		}
	}
	slices.SortStableFunc(all, func(a, b TableReport) int {
		return cmp.Compare(b.Partitions[0].EntitiesPerSec, a.Partitions[0].EntitiesPerSec)
	})
	if len(all) > n {
		all = all[:n]
	}
	return all
}

// hotState is a partition above the warning rate in every sub-window since since.
type hotState struct {
	account, table, pk string
	since              time.Time
	warned             time.Time // last warning line; zero before the first
	rate               float64   // in the last sub-window
	seen               int64     // the last sub-window it was above the rate
}

// Check looks at each sub-window completed since the previous Check and logs the
// warnings: a partition above Options.Warn in every sub-window for WarnAfter gets a
// warning line, again every WarnEvery while it stays there, and an info line when a
// sub-window finds it below. Run calls it; tests call it with their clock.
func (t *Tracker) Check() {
	if t.opts.Warn < 0 {
		return
	}
	now := t.opts.Now()
	done := t.epoch(now) - 1 // the last complete sub-window
	t.warnMu.Lock()
	defer t.warnMu.Unlock()
	from := max(t.checked+1, done-int64(t.opts.Buckets)+1, 0)
	bsecs := t.bucket.Seconds()
	for e := from; e <= done; e++ {
		end := t.origin.Add(time.Duration(e+1) * t.bucket)
		for i := range t.shards {
			sh := &t.shards[i]
			sh.mu.Lock()
			b := &sh.buckets[e%int64(len(sh.buckets))]
			if b.epoch == e {
				for _, c := range b.counters[:b.n] {
					rate := float64(c.count) / bsecs
					if rate < t.opts.Warn {
						continue
					}
					h := t.hot[string(c.key)]
					if h == nil {
						h = &hotState{account: c.account(), table: c.table(), pk: c.partitionKey(),
							since: end.Add(-t.bucket)}
						t.hot[string(c.key)] = h
					}
					h.rate, h.seen = rate, e
				}
			}
			sh.mu.Unlock()
		}
		for k, h := range t.hot {
			if h.seen != e {
				if !h.warned.IsZero() {
					t.opts.Logger.Info("hot partition cooled", "account", h.account, "table", h.table, "partition_key", h.pk,
						"hot_for", end.Add(-t.bucket).Sub(h.since))
				}
				delete(t.hot, k)
				continue
			}
			if end.Sub(h.since) >= t.opts.WarnAfter && (h.warned.IsZero() || end.Sub(h.warned) >= t.opts.WarnEvery) {
				h.warned = end
				t.opts.Logger.Warn("hot partition", "account", h.account, "table", h.table, "partition_key", h.pk,
					"entities_per_sec", int64(h.rate), "threshold", t.opts.Warn, "target", Target, "hot_for", end.Sub(h.since))
			}
		}
		t.checked = e
	}
}

// Run calls Check at every sub-window's end until ctx is done.
func (t *Tracker) Run(ctx context.Context) {
	tick := time.NewTicker(t.bucket)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.Check()
		}
	}
}
