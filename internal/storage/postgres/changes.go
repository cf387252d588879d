package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5"
)

// Change feeds (docs/change-feed-design.md, "PostgreSQL").
//
// Numbers are handed out in commit order by a counter row per feed table
// (cerulean_feeds.next), which every transaction that records changes of the table
// updates as its LAST statement (the seal): the row lock is held from there through the
// commit, and PostgreSQL makes a transaction visible before it releases its locks, so a
// transaction that takes numbers after another has committed, and any snapshot — on the
// primary or on a replica replaying the WAL in order — that sees the counter at N sees
// every record numbered below N. A read therefore returns a gap-free prefix with one
// statement: the counter and the records from one snapshot.
//
// The numbers are only known at the seal, after the writes, so a write statement cannot
// put them into its records. Each records its changes in the statement that makes them
// (a data-modifying CTE over the write's RETURNING, so a compare-and-swap that changes
// nothing records nothing) keyed by (table, transaction id, ord), ord being the record's
// place among the transaction's records of the table, assigned when the pipeline is
// sent (pipeline, sealFeeds); the seal takes base … base+n−1 from the counter and
// writes one row to cerulean_feed_txns (table, last = base+n−1, base, txn, at). A
// record's number is base + ord; a read joins the two. Ords of records that were not
// written (a compare-and-swap that lost) leave holes, which numbers may have.
//
// A write of a table whose feed is on takes the path it would take without the feed,
// with statements that record what they wrote:
//
//   - Inserts, upserts, replaces and deletes (single, coalesced into groups, batches,
//     ApplyEach) send their plain statement's variant that records in a CTE of its own
//     (feedWriteSQL), with the records the Pebble engine makes for them: the expiry of
//     a stored expired row an insert or upsert writes over, then the write's own.
//   - Merges and writes with an explicit expiry take the read-modify-write path
//     (apply.go), where Go knows each mutation's outcome, new state, version and expiry,
//     and builds the records (noteChange) that its compare-and-swap statements write.
//
// The seal checks that the feed is still on and its table not deleted, and raises
// otherwise, so a write that decided to record from settings that have since turned
// the feed off runs again. A table without the feed sends none of this: its statements
// and round trips are what they were.
//
// Lean records. The record of a plain statement's write (not the read-modify-write
// path's) carries no properties: the row it writes names it (ref_txn, ref_ord), and
// the row's properties at the record's version are its state. A read takes them from
// the row (readChanges: COALESCE of the record's and the row's at that version). So an
// insert writes its entity's bytes once, not twice. Whatever changes or removes such a
// row first copies its properties into its record, in the same statement (fillFrom),
// from the version it replaces as the statement's snapshot holds it (the record is in
// that snapshot; one committed later would not be, so these statements write only over
// the snapshot's version and otherwise run again: snapshotVersion):
//
//   - the feed's writes: inserts and upserts (CTE o), replaces, deletes (RETURNING),
//     groups and batches (the snapshot's row, x), the compare-and-swaps of merges and
//     explicit expiries (x at the version they swap), which leave a row without a
//     reference since their records carry the state;
//   - the expiry purge of a feed table (purgeExpiredFeed), and the purge of a deleted
//     table that had a feed (purgeChunkFeed, purgeRestFeed);
//   - turning the feed off (feedOffFill, after the settings statement took the feed's
//     counter): every record gets its state and the rows lose their references, since
//     the table's plain statements that follow do not fill. They do not write over a
//     row with a reference either (noRef in queries.go): such a row is a feed table's,
//     so a plain write that finds one has stale settings (it started before the feed
//     was turned on) and runs again with the feed's statements rather than take the
//     record's state away.
//
// So in every snapshot, on the primary and on a replica, a lean record whose row still
// holds its version reads its state from the row, and one whose row has moved on holds
// it itself; a read that finds neither fails rather than answer a record without its
// state.

// maxFeedExamined bounds the numbers a read examines for one page, so a read with a
// narrow PartitionKey range over a busy feed costs a bounded read per page.
const maxFeedExamined = 4096

// feedChunk is how many of a feed's transactions one retention statement removes.
const feedChunk = 1000

// feedPoll is how often a front end reads the counter of a feed that someone waits on.
const feedPoll = 20 * time.Millisecond

// errNoChangeFeed refuses a change feed on the databases other than PostgreSQL, whose
// transaction ids the records are keyed by.
var errNoChangeFeed = azerr.Newf(azerr.NotImplemented, "The change feed is available on PostgreSQL only, not on this database.")

// change is a record being written: everything but its number and PartitionKey.
type change struct {
	op      storage.ChangeOp
	rk      string
	props   []entity.Property
	version int64
	at      int64
	expiry  int64
}

// noteChange appends the records of mutation m, which has just succeeded on row r
// (leaving props at version v), as the Pebble engine does: the expiry of a stored expired
// row it writes over first, then its own, then an expiry if its explicit expiry has
// already passed (the row is absent from its own write on). now is the clock of the
// read, the At of a delete and of the expiry of the row written over.
func noteChange(cs []change, r *rowState, rk string, m *storage.Mutation, props []entity.Property, v, now int64) []change {
	if r.expiredStored {
		r.expiredStored = false
		cs = append(cs, change{op: storage.ChangeExpire, rk: rk, at: now})
	}
	if m.Op == storage.Delete {
		return append(cs, change{op: storage.ChangeOp(m.Op), rk: rk, at: now})
	}
	exp := r.expiry
	if !r.Exists {
		exp = m.Expiry
	}
	cs = append(cs, change{op: storage.ChangeOp(m.Op), rk: rk, props: props, version: v, at: v, expiry: exp})
	if !r.Exists {
		cs = append(cs, change{op: storage.ChangeExpire, rk: rk, at: v})
	}
	return cs
}

// feedNote marks a statement that records n changes of table tid: its argument ordArg
// is the ord of its first record, set by sealFeeds; maxAt is the latest At of them.
type feedNote struct {
	tid    int64
	n      int
	maxAt  int64
	ordArg int
	// pos orders the statements' records within their transaction where it differs
	// from the statements' order (a batch's statements run in RowKey order, its records
	// go in the mutations' order); statements of equal pos keep their order.
	pos int
}

// feedOn reports whether writes to a table of settings s record its changes.
func (e *Engine) feedOn(s storage.TableSettings) bool {
	return s.ChangeFeedOn() && e.dialect == dialectPostgres
}

