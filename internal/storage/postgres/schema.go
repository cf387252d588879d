package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The schema. Every object carries the cerulean_ prefix so the engine can share a
// database (or a schema chosen with search_path in the URL) with other applications.
//
//	cerulean_migrations  version → when applied; the schema version the database is at
//	cerulean_table_ids   sequence of table ids; never reused, so a table deleted and
//	                     created again gets a new id and cannot see the old rows
//	cerulean_tables      (account, key) → name, id: the catalogue; key is
//	                     storage.TableKey(name) as bytes, so listing is in byte order
//	cerulean_entities    (table_id, pk, rk) → version, props: one row per entity; keys
//	                     are BYTEA so every database orders them by bytes; props is the
//	                     entity.AppendProps encoding, which keeps every EDM value exactly
//	                     (NUL in strings, NaN and -0 bits, 100 ns DateTimes)
//	cerulean_purges      ids of deleted tables whose rows are still being removed
//	cerulean_tables.acl  (version 2) the table's stored access policies, opaque bytes,
//	                     NULL when none; it goes with the catalogue row, so a table
//	                     deleted and created again starts without
//	cerulean_service_properties
//	                     (version 2) account → props: each account's service
//	                     properties, opaque bytes; account is BYTEA like the
//	                     catalogue's, so any account string is stored exactly
//	cerulean_tables.settings
//	                     (version 3) the table's storage.TableSettings
//	                     (storage.MarshalSettings), NULL for a standard table
//	cerulean_tables.gen  (version 3) the settings' generation: a new value of the
//	                     cerulean_table_gens sequence at every create and settings
//	                     change, NULL (read as 0) for tables from before version 3; a
//	                     write computes expiries from cached settings and commits only
//	                     if the generation is still the cached one (settings.go)
//	cerulean_tables_id  (version 8) a unique index of the catalogue by table id, for
//	                     the statements that name a table by id alone
//	cerulean_entities.expiry
//	                     (version 3) when the row expires, in version ticks, NULL
//	                     for never: storage.Expiry at the write; reads treat a row
//	                     with expiry <= the database clock as absent
//	cerulean_entities_expiry
//	                     (version 4) partial index on expiry WHERE expiry IS NOT
//	                     NULL, which the purge of expired rows walks (expiry.go)
//	cerulean_feeds       (version 5) table id → the table's change feed: its counter
//	                     (next: the next number to hand out), retention mark (removed:
//	                     the highest number removed), retention, whether it records
//	                     (on_) and whether its table is deleted, and the table's account
//	                     and key, so a deleted table's feed stays readable by its id
//	                     (changes.go)
//	cerulean_feed_txns   (version 5) (table id, last) → base, txn, at: one row per
//	                     transaction that recorded changes of the table, holding the
//	                     numbers base … last it took from the counter as its last
//	                     statement, the transaction's id and when (for retention)
//	cerulean_changes     (version 5) (table id, txn, ord) → the record: number
//	                     base + ord of its transaction's row in cerulean_feed_txns;
//	                     props NULL on a write's record makes it lean: its state is
//	                     the row's (version 6)
//	cerulean_entities.ref_txn, ref_ord
//	                     (version 6) the lean record (txn, ord) holding this version of
//	                     the row by reference, NULL for none; a statement that changes
//	                     or removes the row first copies its properties into that
//	                     record (changes.go, "Lean records"), and the writes of tables
//	                     without the feed leave a row with a reference alone
//	cerulean_index_entries
//	                     (version 7) (table id, index id, index key, pk, rk): one per
//	                     stored row (expired or not) that has every property of a
//	                     declared index (until version 8, a non-unique one), written
//	                     in the row's own transaction (indexes.go); the reads use
//	                     these entries only. Also indexed by (table id, pk, rk), so a
//	                     write removes a row's entries without knowing its old values
//	cerulean_unique_entries
//	                     (version 7) (table id, index id, exact key) → pk, rk: a unique
//	                     index's entries besides, keyed by the exact key
//	                     (storage.IndexDef.AppendUniqueKey); the primary key is the
//	                     uniqueness, decided by the database between front ends
//	                     (SQLSTATE 23505). Version 8 copies them into
//	                     cerulean_index_entries, which a unique index's reads used not
//	                     to, and its new writes key them exactly (those written before
//	                     keep the plain key, which differs only for Int64s beyond 2^53
//	                     that round alike: dropping and adding the index rekeys them)
//	cerulean_index_work  (version 7) (table id, index id) → kind, position: an index
//	                     being built (kind 0: the last key done, whether the writes
//	                     that started before its declaration have ended) or dropped
//	                     (kind 1: its entries are still being removed)

