package metrics

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/pgtest"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
)

func TestPostgresFigures(t *testing.T) {
	url := pgtest.PrimaryURL(t)
	replica, _, _ := pgtest.ReplicaURLs(t)
	ctx := context.Background()
	eng, err := postgres.Open(ctx, url, postgres.Options{PoolSize: 7, ReplicaURLs: []string{replica}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if _, err := eng.GetTable(ctx, "metrics-test", "nosuchtable"); err == nil {
		t.Fatal("GetTable of a missing table succeeded")
	}
	m, err := New(Options{Engine: storage.Engine(eng)})
	if err != nil {
		t.Fatal(err)
	}
	got := series(t, m)
	if v := got["cerulean_postgres_pool_max_conns{}"]; v != 7 {
		t.Errorf("pool max %v, want 7", v)
	}
	if got["cerulean_postgres_pool_acquires_total{}"] < 1 {
		t.Errorf("pool acquires %v after a read", got["cerulean_postgres_pool_acquires_total{}"])
	}
	for _, k := range []string{"cerulean_postgres_pool_conns{state=in_use}", "cerulean_postgres_pool_conns{state=idle}", "cerulean_postgres_statement_errors_total{class=other}", "cerulean_postgres_retries_total{}", "cerulean_postgres_pending_table_purges{}",
		"cerulean_postgres_index_builds{}", "cerulean_postgres_index_drops{}", "cerulean_postgres_index_build_rows_total{}"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %s", k)
		}
	}
	name := eng.Replicas()[0].Name
	if strings.Contains(name, "@") || name == "" {
		t.Fatalf("replica name %q", name)
	}
	for _, k := range []string{"cerulean_postgres_replica_in_rotation", "cerulean_postgres_replica_lag_bytes", "cerulean_postgres_replica_staleness_seconds"} {
		if _, ok := got[k+"{replica="+name+"}"]; !ok {
			t.Errorf("no %s for replica %s", k, name)
		}
	}
}

// TestPostgresIndexFigures drives an index build and then the removal of the index's
// entries a pass at a time (no background loop), in a database of its own (the gauges
// count the whole database's work): while the build is not finished the builds gauge
// counts it, once it is the gauge is 0 and the rows counter has advanced by the table's
// rows; the dropped index counts in the drops gauge until its entries are gone.
func TestPostgresIndexFigures(t *testing.T) {
	ctx := context.Background()
	url := pgtest.CreateDatabase(t, fmt.Sprintf("metrics_ix_%d", time.Now().UnixNano()))
	eng, err := postgres.Open(ctx, url, postgres.Options{IndexInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	m, err := New(Options{Engine: storage.Engine(eng)})
	if err != nil {
		t.Fatal(err)
	}
	const (
		builds    = "cerulean_postgres_index_builds{}"
		drops     = "cerulean_postgres_index_drops{}"
		rowsTotal = "cerulean_postgres_index_build_rows_total{}"
	)
	if err := eng.CreateTable(ctx, "a", "t", storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	const rows = 1500 // over a chunk of the builder's (1,000)
	for p := range rows / 100 {
		var muts []storage.Mutation
		for r := range 100 {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%03d", r),
				Props: []entity.Property{{Name: "A", Value: entity.Int32Value(int32(r))}}})
		}
		if _, err := eng.Apply(ctx, "a", "t", fmt.Sprintf("p%02d", p), muts); err != nil {
			t.Fatal(err)
		}
	}
	byA := storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{{Name: "ByA", Properties: []string{"A"}}}}
	if err := eng.SetTableSettings(ctx, "a", "t", byA); err != nil {
		t.Fatal(err)
	}
	pass := func() int {
		t.Helper()
		n, err := eng.BuildIndexes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	passed := 0
	for {
		n := pass()
		if n == 0 {
			break
		}
		if passed += n; passed > rows {
			t.Fatalf("the build has passed %d rows of %d and goes on", passed, rows)
		}
		got := series(t, m)
		if got[rowsTotal] != float64(passed) {
			t.Fatalf("rows counter %v after the passes passed %d rows", got[rowsTotal], passed)
		}
		if passed < rows && got[builds] < 1 {
			t.Fatalf("builds %v with the build at %d rows of %d", got[builds], passed, rows)
		}
		if passed == rows && got[builds] != 0 {
			t.Fatalf("builds %v after the build passed every row", got[builds])
		}
	}
	info, err := eng.GetTable(ctx, "a", "t")
	if err != nil {
		t.Fatal(err)
	}
	if d := info.Settings.Indexes[0]; d.State != storage.IndexReady || passed != rows {
		t.Fatalf("index %+v after passes that passed %d rows, want ready after %d", d, passed, rows)
	}
	if got := series(t, m); got[builds] != 0 || got[drops] != 0 || got[rowsTotal] != rows {
		t.Fatalf("after the build: builds %v, drops %v, rows %v; want 0, 0, %d", got[builds], got[drops], got[rowsTotal], rows)
	}

	// Dropped: the first pass removes its entries (fewer than a chunk of a drop's), the
	// next finds none left and ends the drop.
	if err := eng.SetTableSettings(ctx, "a", "t", storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	if n := pass(); n != rows {
		t.Fatalf("the drop's first pass removed %d entries, want %d", n, rows)
	}
	if got := series(t, m); got[drops] != 1 || got[builds] != 0 {
		t.Fatalf("with the dropped index's entries removed but its drop not ended: drops %v, builds %v; want 1, 0", got[drops], got[builds])
	}
	if n := pass(); n != 0 {
		t.Fatalf("the drop's second pass removed %d entries, want 0", n)
	}
	if got := series(t, m); got[drops] != 0 || got[rowsTotal] != rows {
		t.Fatalf("after the drop: drops %v, rows %v; want 0, %d", got[drops], got[rowsTotal], rows)
	}
}
