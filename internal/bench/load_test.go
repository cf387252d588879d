package bench

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/server"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// TestLoadAgainstCerulean runs batchload and bulkload against an in-process Cerulean
// server: each writes exactly --load entities, 100 consecutive ones per partition, and
// bulkload's go into an elastic table of their own.
func TestLoadAgainstCerulean(t *testing.T) {
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	srv, err := server.New(server.Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	cs := "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + auth.DevAccountKey +
		";TableEndpoint=" + hs.URL + "/devstoreaccount1;"
	o := quick(cs)
	o.Workloads = []string{WorkloadBatchLoad, WorkloadBulkLoad}
	o.Load = 2550 // not a whole number of requests or partition units
	o.EntitySize = 200
	o.Table = "loadtest"
	o.Keep = true
	rs, _ := runLogged(t, o)
	for _, r := range rs {
		if r.Entities != int64(o.Load) || r.Errors != 0 || r.EntitiesPerSec <= 0 || strings.HasPrefix(r.Notes, "skipped") {
			t.Errorf("%s: %+v", r.Workload, r)
		}
	}
	tables, _, err := eng.ListTables(context.Background(), auth.DevAccountName, "", 10)
	if err != nil || len(tables) != 2 {
		t.Fatalf("tables %+v, %v", tables, err)
	}
	for _, ti := range tables {
		res, err := eng.Scan(context.Background(), auth.DevAccountName, ti.Name, storage.ScanRequest{Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		want := o.Load
		if ti.Name == "loadtest" {
			want += 100 // the probe batch
		} else if !ti.Settings.Elastic {
			t.Errorf("table %s is not elastic", ti.Name)
		}
		if len(res.Records) != want {
			t.Errorf("table %s: %d entities, want %d", ti.Name, len(res.Records), want)
		}
		perPK := map[string]int{}
		for _, r := range res.Records {
			perPK[r.Entity.PartitionKey]++
		}
		if len(perPK) != o.Partitions+1 && len(perPK) != o.Partitions {
			t.Errorf("table %s: partitions %v", ti.Name, perPK)
		}
	}
}
