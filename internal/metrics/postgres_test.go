package metrics

import (
	"context"
	"strings"
	"testing"

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
	for _, k := range []string{"cerulean_postgres_pool_conns{state=in_use}", "cerulean_postgres_pool_conns{state=idle}", "cerulean_postgres_statement_errors_total{class=other}", "cerulean_postgres_retries_total{}", "cerulean_postgres_pending_table_purges{}"} {
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
