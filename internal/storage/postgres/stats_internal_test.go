package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5"
)

// TestLookupsIgnoreStats: the statements that look up many keys at once (a group of
// point reads, getMany; a write's read of its rows, readRows, and of its one row,
// readRow) probe the whole primary key
// for each key even when the table's statistics are misleading. The test makes them so,
// in a schema of its own: the entity table analysed while every table held one entity
// (so the planner takes every table id for unique), then 20,000 entities written to one
// partition behind the statistics' back. The statements' generic plans (the ones a
// prepared statement settles on) must then read one row per key found; written as plain
// joins they read the whole table for each key (checked: getMany "11669 rows per
// probe", readRows "Rows Removed by Filter: 19999").
func TestLookupsIgnoreStats(t *testing.T) {
	ctx := context.Background()
	_, _, url := ownSchema(t, "stats")
	e, err := Open(ctx, url, Options{DisablePurger: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	const acct = "stats"
	for i := range 8 {
		name := fmt.Sprintf("T%d", i)
		if err := e.CreateTable(ctx, acct, name, storage.TableSettings{}); err != nil {
			t.Fatal(err)
		}
		props := []entity.Property{{Name: "N", Value: entity.Int32Value(1)}}
		if _, err := e.Apply(ctx, acct, name, "p", []storage.Mutation{{Op: storage.Insert, RowKey: "counter", Props: props}}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	for _, sql := range []string{
		`ANALYZE cerulean_entities`,
		`ALTER TABLE cerulean_entities SET (autovacuum_enabled = false)`,
		`INSERT INTO cerulean_entities (table_id, pk, rk, version, props)
			SELECT t.id, 'p', lpad(i::TEXT, 9, '0')::BYTEA, i, '\x00'::BYTEA
			FROM cerulean_tables t, generate_series(1, 20000) i WHERE t.name = 'T0'`,
		`SET plan_cache_mode = force_generic_plan`,
	} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	key, rks := []byte(storage.TableKey("T0")), [][]byte{[]byte("000000005"), []byte("000015000"), []byte("missing")}
	for _, q := range []struct {
		name, sql string
		args      []any
	}{
		{"getMany", e.q.getMany, []any{[]int64{0, 1, 2}, [][]byte{[]byte(acct), []byte(acct), []byte(acct)},
			[][]byte{key, key, key}, [][]byte{[]byte("p"), []byte("p"), []byte("p")}, rks}},
		{"readRows", e.q.readRows, []any{[]byte(acct), key, []byte("p"), rks}},
		{"readRowsProps", e.q.readRowsProps, []any{[]byte(acct), key, []byte("p"), rks}},
		{"readRow", e.q.readRow, []any{[]byte(acct), key, []byte("p"), rks[1]}},
		{"readRowProps", e.q.readRowProps, []any{[]byte(acct), key, []byte("p"), rks[1]}},
	} {
		t.Run(q.name, func(t *testing.T) {
			if _, err := c.Exec(ctx, "PREPARE lookup AS "+q.sql); err != nil {
				t.Fatal(err)
			}
			defer c.Exec(ctx, "DEALLOCATE lookup") //nolint:errcheck
			// EXECUTE takes its arguments as literals.
			lits := make([]string, len(q.args))
			for i, a := range q.args {
				lits[i] = literal(a)
			}
			rows, err := c.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE lookup("+strings.Join(lits, ", ")+")")
			if err != nil {
				t.Fatal(err)
			}
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			// Each probe of the entity table must find at most its one row (EXPLAIN shows
			// the rows per loop); a plan that probes by table id alone reads 20,000.
			probes, inEntity := 0, false
			for i, line := range plan {
				if strings.Contains(line, "->") || i == 0 {
					inEntity = strings.Contains(line, "on cerulean_entities")
				}
				if inEntity && strings.Contains(line, "Rows Removed by") {
					t.Errorf("the entity table's probes read rows they filter out (%s):\n%s", strings.TrimSpace(line), strings.Join(plan, "\n"))
				}
				at := strings.Index(line, "(actual rows=")
				if !strings.Contains(line, "on cerulean_entities") || at < 0 {
					continue // not the entity table, or never executed
				}
				var n, loops int
				if _, err := fmt.Sscanf(line[at:], "(actual rows=%d loops=%d)", &n, &loops); err != nil {
					t.Fatalf("plan line %d %q: %v", i, line, err)
				}
				probes += loops
				if n > 1 {
					t.Errorf("%d rows per probe of the entity table:\n%s", n, strings.Join(plan, "\n"))
				}
			}
			if probes == 0 {
				t.Errorf("no probe of the entity table:\n%s", strings.Join(plan, "\n"))
			}
		})
	}
}

// literal is a SQL literal of a BYTEA, BYTEA[] or INT8[] argument.
func literal(a any) string {
	switch v := a.(type) {
	case []byte:
		return fmt.Sprintf(`'\x%x'::BYTEA`, v)
	case [][]byte:
		s := make([]string, len(v))
		for i := range v {
			s[i] = fmt.Sprintf(`'\x%x'`, v[i])
		}
		return "ARRAY[" + strings.Join(s, ", ") + "]::BYTEA[]"
	case []int64:
		s := make([]string, len(v))
		for i := range v {
			s[i] = fmt.Sprint(v[i])
		}
		return "ARRAY[" + strings.Join(s, ", ") + "]::INT8[]"
	}
	panic(fmt.Sprintf("literal of %T", a))
}

// TestPendingPurges: Stats.PendingPurges counts a table deleted through this front end
// at once, keeps counting it through a purge pass that fails, and is 0 once a pass has
// purged every deleted table's rows, another front end's included.
func TestPendingPurges(t *testing.T) {
	ctx := context.Background()
	admin, schema, url := ownSchema(t, "purges")
	open := func() *Engine {
		t.Helper()
		e, err := Open(ctx, url, Options{DisablePurger: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	e, other := open(), open()
	fill := func(e *Engine, name string, n int) {
		t.Helper()
		if err := e.CreateTable(ctx, "purges", name, storage.TableSettings{}); err != nil {
			t.Fatal(err)
		}
		for b := 0; b < n; b += 100 {
			var muts []storage.Mutation
			for r := b; r < min(b+100, n); r++ {
				muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%05d", r)})
			}
			if _, err := e.Apply(ctx, "purges", name, "p", muts); err != nil {
				t.Fatal(err)
			}
		}
	}
	pending := func(e *Engine, want int64, when string) {
		t.Helper()
		if got := e.Stats().PendingPurges; got != want {
			t.Errorf("%s: PendingPurges %d, want %d", when, got, want)
		}
	}
	rowsLeft := func() int {
		t.Helper()
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+schema+".cerulean_entities").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	fill(e, "T", PurgeChunk+5) // two chunks
	fill(other, "U", 10)
	pending(e, 0, "before any delete")
	if err := e.DeleteTable(ctx, "purges", "T"); err != nil {
		t.Fatal(err)
	}
	pending(e, 1, "after deleting T")
	if err := other.DeleteTable(ctx, "purges", "U"); err != nil {
		t.Fatal(err)
	}
	pending(e, 1, "after another front end deleted U (not seen yet)")
	pending(other, 1, "the other front end, after deleting U")

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.Purge(canceled); err == nil {
		t.Fatal("a purge with a canceled context succeeded")
	}
	pending(e, 1, "after a purge pass that failed")
	if n := rowsLeft(); n != PurgeChunk+5+10 {
		t.Fatalf("%d rows left after a failed pass, want %d", n, PurgeChunk+5+10)
	}

	if err := e.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	pending(e, 0, "after a purge pass")
	if n := rowsLeft(); n != 0 {
		t.Errorf("%d rows left after a purge pass (T's and the other front end's U)", n)
	}
	if err := other.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	pending(other, 0, "the other front end, after its pass")
}

// ownSchema creates a schema of the test's own (prefix and a random suffix) in the test
// database, so that what the test writes and analyses meets no other test's, and drops it
// when the test ends, after the engines the test opened later have closed. It returns a
// connection to the database, the schema's name, and the URL of engines that work in it.
func ownSchema(t *testing.T, prefix string) (admin *pgx.Conn, schema, url string) {
	t.Helper()
	ctx := context.Background()
	base := internalURL(t)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(ctx) })
	schema = fmt.Sprintf("%s_%016x", prefix, rand.Uint64())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop the test's schema: %v", err)
		}
	})
	return admin, schema, withParam(base, "search_path="+schema)
}
