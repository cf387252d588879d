package hotpart

// summary is one Space-Saving summary (Metwally, Agrawal and El Abbadi, "Efficient
// Computation of Frequent and Top-k Elements in Data Streams", 2005) over the weighted
// stream of (account, table, PartitionKey) one shard saw in one sub-window: at most k
// counters whatever the number of distinct keys. A key that has a counter is counted
// exactly from the moment it got it; a new key when all k are taken evicts the smallest
// counter m and starts at m+w with error m. So each counter overestimates its key by at
// most its err, and err ≤ total/k: every key with more than total/k is present.
//
// Its memory is allocated once (newSummary) and reused on reset: counting allocates
// nothing except when a key longer than any its counter held before arrives.
type summary struct {
	// epoch is the sub-window the summary counts (elapsed time / bucket duration), -1
	// before its first use.
	epoch int64
	// total is the weight counted in the sub-window.
	total int64
	// counters[:n] are in use.
	counters []counter
	n        int
	// heap holds the indexes of the counters in use, a min-heap by count; pos[i] is
	// counter i's place in it.
	heap []int32
	pos  []int32
	// index is an open-addressing hash table (linear probing) of counter index+1 by the
	// key's hash; 0 is an empty slot. Its size is a power of two at least 2k.
	index []int32
}

// counter is one key's count. The key is account, table and PartitionKey concatenated,
// with the first two lengths kept: no separator can collide with the keys' contents.
type counter struct {
	key    []byte
	al, tl int
	hash   uint64
	count  int64
	err    int64
}

func (c *counter) is(hash uint64, account, table, pk string) bool {
	if c.hash != hash || c.al != len(account) || c.tl != len(table) || len(c.key) != len(account)+len(table)+len(pk) {
		return false
	}
	k := c.key
	return string(k[:c.al]) == account && string(k[c.al:c.al+c.tl]) == table && string(k[c.al+c.tl:]) == pk
}

func (c *counter) account() string      { return string(c.key[:c.al]) }
func (c *counter) table() string        { return string(c.key[c.al : c.al+c.tl]) }
func (c *counter) partitionKey() string { return string(c.key[c.al+c.tl:]) }

func newSummary(k int) summary {
	size := 1
	for size < 2*k {
		size <<= 1
	}
	return summary{
		epoch:    -1,
		counters: make([]counter, k),
		heap:     make([]int32, 0, k),
		pos:      make([]int32, k),
		index:    make([]int32, size),
	}
}

// reset empties the summary for sub-window epoch, keeping its memory.
func (s *summary) reset(epoch int64) {
	s.epoch, s.total, s.n = epoch, 0, 0
	s.heap = s.heap[:0]
	clear(s.index)
}

// min is the smallest count when every counter is taken — what any key without a
// counter may have had at most — and 0 otherwise.
func (s *summary) min() int64 {
	if s.n < len(s.counters) {
		return 0
	}
	return s.counters[s.heap[0]].count
}

// slot returns the index slot holding the key, or the empty slot where it would go.
func (s *summary) slot(hash uint64, account, table, pk string) (int, bool) {
	mask := len(s.index) - 1
	for i := int(hash) & mask; ; i = (i + 1) & mask {
		e := s.index[i]
		if e == 0 {
			return i, false
		}
		if s.counters[e-1].is(hash, account, table, pk) {
			return i, true
		}
	}
}

// add counts w for the key.
func (s *summary) add(hash uint64, account, table, pk string, w int64) {
	s.total += w
	i, ok := s.slot(hash, account, table, pk)
	if ok {
		c := int(s.index[i] - 1)
		s.counters[c].count += w
		s.down(int(s.pos[c]))
		return
	}
	var c int
	var base int64
	if s.n < len(s.counters) {
		c = s.n
		s.n++
		s.pos[c] = int32(len(s.heap))
		s.heap = append(s.heap, int32(c))
	} else {
		c = int(s.heap[0])
		base = s.counters[c].count
		s.unindex(c)
		i, _ = s.slot(hash, account, table, pk) // the deletion may have moved slots
	}
	ct := &s.counters[c]
	ct.key = append(append(append(ct.key[:0], account...), table...), pk...)
	ct.al, ct.tl, ct.hash = len(account), len(table), hash
	ct.count, ct.err = base+w, base
	s.index[i] = int32(c + 1)
	p := int(s.pos[c])
	s.up(p)
	s.down(int(s.pos[c]))
}

// unindex removes counter c from the hash table (backward-shift deletion, so that no
// probe sequence is broken).
func (s *summary) unindex(c int) {
	mask := len(s.index) - 1
	i := int(s.counters[c].hash) & mask
	for s.index[i] != int32(c+1) {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; s.index[j] != 0; j = (j + 1) & mask {
		home := int(s.counters[s.index[j]-1].hash) & mask
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.index[i] = s.index[j]
			i = j
		}
	}
	s.index[i] = 0
}

func (s *summary) less(a, b int) bool {
	return s.counters[s.heap[a]].count < s.counters[s.heap[b]].count
}

func (s *summary) swap(a, b int) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.pos[s.heap[a]], s.pos[s.heap[b]] = int32(a), int32(b)
}

func (s *summary) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *summary) down(i int) {
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			return
		}
		s.swap(i, m)
		i = m
	}
}
