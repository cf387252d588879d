// Package throttle emulates Azure Table Storage's scalability targets: token buckets of
// entity operations per second for each partition and for each account, in bounded memory,
// so that an application can see the 503 ServerBusy answers its key design and its retry
// policy will meet in production (--scale-targets).
//
// A request is admitted while both its buckets hold tokens; it takes its cost when
// admitted, and a query, whose cost (the entities it scanned) is known only once it ran,
// is charged the rest afterwards. Buckets may go into debt; a bucket in debt refuses
// requests until it has refilled past zero, so the long-run rate through a bucket is its
// target whatever the mix of costs.
package throttle

import (
	"container/list"
	"hash/maphash"
	"sync"
	"time"
)

// Azure's published targets for a standard storage account's Table service, for 1 KiB
// entities ("Scalability and performance targets for Table storage").
const (
	PartitionTarget = 2000
	AccountTarget   = 20000
)

// DefaultMaxPartitions bounds the partition buckets held (see Options.MaxPartitions).
const DefaultMaxPartitions = 1 << 16

const shards = 64

// Options configures a Limiter.
type Options struct {
	// Partition and Account are the targets in entity operations per second; zero takes
	// the Azure target, a negative value turns that limit off.
	Partition, Account float64
	// Burst is how much a bucket holds, in seconds of its rate: an idle partition may
	// take Burst×Partition operations at once. Zero means one second.
	Burst time.Duration
	// MaxPartitions bounds the partition buckets held at once: about 200 bytes plus the
	// key (account, table and PartitionKey) each, so the default 65,536 is at most ~20 MiB
	// with 100-byte keys, whatever the key space. Past it a shard drops its least recently
	// used bucket, which forgives that bucket's debt; a bucket unused for Burst has
	// refilled completely and is the same as no bucket, so with MaxPartitions above the
	// partitions touched per Burst nothing is forgiven.
	MaxPartitions int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Scope is which limit refused a request.
type Scope uint8

// The scopes: None admits.
const (
	None Scope = iota
	Partition
	Account
)

func (s Scope) String() string {
	switch s {
	case Partition:
		return "partition"
	case Account:
		return "account"
	}
	return ""
}

// Limiter holds the buckets. It is safe for concurrent use.
type Limiter struct {
	partRate, acctRate float64
	partCap, acctCap   float64
	now                func() time.Time
	perShard           int
	seed               maphash.Seed
	parts              [shards]shard

	acctMu sync.Mutex
	accts  map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
	key    string
	elem   *list.Element
}

type shard struct {
	mu  sync.Mutex
	m   map[string]*bucket
	lru list.List // front: most recently used
}

// New returns a limiter with opts' targets.
func New(opts Options) *Limiter {
	if opts.Partition == 0 {
		opts.Partition = PartitionTarget
	}
	if opts.Account == 0 {
		opts.Account = AccountTarget
	}
	if opts.Burst <= 0 {
		opts.Burst = time.Second
	}
	if opts.MaxPartitions <= 0 {
		opts.MaxPartitions = DefaultMaxPartitions
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &Limiter{
		partRate: max(opts.Partition, 0),
		acctRate: max(opts.Account, 0),
		now:      opts.Now,
		perShard: max(1, opts.MaxPartitions/shards),
		seed:     maphash.MakeSeed(),
		accts:    map[string]*bucket{},
	}
	l.partCap = max(1, l.partRate*opts.Burst.Seconds())
	l.acctCap = max(1, l.acctRate*opts.Burst.Seconds())
	for i := range l.parts {
		l.parts[i].m = map[string]*bucket{}
	}
	return l
}

// Targets reports the partition and account targets (0: that limit is off).
func (l *Limiter) Targets() (partition, account float64) { return l.partRate, l.acctRate }

// Cost is what an operation on entities entities carrying bytes of entity data costs:
// one per whole KiB of data, at least one per entity and at least one in all (the targets
// assume 1 KiB entities, so a 1 KiB entity, whatever its encoding's overhead, costs 1).
func Cost(entities int, bytes int64) int {
	return max(1, entities, int(bytes>>10))
}

// Admit takes cost from the account's bucket and, when pk is not "", from the bucket of
// the partition (account, table, pk). It reports None if the request may run, or the
// limit that refuses it (then nothing is taken).
func (l *Limiter) Admit(account, table, pk string, cost int) Scope {
	now := l.now()
	c := float64(cost)
	if l.acctRate > 0 {
		l.acctMu.Lock()
		b := l.accts[account]
		if b == nil {
			b = &bucket{tokens: l.acctCap, last: now}
			l.accts[account] = b
		}
		b.refill(now, l.acctRate, l.acctCap)
		if b.tokens <= 0 {
			l.acctMu.Unlock()
			return Account
		}
		b.tokens -= c
		l.acctMu.Unlock()
	}
	if pk == "" || l.partRate <= 0 {
		return None
	}
	if !l.takePartition(account, table, pk, c, now, true) {
		if l.acctRate > 0 { // give the account back what this refused request took
			l.acctMu.Lock()
			l.accts[account].tokens += c
			l.acctMu.Unlock()
		}
		return Partition
	}
	return None
}

// Charge takes cost more from the account's bucket and the partition's (pk may be ""),
// without refusing: the rest of what an admitted request turned out to cost.
func (l *Limiter) Charge(account, table, pk string, cost int) {
	if cost <= 0 {
		return
	}
	now := l.now()
	c := float64(cost)
	if l.acctRate > 0 {
		l.acctMu.Lock()
		if b := l.accts[account]; b != nil {
			b.refill(now, l.acctRate, l.acctCap)
			b.tokens -= c
		}
		l.acctMu.Unlock()
	}
	if pk != "" && l.partRate > 0 {
		l.takePartition(account, table, pk, c, now, false)
	}
}

// Partitions reports how many partition buckets are held (for tests and the bound).
func (l *Limiter) Partitions() int {
	n := 0
	for i := range l.parts {
		sh := &l.parts[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// takePartition takes c from the partition's bucket; with check, only if it holds tokens.
func (l *Limiter) takePartition(account, table, pk string, c float64, now time.Time, check bool) bool {
	var h maphash.Hash
	h.SetSeed(l.seed)
	h.WriteString(account)
	h.WriteByte(0)
	h.WriteString(table)
	h.WriteByte(0)
	h.WriteString(pk)
	sh := &l.parts[h.Sum64()%shards]
	var buf [256]byte
	key := append(append(append(append(append(buf[:0], account...), 0), table...), 0), pk...)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b := sh.m[string(key)] // no allocation for the lookup
	if b == nil {
		if len(sh.m) >= l.perShard {
			l.evict(sh)
		}
		b = &bucket{tokens: l.partCap, last: now, key: string(key)}
		b.elem = sh.lru.PushFront(b)
		sh.m[b.key] = b
	} else {
		sh.lru.MoveToFront(b.elem)
		b.refill(now, l.partRate, l.partCap)
	}
	if check && b.tokens <= 0 {
		return false
	}
	b.tokens -= c
	return true
}

// evict drops the least recently used bucket of a full shard. Dropping a bucket forgives
// its debt, if it has any; the least recently used has had the longest to refill.
func (l *Limiter) evict(sh *shard) {
	if e := sh.lru.Back(); e != nil {
		sh.lru.Remove(e)
		delete(sh.m, e.Value.(*bucket).key)
	}
}

func (b *bucket) refill(now time.Time, rate, capacity float64) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(capacity, b.tokens+rate*d.Seconds())
		b.last = now
	}
}
