package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
)

// TestPoolStaysWarm: a front end keeps connections open for its groups in flight and
// one more (MinConns), opened in the background with the write statements prepared, so
// that its first burst of requests opens no connection; its connections' lifetimes are
// spread; a pool_min_conns in the URL wins.
func TestPoolStaysWarm(t *testing.T) {
	ctx := context.Background()
	url := internalURL(t)
	_, acct := tableEngine(t, "pw")
	e, err := Open(ctx, url, Options{PoolSize: 8, DisablePurger: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cfg := e.pool.Config()
	want := int32(singleSlots(8) + getSlots(8) + 1)
	if cfg.MinConns != want || cfg.MaxConns != 8 {
		t.Fatalf("pool min %d max %d, want %d and 8", cfg.MinConns, cfg.MaxConns, want)
	}
	if cfg.MaxConnLifetimeJitter != cfg.MaxConnLifetime/10 || cfg.MaxConnLifetimeJitter == 0 {
		t.Errorf("lifetime %v jitter %v", cfg.MaxConnLifetime, cfg.MaxConnLifetimeJitter)
	}
	// Idle, not total: the total counts connections still being made (connect, SET,
	// prepare), and a request finding none idle while they are makes one more — under
	// CI's load that window was long enough to fail this test.
	deadline := time.Now().Add(10 * time.Second)
	for e.pool.Stat().IdleConns() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections idle after 10 s, want %d", e.pool.Stat().IdleConns(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Every idle connection has the write statements prepared, those opened before the
	// schema was ready too.
	for _, c := range e.pool.AcquireAllIdle(ctx) {
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		c.Release()
		if n < 18 {
			t.Errorf("a warm connection has %d statements prepared, want the 18 writes'", n)
		}
	}

	// The table's catalogue entry first (one statement), then two callers each writing
	// and reading: at most the three groups in flight at a time, on connections already
	// open. (With three callers and the catalogue load among them, a loaded machine once
	// had five statements in flight at an instant.)
	if _, err := e.Get(ctx, acct, "T", "p", "none"); err != nil && !errors.Is(err, storage.ErrNotFound) {
		t.Fatal(err)
	}
	opened := e.pool.Stat().NewConnsCount()
	var wg sync.WaitGroup
	for c := range 2 {
		wg.Go(func() {
			rk := fmt.Sprintf("r%d", c)
			if _, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: rk}}); err != nil {
				t.Error(err)
			}
			if _, err := e.Get(ctx, acct, "T", "p", rk); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := e.pool.Stat().NewConnsCount() - opened; n != 0 {
		t.Errorf("the first requests opened %d connections", n)
	}

	own, err := Open(ctx, withParam(url, "pool_min_conns=1"), Options{PoolSize: 8, DisablePurger: true})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if n := own.pool.Config().MinConns; n != 1 {
		t.Errorf("pool_min_conns=1 in the URL: pool min %d", n)
	}
}