// recording makes st, the plain single statement of a mutation op on table tid
// (plainStmt), its variant that records its changes (feedWriteSQL), raising as the B
// statements do if raise; its records take place pos among the transaction's.
func (e *Engine) recording(st stmt, op storage.Op, tid int64, raise bool, pos int) stmt {
	var sql [2]string
	n := 2 // an insert or upsert may record the expiry of a row it writes over
	switch op {
	case storage.Insert:
		sql = [2]string{e.q.feedInsert1, e.q.feedInsertB}
	case storage.InsertOrMerge:
		// The plain insert an InsertOrMerge tries first (applyUpsert).
		sql = [2]string{e.q.feedUpsertFirst1, e.q.feedUpsertFirstB}
	case storage.InsertOrReplace:
		sql = [2]string{e.q.feedUpsert1, e.q.feedUpsertB}
	case storage.Replace:
		sql, n = [2]string{e.q.feedReplace1, e.q.feedReplaceB}, 1
	case storage.Delete:
		sql, n = [2]string{e.q.feedDelete1, e.q.feedDeleteB}, 1
	default:
		panic(fmt.Sprintf("recording: %v", op))
	}
	st.sql = sql[0]
	if raise {
		st.sql = sql[1]
	}
	st.feed = &feedNote{tid: tid, n: n, ordArg: len(st.args), pos: pos}
	st.args = append(st.args, int64(0))
	return st
}

// withChanges makes st (one of the compare-and-swap statements, sql its feed variant
// taking the records' arguments after its own) record cs of table tid.
func withChanges(st stmt, sql string, tid int64, cs []change) stmt {
	st.sql = sql
	st.feed = &feedNote{tid: tid, n: len(cs), ordArg: len(st.args)}
	st.args = append(st.args, int64(0))
	st.args = appendChangeArgs(st.args, cs, st.feed)
	return st
}

// recordsStmt records cs of table tid, partition pk, unconditionally (changes of an
// Apply that leave no row to write: an insert and a delete of one row, say).
func (e *Engine) recordsStmt(tid int64, pk []byte, cs []change) stmt {
	st := stmt{sql: e.q.feedRecords, args: []any{tid, int64(0), pk}}
	st.feed = &feedNote{tid: tid, n: len(cs), ordArg: 1}
	st.args = appendChangeArgs(st.args, cs, st.feed)
	return st
}

func appendChangeArgs(args []any, cs []change, f *feedNote) []any {
	ops := make([]int16, len(cs))
	rks, props := make([][]byte, len(cs)), make([][]byte, len(cs))
	vers, ats, exps := make([]int64, len(cs)), make([]int64, len(cs)), make([]int64, len(cs))
	for i := range cs {
		c := &cs[i]
		ops[i], rks[i], vers[i], ats[i], exps[i] = int16(c.op), []byte(c.rk), c.version, c.at, c.expiry
		if c.props != nil || (c.op < storage.ChangeExpire && c.op != storage.ChangeOp(storage.Delete)) {
			props[i] = entity.AppendProps([]byte{}, c.props)
		}
		f.maxAt = max(f.maxAt, c.at)
	}
	return append(args, ops, rks, vers, ats, exps, props)
}

// sealFeeds numbers the records of stmts (the ords of each statement that records
// changes, in statement order per table) and returns the seals that must follow them as
// the transaction's last statements, in table id order (so two transactions take their
// counters in the same order and cannot deadlock on them); nil when none records.
func (e *Engine) sealFeeds(stmts []stmt) []stmt {
	type acc struct {
		tid   int64
		n     int
		maxAt int64
	}
	var accs []acc
	var noted []int
	for i := range stmts {
		if stmts[i].feed != nil {
			noted = append(noted, i)
		}
	}
	slices.SortStableFunc(noted, func(i, j int) int { return cmp.Compare(stmts[i].feed.pos, stmts[j].feed.pos) })
	for _, i := range noted {
		f := stmts[i].feed
		k := slices.IndexFunc(accs, func(a acc) bool { return a.tid == f.tid })
		if k < 0 {
			accs = append(accs, acc{tid: f.tid})
			k = len(accs) - 1
		}
		stmts[i].args[f.ordArg] = int64(accs[k].n)
		accs[k].n += f.n
		accs[k].maxAt = max(accs[k].maxAt, f.maxAt)
	}
	if len(accs) == 0 {
		return nil
	}
	slices.SortFunc(accs, func(x, y acc) int { return cmp.Compare(x.tid, y.tid) })
	seals := make([]stmt, 0, len(accs))
	for _, a := range accs {
		if a.n == 0 {
			continue
		}
		seals = append(seals, stmt{sql: e.q.feedSeal, args: []any{a.tid, int64(a.n), a.maxAt}})
	}
	return seals
}

