package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/entity"
	"github.com/ceruleandb/cerulean/storage"
	"github.com/ceruleandb/cerulean/storage/postgres"
)

// TestExpiryCost measures what the purge of expired rows costs, on a table of 1,000,000
// entities of which 1% expire: how many rows the purge reads and deletes, how long it
// takes, and the foreground throughput (32 callers, half point reads, half
// insert-or-replaces of other entities) while it runs, against the same load without it.
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
		ttl        = 20  // seconds, for one entity per partition (1%)
		callers    = 32
		window     = 5 * time.Second
	)
	e := open(t, postgres.Options{DisablePurger: true})
	db := testDB(t)
	ctx, acct := context.Background(), newAccount()
	if err := e.CreateTable(ctx, acct, "Cost", storage.TableSettings{Elastic: true, DefaultTTL: storage.TTLNever}); err != nil {
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
	// Then the 1%: one entity per partition (RowKey "r050", amid the others) with a TTL.
	start = time.Now()
	next.Store(0)
	for range 16 {
		wg.Go(func() {
			for p := int(next.Add(1) - 1); p < partitions; p = int(next.Add(1) - 1) {
				muts := []storage.Mutation{{Op: storage.Insert, RowKey: "r050x", Props: append(props(p), entity.Property{
					Name: storage.DefaultTTLProperty, Value: entity.Int32Value(ttl)})}}
				if _, err := e.Apply(ctx, acct, "Cost", pk(p), muts); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	expiresBy := time.Now().Add(ttl * time.Second)
	t.Logf("wrote %d expiring entities (TTL %d s) in %v", partitions, ttl, time.Since(start).Round(time.Millisecond))
	if n := storedRows(t, db, acct, "Cost"); n != partitions*perPart {
		t.Fatalf("%d rows stored, want %d", n, partitions*perPart)
	}
	if _, err := db.Exec(ctx, `ANALYZE cerulean_entities`); err != nil {
		t.Fatal(err)
	}

	// The foreground load: ops counts completed calls.
	var ops atomic.Int64
	load := func(d time.Duration) float64 {
		stop := time.Now().Add(d)
		before := ops.Load()
		var lwg sync.WaitGroup
		for c := range callers {
			lwg.Go(func() {
				rnd := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
				for i := 0; time.Now().Before(stop); i++ {
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
		lwg.Wait()
		return float64(ops.Load()-before) / d.Seconds()
	}
	baseline := load(window)
	t.Logf("baseline: %.0f ops/s over %v", baseline, window)

	time.Sleep(time.Until(expiresBy.Add(2 * time.Second)))
	// Every expiring entity is invisible now, before any purge.
	for p := 0; p < partitions; p += partitions / 20 {
		if _, err := e.Get(ctx, acct, "Cost", pk(p), "r050x"); err == nil {
			t.Fatalf("%s/r050x visible after its expiry", pk(p))
		}
	}
	type counters struct{ idxScans, idxRead, deleted int64 }
	stats := func() counters {
		var c counters
		if err := db.QueryRow(ctx, `SELECT i.idx_scan, i.idx_tup_read, s.n_tup_del
			FROM pg_stat_user_indexes i JOIN pg_stat_user_tables s ON s.relid = i.relid
			WHERE i.indexrelname = 'cerulean_entities_expiry'`).Scan(&c.idxScans, &c.idxRead, &c.deleted); err != nil {
			t.Fatal(err)
		}
		return c
	}
	time.Sleep(1500 * time.Millisecond) // statistics reach the views within a second
	before := stats()

	// The purge, under the same load.
	var (
		purged               int
		purgeErr             error
		purgeStart, purgeEnd time.Time
		opsAtStart, opsAtEnd int64
	)
	var pwg sync.WaitGroup
	pwg.Go(func() {
		time.Sleep(time.Second)
		purgeStart, opsAtStart = time.Now(), ops.Load()
		purged, purgeErr = e.PurgeExpired(ctx)
		purgeEnd, opsAtEnd = time.Now(), ops.Load()
	})
	during := load(window)
	pwg.Wait()
	if purgeErr != nil {
		t.Fatal(purgeErr)
	}
	after := load(window)
	time.Sleep(1500 * time.Millisecond)
	delta := stats()
	d := purgeEnd.Sub(purgeStart)
	inPurge := float64(opsAtEnd-opsAtStart) / d.Seconds()
	t.Logf("purge: %d rows in %v (%.0f rows/s); expiry index: %d scans, %d entries read; %d rows deleted in the table",
		purged, d.Round(time.Millisecond), float64(purged)/d.Seconds(), delta.idxScans-before.idxScans, delta.idxRead-before.idxRead,
		delta.deleted-before.deleted)
	t.Logf("foreground: baseline %.0f ops/s; while the purge ran %.0f ops/s (%.0f%% of baseline); over the %v window with the purge %.0f ops/s (%.0f%%); after %.0f ops/s",
		baseline, inPurge, 100*inPurge/baseline, window, during, 100*during/baseline, after)
	if purged != partitions {
		t.Fatalf("purged %d rows, want %d", purged, partitions)
	}
	if n := storedRows(t, db, acct, "Cost"); n != partitions*(perPart-1) {
		t.Fatalf("%d rows stored after the purge, want %d", n, partitions*(perPart-1))
	}
}