// migration is one step of the schema; steps run in order, each once, in a transaction
// together with the row that records it.
type migration struct {
	version    int64
	statements func(d dialect) []string
}

var migrations = []migration{
	{1, func(d dialect) []string {
		return []string{
			`CREATE SEQUENCE cerulean_table_ids`,
			`CREATE TABLE cerulean_tables (
				account BYTEA NOT NULL,
				key BYTEA NOT NULL,
				name TEXT NOT NULL,
				id BIGINT NOT NULL,
				` + d.tablesPrimaryKey() + `)`,
			`CREATE TABLE cerulean_entities (
				table_id BIGINT NOT NULL,
				pk BYTEA NOT NULL,
				rk BYTEA NOT NULL,
				version BIGINT NOT NULL,
				props BYTEA NOT NULL,
				` + d.entitiesPrimaryKey() + `)`,
			`CREATE TABLE cerulean_purges (
				table_id BIGINT PRIMARY KEY,
				deleted_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
		}
	}},
	{2, func(d dialect) []string {
		return []string{
			// Nullable without a default: no table rewrite on PostgreSQL.
			`ALTER TABLE cerulean_tables ADD COLUMN acl BYTEA`,
			`CREATE TABLE cerulean_service_properties (
				account BYTEA PRIMARY KEY,
				props BYTEA NOT NULL)`,
		}
	}},
	{3, func(d dialect) []string {
		return []string{
			// Nullable without defaults: no rewrite of either table on PostgreSQL, and
			// existing entities never expire.
			`ALTER TABLE cerulean_tables ADD COLUMN settings BYTEA`,
			`ALTER TABLE cerulean_tables ADD COLUMN gen BIGINT`,
			`CREATE SEQUENCE cerulean_table_gens`,
			`ALTER TABLE cerulean_entities ADD COLUMN expiry BIGINT`,
		}
	}},
	// A step of its own: CockroachDB refuses a partial index over a column added in the
	// same transaction (cockroachdb/cockroach#83593). The index starts empty, but
	// building it reads the entities table once (under a lock that holds writes back,
	// on PostgreSQL, for that long).
	{4, func(d dialect) []string {
		return []string{d.expiryIndex()}
	}},
	{5, func(d dialect) []string {
		return []string{
			`CREATE TABLE cerulean_feeds (
				table_id BIGINT PRIMARY KEY,
				account BYTEA NOT NULL,
				key BYTEA NOT NULL,
				next BIGINT NOT NULL,
				removed BIGINT NOT NULL DEFAULT 0,
				retention INT NOT NULL,
				on_ BOOLEAN NOT NULL,
				dropped BOOLEAN NOT NULL DEFAULT FALSE)`,
			`CREATE TABLE cerulean_feed_txns (
				table_id BIGINT NOT NULL,
				last BIGINT NOT NULL,
				base BIGINT NOT NULL,
				txn BIGINT NOT NULL,
				at BIGINT NOT NULL,
				PRIMARY KEY (table_id, last))`,
			`CREATE TABLE cerulean_changes (
				table_id BIGINT NOT NULL,
				txn BIGINT NOT NULL,
				ord INT NOT NULL,
				op SMALLINT NOT NULL,
				pk BYTEA NOT NULL,
				rk BYTEA NOT NULL,
				version BIGINT NOT NULL,
				at BIGINT NOT NULL,
				expiry BIGINT NOT NULL,
				props BYTEA,
				PRIMARY KEY (table_id, txn, ord))`,
		}
	}},
	{6, func(d dialect) []string {
		return []string{
			// Nullable without defaults: no rewrite of the entities.
			`ALTER TABLE cerulean_entities ADD COLUMN ref_txn BIGINT`,
			`ALTER TABLE cerulean_entities ADD COLUMN ref_ord INT`,
		}
	}},
	{7, func(d dialect) []string {
		return []string{
			`CREATE TABLE cerulean_index_entries (
				table_id BIGINT NOT NULL,
				index_id INT NOT NULL,
				key BYTEA NOT NULL,
				pk BYTEA NOT NULL,
				rk BYTEA NOT NULL,
				PRIMARY KEY (table_id, index_id, key, pk, rk))`,
			`CREATE INDEX cerulean_index_entries_rows ON cerulean_index_entries (table_id, pk, rk)`,
			`CREATE TABLE cerulean_unique_entries (
				table_id BIGINT NOT NULL,
				index_id INT NOT NULL,
				key BYTEA NOT NULL,
				pk BYTEA NOT NULL,
				rk BYTEA NOT NULL,
				PRIMARY KEY (table_id, index_id, key))`,
			`CREATE INDEX cerulean_unique_entries_rows ON cerulean_unique_entries (table_id, pk, rk)`,
			`CREATE TABLE cerulean_index_work (
				table_id BIGINT NOT NULL,
				index_id INT NOT NULL,
				kind SMALLINT NOT NULL,
				pk BYTEA,
				rk BYTEA,
				waited BOOLEAN NOT NULL DEFAULT FALSE,
				PRIMARY KEY (table_id, index_id))`,
		}
	}},
	{8, func(d dialect) []string {
		return []string{
			// The statements that name a table by id alone (the swaps' generation check,
			// the index builds' catalogue lock) probe this rather than scan the catalogue.
			`CREATE UNIQUE INDEX cerulean_tables_id ON cerulean_tables (id)`,
			// A unique index is read from its plain entries, as every other index is.
			`INSERT INTO cerulean_index_entries (table_id, index_id, key, pk, rk)
				SELECT table_id, index_id, key, pk, rk FROM cerulean_unique_entries
				ON CONFLICT DO NOTHING`,
		}
	}},
}

// migrate brings the schema up to date. Several front ends may start at once: the
// migrations table is created with IF NOT EXISTS (retrying the races some databases
// report for concurrent creation), and each step inserts its version row first, so a
// second front end blocks on that row until the first commits and then skips the step.
func migrate(ctx context.Context, pool *pgxpool.Pool, d dialect) error {
	return migrateSteps(ctx, pool, d, migrations)
}

// migrateSteps is migrate with the steps given (tests start from an older schema).
func migrateSteps(ctx context.Context, pool *pgxpool.Pool, d dialect, migrations []migration) error {
	const create = `CREATE TABLE IF NOT EXISTS cerulean_migrations (
		version BIGINT PRIMARY KEY,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`
	for attempt := 0; ; attempt++ {
		_, err := pool.Exec(ctx, create)
		if err == nil {
			break
		}
		var pe *pgconn.PgError
		if attempt < 10 && errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07" || retryableCode(pe.Code)) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		return fmt.Errorf("create cerulean_migrations: %w", err)
	}
	var newest int64
	if err := pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM cerulean_migrations`).Scan(&newest); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if known := migrations[len(migrations)-1].version; newest > known {
		return fmt.Errorf("database schema version %d is newer than this build's %d", newest, known)
	}
	for _, m := range migrations {
		if m.version <= newest {
			continue
		}
		for attempt := 0; ; attempt++ {
			err := applyMigration(ctx, pool, d, m)
			var pe *pgconn.PgError
			if err != nil && attempt < 10 && errors.As(err, &pe) && retryableCode(pe.Code) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if err != nil {
				return fmt.Errorf("schema migration %d: %w", m.version, err)
			}
			break
		}
	}
	return nil
}

func applyMigration(ctx context.Context, pool *pgxpool.Pool, d dialect, m migration) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO cerulean_migrations (version) VALUES ($1) ON CONFLICT (version) DO NOTHING`, m.version)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil // another front end applied it meanwhile
		}
		for _, s := range m.statements(d) {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
}