// feedSQL are the change feeds' statements (buildQueries).
func feedSQL(q *queries) {
	// The records of a statement: $p the ord of the first, then arrays of their ops,
	// RowKeys, versions, Ats, expiries and properties; table id $1 and PartitionKey $2
	// are the compare-and-swap statements' own.
	recordsFrom := func(p, a int, tid, pk, from string) string {
		return fmt.Sprintf(`INSERT INTO cerulean_changes (table_id, txn, ord, op, pk, rk, version, at, expiry, props)
			SELECT %[2]s, txid_current(), ($%[1]d::BIGINT + u.i - 1)::INT, u.op, %[3]s, u.rk, u.version, u.at, u.expiry, u.props
			FROM %[4]sunnest($%[5]d::SMALLINT[], $%[6]d::BYTEA[], $%[7]d::BIGINT[], $%[8]d::BIGINT[], $%[9]d::BIGINT[], $%[10]d::BYTEA[])
				WITH ORDINALITY AS u (op, rk, version, at, expiry, props, i)`,
			p, tid, pk, from, a, a+1, a+2, a+3, a+4, a+5)
	}
	// The compare-and-swaps of a feed table copy the state of the row they write over
	// into its lean record (fillFrom): an update reads it from the snapshot at the
	// version it swaps (the swap fails if the row has changed since), a delete from its
	// RETURNING. The row they leave refers to no record: theirs carry the state.
	updateDML := strings.Replace(q.casUpdate, `expiry = NULLIF($7::BIGINT, 0)`, `expiry = NULLIF($7::BIGINT, 0), ref_txn = NULL, ref_ord = NULL`, 1)
	deleteDML, ok := strings.CutSuffix(q.casDelete, `RETURNING version`)
	if !ok || !strings.Contains(updateDML, `ref_txn = NULL`) {
		panic("feedSQL: casUpdate or casDelete changed")
	}
	deleteDML += `RETURNING version, props, ref_txn, ref_ord`
	updateFill := fillFrom(`w JOIN cerulean_entities x ON x.table_id = $1::BIGINT AND x.pk = $2::BYTEA AND x.rk = $3::BYTEA
			AND x.version = $4::BIGINT`, "$1::BIGINT", "x", "")
	deleteFill := fillFrom("w", "$1::BIGINT", "w", "")
	// The swaps of a transaction of several (applyRMW), whose records go in a statement
	// of their own; they raise when they lose.
	q.fillCasUpdateB = `WITH w AS (` + updateDML + `), ` + updateFill + ` ` + raisedAnswer
	q.fillCasDeleteB = `WITH w AS (` + deleteDML + `), ` + deleteFill + ` ` + raisedAnswer
	// A compare-and-swap that records its changes only if it wrote.
	cas := func(dml, fill string, p int) string {
		if fill != "" {
			fill += ", "
		}
		return `WITH w AS (` + dml + `), ` + fill + `r AS (` + recordsFrom(p, p+1, "$1::BIGINT", "$2::BYTEA", "w, ") + `) SELECT version FROM w`
	}
	q.feedCasUpdate = cas(updateDML, updateFill, 9)
	q.feedCasDelete = cas(deleteDML, deleteFill, 6)
	q.feedCasInsert = cas(q.casInsert, "", 11)
	// $1 table id, $2 the first ord, $3 PartitionKey, then the arrays.
	q.feedRecords = recordsFrom(2, 4, "$1::BIGINT", "$3::BYTEA", "")
	// The seal: $1 table id, $2 how many numbers, $3 the latest At of the records Go
	// made (0 for those the statements make in SQL: the seal's clock, read after theirs,
	// stands for them). It raises
	// (division_by_zero) when the feed is off or its table deleted, which rolls the
	// transaction back.
	q.feedSeal = `WITH s AS (UPDATE cerulean_feeds SET next = next + $2::BIGINT
				WHERE table_id = $1::BIGINT AND on_ AND NOT dropped RETURNING next - $2::BIGINT AS base),
			c AS (INSERT INTO cerulean_feed_txns (table_id, last, base, txn, at)
				SELECT $1::BIGINT, base + $2::BIGINT - 1, base, txid_current(), GREATEST($3::BIGINT, {now}) FROM s)
		SELECT 1 / count(*)::INT FROM s`

	// One record made by SQL (table-deleted, feed-off) for the feed rows in CTE f
	// (table_id, seq) at clock n.v.
	const one = `c AS (INSERT INTO cerulean_feed_txns (table_id, last, base, txn, at)
				SELECT f.table_id, f.seq, f.seq, txid_current(), n.v FROM f, n),
			r AS (INSERT INTO cerulean_changes (table_id, txn, ord, op, pk, rk, version, at, expiry, props)
				SELECT f.table_id, txid_current(), 0, %d, ''::BYTEA, ''::BYTEA, 0, n.v, 0, NULL FROM f, n)`
	q.createTableFeed = `WITH t AS (INSERT INTO cerulean_tables (account, key, name, id, settings, gen)
			VALUES ($1, $2, $3, nextval('cerulean_table_ids'), $4::BYTEA, nextval('cerulean_table_gens'))
			ON CONFLICT (account, key) DO NOTHING RETURNING id, gen),
		o AS (INSERT INTO cerulean_feeds (table_id, account, key, next, retention, on_)
			SELECT id, $1, $2, 2, $5::INT, TRUE FROM t)
		SELECT id, gen FROM t`
	// $4 the retention, 0 for off. On: the feed row is made or turned on (its numbering
	// goes on); off: a feed that is on records feed-off and stops.
	q.setSettingsFeed = `WITH t AS (UPDATE cerulean_tables SET settings = $3::BYTEA, gen = nextval('cerulean_table_gens')
			WHERE account = $1 AND key = $2 RETURNING id, gen),
		n AS MATERIALIZED (SELECT {now} AS v),
		o AS (INSERT INTO cerulean_feeds (table_id, account, key, next, retention, on_)
			SELECT id, $1, $2, 2, $4::INT, TRUE FROM t WHERE $4::INT > 0
			ON CONFLICT (table_id) DO UPDATE SET on_ = TRUE, retention = excluded.retention),
		f AS (UPDATE cerulean_feeds SET on_ = FALSE, next = next + 1
			WHERE $4::INT = 0 AND table_id IN (SELECT id FROM t) AND on_ RETURNING table_id, next - 1 AS seq),
		` + fmt.Sprintf(one, storage.ChangeFeedOff) + `
		SELECT id, gen, EXISTS (SELECT 1 FROM f) FROM t`
	// DeleteTable: the catalogue row out, the purge entry in, and the feed (if the table
	// has one) marked deleted, with its table-deleted record (also after the feed was
	// turned off: the feed then ends like any other, and retention removes it).
	q.deleteTableFeed = `WITH d AS (DELETE FROM cerulean_tables WHERE account = $1 AND key = $2 RETURNING id),
		p AS (INSERT INTO cerulean_purges (table_id) SELECT id FROM d),
		n AS MATERIALIZED (SELECT {now} AS v),
		g AS (UPDATE cerulean_feeds SET dropped = TRUE, next = next + 1
			WHERE table_id IN (SELECT id FROM d) RETURNING table_id, next - 1 AS seq),
		f AS (SELECT table_id, seq FROM g),
		` + fmt.Sprintf(one, storage.ChangeTableDeleted) + `
		SELECT count(*) FROM d`

	// A page: the feed's row and up to $8 records after $4 (numbers up to $5 past
	// where the page starts), from one snapshot. $1 the feed id (0: the table's, by
	// $2 account and $3 key); $6, $7 the PartitionKey range (NULL: open). The first
	// column is the table's id (NULL: no such table); the feed's columns are NULL when it
	// has no feed; the record columns are NULL when none is selected.
	q.readChanges = `WITH t AS (SELECT id FROM cerulean_tables WHERE account = $2 AND key = $3),
		m AS (SELECT f.* FROM cerulean_feeds f
			WHERE f.table_id = COALESCE(NULLIF($1::BIGINT, 0), (SELECT id FROM t)))
		SELECT (SELECT id FROM t), m.table_id, m.account, m.key, m.on_, m.dropped, m.next, m.removed,
			x.seq, x.op, x.pk, x.rk, x.version, x.at, x.expiry, x.props
		FROM (SELECT 1) o LEFT JOIN m ON TRUE LEFT JOIN LATERAL (
			SELECT c.base + r.ord AS seq, r.op, r.pk, r.rk, r.version, r.at, r.expiry,
				COALESCE(r.props, (SELECT e.props FROM cerulean_entities e
					WHERE e.table_id = r.table_id AND e.pk = r.pk AND e.rk = r.rk AND e.version = r.version)) AS props
			FROM cerulean_feed_txns c JOIN cerulean_changes r ON r.table_id = c.table_id AND r.txn = c.txn
			WHERE c.table_id = m.table_id AND c.last > GREATEST($4::BIGINT, m.removed)
				AND c.base <= GREATEST($4::BIGINT, m.removed) + $5::BIGINT
				AND c.base + r.ord > GREATEST($4::BIGINT, m.removed)
				AND c.base + r.ord <= GREATEST($4::BIGINT, m.removed) + $5::BIGINT
				AND (r.op >= 16 OR (($6::BYTEA IS NULL OR r.pk >= $6::BYTEA) AND ($7::BYTEA IS NULL OR r.pk < $7::BYTEA)))
			ORDER BY c.last, r.ord LIMIT $8) x ON TRUE`
	q.feedHorizon = `SELECT next - 1 FROM cerulean_feeds WHERE table_id = $1`

	// Retention: the feeds, then per feed the last transaction of the first $2 whose
	// records are all older than its retention (a prefix: it stops at the first younger),
	// then their removal with the mark in one statement.
	q.feedList = `SELECT table_id FROM cerulean_feeds ORDER BY table_id`
	q.feedTrimBound = `SELECT max(last) FROM (
			SELECT last, bool_and(at < (SELECT {now}) - f.retention::BIGINT * 10000000) OVER (ORDER BY last) AS old
			FROM (SELECT last, at FROM cerulean_feed_txns WHERE table_id = $1 ORDER BY last LIMIT $2) a,
				cerulean_feeds f WHERE f.table_id = $1) b
		WHERE old`
	q.feedTrim = `WITH c AS (DELETE FROM cerulean_feed_txns WHERE table_id = $1 AND last <= $2 RETURNING txn),
			r AS (DELETE FROM cerulean_changes x USING c WHERE x.table_id = $1 AND x.txn = c.txn RETURNING 1),
			u AS (UPDATE cerulean_feeds SET removed = GREATEST(removed, $2) WHERE table_id = $1)
		SELECT count(*) FROM r`
	q.feedDrop = `DELETE FROM cerulean_feeds WHERE table_id = $1 AND dropped
		AND NOT EXISTS (SELECT 1 FROM cerulean_feed_txns WHERE table_id = $1)`

	// The expiry purge of one feed table ($2), recording an expire per row it removes.
	// Rows of tables without the feed on are purged by purgeExpired, which leaves these.
	q.purgeExpiredFeed = `WITH n AS MATERIALIZED (SELECT {now} AS v),
		c AS (SELECT pk, rk FROM cerulean_entities
			WHERE expiry IS NOT NULL AND expiry <= (SELECT v FROM n) AND table_id = $2
			ORDER BY expiry LIMIT $1 FOR UPDATE SKIP LOCKED),
		d AS (DELETE FROM cerulean_entities e USING c
			WHERE e.table_id = $2 AND e.pk = c.pk AND e.rk = c.rk AND e.expiry <= (SELECT v FROM n)
			AND e.version = ` + snapshotVersion("$2::BIGINT", "c.pk", "c.rk") + `
			RETURNING e.pk, e.rk, e.props, e.ref_txn, e.ref_ord),
		` + fillFrom("d", "$2::BIGINT", "d", "") + `,
		` + rowEntriesGo("$2::BIGINT", "d") + `,
		k AS (SELECT count(*) AS n FROM d),
		s AS (UPDATE cerulean_feeds f SET next = f.next + k.n FROM k
			WHERE f.table_id = $2 AND f.on_ AND NOT f.dropped AND k.n > 0 RETURNING f.next - k.n AS base),
		t AS (INSERT INTO cerulean_feed_txns (table_id, last, base, txn, at)
			SELECT $2, s.base + k.n - 1, s.base, txid_current(), n.v FROM s, k, n),
		r AS (INSERT INTO cerulean_changes (table_id, txn, ord, op, pk, rk, version, at, expiry, props)
			SELECT $2, txid_current(), (row_number() OVER (ORDER BY d.pk, d.rk))::INT - 1, ` + fmt.Sprint(int(storage.ChangeExpire)) + `,
				d.pk, d.rk, 0, n.v, 0, NULL FROM d, n WHERE EXISTS (SELECT 1 FROM s))
		SELECT count(*) FROM d`
	q.feedsOn = `SELECT table_id FROM cerulean_feeds WHERE on_ AND NOT dropped ORDER BY table_id`

	// Lean records of a table whose rows go without a statement of the feed's: the
	// chunks of a deleted table's purge ($1 the table; purgeChunk's bound $2, $3), and
	// turning the feed off, after which the table's writes are plain statements that
	// leave rows with a reference alone (noRef). Each fills the records from the rows
	// and, for the feed turned off, clears the references.
	rowsFill := func(where string) string {
		return fillFrom(`cerulean_entities x`, "$1::BIGINT", "x", ` AND x.table_id = $1::BIGINT AND x.ref_txn IS NOT NULL`+where)
	}
	q.purgeChunkFeed = `WITH ` + rowsFill(` AND (x.pk, x.rk) < ($2::BYTEA, $3::BYTEA)`) + `
		DELETE FROM cerulean_entities WHERE table_id = $1 AND (pk, rk) < ($2::BYTEA, $3::BYTEA)`
	q.purgeRestFeed = `WITH ` + rowsFill("") + `
		DELETE FROM cerulean_entities WHERE table_id = $1`
	q.feedOffFill = `WITH ` + rowsFill("") + `
		UPDATE cerulean_entities SET ref_txn = NULL, ref_ord = NULL WHERE table_id = $1 AND ref_txn IS NOT NULL`
	q.hasFeed = `SELECT EXISTS (SELECT 1 FROM cerulean_feeds WHERE table_id = $1)`
}

