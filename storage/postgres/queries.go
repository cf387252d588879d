package postgres

import "fmt"

// queries are the engine's SQL statements, expanded for the dialect once at Open.
//
// Parameters follow one convention where it helps reading: $1 account, $2 table key
// (storage.TableKey as bytes), $3 PartitionKey, $4 RowKey, all BYTEA.
type queries struct {
	// Single-mutation Apply: one statement each, answering (table id, new version,
	// version before the statement) so that a failed precondition is explained without
	// another round trip. A NULL table id means no such table; a NULL new version means
	// the precondition failed.
	insert1, upsert1, replace1, delete1 string
	// Batch Apply: the same writes, but a failed precondition raises division_by_zero
	// (22012), which aborts the implicit transaction of the pipeline and so every
	// statement of the batch. They answer the new version (the old one for a delete).
	insertB, upsertB, replaceB, deleteB string
	// Batch Apply of inserts only, or insert-or-replaces only (the usual entity group
	// transaction): one statement for every row ($4 RowKeys, $5 properties, $6 how many),
	// answering the RowKeys and versions written, raising 22012 unless all were.
	insertMany, upsertMany string
	// Read-modify-write Apply (merges): read the rows, then compare-and-swap each.
	readRows, readRowsProps            string
	casUpdate, casDelete, casInsert    string
	casUpdateB, casDeleteB, casInsertB string
	// diagnose reads the rows of a failed batch to name its first failing mutation.
	diagnose string

	get, tableExists string
	scan, scanTo     string
	// scanCapped and scanToCapped are scan and scanTo that also stop by size: after the
	// first two rows they return rows only while the sizes of the rows before them (keys
	// and properties, as storage.RecordSize counts them) stay within $6 ($8 for
	// scanToCapped). Sizes come from the column headers, so a row cut off costs an index
	// and heap lookup, not its (TOASTed) properties.
	scanCapped, scanToCapped string

	createTable, getTable, listTables, deleteTable string
	purgeList, purgeChunk, purgeDone               string

	// Stored access policies and service properties: one statement each, no cache.
	getACL, setACL           string
	getSvcProps, setSvcProps string
	clearSvcProps            string
}

// tableID resolves the table inside a statement, so that no front end caches the
// catalogue and a table deleted by another front end is gone for every later statement.
const tableID = `(SELECT id FROM cerulean_tables WHERE account = $1 AND key = $2)`

// raise wraps a data-modifying statement that RETURNs version so that it fails with
// division_by_zero when it changed no row. The COALESCE keeps the division from being
// NULL / 0, which is NULL and not an error; neither operand is a constant, so no planner
// can fold the division away.
func raise(dml string) string {
	return `WITH w AS (` + dml + `) SELECT COALESCE((SELECT version FROM w), 0) / (SELECT count(*) FROM w)`
}

