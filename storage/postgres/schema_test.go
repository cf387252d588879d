package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestMigrateFromVersion1 opens a database at schema version 1 that already holds a
// table (in a schema of its own, chosen with search_path) and checks that migration 2
// adds ACLs and service properties to it.
func TestMigrateFromVersion1(t *testing.T) {
	url := os.Getenv("CERULEAN_TEST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CERULEAN_TEST_POSTGRES_URL is not set")
		}
		t.Skip("CERULEAN_TEST_POSTGRES_URL is not set; scripts/test starts PostgreSQL and sets it")
	}
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	schema := fmt.Sprintf("cerulean_migrate_%016x", rand.Uint64())
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	url += sep + "search_path=" + schema

	// Version 1 only, with a table in it.
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
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
}