// ReadChanges reads a page of a table's feed from the primary (storage.ChangeReader).
func (e *Engine) ReadChanges(ctx context.Context, account, table string, req storage.ChangesRequest) (storage.ChangesPage, error) {
	return e.primary().ReadChanges(ctx, account, table, req)
}

// ReadChanges reads a page of a table's feed on the view's source: a replica holds a
// gap-free prefix of every feed, as the primary does (storage.ChangeReader).
func (v *view) ReadChanges(ctx context.Context, account, table string, req storage.ChangesRequest) (page storage.ChangesPage, err error) {
	err = v.do(ctx, func(ctx context.Context, r reads) (err error) {
		page, err = r.ReadChanges(ctx, account, table, req)
		return
	})
	return page, err
}

var (
	_ storage.ChangeFeed   = (*Engine)(nil)
	_ storage.ChangeReader = (*view)(nil)
)

// ReadChanges reads a page with one statement, so the counter (the horizon), the
// retention mark and the records come from one snapshot.
func (r reads) ReadChanges(ctx context.Context, account, table string, req storage.ChangesRequest) (storage.ChangesPage, error) {
	if req.Limit <= 0 {
		return storage.ChangesPage{}, fmt.Errorf("read changes: limit %d is not positive", req.Limit)
	}
	var page storage.ChangesPage
	err := r.retry(ctx, "read changes", func() error {
		var err error
		page, err = r.readChanges(ctx, account, table, req)
		return err
	})
	return page, err
}

