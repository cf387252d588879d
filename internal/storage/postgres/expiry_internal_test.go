package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestPurgeExpiredPlan checks that the purge of expired rows reads the partial expiry
// index (in expiry order, up to the first row not expired) and finds rows by primary
// key, so that its cost follows the rows that expire, not the table.
func TestPurgeExpiredPlan(t *testing.T) {
	ctx := context.Background()
	e := internalEngine(t)
	if e.dialect != dialectPostgres {
		t.Skip("plan shapes are PostgreSQL's")
	}
	acct := fmt.Sprintf("plan%016x", rand.Uint64())
	if _, err := e.pool.Exec(ctx, `INSERT INTO cerulean_tables (account, key, name, id) VALUES ($1, 'p'::BYTEA, 'P', nextval('cerulean_table_ids'))`, []byte(acct)); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := e.pool.QueryRow(ctx, `SELECT id FROM cerulean_tables WHERE account = $1`, []byte(acct)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	defer e.pool.Exec(context.Background(), `DELETE FROM cerulean_entities WHERE table_id = $1`, id)
	// 20,000 rows without expiry, 2,000 expiring far ahead, 200 expired.
	if _, err := e.pool.Exec(ctx, `INSERT INTO cerulean_entities (table_id, pk, rk, version, props, expiry)
		SELECT $1, 'p'::BYTEA, convert_to(lpad(i::TEXT, 6, '0'), 'UTF8'), 1, '\x00'::BYTEA,
			CASE WHEN i <= 200 THEN i WHEN i <= 2200 THEN 9000000000000000000 END
		FROM generate_series(1, 22200) i`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE cerulean_entities`); err != nil {
		t.Fatal(err)
	}
	sql := strings.Replace(e.q.purgeExpired, "$1", "1000", 1)
	rows, err := e.pool.Query(ctx, "EXPLAIN "+sql)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	t.Logf("purge plan:\n%s", text)
	if !strings.Contains(text, "cerulean_entities_expiry") {
		t.Fatalf("the purge does not read the expiry index:\n%s", text)
	}
	if strings.Contains(text, "Seq Scan on cerulean_entities") || strings.Contains(text, "Sort") {
		t.Fatalf("the purge scans the table:\n%s", text)
	}
	n, err := e.PurgeExpired(ctx)
	if err != nil || n < 200 {
		t.Fatalf("PurgeExpired = %d, %v; want at least this test's 200 rows", n, err)
	}
	var left int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM cerulean_entities WHERE table_id = $1`, id).Scan(&left); err != nil || left != 22000 {
		t.Fatalf("%d rows left, %v; want 22000", left, err)
	}
}
