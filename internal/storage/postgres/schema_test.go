package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestMigrateFromVersion1 opens a database at schema version 1 that already holds a
// table with an entity (in a schema of its own, chosen with search_path) and checks
// that migration 2 adds ACLs and service properties to it, and migrations 3 and 4 table
// settings and expiry: the old table is standard, its entity never expires, and both
// take new settings and writes.
func TestMigrateFromVersion1(t *testing.T) {
	url := os.Getenv("CERULEAN_TEST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CERULEAN_TEST_POSTGRES_URL is not set")
		}
		t.Skip("CERULEAN_TEST_POSTGRES_URL is not set; scripts/test starts PostgreSQL and sets it")
	}
	ctx := context.Background()
	// Version 1 only, with a table in it.
	pool, url := schemaPool(t, url)
	d, _, err := detectDialect(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateSteps(ctx, pool, d, migrations[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO cerulean_tables (account, key, name, id)
		VALUES ('a'::BYTEA, 'old'::BYTEA, 'Old', nextval('cerulean_table_ids'))`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO cerulean_entities (table_id, pk, rk, version, props)
		SELECT id, 'p'::BYTEA, 'r'::BYTEA, 1, '\x00'::BYTEA FROM cerulean_tables`); err != nil {
		t.Fatal(err)
	}
	pool.Close()

	e, err := Open(ctx, url, Options{DisablePurger: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var newest int64
	if err := e.pool.QueryRow(ctx, `SELECT MAX(version) FROM cerulean_migrations`).Scan(&newest); err != nil || newest != migrations[len(migrations)-1].version {
		t.Fatalf("schema version %d, %v after Open; want %d", newest, err, migrations[len(migrations)-1].version)
	}
	if acl, err := e.GetTableACL(ctx, "a", "OLD"); err != nil || acl != nil {
		t.Fatalf("ACL of a table from before the migration = %q, %v; want nil", acl, err)
	}
	if err := e.SetTableACL(ctx, "a", "Old", []byte("acl")); err != nil {
		t.Fatal(err)
	}
	if acl, err := e.GetTableACL(ctx, "a", "old"); err != nil || string(acl) != "acl" {
		t.Fatalf("ACL after set = %q, %v", acl, err)
	}
	if err := e.SetServiceProperties(ctx, "a", []byte("props")); err != nil {
		t.Fatal(err)
	}
	if p, err := e.GetServiceProperties(ctx, "a"); err != nil || string(p) != "props" {
		t.Fatalf("service properties after set = %q, %v", p, err)
	}

	if info, err := e.GetTable(ctx, "a", "old"); err != nil || !info.Settings.IsStandard() {
		t.Fatalf("table from before the migration: %+v, %v; want a standard table", info, err)
	}
	if _, err := e.Get(ctx, "a", "Old", "p", "r"); err != nil {
		t.Fatalf("entity from before the migration: %v", err)
	}
	ttl := []entity.Property{{Name: storage.DefaultTTLProperty, Value: entity.Int32Value(60)}}
	if _, err := e.Apply(ctx, "a", "Old", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "s", Props: ttl}}); err != nil {
		t.Fatalf("write to a table from before the migration: %v", err)
	}
	elastic := storage.TableSettings{Elastic: true, DefaultTTL: 3600}
	if err := e.SetTableSettings(ctx, "a", "old", elastic); err != nil {
		t.Fatal(err)
	}
	applied, err := e.Apply(ctx, "a", "Old", "p", []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: "r", Props: ttl}})
	if err != nil {
		t.Fatal(err)
	}
	var expiry *int64
	if err := e.pool.QueryRow(ctx, `SELECT expiry FROM cerulean_entities WHERE rk = 'r'::BYTEA`).Scan(&expiry); err != nil {
		t.Fatal(err)
	}
	if expiry == nil || *expiry != applied.Versions[0]+60*10_000_000 {
		t.Fatalf("expiry after the settings change: %v, want version %d + 60 s", expiry, applied.Versions[0])
	}
}