func (r reads) readChanges(ctx context.Context, account, table string, req storage.ChangesRequest) (storage.ChangesPage, error) {
	if r.e.dialect != dialectPostgres {
		return storage.ChangesPage{}, storage.ErrFeedOff
	}
	key := storage.TableKey(table)
	var start, end []byte
	if req.StartPK != nil {
		start = []byte(*req.StartPK)
	}
	if req.EndPK != nil {
		end = []byte(*req.EndPK)
	}
	after, limit := int64(req.After), int64(req.Limit)
	if req.After == storage.AfterNow {
		after, limit = 0, 0
	} else if req.After > 1<<62 {
		after = 1 << 62
	}
	rows, err := r.db.Query(ctx, r.e.q.readChanges, int64(req.FeedID), []byte(account), []byte(key), after,
		int64(maxFeedExamined), start, end, limit)
	if err != nil {
		return storage.ChangesPage{}, err
	}
	defer rows.Close()
	var (
		page     storage.ChangesPage
		tableID  *int64
		feedID   *int64
		facct    []byte
		fkey     []byte
		on, drop *bool
		next     *int64
		removed  *int64
		first    = true
	)
	for rows.Next() {
		var (
			seq, ver, at, exp *int64
			op                *int16
			pk, rk, props     []byte
		)
		if err := rows.Scan(&tableID, &feedID, &facct, &fkey, &on, &drop, &next, &removed,
			&seq, &op, &pk, &rk, &ver, &at, &exp, &props); err != nil {
			return storage.ChangesPage{}, err
		}
		if first {
			first = false
			if err := feedErr(req.FeedID, account, key, tableID, feedID, facct, fkey, on, drop); err != nil {
				return storage.ChangesPage{}, err
			}
		}
		if seq == nil {
			continue
		}
		c := storage.Change{Seq: uint64(*seq), Op: storage.ChangeOp(*op), PartitionKey: string(pk), RowKey: string(rk),
			Version: *ver, At: *at, Expiry: *exp}
		if props == nil && c.Op < storage.ChangeExpire && c.Op != storage.ChangeOp(storage.Delete) {
			// A lean record whose row no longer holds its version, and which no
			// statement filled: a broken invariant, never a record without its state.
			return storage.ChangesPage{}, fmt.Errorf("change record %d of %s/%s: its state is missing", c.Seq, c.PartitionKey, c.RowKey)
		}
		if len(props) > 0 {
			if c.Props, err = entity.DecodeProps(props); err != nil {
				return storage.ChangesPage{}, fmt.Errorf("change record: %w", err)
			}
		}
		page.Changes = append(page.Changes, c)
		page.Ended = page.Ended || c.Op == storage.ChangeTableDeleted
	}
	if err := rows.Err(); err != nil {
		return storage.ChangesPage{}, err
	}
	if first {
		return storage.ChangesPage{}, errors.New("read changes: no answer")
	}
	page.FeedID = uint64(*feedID)
	horizon := uint64(*next - 1)
	if req.After == storage.AfterNow {
		page.Next = horizon
		return page, nil
	}
	if req.After != 0 && req.After < uint64(*removed) {
		return storage.ChangesPage{}, storage.ErrChangesExpired
	}
	from := max(req.After, uint64(*removed))
	switch {
	case len(page.Changes) == req.Limit:
		page.Next = page.Changes[len(page.Changes)-1].Seq
	default:
		page.Next = max(min(horizon, from+maxFeedExamined), req.After)
	}
	return page, nil
}

// feedErr is what a read (or a wait) of the feed the statement found answers: the
// feed of a FeedID must be of this account and table name; a read without one needs the
// table and its feed on.
func feedErr(id uint64, account, key string, tableID, feedID *int64, facct, fkey []byte, on, drop *bool) error {
	if id != 0 {
		if feedID == nil || string(facct) != account || string(fkey) != key {
			return storage.ErrChangesExpired
		}
		return nil
	}
	if tableID == nil {
		return storage.ErrTableNotFound
	}
	if feedID == nil || !*on || *drop {
		return storage.ErrFeedOff
	}
	return nil
}

// WaitChanges waits for the feed's horizon to pass after (storage.ChangeFeed). The front
// end reads the counter of each feed someone waits on every feedPoll, once for all of
// its waiters (feedWatch), on the primary.
func (e *Engine) WaitChanges(ctx context.Context, account, table string, feedID, after uint64) error {
	if e.closed.Load() {
		return ErrClosed
	}
	page, err := e.ReadChanges(ctx, account, table, storage.ChangesRequest{FeedID: feedID, After: storage.AfterNow, Limit: 1})
	if err != nil {
		return err
	}
	if after != storage.AfterNow && page.Next > after {
		return nil
	}
	w := e.watch(int64(page.FeedID), page.Next)
	defer e.unwatch(w)
	for {
		w.mu.Lock()
		if after != storage.AfterNow && w.horizon > after {
			w.mu.Unlock()
			return nil
		}
		ch := w.moved
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-e.purgeStop:
			return ErrClosed
		}
	}
}

