package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Result is one workload's outcome.
type Result struct {
	// Workload is the workload name (see AllWorkloads).
	Workload string `json:"workload"`
	// Ops counts successful operations: one AddEntity, GetEntity, batch
	// transaction, whole-partition query (all pages), or — for update — one
	// successful increment however many If-Match conflicts it retried.
	Ops int64 `json:"ops"`
	// Entities counts entities written or read by those operations.
	Entities int64 `json:"entities"`
	// Errors counts failed operations (any non-success response or transport
	// error; there are no SDK retries, so throttling shows up here) plus, for
	// update, a final counter that disagrees with the successes, and for
	// query, scans that returned fewer entities than were preloaded.
	Errors int64 `json:"errors"`
	// Seconds is the wall time from the first request to the last response.
	Seconds float64 `json:"seconds"`
	// EntitiesPerSec is Entities / Seconds.
	EntitiesPerSec float64 `json:"entities_per_sec"`
	// P50 and P99 are latency percentiles of successful operations
	// (JSON: milliseconds as floats, keys p50_ms and p99_ms).
	P50 time.Duration `json:"-"`
	P99 time.Duration `json:"-"`
	// HottestPartition is the partition that received the most entities and
	// HottestPartitionPerSec its entities per second.
	HottestPartition       string  `json:"hottest_partition"`
	HottestPartitionPerSec float64 `json:"hottest_partition_per_sec"`
	// PartitionTarget is Azure's per-partition target, PartitionTarget.
	PartitionTarget float64 `json:"partition_target"`
	// Throttled counts the 503 ServerBusy answers the measured requests got,
	// every try included; Retries counts the tries beyond each request's first
	// (zero without Options.Retry).
	Throttled int64 `json:"throttled"`
	Retries   int64 `json:"retries"`
	// RoundsPerSec is entities/s of every round when Options.Rounds > 1. The Result is then
	// the median round's (by entities/s), except that P50 and P99 are the medians over the
	// rounds and Errors their sum.
	RoundsPerSec []float64 `json:"rounds_entities_per_sec,omitempty"`
	// FloorPerSec is the floor's (median) entities/s for the same workload and client
	// (Options.Floor), and FloorRatio is EntitiesPerSec / FloorPerSec.
	FloorPerSec float64 `json:"floor_entities_per_sec,omitempty"`
	FloorRatio  float64 `json:"floor_ratio,omitempty"`
	// DurableFloorPerSec is the durable floor's (median) entities/s for a write workload
	// (Options.DurableFloor), and DurableFloorRatio is EntitiesPerSec / DurableFloorPerSec.
	DurableFloorPerSec float64 `json:"durable_floor_entities_per_sec,omitempty"`
	DurableFloorRatio  float64 `json:"durable_floor_ratio,omitempty"`
	// EngineFloorPerSec is the engine floor's (median) entities/s for a write workload
	// (Options.EngineFloor), and EngineFloorRatio is EntitiesPerSec / EngineFloorPerSec.
	EngineFloorPerSec float64 `json:"engine_floor_entities_per_sec,omitempty"`
	EngineFloorRatio  float64 `json:"engine_floor_ratio,omitempty"`
	// Paced is the rounds paced at Options.LatencyAt of the measured rate.
	Paced *Paced `json:"paced,omitempty"`
	// Notes carries workload-specific findings: the update workload's
	// counter check, a skipped batch workload's reason, error breakdowns.
	Notes string `json:"notes,omitempty"`
	// FeedDelayP50 and FeedDelayP99 are, for the feed workload, the delays from a
	// write's acknowledgement to the feed's reader receiving its record (JSON:
	// feed_delay_p50_ms, feed_delay_p99_ms), and FeedReadPerSec the changes/s of reading
	// the feed back from its beginning.
	FeedDelayP50   time.Duration `json:"-"`
	FeedDelayP99   time.Duration `json:"-"`
	FeedReadPerSec float64       `json:"feed_read_changes_per_sec,omitempty"`
	// IndexInsertPerSec is, for indexinsert, the entities/s into the tables with 0, 1
	// and 3 indexes.
	IndexInsertPerSec []float64 `json:"index_insert_entities_per_sec,omitempty"`
	// IndexSpeedup is, for indexquery, the unindexed scans' median latency over the
	// index queries', each run one at a time; IndexScanP50 and IndexAloneP50 are those
	// medians (JSON: index_scan_p50_ms, index_alone_p50_ms).
	IndexSpeedup  float64       `json:"index_speedup,omitempty"`
	IndexScanP50  time.Duration `json:"-"`
	IndexAloneP50 time.Duration `json:"-"`
}