// TestMigrateIndexes migrates a database at schema version 6 that holds an entity to
// version 7 and checks the index tables: an entry per (index, key, row), a unique entry
// per (index, key) whoever holds it, and the entries of one row found by its keys.
func TestMigrateIndexes(t *testing.T) {
	ctx := context.Background()
	pool, d := poolAtVersion(t, 6)
	if err := migrate(ctx, pool, d); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`INSERT INTO cerulean_index_entries VALUES (1, 1, 'k'::BYTEA, 'p'::BYTEA, 'a'::BYTEA)`,
		`INSERT INTO cerulean_index_entries VALUES (1, 1, 'k'::BYTEA, 'p'::BYTEA, 'b'::BYTEA)`,
		`INSERT INTO cerulean_unique_entries VALUES (1, 1, 'k'::BYTEA, 'p'::BYTEA, 'a'::BYTEA)`,
		`INSERT INTO cerulean_unique_entries VALUES (1, 2, 'k'::BYTEA, 'p'::BYTEA, 'b'::BYTEA)`,
		`INSERT INTO cerulean_index_work (table_id, index_id, kind) VALUES (1, 1, 0)`,
	} {
		if _, err := pool.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	_, err := pool.Exec(ctx, `INSERT INTO cerulean_unique_entries VALUES (1, 1, 'k'::BYTEA, 'p'::BYTEA, 'c'::BYTEA)`)
	if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "23505" || pe.TableName != "cerulean_unique_entries" {
		t.Fatalf("a second holder of a unique value: %v, want SQLSTATE 23505 on cerulean_unique_entries", err)
	}
	// A row's entries are found by its keys through an index (what a write deletes by).
	for _, tab := range []string{"cerulean_index_entries", "cerulean_unique_entries"} {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1 AND indexdef LIKE '%(table_id, pk, rk)'`, tab).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%s: %d indexes on (table_id, pk, rk), %v; want 1", tab, n, err)
		}
	}
}

// TestMigrateUniqueReads migrates a database at schema version 7 whose unique index has
// entries only in cerulean_unique_entries (as version 7 wrote them) to version 8, and
// checks that they are then in cerulean_index_entries too, where every index is read.
func TestMigrateUniqueReads(t *testing.T) {
	ctx := context.Background()
	pool, d := poolAtVersion(t, 7)
	for _, s := range []string{
		`INSERT INTO cerulean_index_entries VALUES (1, 1, 'k'::BYTEA, 'p'::BYTEA, 'a'::BYTEA)`,
		`INSERT INTO cerulean_unique_entries VALUES (1, 2, 'k'::BYTEA, 'p'::BYTEA, 'a'::BYTEA)`,
		`INSERT INTO cerulean_unique_entries VALUES (1, 2, 'l'::BYTEA, 'p'::BYTEA, 'b'::BYTEA)`,
		`INSERT INTO cerulean_unique_entries VALUES (2, 1, 'k'::BYTEA, 'q'::BYTEA, 'c'::BYTEA)`,
	} {
		if _, err := pool.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := migrate(ctx, pool, d); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT table_id, index_id, key, pk, rk FROM cerulean_index_entries ORDER BY table_id, index_id, key, pk, rk`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var tid, idx int64
		var key, pk, rk []byte
		if err := rows.Scan(&tid, &idx, &key, &pk, &rk); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d/%d/%s/%s/%s", tid, idx, key, pk, rk))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"1/1/k/p/a", "1/2/k/p/a", "1/2/l/p/b", "2/1/k/q/c"}; !slices.Equal(got, want) {
		t.Fatalf("plain entries after migration 8: %v, want %v", got, want)
	}
}

// schemaPool returns a pool on the database at url whose search_path is a schema of its
// own, empty, dropped when the test ends (a database at whatever schema version a test
// migrates it to, beside the shared one), and the URL that reaches that schema.
func schemaPool(t *testing.T, url string) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	schema := fmt.Sprintf("cerulean_migrate_%016x", rand.Uint64())
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	url += sep + "search_path=" + schema
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, url
}

// poolAtVersion returns a pool on a schema of its own (schemaPool) migrated through the
// first n steps, and the database's dialect; it skips the test without a database.
func poolAtVersion(t *testing.T, n int) (*pgxpool.Pool, dialect) {
	t.Helper()
	url := os.Getenv("CERULEAN_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("CERULEAN_TEST_POSTGRES_URL is not set; scripts/test starts PostgreSQL and sets it")
	}
	ctx := context.Background()
	pool, _ := schemaPool(t, url)
	d, _, err := detectDialect(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateSteps(ctx, pool, d, migrations[:n]); err != nil {
		t.Fatal(err)
	}
	return pool, d
}