// feedWatch is a feed's horizon as this front end's poller last read it, for the
// waiters of the feed.
type feedWatch struct {
	id      int64
	waiters int // guarded by feedWatches.mu
	mu      sync.Mutex
	horizon uint64
	moved   chan struct{} // closed, and replaced, when horizon moves
}

type feedWatches struct {
	mu sync.Mutex
	m  map[int64]*feedWatch
}

// watch registers a waiter of feed id, starting the feed's poller if it has none.
func (e *Engine) watch(id int64, horizon uint64) *feedWatch {
	e.watches.mu.Lock()
	defer e.watches.mu.Unlock()
	if e.watches.m == nil {
		e.watches.m = map[int64]*feedWatch{}
	}
	w := e.watches.m[id]
	if w == nil {
		w = &feedWatch{id: id, horizon: horizon, moved: make(chan struct{})}
		e.watches.m[id] = w
		e.loops.Add(1)
		go e.pollFeed(w)
	}
	w.waiters++
	w.mu.Lock()
	if horizon > w.horizon {
		w.horizon = horizon
		close(w.moved)
		w.moved = make(chan struct{})
	}
	w.mu.Unlock()
	return w
}

func (e *Engine) unwatch(w *feedWatch) {
	e.watches.mu.Lock()
	w.waiters--
	e.watches.mu.Unlock()
}

// pollFeed reads the counter of w's feed every feedPoll while it has waiters, and wakes
// them when it moved.
func (e *Engine) pollFeed(w *feedWatch) {
	defer e.loops.Done()
	ctx, cancel := e.loopContext()
	defer cancel()
	t := time.NewTicker(feedPoll)
	defer t.Stop()
	for {
		select {
		case <-e.purgeStop:
			return
		case <-t.C:
		}
		e.watches.mu.Lock()
		if w.waiters == 0 {
			delete(e.watches.m, w.id)
			e.watches.mu.Unlock()
			return
		}
		e.watches.mu.Unlock()
		var h int64
		err := e.pool.QueryRow(ctx, e.q.feedHorizon, w.id).Scan(&h)
		if errors.Is(err, pgx.ErrNoRows) {
			h = 1 << 62 // the feed is gone: its waiters read ErrChangesExpired
		} else if err != nil {
			continue
		}
		w.mu.Lock()
		if uint64(h) > w.horizon {
			w.horizon = uint64(h)
			close(w.moved)
			w.moved = make(chan struct{})
		}
		w.mu.Unlock()
	}
}

// TrimChanges removes the records older than their feed's retention (storage.ChangeFeed):
// per feed, prefixes of up to feedChunk transactions, each removal one statement with
// the feed's retention mark; a deleted table's feed goes once nothing is left of it.
func (e *Engine) TrimChanges(ctx context.Context) (int, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	n, err := e.trimChanges(ctx)
	return n, e.mapErr(ctx, "trim change feeds", err)
}

