package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// This file is the only place where SQL differs between the databases the engine runs on.
// Everything else is SQL that PostgreSQL 15+, YugabyteDB and CockroachDB all accept:
// BYTEA keys, row-value comparisons, INSERT … ON CONFLICT, data-modifying CTEs with
// RETURNING, sequences and GREATEST.

// dialect names the database behind the connection, as its version() string tells.
type dialect uint8

const (
	dialectPostgres dialect = iota
	dialectYugabyte
	dialectCockroach
)

func (d dialect) String() string {
	switch d {
	case dialectYugabyte:
		return "yugabytedb"
	case dialectCockroach:
		return "cockroachdb"
	}
	return "postgresql"
}

// detectDialect reads version(): YugabyteDB reports "PostgreSQL 11.2-YB-…" or
// "…-YB-…", CockroachDB "CockroachDB CCL v…"; anything else is treated as PostgreSQL
// (Citus and managed PostgreSQL services included).
func detectDialect(ctx context.Context, pool *pgxpool.Pool) (dialect, string, error) {
	var v string
	if err := pool.QueryRow(ctx, "SELECT version()").Scan(&v); err != nil {
		return 0, "", err
	}
	switch {
	case strings.Contains(v, "CockroachDB"):
		return dialectCockroach, v, nil
	case strings.Contains(v, "-YB-"), strings.Contains(v, "Yugabyte"):
		return dialectYugabyte, v, nil
	}
	return dialectPostgres, v, nil
}

// nowTicks is an SQL expression for the database server's wall clock in 100 ns ticks
// since the Unix epoch (the unit of entity versions). clock_timestamp() rather than now()
// so that two statements of one transaction on the same row still see the clock move;
// the statements also take GREATEST with the row's previous version + 1, so versions stay
// strictly increasing even if the clock stands still or steps back.
func (d dialect) nowTicks() string {
	switch d {
	case dialectCockroach:
		// EXTRACT returns FLOAT here: a float64 holds today's epoch in microseconds
		// exactly, so scale to microseconds first, round, then to ticks.
		return "((EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::INT8 * 10)"
	}
	// PostgreSQL 14+ (and YugabyteDB's 11-based fork, as double precision) return the
	// epoch with microseconds; the product is exact in NUMERIC.
	return "((EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT * 10)"
}

// entitiesPrimaryKey is the primary key clause of the entities table. YugabyteDB shards
// the first primary-key column by hash unless told otherwise, which would put a whole
// table on one tablet and lose the ordered scans; ASC makes it range-sharded like the
// others.
func (d dialect) entitiesPrimaryKey() string {
	if d == dialectYugabyte {
		return "PRIMARY KEY (table_id ASC, pk ASC, rk ASC)"
	}
	return "PRIMARY KEY (table_id, pk, rk)"
}

// tablesPrimaryKey is the catalogue's primary key clause (range-sharded on YugabyteDB
// too, so ListTables reads it in order).
func (d dialect) tablesPrimaryKey() string {
	if d == dialectYugabyte {
		return "PRIMARY KEY (account ASC, key ASC)"
	}
	return "PRIMARY KEY (account, key)"
}

// expiryIndex is the statement that creates the partial index of expiring rows, which
// the purge walks in expiry order (range-sharded on YugabyteDB too). Rows that never
// expire (expiry NULL) are not in it, so it costs nothing to tables without a
// time-to-live.
func (d dialect) expiryIndex() string {
	if d == dialectYugabyte {
		return `CREATE INDEX cerulean_entities_expiry ON cerulean_entities (expiry ASC) WHERE expiry IS NOT NULL`
	}
	return `CREATE INDEX cerulean_entities_expiry ON cerulean_entities (expiry) WHERE expiry IS NOT NULL`
}

// positionQuery reads the commit position the database has reached, as text.
//
// PostgreSQL: the WAL insert position, "X/Y" (see positions.go). Read after a commit,
// it is at or past the end of the commit's WAL record whatever synchronous_commit says,
// so a replica that has replayed up to it has replayed the commit.
//
// YugabyteDB and CockroachDB have no WAL position a client can read; the position is
// the database clock in ticks ({now}), read after the commit. Both serve consistent
// reads from every node (a read that starts after a commit sees it), so a position
// there only orders a session's writes, up to the clock offset between nodes.
func (d dialect) positionQuery() string {
	if d == dialectPostgres {
		return `SELECT pg_current_wal_insert_lsn()::TEXT`
	}
	return `SELECT ({now})::TEXT`
}

// markQuery is a statement that makes its (implicit) transaction write a commit record,
// so that the position read after it is above every position read before: an Apply that
// ends up writing no row (an insert and a delete of one entity, say) still reports a
// later position than the Applies before it. On PostgreSQL, txid_current() assigns the
// transaction an id, and a transaction with an id logs its commit. The clock positions
// of the other databases move by themselves.
func (d dialect) markQuery() string {
	if d == dialectPostgres {
		return `SELECT txid_current()`
	}
	return `SELECT 1`
}

// sql expands the dialect placeholders in a statement: {now} for nowTicks.
func (d dialect) sql(s string) string {
	return strings.ReplaceAll(s, "{now}", d.nowTicks())
}
