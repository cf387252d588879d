package postgres

import "fmt"

// queries are the engine's SQL statements, expanded for the dialect once at Open.
//
// Parameters follow one convention where it helps reading: $1 account, $2 table key
// (storage.TableKey as bytes), $3 PartitionKey, $4 RowKey, all BYTEA. Write statements
// that store properties take $5 the properties, $6 the table's settings generation the
// caller computed expiry with (the statement writes nothing unless the catalogue row
// still has it, see settings.go) and $7 the time-to-live in ticks (0: never expires).
type queries struct {
	// Single-mutation Apply: one plain statement each, keyed on the table id of the
	// front end's cache (settings.go), answering the new version (the old one for a
	// delete), or no row when it wrote nothing. Parameters: $1 the cached table id, $2
	// account, $3 table key, $4 PartitionKey, $5 RowKey; insert1, upsert1 and replace1
	// then take $6 the properties, $7 the cached settings generation, $8 the
	// time-to-live in ticks, and replace1 $9 the expected version (0: any); delete1
	// takes $6 the expected version. Each writes only while the catalogue row
	// (account, key) still has that id (and generation): a table deleted, re-created or
	// given new settings since the cache was filled writes nothing. Why nothing was
	// written is then read in a second round trip (diagnose), off the fast path.
	insert1, upsert1, replace1, delete1 string
	// insertGroup and upsertGroup are insert1 and upsert1 for a group of coalesced single
	// writes in one statement (mergeSingles): $1 … $8 are arrays of insert1's eight
	// parameters, one element per write. Each row written answers its table id, keys and
	// new version; a write that writes nothing answers no row, as alone.
	insertGroup, upsertGroup string
	// Batch Apply: the same writes, but writing no row raises division_by_zero (22012),
	// which aborts the implicit transaction of the pipeline and so every statement of the
	// batch. They answer the new version (the old one for a delete).
	insertB, upsertB, replaceB, deleteB string
	// Batch Apply of inserts only, or insert-or-replaces only (the usual entity group
	// transaction): one statement for every row ($4 RowKeys, $5 properties, $6 how many,
	// $7 time-to-live ticks, $8 settings generation), answering the RowKeys and versions
	// written, raising 22012 unless all were.
	insertMany, upsertMany string
	// insertManyAt and upsertManyAt are insertMany and upsertMany for rows with explicit
	// expiries (storage.Mutation.Expiry): $7 holds each row's absolute expiry in ticks (0:
	// never) rather than a time-to-live, stored as it is, also over an existing row.
	insertManyAt, upsertManyAt string
	// Read-modify-write Apply (merges): read the catalogue row (id, settings), the server
	// clock and the rows, then compare-and-swap each row. readRows also explains a failed
	// batch (diagnose). readRow and readRowProps are the same for one RowKey ($4 BYTEA
	// rather than an array).
	readRows, readRowsProps            string
	readRow, readRowProps              string
	casUpdate, casDelete, casInsert    string
	casUpdateB, casDeleteB, casInsertB string

	get, tableExists string
	// getMany is get for many keys in one statement: $1 each key's index in the group,
	// then the account, table key, PartitionKey and RowKey arrays. It answers a row for
	// each key whose table exists (the index first, then get's columns), so a key with no
	// row is a missing table, as get answering none is.
	getMany      string
	scan, scanTo string
	// scanCapped and scanToCapped are scan and scanTo that also stop by size: after the
	// first two rows they return rows only while the sizes of the rows before them (keys
	// and properties, as storage.RecordSize counts them) stay within $6 ($8 for
	// scanToCapped). Sizes come from the column headers, so a row cut off costs an index
	// and heap lookup, not its (TOASTed) properties.
	scanCapped, scanToCapped string

	createTable, getTable, listTables, deleteTable string
	loadTable, setSettings                         string
	purgeList, purgeDone                           string
	purgeBound, purgeChunk, purgeRest              string
	// purgeExpired deletes up to $1 expired rows (expiry.go).
	purgeExpired string
	// position reads the commit position the database has reached (positions.go), and
	// mark makes a transaction that writes nothing move it (dialect.markQuery).
	position, mark string

	// Change feeds (changes.go): the compare-and-swap statements that record their
	// changes, the records of an Apply that writes no row, the seal (the counter, last
	// in the transaction), the catalogue statements of feed tables, reads, retention and
	// the expiry purge of feed tables.
	feedCasUpdate, feedCasDelete, feedCasInsert string
	// fillCasUpdateB and fillCasDeleteB are casUpdateB and casDeleteB for a feed table
	// (they fill the lean record of the row they write over).
	fillCasUpdateB, fillCasDeleteB string
	// purgeChunkFeed and purgeRestFeed are purgeChunk and purgeRest for a table that had
	// a feed; feedOffFill fills a table's lean records and clears its rows' references;
	// hasFeed tells whether a table has or had a feed.
	purgeChunkFeed, purgeRestFeed, feedOffFill, hasFeed string
	// lockSettings reads a table's stored settings and locks its catalogue row.
	lockSettings          string
	feedRecords, feedSeal string
	// The plain writes of a feed table, recording their changes in their own CTEs
	// (changes.go, feedWriteSQL): feedInsert1 … feedDelete1 take their plain statement's
	// parameters and then the ord of their first record, answering as their plain
	// statement does; the B variants take the same and raise as insertB … deleteB do.
	// feedInsertGroup and feedUpsertGroup are insertGroup and upsertGroup for one feed
	// table, feedInsertMany and feedUpsertMany insertMany and upsertMany.
	feedInsert1, feedUpsert1, feedReplace1, feedDelete1 string
	feedInsertB, feedUpsertB, feedReplaceB, feedDeleteB string
	// feedUpsertFirst1 and feedUpsertFirstB are feedInsert1 and feedInsertB for the plain
	// insert an InsertOrMerge tries first (applyUpsert): their record names the write as
	// asked, InsertOrMerge.
	feedUpsertFirst1, feedUpsertFirstB          string
	feedInsertGroup, feedUpsertGroup            string
	feedInsertMany, feedUpsertMany              string
	createTableFeed, setSettingsFeed            string
	deleteTableFeed                             string
	readChanges, feedHorizon                    string
	feedList, feedTrimBound, feedTrim, feedDrop string
	purgeExpiredFeed, feedsOn                   string

	// Secondary indexes (indexes.go, indexbuild.go): a swap's generation check (with the
	// catalogue row's KEY SHARE lock while an index builds), the entries of the rows it
	// writes, the holders of unique values; index reads (of the plain entries, which
	// every index has) and row counts; the build's chunks and the removal of dropped
	// indexes' and deleted tables' entries.
	ixGen, ixGenLock, ixDelete, ixInsert, ixHolders string
	ixHoldersLive, ixLockHolder, ixTakeOver         string
	// The single writes with their entries, and their groups: [0] for a table with a
	// unique index, [1] without.
	ixInsert1, ixUpsert1, ixReplace1, ixDelete1 [2]string
	ixInsertGroup, ixUpsertGroup                [2]string
	ixScan, ixScanTo, ixCount, ixCountTo        string
	ixTable, ixCountRows, ixCountRowsTo         string
	ixWork, ixLockTable, ixPosition, ixRows     string
	ixRowsFrom, ixBuildPlain, ixBuildUnique     string
	ixSetSettings, ixFail, ixAdvance, ixDone    string
	ixDropEntries, ixDropTable                  [2]string
	ixDropDone                                  string
	ixWorkPut, ixWorkDrop, ixWorkForget         string
	ixDropWaited, ixDropWait                    string

	// Stored access policies and service properties: one statement each, no cache.
	getACL, setACL           string
	getSvcProps, setSvcProps string
	clearSvcProps            string
}