// tableIDs runs a query answering table ids (the feeds to trim, the tables whose feed is
// on) on PostgreSQL itself; none on the other dialects, which record no feeds.
func (e *Engine) tableIDs(ctx context.Context, query string) ([]int64, error) {
	if e.dialect != dialectPostgres {
		return nil, nil
	}
	rows, err := e.pool.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

func (e *Engine) trimChanges(ctx context.Context) (int, error) {
	ids, err := e.tableIDs(ctx, e.q.feedList)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, id := range ids {
		for {
			if err := ctx.Err(); err != nil {
				return total, err
			}
			var last *int64
			if err := e.pool.QueryRow(ctx, e.q.feedTrimBound, id, feedChunk).Scan(&last); err != nil {
				return total, fmt.Errorf("feed %d: %w", id, err)
			}
			if last == nil {
				break
			}
			var n int64
			if err := e.pool.QueryRow(ctx, e.q.feedTrim, id, *last).Scan(&n); err != nil {
				return total, fmt.Errorf("feed %d: %w", id, err)
			}
			total += int(n)
		}
		if _, err := e.pool.Exec(ctx, e.q.feedDrop, id); err != nil {
			return total, fmt.Errorf("feed %d: %w", id, err)
		}
	}
	return total, nil
}

// purgeExpiredFeeds removes the expired rows of the tables whose feed is on, recording
// an expire for each in the removal's transaction; chunks of ExpiryChunk rows per table.
func (e *Engine) purgeExpiredFeeds(ctx context.Context) (int, error) {
	ids, err := e.tableIDs(ctx, e.q.feedsOn)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, id := range ids {
		for failures := 0; ; {
			if err := ctx.Err(); err != nil {
				return total, err
			}
			var n int64
			if err := e.pool.QueryRow(ctx, e.q.purgeExpiredFeed, ExpiryChunk, id).Scan(&n); err != nil {
				if failures++; retryable(err) && failures < 10 {
					continue
				}
				return total, fmt.Errorf("purge expired rows of table %d: %w", id, err)
			}
			failures = 0
			total += int(n)
			if n < ExpiryChunk {
				break
			}
		}
	}
	return total, nil
}

// feedWriteSQL builds the plain writes of a feed table (queries.feedInsert1 …): each is
// its plain statement (queries.go; setList the ON CONFLICT update's assignments, atIDGen
// its catalogue check) with the records of what it wrote in a CTE of its own, so a
// write that writes nothing records nothing, and the statement answers as the plain one
// does. The records are numbered by the seal as every record is (sealFeeds): a
// statement reserves two ords per row it may write, 2·pos for the expiry of a stored
// expired row written over and 2·pos+1 for the write's own record.
//
// A write's record is lean ("Lean records" below): the row it writes refers to it
// (ref_txn, ref_ord), and a fill CTE copies the state of the row it writes over into
// that row's own lean record, if it has one.
//
// An insert or insert-or-replace can write over a stored row that has expired: its
// expiry is recorded first (noteChange's rule). Which row it wrote over is known from
// CTE o, the row as the statement's snapshot holds it, and the ON CONFLICT update only
// writes over that very row (the same version: every write of a row gives it a new
// one, so its expiry is the one o read). A row that changed after the snapshot (written
// by a transaction that committed meanwhile) therefore writes nothing, and the write
// runs again (diagnose finds nothing failing), as a compare-and-swap that lost does.
// The single statements lock o's row (FOR UPDATE) before they write, so a concurrent
// write of the row makes them wait and then read its latest version, rather than lose:
// each locks one row, in the group's order, so the groups' lock order is kept. The
// statements over arrays (groups, batches) do not lock: locking every row of the
// arrays first and then writing them would take the locks of rows created meanwhile
// out of order.
//
// A write's record holds its new version (At too) and the row's stored expiry after
// it; a delete's At is the clock the statement reads.
func feedWriteSQL(q *queries, setList, atIDGen string) {
	ins, ups := int(storage.Insert), int(storage.InsertOrReplace)
	const cols = `INSERT INTO cerulean_changes (table_id, txn, ord, op, pk, rk, version, at, expiry, props)`
	// The ON CONFLICT update also points the row at its new lean record.
	setRef := setList + `, ref_txn = excluded.ref_txn, ref_ord = excluded.ref_ord WHERE `
	// recs are the records of the rows w wrote: x.k 0 the expiry of the row o read if
	// it had expired at n.v, 1 the write's own (op, lean).
	recs := func(op int) string {
		return fmt.Sprintf(`CROSS JOIN n CROSS JOIN LATERAL (VALUES
				(0, %d::SMALLINT, 0::BIGINT, n.v, 0::BIGINT),
				(1, %d::SMALLINT, w.version, w.version, COALESCE(w.expiry, 0)))
				AS x (k, op, version, at, expiry)`, int(storage.ChangeExpire), op)
	}
	const clockCTE = `n AS MATERIALIZED (SELECT {now} AS v)`
	answer := `SELECT version FROM w`

	// One row: $1 table id, $2 account, $3 table key, $4 PartitionKey, $5 RowKey, $6
	// properties, $7 generation, $8 time-to-live, $9 the first ord. o, the row locked,
	// is the version the write replaces, so it is what the fill copies.
	one := func(cond string, op int, final string) string {
		return `WITH ` + clockCTE + `,
		o AS MATERIALIZED (SELECT e.version, e.expiry, e.props, e.ref_txn, e.ref_ord FROM cerulean_entities e
			WHERE e.table_id = $1::BIGINT AND e.pk = $4::BYTEA AND e.rk = $5::BYTEA),
		w AS (INSERT INTO cerulean_entities AS e (table_id, pk, rk, version, props, expiry, ref_txn, ref_ord)
			SELECT $1::BIGINT, $4::BYTEA, $5::BYTEA, n.v, $6::BYTEA, n.v + NULLIF($8::BIGINT, 0), txid_current(), ($9::BIGINT + 1)::INT
			FROM n, (SELECT count(*) FROM o) l WHERE ` + atIDGen + `
			ON CONFLICT (table_id, pk, rk) DO UPDATE SET ` + setRef + cond + ` e.version = (SELECT version FROM o)
			RETURNING e.version, e.expiry),
		` + fillFrom("o, w", "$1::BIGINT", "o", "") + `,
		r AS (` + cols + `
			SELECT $1::BIGINT, txid_current(), ($9::BIGINT + x.k)::INT, x.op, $4::BYTEA, $5::BYTEA, x.version, x.at, x.expiry, NULL
			FROM w ` + recs(op) + `
			WHERE x.k = 1 OR EXISTS (SELECT 1 FROM o WHERE o.expiry <= n.v))
		` + final
	}
	const expiredOnly = `e.expiry <= excluded.version AND`
	q.feedInsert1, q.feedInsertB = one(expiredOnly, ins, answer), one(expiredOnly, ins, raisedAnswer)
	um := int(storage.InsertOrMerge)
	q.feedUpsertFirst1, q.feedUpsertFirstB = one(expiredOnly, um, answer), one(expiredOnly, um, raisedAnswer)
	q.feedUpsert1, q.feedUpsertB = one("", ups, answer), one("", ups, raisedAnswer)

	// Replace: replace1's parameters ($9 the expected version, 0 for any), $10 the ord;
	// it never writes over an expired row. It locks the row first (o), as the inserts
	// do, so that the version it replaces is the one it copies into that version's
	// record.
	replace := func(final string) string {
		return `WITH ` + clockCTE + `,
		o AS MATERIALIZED (SELECT e.version, e.props, e.ref_txn, e.ref_ord FROM cerulean_entities e
			WHERE e.table_id = $1::BIGINT AND e.pk = $4::BYTEA AND e.rk = $5::BYTEA),
		w AS (UPDATE cerulean_entities AS e SET version = GREATEST(n.v, e.version + 1), props = $6::BYTEA,
				expiry = GREATEST(n.v, e.version + 1) + NULLIF($8::BIGINT, 0), ref_txn = txid_current(), ref_ord = $10::INT
			FROM n
			WHERE e.table_id = $1::BIGINT AND e.pk = $4::BYTEA AND e.rk = $5::BYTEA
			AND ($9::BIGINT = 0 OR e.version = $9::BIGINT) AND (e.expiry IS NULL OR e.expiry > n.v) AND ` + atIDGen + `
			AND e.version = (SELECT version FROM o)
			RETURNING e.version, e.expiry),
		` + fillFrom("o, w", "$1::BIGINT", "o", "") + `,
		r AS (` + cols + `
			SELECT $1::BIGINT, txid_current(), $10::INT, ` + fmt.Sprint(int(storage.Replace)) + `, $4::BYTEA, $5::BYTEA,
				w.version, w.version, COALESCE(w.expiry, 0), NULL FROM w)
		` + final
	}
	q.feedReplace1, q.feedReplaceB = replace(answer), replace(raisedAnswer)
	// Delete: delete1's parameters ($6 the expected version, $7 the generation), $8 the
	// ord. What it removed is in its RETURNING.
	del := func(final string) string {
		return `WITH ` + clockCTE + `,
		w AS (DELETE FROM cerulean_entities AS e USING n
			WHERE e.table_id = $1::BIGINT AND e.pk = $4::BYTEA AND e.rk = $5::BYTEA
			AND ($6::BIGINT = 0 OR e.version = $6::BIGINT) AND (e.expiry IS NULL OR e.expiry > n.v) AND ` + atIDGen + `
			AND e.version = ` + snapshotVersion("$1::BIGINT", "$4::BYTEA", "$5::BYTEA") + `
			RETURNING e.version, n.v AS at, e.props, e.ref_txn, e.ref_ord),
		` + fillFrom("w", "$1::BIGINT", "w", "") + `,
		r AS (` + cols + `
			SELECT $1::BIGINT, txid_current(), $8::INT, ` + fmt.Sprint(int(storage.Delete)) + `, $4::BYTEA, $5::BYTEA,
				0, w.at, 0, NULL FROM w)
		` + final
	}
	q.feedDelete1, q.feedDeleteB = del(answer), del(raisedAnswer)

	// The statements over arrays look up the row as the snapshot holds it only for the
	// rows they write over (old, in the ON CONFLICT update's condition and in RETURNING:
	// the statement's own writes are not in its snapshot), rather than in a CTE of every
	// row: a CTE of index probes over the arrays made the planner prefer a custom plan,
	// planned again at every run, to the generic plan it costs at 100 rows. The fill
	// reads the rows written over from the snapshot too (x): that is the version the
	// update's condition matched.
	old := func(col string) string {
		return `(SELECT x.` + col + ` FROM cerulean_entities x WHERE x.table_id = e.table_id AND x.pk = e.pk AND x.rk = e.rk)`
	}
	snapshotFill := fillFrom(`w JOIN cerulean_entities x ON x.table_id = w.table_id AND x.pk = w.pk AND x.rk = w.rk`, "w.table_id", "x", "")
	// A group of single writes of one table (mergeSingles, ApplyEach): insertGroup's
	// arrays $1 … $8, $9 the first ord, $10 each row's place (pos) among the records.
	group := func(cond string, op int) string {
		return `WITH ` + clockCTE + `,
		w AS (INSERT INTO cerulean_entities AS e (table_id, pk, rk, version, props, expiry, ref_txn, ref_ord)
			SELECT u.id, u.pk, u.rk, n.v, u.props, n.v + NULLIF(u.ttl, 0), txid_current(), ($9::BIGINT + 2 * u.pos + 1)::INT
			FROM n, unnest($1::BIGINT[], $2::BYTEA[], $3::BYTEA[], $4::BYTEA[], $5::BYTEA[], $6::BYTEA[], $7::BIGINT[], $8::BIGINT[], $10::INT[])
				WITH ORDINALITY AS u (id, account, key, pk, rk, props, gen, ttl, pos, ord)
			WHERE EXISTS (SELECT 1 FROM cerulean_tables t WHERE t.account = u.account AND t.key = u.key AND t.id = u.id AND COALESCE(t.gen, 0) = u.gen)
			ORDER BY u.ord
			ON CONFLICT (table_id, pk, rk) DO UPDATE SET ` + setRef + cond + ` e.version = ` + old("version") + `
			RETURNING e.table_id, e.pk, e.rk, e.version, e.expiry, e.ref_ord, ` + old("expiry") + ` AS old),
		` + snapshotFill + `,
		r AS (` + cols + `
			SELECT w.table_id, txid_current(), w.ref_ord - 1 + x.k, x.op, w.pk, w.rk, x.version, x.at, x.expiry, NULL
			FROM w ` + recs(op) + `
			WHERE x.k = 1 OR w.old <= n.v)
		SELECT table_id, pk, rk, version FROM w`
	}
	q.feedInsertGroup, q.feedUpsertGroup = group(expiredOnly, ins), group("", ups)

	// A batch of inserts or insert-or-replaces (applyMany): insertMany's parameters, $9
	// the table id, $10 the first ord, $11 each row's place among the records.
	many := func(cond string, op int) string {
		return `WITH ` + clockCTE + `,
		w AS (INSERT INTO cerulean_entities AS e (table_id, pk, rk, version, props, expiry, ref_txn, ref_ord)
			SELECT t.id, $3::BYTEA, u.rk, n.v, u.props, n.v + NULLIF(u.ttl, 0), txid_current(), ($10::BIGINT + 2 * u.pos + 1)::INT
			FROM cerulean_tables t, n, unnest($4::BYTEA[], $5::BYTEA[], $7::BIGINT[], $11::INT[]) WITH ORDINALITY AS u (rk, props, ttl, pos, ord)
			WHERE t.account = $1 AND t.key = $2 AND COALESCE(t.gen, 0) = $8::BIGINT AND t.id = $9::BIGINT
			ORDER BY u.ord
			ON CONFLICT (table_id, pk, rk) DO UPDATE SET ` + setRef + cond + ` e.version = ` + old("version") + `
			RETURNING e.table_id, e.pk, e.rk, e.version, e.expiry, e.ref_ord, ` + old("expiry") + ` AS old),
		` + snapshotFill + `,
		r AS (` + cols + `
			SELECT $9::BIGINT, txid_current(), w.ref_ord - 1 + x.k, x.op, $3::BYTEA, w.rk, x.version, x.at, x.expiry, NULL
			FROM w ` + recs(op) + `
			WHERE x.k = 1 OR w.old <= n.v)
		SELECT array_agg(w.rk), array_agg(w.version), 1 / (CASE WHEN count(*) = $6::BIGINT THEN 1 ELSE 0 END) FROM w`
	}
	q.feedInsertMany, q.feedUpsertMany = many(expiredOnly, ins), many("", ups)
}

// snapshotVersion is the version of a row in the statement's snapshot. A statement
// that fills the lean record of a row it removes or writes over must do so only over
// that version: the record of a version committed after the snapshot (which an update
// or delete in READ COMMITTED goes on to when the row changed while it waited for its
// lock) is not in the snapshot, so no update of the statement finds it. A statement
// whose row changed so writes nothing and runs again.
func snapshotVersion(tid, pk, rk string) string {
	return `(SELECT x.version FROM cerulean_entities x WHERE x.table_id = ` + tid + ` AND x.pk = ` + pk + ` AND x.rk = ` + rk + `)`
}

// fillFrom is the CTE f of a statement that changes or removes rows which may refer to
// lean records: it copies each such row's properties into its record. from names the
// rows' old versions (columns props, ref_txn, ref_ord of alias src) for feed table tid;
// and, if not empty, narrows them further (" AND …").
func fillFrom(from, tid, src, and string) string {
	return `f AS (UPDATE cerulean_changes c SET props = ` + src + `.props FROM ` + from + `
			WHERE c.table_id = ` + tid + ` AND c.txn = ` + src + `.ref_txn AND c.ord = ` + src + `.ref_ord AND c.props IS NULL` + and + `)`
}
