package e2e

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/jackc/pgx/v5"

	"github.com/ceruleandb/cerulean/client"
)

// storedCounts are what an engine physically stores for the tables of one server: rows
// (expired ones included) and expiry-index entries.
type storedCounts struct{ rows, expiring int }

// pebbleStored counts, in a stopped server's Pebble data directory, the entity keys and
// the expiry-index keys, by the key kinds of storage/pebble/keys.go (0x10 entity, 0x06
// expiry index). The directory belongs to one test, so they are its tables' rows.
func pebbleStored(t *testing.T, dir string) storedCounts {
	t.Helper()
	db, err := pebbledb.Open(dir, &pebbledb.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open %s read-only: %v", dir, err)
	}
	defer db.Close()
	count := func(kind byte) int {
		it, err := db.NewIter(&pebbledb.IterOptions{LowerBound: []byte{kind}, UpperBound: []byte{kind + 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		n := 0
		for it.First(); it.Valid(); it.Next() {
			n++
		}
		return n
	}
	return storedCounts{rows: count(0x10), expiring: count(0x06)}
}

// TestExpiryPurgeAndRestart: expired entities stay invisible across a restart, and the
// background pass removes them from storage within its interval, leaving the others.
// The server checks for expired rows every 300 ms (--expiry-interval).
func TestExpiryPurgeAndRestart(t *testing.T) {
	t.Parallel()
	const interval = 300 * time.Millisecond
	srv := startServer(t, withArgs("--expiry-interval", interval.String()))
	name := tableName(t)
	if err := settingsClient(t, srv).CreateTable(ctx(t), name, &client.TableSettings{Elastic: true, DefaultTimeToLive: 1}); err != nil {
		t.Fatal(err)
	}
	c := newServiceClient(t, srv).NewClient(name)
	const n = 40
	start := time.Now()
	for i := range n {
		// The even ones expire after 1 s (the table's TTL), while the server is stopped;
		// the odd ones after 3 s, once it runs again.
		e := map[string]any{"PartitionKey": fmt.Sprintf("p%d", i%4), "RowKey": fmt.Sprintf("r%02d", i)}
		if i%2 == 1 {
			e["TTLInSeconds"] = 3
		}
		addEntity(t, c, e)
	}
	// Each entity's time-to-live runs from its own write: the last ones expire up to the
	// writing's length after the first.
	written := time.Now()
	for i := range 3 {
		addEntity(t, c, map[string]any{"PartitionKey": "keep", "RowKey": fmt.Sprint(i), "TTLInSeconds": -1})
	}
	if time.Since(start) > time.Second-ttlMargin {
		t.Skipf("writing %d entities took %v: too slow to stop the server before they expire", n, time.Since(start))
	}
	if err, _ := srv.terminate(stopTimeout); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if !onPostgres() {
		// Nothing expired yet when it stopped: every row and index entry is stored.
		if got := pebbleStored(t, srv.DataDir); got != (storedCounts{rows: n + 3, expiring: n}) {
			t.Errorf("stored before the expiry: %+v; want %d rows, %d expiring", got, n+3, n)
		}
	}
	sleepUntil(written.Add(time.Second + ttlMargin))
	srv.restart(t) // on a new port
	c = newServiceClient(t, srv).NewClient(name)

	// At once after the restart: the 1 s entities are gone, the 3 s ones still there.
	all := listAll(t, c, nil)
	late := time.Since(start) > 3*time.Second-ttlMargin
	if !late && len(all) != n/2+3 {
		t.Errorf("%d entities visible after the restart; want %d", len(all), n/2+3)
	}
	requireAbsent(t, c, "p0", "r00")
	if !late {
		requirePresent(t, c, "p1", "r01")
	}

	// Once the rest has expired, only the three without a TTL are visible, and storage
	// holds only them once the background pass has run.
	sleepUntil(written.Add(3*time.Second + ttlMargin))
	if got := rowKeysOf(t, listAll(t, c, nil)); len(got) != 3 {
		t.Errorf("visible after every expiry: %v; want the 3 without a TTL", got)
	}
	if _, err := c.GetEntity(ctx(t), "p1", "r01", nil); err == nil {
		t.Error("an entity expired after the restart is still visible")
	} else {
		requireRespErr(t, err, http.StatusNotFound, "ResourceNotFound")
	}
	want := storedCounts{rows: 3, expiring: 0}
	deadline := time.Now().Add(3 * interval)
	if onPostgres() {
		// Several front ends purge a shared database; it is polled while the server runs.
		var got storedCounts
		for {
			got = postgresStored(t, name)
			if got == want || time.Now().After(deadline.Add(2*time.Second)) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if got != want {
			t.Errorf("stored %v after the expiry and %v of purge passes; want %+v", got, 3*interval, want)
		}
		return
	}
	sleepUntil(deadline)
	if err, _ := srv.terminate(stopTimeout); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if got := pebbleStored(t, srv.DataDir); got != want {
		t.Errorf("stored %+v after the expiry and %v of purge passes; want %+v", got, 3*interval, want)
	}
}

// postgresStored counts, in the database of CERULEAN_TEST_ENGINE_ARGS' --postgres-url,
// the rows of the default account's table name and those with an expiry (the column the
// purge walks; storage/postgres/schema.go).
func postgresStored(t *testing.T, name string) storedCounts {
	t.Helper()
	args := strings.Fields(os.Getenv("CERULEAN_TEST_ENGINE_ARGS"))
	i := slices.Index(args, "--postgres-url")
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("CERULEAN_TEST_ENGINE_ARGS %q has no --postgres-url", args)
	}
	conn, err := pgx.Connect(ctx(t), args[i+1])
	if err != nil {
		t.Fatalf("connect to the test database: %v", err)
	}
	defer conn.Close(ctx(t))
	var c storedCounts
	err = conn.QueryRow(ctx(t), `SELECT count(*), count(e.expiry) FROM cerulean_entities e
		JOIN cerulean_tables t ON t.id = e.table_id WHERE t.account = $1 AND t.key = $2`,
		[]byte(devAccount), []byte(strings.ToLower(name))).Scan(&c.rows, &c.expiring)
	if err != nil {
		t.Fatalf("count stored rows: %v", err)
	}
	return c
}
