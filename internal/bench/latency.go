package bench

import (
	"math"
	"math/bits"
	"time"
)

// Latency histogram: log-linear buckets over nanoseconds, HDR-style. Values
// below 2^subBits ns get a bucket each; above that every power-of-two range
// [2^k, 2^(k+1)) is split into 2^subBits equal buckets, so a bucket's width
// is at most 1/2^subBits (3.1%) of its lower bound. That bounds the error of
// a reported percentile to about ±1.6% (midpoint reporting) in fixed memory
// (~10 KiB per worker) however many operations run, which matters for long
// runs against fast servers where a slice of every duration would grow
// without bound.
const (
	subBits     = 5
	subBuckets  = 1 << subBits
	maxExponent = 40 // 2^(40+subBits) ns ≈ 9.8 hours: anything longer is clamped
	nBuckets    = (maxExponent + 1) * subBuckets
)

// histogram records durations. The zero value is ready to use; it is not
// safe for concurrent use (each worker owns one and they are merged after).
type histogram struct {
	counts   [nBuckets]uint64
	n        uint64
	min, max time.Duration
}

// bucketOf maps a non-negative duration to its bucket index.
func bucketOf(d time.Duration) int {
	if d < 0 {
		d = 0
	}
	v := uint64(d)
	e := bits.Len64(v) - subBits - 1 // v in [2^subBits·2^e, 2^(subBits+1)·2^e)
	if e < 0 {
		e = 0
	}
	if e >= maxExponent {
		return nBuckets - 1
	}
	return e<<subBits + int(v>>uint(e))
}

// bucketBounds returns the smallest value in bucket i and the bucket's width.
func bucketBounds(i int) (lo, width uint64) {
	if i < 2*subBuckets {
		return uint64(i), 1
	}
	e := i>>subBits - 1
	m := uint64(i - e<<subBits)
	return m << uint(e), 1 << uint(e)
}

// record adds one observation.
func (h *histogram) record(d time.Duration) {
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.counts[bucketOf(d)]++
	h.n++
}

// merge adds every observation of o to h.
func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// count returns the number of observations.
func (h *histogram) count() uint64 { return h.n }

// percentile returns the q-quantile (0 < q ≤ 1) by the nearest-rank method:
// the smallest recorded value v such that at least ⌈q·n⌉ observations are
// ≤ v, reported as the midpoint of v's bucket and clamped to the observed
// min and max (so a single observation, or the p100, comes back exact). It
// returns 0 for an empty histogram.
func (h *histogram) percentile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(1, min(rank, h.n))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen < rank {
			continue
		}
		lo, w := bucketBounds(i)
		v := time.Duration(lo + (w-1)/2)
		return max(h.min, min(v, h.max))
	}
	return h.max // unreachable: counts sum to n
}