// tableID resolves the table inside a statement, so that no front end caches the table
// id and a table deleted by another front end is gone for every later statement.
const tableID = `(SELECT id FROM cerulean_tables WHERE account = $1 AND key = $2)`

// tableIDAtGen is tableID for a write whose expiries were computed from the settings of
// generation $6: a catalogue row whose settings have changed since looks like no table.
const tableIDAtGen = `(SELECT id FROM cerulean_tables WHERE account = $1 AND key = $2 AND COALESCE(gen, 0) = $6::BIGINT)`

// entityAt is a LATERAL subquery of the row (table id t.id, pk, rk) of cerulean_entities
// (its rk, version, expiry and props), and also where (a condition on e, or TRUE), for
// statements that look up many keys at once.
//
// Written as a join (e.table_id = t.id AND e.pk = k.pk AND e.rk = k.rk, or e.rk =
// ANY($4)), the lookup's plan depended on the table's statistics: analysed while it held
// few rows per table (a new database, or one whose tables were small at the time), the
// planner took every table id for unique and probed the primary key on the table id
// alone, filtering the rest, so each key read the whole table. After six runs of the
// bench's update workload on a new database, a hot partition of 50,000 entities made 34
// point reads/s (each group of reads 0.3–0.7 s) and 282 upserts/s until autovacuum
// analysed the table again. In a subquery the optimiser cannot pull up (OFFSET 0), the
// keys are the subquery's parameters, and a scan uses every equality on an index column
// as its index condition: one probe of the whole primary key per key, whatever the
// statistics say (TestLookupsIgnoreStats).
func entityAt(pk, rk, where string) string {
	return `LATERAL (SELECT e.rk, e.version, e.expiry, e.props FROM cerulean_entities e
		WHERE e.table_id = t.id AND e.pk = ` + pk + ` AND e.rk = ` + rk + ` AND ` + where + ` OFFSET 0)`
}