// Paced is Options.Rounds rounds run at a fixed rate below the maximum: the median round
// by rate, with P50 and P99 the medians over the rounds and Errors their sum.
type Paced struct {
	// Fraction is Options.LatencyAt; TargetOpsPerSec the rate asked for (Fraction × the
	// measured ops/s) and OpsPerSec the rate achieved.
	Fraction        float64 `json:"fraction"`
	TargetOpsPerSec float64 `json:"target_ops_per_sec"`
	OpsPerSec       float64 `json:"ops_per_sec"`
	// P50 and P99 are latencies measured from when each request was due (JSON: p50_ms and
	// p99_ms).
	P50    time.Duration `json:"-"`
	P99    time.Duration `json:"-"`
	Errors int64         `json:"errors"`
	// RoundsP99 is each paced round's p99 in milliseconds, in the order run.
	RoundsP99 []float64 `json:"rounds_p99_ms,omitempty"`
}

// MarshalJSON renders P50 and P99 as fractional milliseconds.
func (p Paced) MarshalJSON() ([]byte, error) {
	type plain Paced
	return json.Marshal(struct {
		plain
		P50 float64 `json:"p50_ms"`
		P99 float64 `json:"p99_ms"`
	}{plain(p), ms(p.P50), ms(p.P99)})
}

// OpsPerSec is Ops / Seconds (0 for a workload that did not run).
func (r Result) OpsPerSec() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Seconds
}

// MarshalJSON renders P50 and P99 as fractional milliseconds, the unit people
// compare latencies in, instead of integer nanoseconds.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result // no methods: avoids recursion
	return json.Marshal(struct {
		plain
		OpsPerSec     float64 `json:"ops_per_sec"`
		P50           float64 `json:"p50_ms"`
		P99           float64 `json:"p99_ms"`
		FeedDelayP50  float64 `json:"feed_delay_p50_ms,omitempty"`
		FeedDelayP99  float64 `json:"feed_delay_p99_ms,omitempty"`
		IndexScanP50  float64 `json:"index_scan_p50_ms,omitempty"`
		IndexAloneP50 float64 `json:"index_alone_p50_ms,omitempty"`
	}{plain(r), r.OpsPerSec(), ms(r.P50), ms(r.P99), ms(r.FeedDelayP50), ms(r.FeedDelayP99), ms(r.IndexScanP50), ms(r.IndexAloneP50)})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// jsonOptions is the options section of the --json document. It carries the
// endpoint instead of the connection string so that account keys and SAS
// tokens never reach output.
type jsonOptions struct {
	Endpoint        string   `json:"endpoint"`
	Table           string   `json:"table"`
	Workers         int      `json:"workers"`
	DurationSeconds float64  `json:"duration_seconds"`
	EntitySize      int      `json:"entity_size"`
	Preload         int      `json:"preload"`
	Partitions      int      `json:"partitions"`
	Load            int      `json:"load"`
	HotPartition    bool     `json:"hot_partition"`
	Workloads       []string `json:"workloads"`
	Keep            bool     `json:"keep"`
	Retries         int      `json:"retries"`
	Consistency     string   `json:"consistency,omitempty"`
}

// jsonReport is the whole --json document.
type jsonReport struct {
	Options jsonOptions `json:"options"`
	Results []Result    `json:"results"`
	Error   string      `json:"error,omitempty"`
}

