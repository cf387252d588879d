package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// runRounds runs workload name Options.Rounds times against the server — each round, with
// Options.Floor, followed by the same round against the floor, and for a write workload
// with Options.DurableFloor then against the durable floor — and then, with
// Options.LatencyAt, Options.Rounds more rounds paced at that fraction of the median rate.
// It returns the median round's Result carrying the figures across rounds (see
// Result.RoundsPerSec and Result.Paced). Paced latencies are medians of rounds like the
// rates: one background compaction on a shared machine moves a single round's p99.
// Alternating server and floor rounds lets both see the same drift of a shared machine.
func (b *bench) runRounds(ctx context.Context, name string) (Result, error) {
	var runs []Result
	var floors, durables, engines []float64
	var errs []error
	var floorNote string
	for round := range b.opts.Rounds {
		if ctx.Err() != nil {
			break
		}
		r, err := b.runOnce(ctx, name, false, 0)
		runs = append(runs, r)
		if err != nil {
			errs = append(errs, err)
		}
		if b.opts.Floor && floored(name) && r.Ops > 0 && ctx.Err() == nil {
			f, _ := b.runOnce(ctx, name, true, 0)
			floors = append(floors, f.EntitiesPerSec)
			if f.Errors > 0 && floorNote == "" {
				floorNote = "floor " + f.Notes
			}
			// A write workload's rounds against the floor in its durable and engine modes.
			for _, m := range []struct {
				on    bool
				mode  int32
				rates *[]float64
				label string
			}{
				{b.floor.log != nil, floorDurable, &durables, "durable floor "},
				{b.floor.engine != nil, floorEngine, &engines, "engine floor "},
			} {
				if !m.on || !writes(name) || ctx.Err() != nil {
					continue
				}
				b.floor.mode.Store(m.mode)
				d, _ := b.runOnce(ctx, name, true, 0)
				b.floor.mode.Store(floorPlain)
				*m.rates = append(*m.rates, d.EntitiesPerSec)
				if d.Errors > 0 && floorNote == "" {
					floorNote = m.label + d.Notes
				}
			}
		}
		if b.opts.Rounds > 1 {
			fmt.Fprintf(b.text, "%-9s round %d/%d: %s entities/s\n", name, round+1, b.opts.Rounds, commas(r.EntitiesPerSec))
		}
	}
	if len(runs) == 0 {
		return Result{Workload: name, PartitionTarget: PartitionTarget, Notes: "not run: " + context.Cause(ctx).Error()}, ctx.Err()
	}
	res := median(runs)
	if floorNote != "" {
		res.Notes = joinNotes(res.Notes, floorNote)
	}
	res.FloorPerSec, res.FloorRatio = floorOf(floors, res.EntitiesPerSec)
	res.DurableFloorPerSec, res.DurableFloorRatio = floorOf(durables, res.EntitiesPerSec)
	res.EngineFloorPerSec, res.EngineFloorRatio = floorOf(engines, res.EntitiesPerSec)
	if f := b.opts.LatencyAt; f > 0 && paceable(name) && res.OpsPerSec() > 0 && ctx.Err() == nil {
		rate := f * res.OpsPerSec()
		var paced []Result
		for range b.opts.Rounds {
			if ctx.Err() != nil {
				break
			}
			p, err := b.runOnce(ctx, name, false, rate)
			if err != nil {
				errs = append(errs, err)
			}
			paced = append(paced, p)
		}
		if len(paced) > 0 {
			p := median(paced)
			res.Paced = &Paced{Fraction: f, TargetOpsPerSec: rate, OpsPerSec: p.OpsPerSec(), P50: p.P50, P99: p.P99, Errors: p.Errors}
			for _, r := range paced {
				res.Paced.RoundsP99 = append(res.Paced.RoundsP99, ms(r.P99))
			}
		}
	}
	return res, errors.Join(errs...)
}

// runOnce runs one round of a workload, against the floor if onFloor, paced at rate ops/s
// if rate > 0.
func (b *bench) runOnce(ctx context.Context, name string, onFloor bool, rate float64) (Result, error) {
	b.onFloor, b.rate = onFloor, rate
	b.round++
	defer func() { b.onFloor, b.rate, b.alt = false, 0, nil }()
	if b.rec != nil {
		b.rec.setWorkload(name)
	}
	b.pipeline.take()
	r, err := b.runWorkload(ctx, name)
	r.Throttled, r.Retries = b.pipeline.take()
	return r, err
}

// floored reports whether a workload runs against the floor too: not the load of an
// elastic table, nor the workloads of tables of their own (feed, indexes), whose answers
// the floor does not replay.
func floored(name string) bool {
	switch name {
	case WorkloadBulkLoad, WorkloadFeed, WorkloadIndexInsert, WorkloadIndexQuery:
		return false
	}
	return true
}

// floorOf returns the median of a floor's rounds (entities/s) and the server's rate's
// ratio to it; zeros without rounds.
func floorOf(rounds []float64, server float64) (perSec, ratio float64) {
	if len(rounds) == 0 {
		return 0, 0
	}
	slices.Sort(rounds)
	if perSec = rounds[len(rounds)/2]; perSec > 0 {
		ratio = server / perSec
	}
	return perSec, ratio
}

// writes reports whether a workload changes data, and so has a durable floor.
func writes(name string) bool {
	switch name {
	case WorkloadInsert, WorkloadUpsert, WorkloadUpdate, WorkloadBatch, WorkloadBatchLoad:
		return true
	}
	return false
}

// paceable reports whether a workload runs for a duration (drive) and so can be paced; the
// load workloads time a fixed amount of work instead.
func paceable(name string) bool { return name != WorkloadBatchLoad && name != WorkloadBulkLoad }

// median returns the round with the median entities/s (the lower middle of an even
// count), with P50 and P99 replaced by their medians over the rounds and Errors by the sum.
func median(runs []Result) Result {
	if len(runs) == 1 {
		return runs[0]
	}
	byRate := slices.Clone(runs)
	slices.SortStableFunc(byRate, func(a, b Result) int { return cmp.Compare(a.EntitiesPerSec, b.EntitiesPerSec) })
	res := byRate[(len(byRate)-1)/2]
	var p50s, p99s []time.Duration
	var errs int64
	res.RoundsPerSec = nil
	for _, r := range runs {
		p50s, p99s = append(p50s, r.P50), append(p99s, r.P99)
		errs += r.Errors
		res.RoundsPerSec = append(res.RoundsPerSec, r.EntitiesPerSec)
	}
	slices.Sort(p50s)
	slices.Sort(p99s)
	res.P50, res.P99, res.Errors = p50s[(len(p50s)-1)/2], p99s[(len(p99s)-1)/2], errs
	return res
}

func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
