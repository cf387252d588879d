package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
)

// BenchmarkNewConnection measures what a new pooled connection costs before its first
// use: the connection (the database's new process), the session's settings and the
// write statements' preparation (the pool's AfterConnect). A front end pays it for every
// connection it opens, and under a sudden load its first requests wait for it. On this
// project's 2-core machines about 35 ms, of which the connection is 20-25 ms and the
// eighteen prepares about 11 ms, the database's parsing and planning rather than the
// round trips: sent as one pipeline they cost the same.
//
//	CERULEAN_TEST_POSTGRES_URL=... go test -run '^$' -bench NewConnection ./storage/postgres
func BenchmarkNewConnection(b *testing.B) {
	ctx := context.Background()
	e := internalEngine(b)
	for b.Loop() {
		c, err := e.pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		// Taken out of the pool and closed, so the next Acquire makes a new one.
		if err := c.Hijack().Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkColdStart measures what a front end's first requests wait for: each
// iteration opens an engine, lets it settle for half a second (as a front end started
// before its load arrives), then times a burst of one write and one point read from each
// of 8 callers, and reports the slowest of them.
//
//	CERULEAN_TEST_POSTGRES_URL=... go test -run '^$' -bench ColdStart -benchtime 10x ./storage/postgres
func BenchmarkColdStart(b *testing.B) {
	ctx := context.Background()
	url := internalURL(b)
	_, acct := tableEngine(b, "cs")
	var worst []time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		e, err := Open(ctx, url, Options{DisablePurger: true})
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		b.StartTimer()
		var mu sync.Mutex
		var slowest time.Duration
		var wg sync.WaitGroup
		for c := range 8 {
			wg.Go(func() {
				start := time.Now()
				rk := fmt.Sprintf("r%d-%d", i, c)
				if _, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: rk}}); err != nil {
					b.Error(err)
				}
				if _, err := e.Get(ctx, acct, "T", "p", rk); err != nil {
					b.Error(err)
				}
				mu.Lock()
				slowest = max(slowest, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		b.StopTimer()
		e.Close()
		worst = append(worst, slowest)
		b.StartTimer()
	}
	slices.Sort(worst)
	b.ReportMetric(float64(worst[len(worst)/2].Microseconds())/1000, "ms-slowest-median")
}
