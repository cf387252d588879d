package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
)

// TestExpiryCost measures what the purge of expired rows costs, on a table of 1,000,000
// entities of which 1% expire: how many rows the purge reads and deletes, how long it
// takes, and the foreground throughput (32 callers, half point reads, half
// insert-or-replaces of other entities) while it runs, against the same load just
// before and after it. Five waves of expiring entities give five purges.
// It takes a few minutes and a few hundred MB of the database, so it runs only when
// asked:
//
//	CERULEAN_EXPIRY_COST=1 CERULEAN_TEST_POSTGRES_URL=... go test -run TestExpiryCost -v -timeout 30m ./storage/postgres
func TestExpiryCost(t *testing.T) {
	if os.Getenv("CERULEAN_EXPIRY_COST") == "" {
		t.Skip("set CERULEAN_EXPIRY_COST=1 to measure the cost of the expiry purge")
	}
	const (
		partitions = 10_000
		perPart    = 100 // 1,000,000 entities
		ttl        = 10  // seconds, for one entity per partition (1%)
		callers    = 32
		waves      = 5
	)
	e := open(t, postgres.Options{DisablePurger: true})
	db := testDB(t)
	ctx, acct := context.Background(), newAccount()
	if err := e.CreateTable(ctx, acct, "Cost", storage.TableSettings{Elastic: true, DefaultTTL: storage.TTLNever}); err != nil {
		t.Fatal(err)
	}
	// Rows other tests left expired would count below.
	if _, err := e.PurgeExpired(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = e.DeleteTable(ctx, acct, "Cost")
		if err := e.Purge(ctx); err != nil {
			t.Errorf("purge the table: %v", err)
		}
	}()
	props := func(i int) []entity.Property {
		return []entity.Property{
			{Name: "Name", Value: entity.StringValue(fmt.Sprintf("customer %d", i))},
			{Name: "Notes", Value: entity.StringValue(fmt.Sprintf("%0150d", i))},
			{Name: "Age", Value: entity.Int32Value(int32(i % 100))},
		}
	}
	pk := func(p int) string { return fmt.Sprintf("p%05d", p) }

	// Load 99 entities per partition that never expire, in batches of 99.
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for p := int(next.Add(1) - 1); p < partitions; p = int(next.Add(1) - 1) {
				muts := make([]storage.Mutation, perPart-1)
				for r := range muts {
					muts[r] = storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%03d", r), Props: props(p*perPart + r)}
				}
				if _, err := e.Apply(ctx, acct, "Cost", pk(p), muts); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("loaded %d entities in %v", partitions*(perPart-1), time.Since(start).Round(time.Millisecond))
	// VACUUM now rather than an autovacuum in the middle of the measurements.
	start = time.Now()
	if _, err := db.Exec(ctx, `VACUUM ANALYZE cerulean_entities`); err != nil {
		t.Fatal(err)
	}
	t.Logf("vacuumed in %v", time.Since(start).Round(time.Millisecond))

	// The foreground load runs throughout; ops counts its completed calls.
	var ops atomic.Int64
	stop := make(chan struct{})
	var lwg sync.WaitGroup
	for c := range callers {
		lwg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p, r := rnd.IntN(partitions), rnd.IntN(perPart-1)
				var err error
				if i%2 == 0 {
					_, err = e.Get(ctx, acct, "Cost", pk(p), fmt.Sprintf("r%03d", r))
				} else {
					_, err = e.Apply(ctx, acct, "Cost", pk(p), []storage.Mutation{{Op: storage.InsertOrReplace,
						RowKey: fmt.Sprintf("r%03d", r), Props: props(i)}})
				}
				if err != nil {
					t.Error(err)
					return
				}
				ops.Add(1)
			}
		})
	}
	defer func() { close(stop); lwg.Wait() }()
	rate := func(d time.Duration) float64 {
		before, start := ops.Load(), time.Now()
		time.Sleep(d)
		return float64(ops.Load()-before) / time.Since(start).Seconds()
	}

	type counters struct{ idxScans, idxRead, deleted int64 }
	stats := func() counters {
		time.Sleep(1500 * time.Millisecond) // statistics reach the views within a second
		var c counters
		if err := db.QueryRow(ctx, `SELECT i.idx_scan, i.idx_tup_read, s.n_tup_del
			FROM pg_stat_user_indexes i JOIN pg_stat_user_tables s ON s.relid = i.relid
			WHERE i.indexrelname = 'cerulean_entities_expiry'`).Scan(&c.idxScans, &c.idxRead, &c.deleted); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Waves: 1% of the table (one entity per partition, RowKey "r050x", amid the others)
	// written with a TTL, left to expire, then purged; the foreground rate just before,
	// during and just after each purge.
	var ratios []float64
	for wave := range waves {
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for p := int(next.Add(1) - 1); p < partitions; p = int(next.Add(1) - 1) {
					muts := []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: "r050x", Props: append(props(p), entity.Property{
						Name: storage.DefaultTTLProperty, Value: entity.Int32Value(ttl)})}}
					if _, err := e.Apply(ctx, acct, "Cost", pk(p), muts); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		expiresBy := time.Now().Add(ttl * time.Second)
		t.Logf("wave %d: wrote %d expiring entities (TTL %d s) in %v", wave, partitions, ttl, time.Since(start).Round(time.Millisecond))
		if n := storedRows(t, db, acct, "Cost"); n != partitions*perPart {
			t.Fatalf("%d rows stored, want %d", n, partitions*perPart)
		}
		time.Sleep(time.Until(expiresBy.Add(time.Second)))
		// Every expiring entity is invisible now, before any purge.
		for p := 0; p < partitions; p += partitions / 20 {
			if _, err := e.Get(ctx, acct, "Cost", pk(p), "r050x"); err == nil {
				t.Fatalf("%s/r050x visible after its expiry", pk(p))
			}
		}
		c0 := stats()
		before := rate(2 * time.Second)
		opsAt, purgeStart := ops.Load(), time.Now()
		purged, err := e.PurgeExpired(ctx)
		d := time.Since(purgeStart)
		during := float64(ops.Load()-opsAt) / d.Seconds()
		if err != nil {
			t.Fatal(err)
		}
		after := rate(2 * time.Second)
		c1 := stats()
		ratio := during / ((before + after) / 2)
		ratios = append(ratios, ratio)
		t.Logf("wave %d: purge %d rows in %v (%.0f rows/s), expiry index %d scans, %d entries read, %d rows deleted; "+
			"foreground %.0f ops/s before, %.0f during (%.0f%%), %.0f after",
			wave, purged, d.Round(time.Millisecond), float64(purged)/d.Seconds(), c1.idxScans-c0.idxScans, c1.idxRead-c0.idxRead,
			c1.deleted-c0.deleted, before, during, 100*ratio, after)
		if purged < partitions { // rows of other tests may expire meanwhile and count too
			t.Fatalf("purged %d rows, want %d", purged, partitions)
		}
		if n := storedRows(t, db, acct, "Cost"); n != partitions*(perPart-1) {
			t.Fatalf("%d rows stored after the purge, want %d", n, partitions*(perPart-1))
		}
	}
	slices.Sort(ratios)
	t.Logf("foreground throughput during the purge, relative to around it: median %.0f%% (waves: %.2f)", 100*ratios[len(ratios)/2], ratios)
}