// writeResultText prints one workload's text report.
func writeResultText(w io.Writer, r Result) {
	const indent = "          "
	if r.Seconds == 0 && r.Ops == 0 {
		fmt.Fprintf(w, "%-9s %s\n", r.Workload, r.Notes)
		return
	}
	fmt.Fprintf(w, "%-9s %s entities/s, %s ops/s, p50 %s, p99 %s, %s errors (%s entities in %.1fs)\n",
		r.Workload, commas(r.EntitiesPerSec), commas(r.OpsPerSec()),
		fmtLatency(r.P50), fmtLatency(r.P99), commas(float64(r.Errors)),
		commas(float64(r.Entities)), r.Seconds)
	if len(r.RoundsPerSec) > 1 {
		rounds := make([]string, len(r.RoundsPerSec))
		for i, v := range r.RoundsPerSec {
			rounds[i] = commas(v)
		}
		fmt.Fprintf(w, "%smedian of %d rounds: %s entities/s\n", indent, len(rounds), strings.Join(rounds, ", "))
	}
	if r.FloorPerSec > 0 {
		fmt.Fprintf(w, "%sfloor %s entities/s: server/floor = %.2f\n", indent, commas(r.FloorPerSec), r.FloorRatio)
	}
	if r.DurableFloorPerSec > 0 {
		fmt.Fprintf(w, "%sdurable floor %s entities/s: server/durable floor = %.2f", indent, commas(r.DurableFloorPerSec), r.DurableFloorRatio)
		if r.FloorPerSec > 0 {
			fmt.Fprintf(w, ", durable floor/floor = %.2f", r.DurableFloorPerSec/r.FloorPerSec)
		}
		fmt.Fprintln(w)
	}
	if r.EngineFloorPerSec > 0 {
		fmt.Fprintf(w, "%sengine floor %s entities/s: server/engine floor = %.2f", indent, commas(r.EngineFloorPerSec), r.EngineFloorRatio)
		if r.DurableFloorPerSec > 0 {
			fmt.Fprintf(w, ", engine floor/durable floor = %.2f", r.EngineFloorPerSec/r.DurableFloorPerSec)
		}
		fmt.Fprintln(w)
	}
	if p := r.Paced; p != nil {
		rounds := ""
		if len(p.RoundsP99) > 1 {
			each := make([]string, len(p.RoundsP99))
			for i, v := range p.RoundsP99 {
				each[i] = strconv.FormatFloat(v, 'f', 1, 64)
			}
			rounds = fmt.Sprintf(" (median of %d rounds: %s ms)", len(each), strings.Join(each, ", "))
		}
		fmt.Fprintf(w, "%spaced at %.0f%%: %s ops/s (asked %s), p50 %s, p99 %s%s, %s errors\n", indent, 100*p.Fraction,
			commas(p.OpsPerSec), commas(p.TargetOpsPerSec), fmtLatency(p.P50), fmtLatency(p.P99), rounds, commas(float64(p.Errors)))
	}
	if r.Throttled > 0 || r.Retries > 0 {
		fmt.Fprintf(w, "%sthrottled: %s answers 503 ServerBusy, %s retries\n", indent, commas(float64(r.Throttled)), commas(float64(r.Retries)))
	}
	if r.HottestPartition != "" {
		fmt.Fprintf(w, "%shottest partition %s: %s/s = %.0f%% of the %s/s target\n",
			indent, r.HottestPartition, commas(r.HottestPartitionPerSec),
			100*r.HottestPartitionPerSec/r.PartitionTarget, commas(r.PartitionTarget))
	}
	if r.Notes != "" {
		fmt.Fprintf(w, "%s%s\n", indent, r.Notes)
	}
}

// commas formats v rounded to an integer with thousands separators.
func commas(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	if v < 0 {
		s = strconv.FormatInt(int64(v-0.5), 10)
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtLatency prints a latency with about three significant digits.
func fmtLatency(d time.Duration) string {
	m := ms(d)
	switch {
	case m < 10:
		return strconv.FormatFloat(m, 'f', 2, 64) + "ms"
	case m < 100:
		return strconv.FormatFloat(m, 'f', 1, 64) + "ms"
	case m < 10_000:
		return strconv.FormatFloat(m, 'f', 0, 64) + "ms"
	default:
		return strconv.FormatFloat(m/1000, 'f', 1, 64) + "s"
	}
}
