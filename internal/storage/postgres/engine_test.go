package postgres_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/pgtest"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/enginetest"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// testURL returns the database the tests use (scripts/test starts a throwaway one and
// exports CERULEAN_TEST_POSTGRES_URL). Without it the tests skip, except in CI, where a
// missing database is a failure.
func testURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("CERULEAN_TEST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CERULEAN_TEST_POSTGRES_URL is not set (scripts/test starts PostgreSQL and sets it)")
		}
		t.Skip("CERULEAN_TEST_POSTGRES_URL is not set; scripts/test starts PostgreSQL and sets it")
	}
	return url
}

func open(t testing.TB, opts postgres.Options) *postgres.Engine {
	t.Helper()
	e, err := postgres.Open(context.Background(), testURL(t), opts)
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// conformanceOptions leave the removal of expired rows and of old change records, and
// index builds, to the suite (PurgeExpired, TrimChanges, BuildIndexes): a background pass
// in the middle of a test that checks what a purge, a trim or a build does would do it
// first.
var conformanceOptions = postgres.Options{ExpiryInterval: time.Hour, IndexInterval: -1}

func TestConformance(t *testing.T) {
	url := testURL(t)
	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close) // after the parallel subtests
	enginetest.Run(t, enginetest.Harness{
		Open: func(t *testing.T) storage.Engine { return open(t, conformanceOptions) },
		Reopen: func(t *testing.T, e storage.Engine) storage.Engine {
			if err := e.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return open(t, conformanceOptions)
		},
		PurgeExpired: func(t *testing.T, e storage.Engine) {
			if _, err := e.(*postgres.Engine).PurgeExpired(t.Context()); err != nil {
				t.Fatalf("PurgeExpired: %v", err)
			}
		},
		StoredRows: func(t *testing.T, _ storage.Engine, account, table string) int {
			return storedRows(t, db, account, table)
		},
	})
}

// storedRows counts the rows the database stores for a table, expired ones included.
func storedRows(t testing.TB, db *pgxpool.Pool, account, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM cerulean_entities
		WHERE table_id = (SELECT id FROM cerulean_tables WHERE account = $1 AND key = $2)`,
		[]byte(account), []byte(storage.TableKey(table))).Scan(&n); err != nil {
		t.Fatalf("count stored rows: %v", err)
	}
	return n
}

// replicaURLs returns the streaming standbys of the test database that scripts/test
// starts: one that replays at once, and one that applies WAL after a delay.
func replicaURLs(t testing.TB) (prompt, delayed string) {
	t.Helper()
	prompt, delayed, _ = pgtest.ReplicaURLs(t)
	return prompt, delayed
}

// TestConformanceReplicas runs the suite on engines that have both standbys as read
// replicas: every view the suite opens at a position, at every level, must see what it
// asks for, whichever replica or the primary serves it.
func TestConformanceReplicas(t *testing.T) {
	url := testURL(t)
	prompt, delayed := replicaURLs(t)
	opts := conformanceOptions
	opts.ReplicaURLs = []string{prompt, delayed}
	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	enginetest.Run(t, enginetest.Harness{
		Open: func(t *testing.T) storage.Engine { return open(t, opts) },
		Reopen: func(t *testing.T, e storage.Engine) storage.Engine {
			if err := e.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return open(t, opts)
		},
		PurgeExpired: func(t *testing.T, e storage.Engine) {
			if _, err := e.(*postgres.Engine).PurgeExpired(t.Context()); err != nil {
				t.Fatalf("PurgeExpired: %v", err)
			}
		},
		StoredRows: func(t *testing.T, _ storage.Engine, account, table string) int {
			return storedRows(t, db, account, table)
		},
	})
}