// live is the condition that a row of cerulean_entities (aliased e) has not expired at
// the database clock {now}. The clock is a scalar subquery, so a statement reads it
// once (an InitPlan), not per row.
const live = `(e.expiry IS NULL OR e.expiry > (SELECT {now}))`

// noRef is true of a row that refers to no lean change record (changes.go, "Lean
// records"): the only rows the statements of tables without the feed write over.
const noRef = `e.ref_txn IS NULL`

// raise wraps a data-modifying statement that RETURNs version so that it fails with
// division_by_zero when it changed no row. The COALESCE keeps the division from being
// NULL / 0, which is NULL and not an error; neither operand is a constant, so no planner
// can fold the division away.
// raisedAnswer is the answer of a statement whose CTE w RETURNs version: the version,
// or division_by_zero when w changed no row.
const raisedAnswer = `SELECT COALESCE((SELECT version FROM w), 0) / (SELECT count(*) FROM w)`

func raise(dml string) string {
	return `WITH w AS (` + dml + `) ` + raisedAnswer
}

func buildQueries(d dialect) queries {
	var q queries
	// Versions and expiries: the server clock is read once per row, in a subquery (n.v),
	// and the new version is GREATEST(it, old version + 1); the expiry is that same
	// version plus the time-to-live, so storage.Expiry's "version + TTL" holds exactly.
	// An ON CONFLICT update takes excluded.version, the clock read for the row it
	// failed to insert, and excluded.expiry - excluded.version, the time-to-live.
	const (
		clock   = `(SELECT {now} AS v) n`
		setList = `version = GREATEST(excluded.version, e.version + 1), props = excluded.props,
			expiry = GREATEST(excluded.version, e.version + 1) + (excluded.expiry - excluded.version)`
		// These statements write only over rows that hold no lean change record
		// (changes.go, "Lean records"): a row that does belongs to a table whose feed is
		// on, whose writes take the feed's statements, so a write that finds one has
		// stale settings and runs again (diagnose) rather than lose the record's state.
		setUpsert = setList + ` WHERE ` + noRef
		// An insert over an expired row replaces it, as over a missing one. The version
		// still exceeds the old one, and the clock that decides expiry is the one the
		// insert took its version from.
		setInsert = setList + ` WHERE e.expiry <= excluded.version AND ` + noRef

		insertHead = `INSERT INTO cerulean_entities AS e (table_id, pk, rk, version, props, expiry)
			SELECT t.id, $3::BYTEA, $4::BYTEA, n.v, $5::BYTEA, n.v + NULLIF($7::BIGINT, 0) FROM cerulean_tables t, ` + clock + `
			WHERE t.account = $1 AND t.key = $2 AND COALESCE(t.gen, 0) = $6::BIGINT
			ON CONFLICT (table_id, pk, rk) DO UPDATE SET `
		insertDML = insertHead + setInsert + ` RETURNING e.version`
		upsertDML = insertHead + setUpsert + ` RETURNING e.version`
		// $8 is the expected version, 0 for any. An expired row does not match.
		replaceDML = `UPDATE cerulean_entities AS e SET version = GREATEST(n.v, e.version + 1), props = $5::BYTEA,
			expiry = GREATEST(n.v, e.version + 1) + NULLIF($7::BIGINT, 0)
			FROM ` + clock + `
			WHERE e.table_id = ` + tableIDAtGen + ` AND e.pk = $3::BYTEA AND e.rk = $4::BYTEA
			AND ($8::BIGINT = 0 OR e.version = $8::BIGINT) AND (e.expiry IS NULL OR e.expiry > n.v) AND ` + noRef + `
			RETURNING e.version`
		// $5 is the expected version, 0 for any; $6 the settings generation, checked
		// although a delete computes no expiry: whether it records a change (the
		// table's change feed) is a setting. An expired row does not match; the purge
		// removes it.
		deleteDML = `DELETE FROM cerulean_entities AS e
			WHERE e.table_id = ` + tableIDAtGen + ` AND e.pk = $3::BYTEA AND e.rk = $4::BYTEA
			AND ($5::BIGINT = 0 OR e.version = $5::BIGINT) AND ` + live + ` AND ` + noRef + `
			RETURNING e.version`
	)
	// The single statements. The catalogue check is an uncorrelated EXISTS: the
	// planner runs it once, as a one-time filter before the row's own index probe, so
	// a statement costs the database two index probes and a small plan to start.
	const (
		atIDGen   = `EXISTS (SELECT 1 FROM cerulean_tables WHERE account = $2 AND key = $3 AND id = $1::BIGINT AND COALESCE(gen, 0) = $7::BIGINT)`
		single1Hd = `INSERT INTO cerulean_entities AS e (table_id, pk, rk, version, props, expiry)
			SELECT $1::BIGINT, $4::BYTEA, $5::BYTEA, n.v, $6::BYTEA, n.v + NULLIF($8::BIGINT, 0) FROM ` + clock + `
			WHERE ` + atIDGen + `
			ON CONFLICT (table_id, pk, rk) DO UPDATE SET `
	)
	q.insert1 = single1Hd + setInsert + ` RETURNING e.version`
	q.upsert1 = single1Hd + setUpsert + ` RETURNING e.version`
	// The group's catalogue checks are one semi-join of the distinct (account, key, id,
	// generation) it names, each an index probe. ORDER BY keeps the rows in the group's
	// order (table id, PartitionKey, RowKey), the order every group and batch takes its
	// row locks in: the planner makes the semi-join a hash join over the arrays, whose
	// rows come out of a hash bucket in reverse, and a group written backwards deadlocked
	// with one written forwards (the database breaks it after deadlock_timeout, a second,
	// and both groups run again alone): BenchmarkUpsertHot made 595–940 writes/s rather
	// than 13,300–16,700.
	const groupHd = `INSERT INTO cerulean_entities AS e (table_id, pk, rk, version, props, expiry)
			SELECT u.id, u.pk, u.rk, n.v, u.props, n.v + NULLIF(u.ttl, 0)
			FROM ` + clock + `, unnest($1::BIGINT[], $2::BYTEA[], $3::BYTEA[], $4::BYTEA[], $5::BYTEA[], $6::BYTEA[], $7::BIGINT[], $8::BIGINT[])
				WITH ORDINALITY AS u (id, account, key, pk, rk, props, gen, ttl, ord)
			WHERE EXISTS (SELECT 1 FROM cerulean_tables t WHERE t.account = u.account AND t.key = u.key AND t.id = u.id AND COALESCE(t.gen, 0) = u.gen)
			ORDER BY u.ord
			ON CONFLICT (table_id, pk, rk) DO UPDATE SET `
	q.insertGroup = groupHd + setInsert + ` RETURNING e.table_id, e.pk, e.rk, e.version`
	q.upsertGroup = groupHd + setUpsert + ` RETURNING e.table_id, e.pk, e.rk, e.version`
	q.replace1 = `UPDATE cerulean_entities AS e SET version = GREATEST(n.v, e.version + 1), props = $6::BYTEA,
			expiry = GREATEST(n.v, e.version + 1) + NULLIF($8::BIGINT, 0)
			FROM ` + clock + `
			WHERE e.table_id = $1::BIGINT AND e.pk = $4::BYTEA AND e.rk = $5::BYTEA
			AND ($9::BIGINT = 0 OR e.version = $9::BIGINT) AND (e.expiry IS NULL OR e.expiry > n.v) AND ` + noRef + ` AND ` + atIDGen + `
			RETURNING e.version`
	// A delete checks the settings generation ($7) too, although it computes no
	// expiry: whether it records a change (the table's change feed) is a setting.
	q.delete1 = `DELETE FROM cerulean_entities AS e
			WHERE e.table_id = $1::BIGINT AND e.pk = $4::BYTEA AND e.rk = $5::BYTEA
			AND ($6::BIGINT = 0 OR e.version = $6::BIGINT) AND ` + live + ` AND ` + noRef + ` AND ` + atIDGen + `
			RETURNING e.version`
	// The rows go in the arrays' order (applyMany's, by RowKey), as groupHd's do.
	const many = `WITH w AS (INSERT INTO cerulean_entities AS e (table_id, pk, rk, version, props, expiry)
			SELECT t.id, $3::BYTEA, u.rk, n.v, u.props, n.v + NULLIF(u.ttl, 0)
			FROM cerulean_tables t, ` + clock + `, unnest($4::BYTEA[], $5::BYTEA[], $7::BIGINT[]) WITH ORDINALITY AS u (rk, props, ttl, ord)
			WHERE t.account = $1 AND t.key = $2 AND COALESCE(t.gen, 0) = $8::BIGINT
			ORDER BY u.ord
			ON CONFLICT (table_id, pk, rk) DO UPDATE SET %s
			RETURNING e.rk, e.version)
		SELECT array_agg(w.rk), array_agg(w.version), 1 / (CASE WHEN count(*) = $6::BIGINT THEN 1 ELSE 0 END) FROM w`
	q.insertMany = fmt.Sprintf(many, setInsert)
	q.upsertMany = fmt.Sprintf(many, setUpsert)
	// With absolute expiries the array's value is the expiry, and an ON CONFLICT update
	// takes it as it is (excluded.expiry). One already at or before the row's new version
	// leaves the row stored but expired, absent for every read and precondition until the
	// purge removes it (storage.SettleExpiry's "expired at once").
	const (
		manyAt = `WITH w AS (INSERT INTO cerulean_entities AS e (table_id, pk, rk, version, props, expiry)
			SELECT t.id, $3::BYTEA, u.rk, n.v, u.props, NULLIF(u.exp, 0)
			FROM cerulean_tables t, ` + clock + `, unnest($4::BYTEA[], $5::BYTEA[], $7::BIGINT[]) WITH ORDINALITY AS u (rk, props, exp, ord)
			WHERE t.account = $1 AND t.key = $2 AND COALESCE(t.gen, 0) = $8::BIGINT
			ORDER BY u.ord
			ON CONFLICT (table_id, pk, rk) DO UPDATE SET %s
			RETURNING e.rk, e.version)
		SELECT array_agg(w.rk), array_agg(w.version), 1 / (CASE WHEN count(*) = $6::BIGINT THEN 1 ELSE 0 END) FROM w`
		setUpsertAt = `version = GREATEST(excluded.version, e.version + 1), props = excluded.props, expiry = excluded.expiry`
	)
	q.insertManyAt = fmt.Sprintf(manyAt, setUpsertAt+` WHERE e.expiry <= excluded.version AND `+noRef)
	q.upsertManyAt = fmt.Sprintf(manyAt, setUpsertAt+` WHERE `+noRef)
	q.insertB = raise(insertDML)
	q.upsertB = raise(upsertDML)
	q.replaceB = raise(replaceDML)
	q.deleteB = raise(deleteDML)

	// The rows as stored, expired ones included (the caller decides what is expired at
	// the clock read here: a compare-and-swap must match a stored row's version). Each
	// RowKey is looked up on its own (entityAt), not as rk = ANY($4): see entityAt.
	//
	// One RowKey (every single merge) has a statement of its own, a plain join on three
	// parameters, which a generic plan probes with all three whatever the statistics.
	// Through unnest, the generic plan counts on ten RowKeys and costs more than a
	// custom plan for one, so the database planned the statement anew on every run:
	// BenchmarkMerge 9,500–10,300 → 6,300–6,800 merges/s.
	rowsFrom := ` FROM cerulean_tables t CROSS JOIN ` + clock + `
		LEFT JOIN LATERAL (SELECT x.* FROM unnest($4::BYTEA[]) AS r (rk), ` + entityAt("$3::BYTEA", "r.rk", "TRUE") + ` x) e ON TRUE
		WHERE t.account = $1 AND t.key = $2`
	const rowFrom = ` FROM cerulean_tables t CROSS JOIN ` + clock + `
		LEFT JOIN cerulean_entities e ON e.table_id = t.id AND e.pk = $3::BYTEA AND e.rk = $4::BYTEA
		WHERE t.account = $1 AND t.key = $2`
	const (
		cols      = `SELECT t.id, COALESCE(t.gen, 0), t.settings, n.v, e.rk, e.version, e.expiry, `
		colsProps = cols + `e.props`
		colsNone  = cols + `NULL::BYTEA`
	)
	q.readRows, q.readRowsProps = colsNone+rowsFrom, colsProps+rowsFrom
	q.readRow, q.readRowProps = colsNone+rowFrom, colsProps+rowFrom

	// Compare-and-swap writes: $1 table id, $2 PartitionKey, $3 RowKey, $4 the version
	// read, $5 the new version, $6 the properties, $7 the expiry (0: never), and last the
	// settings generation the rows were read with ($8, $5 and $10). A swap checks it as
	// the single writes do (settings.go): the expiry it stores, the change it records and
	// the index entries its transaction writes follow from the settings, and a settings
	// change committed between the read and the swap (an index declared, whose build may
	// have passed the row already) makes it lose, and the Apply reads again.
	const (
		atGen      = `EXISTS (SELECT 1 FROM cerulean_tables WHERE id = $1::BIGINT AND COALESCE(gen, 0) = $%d::BIGINT)`
		casUpdateF = `UPDATE cerulean_entities SET version = $5::BIGINT, props = $6::BYTEA, expiry = NULLIF($7::BIGINT, 0)
			WHERE table_id = $1::BIGINT AND pk = $2::BYTEA AND rk = $3::BYTEA AND version = $4::BIGINT AND ` + atGen + ` RETURNING version`
		casDeleteF = `DELETE FROM cerulean_entities
			WHERE table_id = $1::BIGINT AND pk = $2::BYTEA AND rk = $3::BYTEA AND version = $4::BIGINT AND ` + atGen + ` RETURNING version`
		// An insert goes through the catalogue ($8 account, $9 table key), so that no row
		// is created under the id of a table deleted since the read.
		casInsertDML = `INSERT INTO cerulean_entities (table_id, pk, rk, version, props, expiry)
			SELECT id, $2::BYTEA, $3::BYTEA, $5::BIGINT, $6::BYTEA, NULLIF($7::BIGINT, 0) FROM cerulean_tables
			WHERE account = $8 AND key = $9 AND id = $1::BIGINT AND COALESCE(gen, 0) = $10::BIGINT AND $4::BIGINT = 0
			ON CONFLICT (table_id, pk, rk) DO NOTHING RETURNING version`
	)
	casUpdateDML, casDeleteDML := fmt.Sprintf(casUpdateF, 8), fmt.Sprintf(casDeleteF, 5)
	q.casUpdate, q.casDelete, q.casInsert = casUpdateDML, casDeleteDML, casInsertDML
	q.casUpdateB, q.casDeleteB, q.casInsertB = raise(casUpdateDML), raise(casDeleteDML), raise(casInsertDML)

	q.get = `SELECT t.id, e.version, e.props, e.expiry FROM cerulean_tables t
		LEFT JOIN cerulean_entities e ON e.table_id = t.id AND e.pk = $3::BYTEA AND e.rk = $4::BYTEA AND ` + live + `
		WHERE t.account = $1 AND t.key = $2`
	q.getMany = `SELECT k.n, t.id, e.version, e.props, e.expiry
		FROM unnest($1::INT8[], $2::BYTEA[], $3::BYTEA[], $4::BYTEA[], $5::BYTEA[]) AS k (n, account, key, pk, rk)
		JOIN cerulean_tables t ON t.account = k.account AND t.key = k.key
		LEFT JOIN ` + entityAt("k.pk", "k.rk", live) + ` e ON TRUE`
	q.tableExists = `SELECT id FROM cerulean_tables WHERE account = $1 AND key = $2`
	// $5 limit; scanTo adds the exclusive end ($6, $7). Expired rows are filtered out in
	// the statement, so they neither count against the limit nor reach the caller.
	const scanHead = `SELECT pk, rk, version, props, expiry FROM cerulean_entities e
		WHERE table_id = ` + tableID + ` AND (pk, rk) >= ($3::BYTEA, $4::BYTEA) AND ` + live
	q.scan = scanHead + ` ORDER BY pk, rk LIMIT $5`
	q.scanTo = scanHead + ` AND (pk, rk) < ($6::BYTEA, $7::BYTEA) ORDER BY pk, rk LIMIT $5`
	// The size cap's window runs over live rows only: expired ones are filtered before
	// it, so they take no room in a page.
	const (
		rowSize = `(octet_length(pk) + octet_length(rk) + octet_length(props))`
		running = ` OVER (ORDER BY pk, rk ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)`
		capHead = `SELECT pk, rk, version, props, expiry FROM (SELECT pk, rk, version, props, expiry,
			row_number()` + running + ` AS n, (sum` + rowSize + running + `)::BIGINT - ` + rowSize + ` AS before
			FROM cerulean_entities e WHERE table_id = ` + tableID + ` AND (pk, rk) >= ($3::BYTEA, $4::BYTEA) AND ` + live
	)
	q.scanCapped = capHead + ` ORDER BY pk, rk LIMIT $5) s WHERE n <= 2 OR before <= $6::BIGINT ORDER BY pk, rk`
	q.scanToCapped = capHead + ` AND (pk, rk) < ($6::BYTEA, $7::BYTEA) ORDER BY pk, rk LIMIT $5) s WHERE n <= 2 OR before <= $8::BIGINT ORDER BY pk, rk`

	// $4 the settings (storage.MarshalSettings; NULL for a standard table). Every
	// settings change takes a new generation from a sequence, so a generation names one
	// table's settings at one time, across deletes and creates.
	q.createTable = `INSERT INTO cerulean_tables (account, key, name, id, settings, gen)
		VALUES ($1, $2, $3, nextval('cerulean_table_ids'), $4::BYTEA, nextval('cerulean_table_gens'))
		ON CONFLICT (account, key) DO NOTHING RETURNING id, gen`
	q.getTable = `SELECT name, settings FROM cerulean_tables WHERE account = $1 AND key = $2`
	q.listTables = `SELECT name, settings FROM cerulean_tables WHERE account = $1 AND key >= $2 ORDER BY key LIMIT $3`
	q.loadTable = `SELECT id, COALESCE(gen, 0), settings FROM cerulean_tables WHERE account = $1 AND key = $2`
	// Like setACL, the update locks the catalogue row, so it orders with a concurrent
	// DeleteTable and never attaches to a table created again.
	q.setSettings = `UPDATE cerulean_tables SET settings = $3::BYTEA, gen = nextval('cerulean_table_gens')
		WHERE account = $1 AND key = $2 RETURNING id, gen`
	// One statement: the catalogue row out and the purge entry in commit together.
	q.deleteTable = `WITH d AS (DELETE FROM cerulean_tables WHERE account = $1 AND key = $2 RETURNING id)
		INSERT INTO cerulean_purges (table_id) SELECT id FROM d`
	q.purgeList = `SELECT table_id, deleted_at < now() - $1::BIGINT * INTERVAL '1 millisecond' FROM cerulean_purges ORDER BY table_id`
	// A deleted table's rows go in chunks of key ranges: purgeBound finds the key $2 rows
	// in (none when fewer remain), purgeChunk deletes the rows before it, purgeRest the
	// last ones. Each is one range of the primary key, whatever the planner's estimates
	// (a join of the table with a LIMIT subquery of it can turn quadratic when the
	// statistics still think the table is empty).
	q.purgeBound = `SELECT pk, rk FROM cerulean_entities WHERE table_id = $1 ORDER BY pk, rk OFFSET $2 LIMIT 1`
	q.purgeChunk = `DELETE FROM cerulean_entities WHERE table_id = $1 AND (pk, rk) < ($2::BYTEA, $3::BYTEA)`
	q.purgeRest = `DELETE FROM cerulean_entities WHERE table_id = $1`
	q.purgeDone = `DELETE FROM cerulean_purges WHERE table_id = $1
		AND NOT EXISTS (SELECT 1 FROM cerulean_entities WHERE table_id = $1)`
	// The CTE walks the partial expiry index from its oldest entry and stops at the
	// first that has not expired, so it reads only what has expired; SKIP LOCKED lets
	// front ends purge at once without waiting for each other or for writers, and the
	// delete checks the expiry again on the row it deletes. A CTE (materialized: it
	// locks rows and reads the clock) joined by primary key rather than IN (subquery):
	// that can be planned as a nested loop that runs the subquery again per row.
	//
	// Rows of tables whose change feed is on are left to purgeExpiredFeed, which records
	// their removal (changes.go): their ids are read once per statement (an InitPlan over
	// cerulean_feeds, which has a row only for a table that has or had a feed) and
	// filtered out of the index walk, which keeps its order and stops at the chunk's
	// limit. (An anti-join with cerulean_feeds was planned as a hash join under a sort,
	// which read every expired row for each chunk.)
	//
	// A row's index entries go with it (indexes.go): a probe of each entries table per
	// row, found empty but for tables that declare indexes.
	//
	// It needs no noRef: a row with a lean record is a feed table's, whose feed was on
	// when the row was written, so a purge that takes the table for one without the
	// feed started before the row's write, and the row (whose expiry is at least a
	// second after that write's clock) has not expired at the purge's clock.
	q.purgeExpired = `WITH c AS (SELECT table_id, pk, rk FROM cerulean_entities
			WHERE expiry IS NOT NULL AND expiry <= (SELECT {now})
			AND table_id <> ALL (COALESCE((SELECT array_agg(table_id) FROM cerulean_feeds WHERE on_ AND NOT dropped), '{}'::BIGINT[]))
			ORDER BY expiry LIMIT $1 FOR UPDATE SKIP LOCKED),
		d AS (DELETE FROM cerulean_entities e USING c
			WHERE e.table_id = c.table_id AND e.pk = c.pk AND e.rk = c.rk AND e.expiry <= (SELECT {now})
			RETURNING e.table_id, e.pk, e.rk),
		` + rowEntriesGo("d.table_id", "d") + `
		SELECT count(*) FROM d`
	q.position = d.positionQuery()
	q.mark = d.markQuery()
	indexSQL(&q)
	feedSQL(&q)
	feedWriteSQL(&q, setList, atIDGen)

	q.getACL = `SELECT acl FROM cerulean_tables WHERE account = $1 AND key = $2`
	q.lockSettings = `SELECT settings FROM cerulean_tables WHERE account = $1 AND key = $2 FOR UPDATE`
	// $3 the ACL, NULL to clear. The update locks the catalogue row, so it orders with a
	// concurrent DeleteTable: either it lands first and leaves with the row, or it finds
	// no row (ErrTableNotFound); a table created again is a new row without an ACL.
	q.setACL = `UPDATE cerulean_tables SET acl = $3::BYTEA WHERE account = $1 AND key = $2`
	q.getSvcProps = `SELECT props FROM cerulean_service_properties WHERE account = $1`
	q.setSvcProps = `INSERT INTO cerulean_service_properties (account, props) VALUES ($1, $2::BYTEA)
		ON CONFLICT (account) DO UPDATE SET props = excluded.props`
	q.clearSvcProps = `DELETE FROM cerulean_service_properties WHERE account = $1`

	for _, p := range []*string{&q.insert1, &q.upsert1, &q.insertGroup, &q.upsertGroup, &q.replace1, &q.delete1, &q.insertB, &q.upsertB, &q.replaceB,
		&q.deleteB, &q.insertMany, &q.upsertMany, &q.insertManyAt, &q.upsertManyAt, &q.readRows, &q.readRowsProps, &q.readRow, &q.readRowProps, &q.get, &q.getMany, &q.scan, &q.scanTo,
		&q.scanCapped, &q.scanToCapped, &q.purgeExpired, &q.position,
		&q.setSettingsFeed, &q.deleteTableFeed, &q.feedSeal, &q.feedTrimBound, &q.purgeExpiredFeed,
		&q.feedInsert1, &q.feedUpsert1, &q.feedReplace1, &q.feedDelete1, &q.feedInsertB, &q.feedUpsertB, &q.feedReplaceB,
		&q.feedDeleteB, &q.feedInsertGroup, &q.feedUpsertGroup, &q.feedInsertMany, &q.feedUpsertMany, &q.feedUpsertFirst1, &q.feedUpsertFirstB,
		&q.ixScan, &q.ixScanTo, &q.ixInsert1[0], &q.ixUpsert1[0], &q.ixReplace1[0], &q.ixDelete1[0], &q.ixInsertGroup[0], &q.ixUpsertGroup[0],
		&q.ixInsert1[1], &q.ixUpsert1[1], &q.ixReplace1[1], &q.ixDelete1[1], &q.ixInsertGroup[1], &q.ixUpsertGroup[1], &q.ixHoldersLive, &q.ixLockHolder} {
		*p = d.sql(*p)
	}
	return q
}