func buildQueries(d dialect) queries {
	var q queries
	const (
		insertDML = `INSERT INTO cerulean_entities (table_id, pk, rk, version, props)
			SELECT id, $3::BYTEA, $4::BYTEA, {now}, $5::BYTEA FROM cerulean_tables WHERE account = $1 AND key = $2
			ON CONFLICT (table_id, pk, rk) DO NOTHING RETURNING version`
		upsertDML = `INSERT INTO cerulean_entities (table_id, pk, rk, version, props)
			SELECT id, $3::BYTEA, $4::BYTEA, {now}, $5::BYTEA FROM cerulean_tables WHERE account = $1 AND key = $2
			ON CONFLICT (table_id, pk, rk) DO UPDATE
			SET version = GREATEST({now}, cerulean_entities.version + 1), props = excluded.props RETURNING version`
		// $6 is the expected version, 0 for any.
		replaceDML = `UPDATE cerulean_entities SET version = GREATEST({now}, version + 1), props = $5::BYTEA
			WHERE table_id = ` + tableID + ` AND pk = $3::BYTEA AND rk = $4::BYTEA AND ($6::BIGINT = 0 OR version = $6::BIGINT)
			RETURNING version`
		// $5 is the expected version, 0 for any.
		deleteDML = `DELETE FROM cerulean_entities
			WHERE table_id = ` + tableID + ` AND pk = $3::BYTEA AND rk = $4::BYTEA AND ($5::BIGINT = 0 OR version = $5::BIGINT)
			RETURNING version`
		current = `(SELECT version FROM cerulean_entities WHERE table_id = (SELECT id FROM t) AND pk = $3::BYTEA AND rk = $4::BYTEA)`
	)
	single := func(dml string, withCurrent bool) string {
		cur := "NULL::BIGINT"
		if withCurrent {
			cur = current
		}
		return `WITH t AS (SELECT id FROM cerulean_tables WHERE account = $1 AND key = $2), w AS (` + dml + `)
			SELECT (SELECT id FROM t), (SELECT version FROM w), ` + cur
	}
	q.insert1 = single(insertDML, false)
	q.upsert1 = single(upsertDML, false)
	q.replace1 = single(replaceDML, true)
	q.delete1 = single(deleteDML, true)
	const many = `WITH w AS (INSERT INTO cerulean_entities (table_id, pk, rk, version, props)
			SELECT t.id, $3::BYTEA, u.rk, {now}, u.props
			FROM cerulean_tables t, unnest($4::BYTEA[], $5::BYTEA[]) AS u (rk, props)
			WHERE t.account = $1 AND t.key = $2
			ON CONFLICT (table_id, pk, rk) DO %s
			RETURNING rk, version)
		SELECT array_agg(w.rk), array_agg(w.version), 1 / (CASE WHEN count(*) = $6::BIGINT THEN 1 ELSE 0 END) FROM w`
	q.insertMany = fmt.Sprintf(many, "NOTHING")
	q.upsertMany = fmt.Sprintf(many, "UPDATE SET version = GREATEST({now}, cerulean_entities.version + 1), props = excluded.props")
	q.insertB = raise(insertDML)
	q.upsertB = raise(upsertDML)
	q.replaceB = raise(replaceDML)
	q.deleteB = raise(deleteDML)

	const rowsFrom = ` FROM cerulean_tables t
		LEFT JOIN cerulean_entities e ON e.table_id = t.id AND e.pk = $3::BYTEA AND e.rk = ANY($4::BYTEA[])
		WHERE t.account = $1 AND t.key = $2`
	q.readRows = `SELECT t.id, {now}, e.rk, e.version, NULL::BYTEA` + rowsFrom
	q.readRowsProps = `SELECT t.id, {now}, e.rk, e.version, e.props` + rowsFrom
	q.diagnose = `SELECT t.id, e.rk, e.version` + rowsFrom

	// Compare-and-swap writes: $1 table id, $2 PartitionKey, $3 RowKey, $4 the version
	// read, $5 the new version, $6 the properties.
	const (
		casUpdateDML = `UPDATE cerulean_entities SET version = $5::BIGINT, props = $6::BYTEA
			WHERE table_id = $1::BIGINT AND pk = $2::BYTEA AND rk = $3::BYTEA AND version = $4::BIGINT RETURNING version`
		casDeleteDML = `DELETE FROM cerulean_entities
			WHERE table_id = $1::BIGINT AND pk = $2::BYTEA AND rk = $3::BYTEA AND version = $4::BIGINT RETURNING version`
		// An insert goes through the catalogue ($7 account, $8 table key), so that no row
		// is created under the id of a table deleted since the read.
		casInsertDML = `INSERT INTO cerulean_entities (table_id, pk, rk, version, props)
			SELECT id, $2::BYTEA, $3::BYTEA, $5::BIGINT, $6::BYTEA FROM cerulean_tables
			WHERE account = $7 AND key = $8 AND id = $1::BIGINT AND $4::BIGINT = 0
			ON CONFLICT (table_id, pk, rk) DO NOTHING RETURNING version`
	)
	q.casUpdate, q.casDelete, q.casInsert = casUpdateDML, casDeleteDML, casInsertDML
	q.casUpdateB, q.casDeleteB, q.casInsertB = raise(casUpdateDML), raise(casDeleteDML), raise(casInsertDML)

	q.get = `SELECT t.id, e.version, e.props FROM cerulean_tables t
		LEFT JOIN cerulean_entities e ON e.table_id = t.id AND e.pk = $3::BYTEA AND e.rk = $4::BYTEA
		WHERE t.account = $1 AND t.key = $2`
	q.tableExists = `SELECT id FROM cerulean_tables WHERE account = $1 AND key = $2`
	// $5 limit; scanTo adds the exclusive end ($6, $7).
	const scanHead = `SELECT pk, rk, version, props FROM cerulean_entities
		WHERE table_id = ` + tableID + ` AND (pk, rk) >= ($3::BYTEA, $4::BYTEA)`
	q.scan = scanHead + ` ORDER BY pk, rk LIMIT $5`
	q.scanTo = scanHead + ` AND (pk, rk) < ($6::BYTEA, $7::BYTEA) ORDER BY pk, rk LIMIT $5`
	const (
		rowSize = `(octet_length(pk) + octet_length(rk) + octet_length(props))`
		running = ` OVER (ORDER BY pk, rk ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)`
		capHead = `SELECT pk, rk, version, props FROM (SELECT pk, rk, version, props,
			row_number()` + running + ` AS n, (sum` + rowSize + running + `)::BIGINT - ` + rowSize + ` AS before
			FROM cerulean_entities WHERE table_id = ` + tableID + ` AND (pk, rk) >= ($3::BYTEA, $4::BYTEA)`
	)
	q.scanCapped = capHead + ` ORDER BY pk, rk LIMIT $5) s WHERE n <= 2 OR before <= $6::BIGINT ORDER BY pk, rk`
	q.scanToCapped = capHead + ` AND (pk, rk) < ($6::BYTEA, $7::BYTEA) ORDER BY pk, rk LIMIT $5) s WHERE n <= 2 OR before <= $8::BIGINT ORDER BY pk, rk`

	q.createTable = `INSERT INTO cerulean_tables (account, key, name, id)
		VALUES ($1, $2, $3, nextval('cerulean_table_ids')) ON CONFLICT (account, key) DO NOTHING`
	q.getTable = `SELECT name FROM cerulean_tables WHERE account = $1 AND key = $2`
	q.listTables = `SELECT name FROM cerulean_tables WHERE account = $1 AND key >= $2 ORDER BY key LIMIT $3`
	// One statement: the catalogue row out and the purge entry in commit together.
	q.deleteTable = `WITH d AS (DELETE FROM cerulean_tables WHERE account = $1 AND key = $2 RETURNING id)
		INSERT INTO cerulean_purges (table_id) SELECT id FROM d`
	q.purgeList = `SELECT table_id, deleted_at < now() - $1::BIGINT * INTERVAL '1 millisecond' FROM cerulean_purges ORDER BY table_id`
	q.purgeChunk = `DELETE FROM cerulean_entities WHERE table_id = $1 AND (pk, rk) IN
		(SELECT pk, rk FROM cerulean_entities WHERE table_id = $1 ORDER BY pk, rk LIMIT $2)`
	q.purgeDone = `DELETE FROM cerulean_purges WHERE table_id = $1
		AND NOT EXISTS (SELECT 1 FROM cerulean_entities WHERE table_id = $1)`

	q.getACL = `SELECT acl FROM cerulean_tables WHERE account = $1 AND key = $2`
	// $3 the ACL, NULL to clear. The update locks the catalogue row, so it orders with a
	// concurrent DeleteTable: either it lands first and leaves with the row, or it finds
	// no row (ErrTableNotFound); a table created again is a new row without an ACL.
	q.setACL = `UPDATE cerulean_tables SET acl = $3::BYTEA WHERE account = $1 AND key = $2`
	q.getSvcProps = `SELECT props FROM cerulean_service_properties WHERE account = $1`
	q.setSvcProps = `INSERT INTO cerulean_service_properties (account, props) VALUES ($1, $2::BYTEA)
		ON CONFLICT (account) DO UPDATE SET props = excluded.props`
	q.clearSvcProps = `DELETE FROM cerulean_service_properties WHERE account = $1`

	for _, p := range []*string{&q.insert1, &q.upsert1, &q.replace1, &q.delete1, &q.insertB, &q.upsertB, &q.replaceB,
		&q.deleteB, &q.insertMany, &q.upsertMany, &q.readRows, &q.readRowsProps} {
		*p = d.sql(*p)
	}
	return q
}
