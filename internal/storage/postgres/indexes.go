package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/index"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Secondary index entries (docs/indexes-design.md §3).
//
// An entry is (table id, index id, index key, pk, rk) in cerulean_index_entries, or for a
// unique index in cerulean_unique_entries, whose primary key (table id, index id, index
// key) is the uniqueness: the database decides between front ends writing one value at
// once, one commits and the others get SQLSTATE 23505. A stored row (expired or not) has
// the entries of every maintained index whose properties it all has; the index key is
// the values' internal/index keys, concatenated, compared bytewise as BYTEA is.
//
// Writes of a table that declares an index take the read-modify-write path (applyRMW)
// whatever their kind, and its swap's transaction carries the entries: first a check
// that the settings generation the rows were read with is still the table's (so an index
// declared meanwhile is not missed: the Apply runs again), taking a KEY SHARE lock of the
// catalogue row while an index is being built (a build chunk holds the row FOR UPDATE, so
// a chunk and a write never interleave), then the swaps, then the deletion of every entry
// of the rows written (found by (table id, pk, rk), with no knowledge of the old values)
// and the insertion of the rows' new entries. Tables without indexes send exactly the
// statements they sent before indexes.
//
// Why not the plain statements' CTEs, as the change feed does: a CTE that deletes a row's
// entries and one that inserts its new entries run on one snapshot in no defined order,
// so a unique value a row keeps, or passes to another row of the batch, would conflict
// with its own old entry; and a unique violation inside a coalesced group
// (coalesce.go) would abort the other writers' statements with it. The read-modify-write
// path costs a read more per write (see BenchmarkIndexedInsert for the figures).

// ixEntry is one entry of a row: its index, the index key, and whether the index is
// unique.
type ixEntry struct {
	id     uint32
	key    []byte
	unique bool
}

// maintained returns the indexes writes maintain: every declared one but a failed one
// (which no query uses and whose entries go as a dropped index's do).
func maintained(s storage.TableSettings) []storage.IndexDef {
	var out []storage.IndexDef
	for _, d := range s.Indexes {
		if d.ID != 0 && d.State != storage.IndexFailed {
			out = append(out, d)
		}
	}
	return out
}

// building reports whether one of defs is being built.
func building(defs []storage.IndexDef) bool {
	return slices.ContainsFunc(defs, func(d storage.IndexDef) bool { return d.State == storage.IndexBuilding })
}

// rowEntries returns the entries, in each of defs, of an entity with props: none for an
// index one of whose properties it lacks. Every index has plain entries, which reads
// use; a unique index has a unique entry besides, keyed by the exact key its uniqueness
// is decided by (storage.IndexDef.AppendUniqueKey). Reading plain entries only keeps one
// order, (index key, PartitionKey, RowKey), for every index, as the planner's merges need.
func rowEntries(defs []storage.IndexDef, props []entity.Property) []ixEntry {
	var out []ixEntry
	for i := range defs {
		d := &defs[i]
		k, ok := d.AppendKey(nil, props)
		if !ok {
			continue
		}
		out = append(out, ixEntry{id: d.ID, key: k})
		if d.Unique {
			x, _ := d.AppendUniqueKey(nil, props)
			out = append(out, ixEntry{id: d.ID, key: x, unique: true})
		}
	}
	return out
}

// ixRow is a row a swap writes: its RowKey, whether it is stored afterwards, and its
// properties then.
type ixRow struct {
	rk     string
	exists bool
	props  []entity.Property
}

// rowEntriesGo is the CTEs (named xi and xu) that delete the entries of the rows rel
// holds (columns pk, rk) of table tid: the expiry purges' (queries.go, changes.go).
func rowEntriesGo(tid, rel string) string {
	return `xi AS (DELETE FROM cerulean_index_entries x USING ` + rel + ` WHERE x.table_id = ` + tid + ` AND x.pk = ` + rel + `.pk AND x.rk = ` + rel + `.rk),
		xu AS (DELETE FROM cerulean_unique_entries x USING ` + rel + ` WHERE x.table_id = ` + tid + ` AND x.pk = ` + rel + `.pk AND x.rk = ` + rel + `.rk)`
}

// indexSQL builds the statements of the entries (queries.go calls it).
func indexSQL(q *queries) {
	const liveAt = `(e.expiry IS NULL OR e.expiry > (SELECT {now}))`
	// The swap's first statement: division_by_zero (raise's error, which the swap takes
	// for a lost race) unless the table id $1 still has the settings generation $2.
	const genCheck = `SELECT 1 / count(*) FROM (SELECT 1 FROM cerulean_tables WHERE id = $1::BIGINT AND COALESCE(gen, 0) = $2::BIGINT%s) s`
	q.ixGen = fmt.Sprintf(genCheck, "")
	q.ixGenLock = fmt.Sprintf(genCheck, " FOR KEY SHARE")
	// Every entry of the rows $3 of partition $2 of table $1.
	q.ixDelete = `WITH a AS (DELETE FROM cerulean_index_entries
			WHERE table_id = $1::BIGINT AND pk = $2::BYTEA AND rk = ANY($3::BYTEA[]))
		DELETE FROM cerulean_unique_entries WHERE table_id = $1::BIGINT AND pk = $2::BYTEA AND rk = ANY($3::BYTEA[])`
	// The entries ($3 RowKeys, $4 index ids, $5 index keys, $6 uniqueness) of partition $2
	// of table $1, unique ones in the arrays' order (sorted, so that concurrent writers
	// take the unique values' locks in one order).
	q.ixInsert = `WITH u AS (SELECT * FROM unnest($3::BYTEA[], $4::INT[], $5::BYTEA[], $6::BOOLEAN[]) WITH ORDINALITY AS u (rk, idx, key, uniq, ord)),
		a AS (INSERT INTO cerulean_index_entries (table_id, index_id, key, pk, rk)
			SELECT $1::BIGINT, u.idx, u.key, $2::BYTEA, u.rk FROM u WHERE NOT u.uniq)
		INSERT INTO cerulean_unique_entries (table_id, index_id, key, pk, rk)
			SELECT $1::BIGINT, u.idx, u.key, $2::BYTEA, u.rk FROM u WHERE u.uniq ORDER BY u.ord`
	// Who holds the unique values ($2 index ids, $3 index keys) of table $1; ixHoldersLive
	// adds whether the holder is stored and not expired.
	q.ixHolders = `SELECT u.index_id, u.key, u.pk, u.rk FROM unnest($2::INT[], $3::BYTEA[]) AS v (idx, key)
		JOIN cerulean_unique_entries u ON u.table_id = $1::BIGINT AND u.index_id = v.idx AND u.key = v.key`
	q.ixHoldersLive = `SELECT u.index_id, u.key, u.pk, u.rk, COALESCE(` + liveAt + `, FALSE) FROM unnest($2::INT[], $3::BYTEA[]) AS v (idx, key)
		JOIN cerulean_unique_entries u ON u.table_id = $1::BIGINT AND u.index_id = v.idx AND u.key = v.key
		LEFT JOIN cerulean_entities e ON e.table_id = u.table_id AND e.pk = u.pk AND e.rk = u.rk`
	// takeOver's: the holder's row ($2, $3) of table $1, locked, and whether it has
	// expired; the entry ($2 index, $3 key, $4 … $5 holder), deleted.
	q.ixLockHolder = `SELECT e.expiry IS NOT NULL AND e.expiry <= (SELECT {now}) FROM cerulean_entities e
		WHERE e.table_id = $1 AND e.pk = $2::BYTEA AND e.rk = $3::BYTEA FOR UPDATE`
	q.ixTakeOver = `DELETE FROM cerulean_unique_entries WHERE table_id = $1 AND index_id = $2 AND key = $3::BYTEA
		AND pk = $4::BYTEA AND rk = $5::BYTEA`

	// Reads. $1 table id, $2 index id, $3 the span's start, $4 … $6 the entry to read
	// after (an empty key for none: every index key is longer), $7 how many, $8 the span's
	// end. The entries come first, by their primary key, and each row is one probe.
	const (
		scanEntries = `SELECT x.key, x.pk, x.rk, e.version, e.props, e.expiry, ` + liveAt + `
		FROM (SELECT key, pk, rk FROM cerulean_index_entries WHERE table_id = $1::BIGINT AND index_id = $2::INT AND key >= $3::BYTEA%s
			AND (key, pk, rk) > ($4::BYTEA, $5::BYTEA, $6::BYTEA) ORDER BY key, pk, rk LIMIT $7) x
		LEFT JOIN cerulean_entities e ON e.table_id = $1::BIGINT AND e.pk = x.pk AND e.rk = x.rk
		ORDER BY x.key, x.pk, x.rk`
		countEntries = `SELECT count(*) FROM (SELECT 1 FROM cerulean_index_entries WHERE table_id = $1::BIGINT AND index_id = $2::INT
			AND key >= $3::BYTEA%s LIMIT $4) s`
	)
	q.ixScan = fmt.Sprintf(scanEntries, "")
	q.ixScanTo = fmt.Sprintf(scanEntries, ` AND key < $8::BYTEA`)
	q.ixCount = fmt.Sprintf(countEntries, "")
	q.ixCountTo = fmt.Sprintf(countEntries, ` AND key < $5::BYTEA`)
	q.ixTable = `SELECT id, settings FROM cerulean_tables WHERE account = $1 AND key = $2`
	// $3 … $4 the start, $5 how many, $6 … $7 the end.
	const countRows = `SELECT t.id, (SELECT count(*) FROM (SELECT 1 FROM cerulean_entities e
			WHERE e.table_id = t.id AND (e.pk, e.rk) >= ($3::BYTEA, $4::BYTEA)%s LIMIT $5) s)
		FROM cerulean_tables t WHERE t.account = $1 AND t.key = $2`
	q.ixCountRows = fmt.Sprintf(countRows, "")
	q.ixCountRowsTo = fmt.Sprintf(countRows, ` AND (e.pk, e.rk) < ($6::BYTEA, $7::BYTEA)`)
	// The single writes of a table with indexes, none building and no change feed
	// (applyIndexed): insert1, upsert1, replace1 and delete1, each with its row's entries
	// in CTEs of the same statement, so a lone write stays one statement, coalesced with
	// the others (coalesce.go). After the plain statement's parameters come the row's new
	// entries: index ids, index keys, uniqueness (empty for a delete). The CTEs act only
	// on the row the write wrote (w), and the entries they delete (the row's old ones
	// that are not new) and insert (the new ones the row does not have yet) are disjoint,
	// so the order in which the database runs them does not matter. A unique value held
	// by another row fails the statement (23505, or division_by_zero: keepOwn).
	// A unique entry the row holds already is updated (to itself), which locks it as a
	// write of the value: a concurrent takeover (takeOver) of the value from the row,
	// expired at that write's snapshot, then waits for this one. One another row holds
	// is left, and the statement fails with division_by_zero (allTaken: fewer entries
	// written than the row has), as raise() does; uniqueError then tells why.
	const (
		keepOwn = `ON CONFLICT (table_id, index_id, key) DO UPDATE SET pk = excluded.pk
			WHERE x.pk = excluded.pk AND x.rk = excluded.rk RETURNING 1`
		allTaken = `(CASE WHEN (SELECT count(*) FROM i2) = (SELECT count(*) FROM w, n WHERE n.uniq) THEN 1 ELSE 0 END)`
	)
	withEntries := func(dml string, n int, unique bool) string {
		const ret = `RETURNING e.version`
		if !strings.HasSuffix(dml, ret) {
			panic("indexSQL: a statement that does not end in " + ret)
		}
		ids, keys, uniq := fmt.Sprintf("$%d::INT[]", n+1), fmt.Sprintf("$%d::BYTEA[]", n+2), fmt.Sprintf("$%d::BOOLEAN[]", n+3)
		if !unique {
			// A table without unique indexes: the plain entries only.
			return `WITH w AS (` + strings.TrimSuffix(dml, ret) + ` RETURNING e.table_id, e.pk, e.rk, e.version),
		n AS (SELECT * FROM unnest(` + ids + `, ` + keys + `, ` + uniq + `) AS n (idx, key, uniq)),
		d1 AS (DELETE FROM cerulean_index_entries x USING w WHERE x.table_id = w.table_id AND x.pk = w.pk AND x.rk = w.rk
			AND NOT EXISTS (SELECT 1 FROM n WHERE n.idx = x.index_id AND n.key = x.key)),
		i1 AS (INSERT INTO cerulean_index_entries (table_id, index_id, key, pk, rk)
			SELECT w.table_id, n.idx, n.key, w.pk, w.rk FROM w, n ON CONFLICT DO NOTHING)
		SELECT version FROM w`
		}
		return `WITH w AS (` + strings.TrimSuffix(dml, ret) + ` RETURNING e.table_id, e.pk, e.rk, e.version),
		n AS (SELECT * FROM unnest(` + ids + `, ` + keys + `, ` + uniq + `) AS n (idx, key, uniq)),
		d1 AS (DELETE FROM cerulean_index_entries x USING w WHERE x.table_id = w.table_id AND x.pk = w.pk AND x.rk = w.rk
			AND NOT EXISTS (SELECT 1 FROM n WHERE NOT n.uniq AND n.idx = x.index_id AND n.key = x.key)),
		d2 AS (DELETE FROM cerulean_unique_entries x USING w WHERE x.table_id = w.table_id AND x.pk = w.pk AND x.rk = w.rk
			AND NOT EXISTS (SELECT 1 FROM n WHERE n.uniq AND n.idx = x.index_id AND n.key = x.key)),
		i1 AS (INSERT INTO cerulean_index_entries (table_id, index_id, key, pk, rk)
			SELECT w.table_id, n.idx, n.key, w.pk, w.rk FROM w, n WHERE NOT n.uniq ON CONFLICT DO NOTHING),
		i2 AS (INSERT INTO cerulean_unique_entries AS x (table_id, index_id, key, pk, rk)
			SELECT w.table_id, n.idx, n.key, w.pk, w.rk FROM w, n WHERE n.uniq
			` + keepOwn + `)
		SELECT version / ` + allTaken + ` FROM w`
	}
	for i, unique := range []bool{true, false} {
		q.ixInsert1[i], q.ixUpsert1[i] = withEntries(q.insert1, 8, unique), withEntries(q.upsert1, 8, unique)
		q.ixReplace1[i], q.ixDelete1[i] = withEntries(q.replace1, 9, unique), withEntries(q.delete1, 7, unique)
	}
	// insertGroup and upsertGroup with the group's entries (mergeSingles): after their
	// eight arrays, each entry's table id, PartitionKey, RowKey, index id, index key and
	// uniqueness.
	groupEntries := func(dml string, unique bool) string {
		const ret = `RETURNING e.table_id, e.pk, e.rk, e.version`
		if !strings.HasSuffix(dml, ret) {
			panic("indexSQL: a group statement that does not end in " + ret)
		}
		const of = `n.tid = w.table_id AND n.pk = w.pk AND n.rk = w.rk`
		if !unique {
			return `WITH w AS (` + dml + `),
		n AS (SELECT * FROM unnest($9::BIGINT[], $10::BYTEA[], $11::BYTEA[], $12::INT[], $13::BYTEA[], $14::BOOLEAN[]) AS n (tid, pk, rk, idx, key, uniq)),
		d1 AS (DELETE FROM cerulean_index_entries x USING w WHERE x.table_id = w.table_id AND x.pk = w.pk AND x.rk = w.rk
			AND NOT EXISTS (SELECT 1 FROM n WHERE ` + of + ` AND n.idx = x.index_id AND n.key = x.key)),
		i1 AS (INSERT INTO cerulean_index_entries (table_id, index_id, key, pk, rk)
			SELECT w.table_id, n.idx, n.key, w.pk, w.rk FROM w JOIN n ON ` + of + ` ON CONFLICT DO NOTHING)
		SELECT table_id, pk, rk, version FROM w`
		}
		return `WITH w AS (` + dml + `),
		n AS (SELECT * FROM unnest($9::BIGINT[], $10::BYTEA[], $11::BYTEA[], $12::INT[], $13::BYTEA[], $14::BOOLEAN[]) AS n (tid, pk, rk, idx, key, uniq)),
		d1 AS (DELETE FROM cerulean_index_entries x USING w WHERE x.table_id = w.table_id AND x.pk = w.pk AND x.rk = w.rk
			AND NOT EXISTS (SELECT 1 FROM n WHERE ` + of + ` AND NOT n.uniq AND n.idx = x.index_id AND n.key = x.key)),
		d2 AS (DELETE FROM cerulean_unique_entries x USING w WHERE x.table_id = w.table_id AND x.pk = w.pk AND x.rk = w.rk
			AND NOT EXISTS (SELECT 1 FROM n WHERE ` + of + ` AND n.uniq AND n.idx = x.index_id AND n.key = x.key)),
		i1 AS (INSERT INTO cerulean_index_entries (table_id, index_id, key, pk, rk)
			SELECT w.table_id, n.idx, n.key, w.pk, w.rk FROM w JOIN n ON ` + of + ` WHERE NOT n.uniq ON CONFLICT DO NOTHING),
		i2 AS (INSERT INTO cerulean_unique_entries AS x (table_id, index_id, key, pk, rk)
			SELECT w.table_id, n.idx, n.key, w.pk, w.rk FROM w JOIN n ON ` + of + ` WHERE n.uniq
			` + keepOwn + `)
		SELECT table_id, pk, rk, version / ` + strings.Replace(allTaken, "FROM w, n WHERE", "FROM w JOIN n ON "+of+" WHERE", 1) + ` FROM w`
	}
	for i, unique := range []bool{true, false} {
		q.ixInsertGroup[i], q.ixUpsertGroup[i] = groupEntries(q.insertGroup, unique), groupEntries(q.upsertGroup, unique)
	}
	buildSQL(q)
}

// indexStmts are the statements a swap of table tid, read at settings generation gen,
// sends for the rows it writes in partition pk, given the maintained indexes defs: the
// generation check (first in the transaction) and the entries (after the swaps). A
// unique value two rows of the batch would both take fails here, as the later
// mutation's UniqueViolation (last: the mutation index of each RowKey's last mutation).
func (e *Engine) indexStmts(tid, gen int64, defs []storage.IndexDef, pk []byte, rows []ixRow, last map[string]int) (first stmt, after []stmt, err error) {
	first = stmt{sql: e.q.ixGen, args: []any{tid, gen}}
	if building(defs) {
		first.sql = e.q.ixGenLock
	}
	type put struct {
		rk string
		ixEntry
	}
	var puts []put
	rks := make([][]byte, len(rows))
	for i, r := range rows {
		rks[i] = []byte(r.rk)
		if r.exists {
			for _, en := range rowEntries(defs, r.props) {
				puts = append(puts, put{r.rk, en})
			}
		}
	}
	// Unique entries in (index, key) order; two of one value are a violation.
	slices.SortStableFunc(puts, func(x, y put) int {
		if x.unique != y.unique {
			if x.unique {
				return 1
			}
			return -1
		}
		if !x.unique {
			return 0
		}
		if x.id != y.id {
			return int(x.id) - int(y.id)
		}
		return bytes.Compare(x.key, y.key)
	})
	for i := 1; i < len(puts); i++ {
		x, y := puts[i-1], puts[i]
		if x.unique && y.unique && x.id == y.id && bytes.Equal(x.key, y.key) {
			holder, taker := x, y
			if last[x.rk] > last[y.rk] {
				holder, taker = y, x
			}
			return stmt{}, nil, &storage.ApplyError{Index: last[taker.rk], Err: &storage.UniqueViolation{
				Index: indexName(defs, x.id), PartitionKey: string(pk), RowKey: holder.rk}}
		}
	}
	after = []stmt{{sql: e.q.ixDelete, args: []any{tid, pk, rks}}}
	if len(puts) > 0 {
		prk, ids, keys, uniq := make([][]byte, len(puts)), make([]int32, len(puts)), make([][]byte, len(puts)), make([]bool, len(puts))
		for i, p := range puts {
			prk[i], ids[i], keys[i], uniq[i] = []byte(p.rk), int32(p.id), p.key, p.unique
		}
		after = append(after, stmt{sql: e.q.ixInsert, args: []any{tid, pk, prk, ids, keys, uniq}})
	}
	return first, after, nil
}

// applyIndexed runs a single Insert, InsertOrReplace, Replace or Delete of a table whose
// indexes (defs) are all built and whose change feed is off as one statement with its
// entries (ixInsert1 …), through the single writes' coalescer, as applySingle does for a
// table without indexes; ok false leaves any other Apply to the read-modify-write path.
// The statement checks the cached settings generation, so an index declared since the
// cache was filled fails it (diagnose refreshes the cache and the Apply runs again), and
// one that started before the declaration is waited for by the build (indexbuild.go).
func (e *Engine) applyIndexed(ctx context.Context, a *applyArgs, defs []storage.IndexDef) (res storage.Applied, ok bool, err error) {
	if len(a.muts) != 1 || building(defs) || e.feedOn(a.ent.settings) || explicitExpiry(a.muts) {
		return storage.Applied{}, false, nil
	}
	m := &a.muts[0]
	v := 1 // the statements without unique entries, unless an index is unique
	if slices.ContainsFunc(defs, func(d storage.IndexDef) bool { return d.Unique }) {
		v = 0
	}
	var sql string
	switch m.Op {
	case storage.Insert:
		sql = e.q.ixInsert1[v]
	case storage.InsertOrReplace:
		sql = e.q.ixUpsert1[v]
	case storage.Replace:
		sql = e.q.ixReplace1[v]
	case storage.Delete:
		sql = e.q.ixDelete1[v]
	default:
		return storage.Applied{}, false, nil
	}
	ttls, err := e.settings(ctx, a)
	if err != nil {
		return storage.Applied{}, true, e.invalid(ctx, a, err)
	}
	pk, rk := []byte(a.pk), []byte(m.RowKey)
	var ver int64
	st := e.plainStmt(a, m, pk, rk, ttls[0], &ver)
	ids, keys, uniq := []int32{}, [][]byte{}, []bool{}
	if m.Op != storage.Delete {
		for _, en := range rowEntries(defs, m.Props) {
			ids, keys, uniq = append(ids, int32(en.id)), append(keys, en.key), append(uniq, en.unique)
		}
	}
	st.sql, st.args = sql, append(st.args, ids, keys, uniq)
	at, err := e.singles.do(ctx, &st, a.ent.id, pk, rk)
	if err != nil {
		row := []ixRow{{rk: m.RowKey, exists: true, props: m.Props}}
		return storage.Applied{}, true, e.uniqueError(ctx, err, true, a.ent.id, defs, pk, row, map[string]int{m.RowKey: 0})
	}
	switch st.rows {
	case 0:
		return storage.Applied{}, true, e.diagnose(ctx, a)
	case 1:
	default:
		return storage.Applied{}, true, fmt.Errorf("apply: %d result rows", st.rows)
	}
	if m.Op == storage.Delete {
		ver = 0
	}
	return storage.Applied{Versions: []int64{ver}, Position: at.hi}, true, nil
}

// groupEntries are the entries of a merged group of single writes (mergeSingles), as
// the arrays of ixInsertGroup.
type groupEntries struct {
	tids           []int64
	pks, rks, keys [][]byte
	ids            []int32
	uniq           []bool
}

// add appends the entries of the write of row (pk, rk) of table tid, given as its
// statement's last three arguments (applyIndexed); false if they are not that.
func (g *groupEntries) add(tid int64, pk, rk []byte, args []any) bool {
	ids, ok1 := args[0].([]int32)
	keys, ok2 := args[1].([][]byte)
	uniq, ok3 := args[2].([]bool)
	if !ok1 || !ok2 || !ok3 || len(ids) != len(keys) || len(ids) != len(uniq) {
		return false
	}
	for i := range ids {
		g.tids, g.pks, g.rks = append(g.tids, tid), append(g.pks, pk), append(g.rks, rk)
		g.ids, g.keys, g.uniq = append(g.ids, ids[i]), append(g.keys, keys[i]), append(g.uniq, uniq[i])
	}
	return true
}

// indexName names index id of defs.
func indexName(defs []storage.IndexDef, id uint32) string {
	for _, d := range defs {
		if d.ID == id {
			return d.Name
		}
	}
	return fmt.Sprint(id)
}

// uniqueError turns err, a write's failure, into the UniqueViolation of the mutation that
// took a unique value another entity holds, when it is one: SQLSTATE 23505 on the unique
// entries, or with raised a division_by_zero (a single write's statement, keepOwn). The
// holders are read after the failure. A holder that has expired holds nothing (as
// Pebble's): its entry is taken over (takeOver) and errConflict runs the write again;
// errConflict too when no holder is left (the write may succeed now). Any other err is
// returned as it is.
func (e *Engine) uniqueError(ctx context.Context, err error, raised bool, tid int64, defs []storage.IndexDef, pk []byte, rows []ixRow, last map[string]int) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !(pe.Code == "23505" && pe.TableName == "cerulean_unique_entries" || raised && pe.Code == "22012") {
		return err
	}
	type want struct {
		rk string
		ixEntry
	}
	var wants []want
	var ids []int32
	var keys [][]byte
	for _, r := range rows {
		if !r.exists {
			continue
		}
		for _, en := range rowEntries(defs, r.props) {
			if en.unique {
				wants = append(wants, want{r.rk, en})
				ids, keys = append(ids, int32(en.id)), append(keys, en.key)
			}
		}
	}
	rs, qerr := e.pool.Query(ctx, e.q.ixHoldersLive, tid, ids, keys)
	if qerr != nil {
		return qerr
	}
	defer rs.Close()
	var (
		best    *storage.ApplyError
		expired []storedHolder
	)
	for rs.Next() {
		var h storedHolder
		var live bool
		if err := rs.Scan(&h.id, &h.key, &h.pk, &h.rk, &live); err != nil {
			return err
		}
		for _, w := range wants {
			if w.id != uint32(h.id) || !bytes.Equal(w.key, h.key) || (bytes.Equal(h.pk, pk) && string(h.rk) == w.rk) {
				continue
			}
			if !live {
				expired = append(expired, h)
				continue
			}
			if i := last[w.rk]; best == nil || i < best.Index {
				best = &storage.ApplyError{Index: i, Err: &storage.UniqueViolation{
					Index: indexName(defs, w.id), PartitionKey: string(h.pk), RowKey: string(h.rk)}}
			}
		}
	}
	if err := rs.Err(); err != nil {
		return err
	}
	rs.Close()
	if best != nil {
		return best
	}
	for _, h := range expired {
		if err := e.takeOver(ctx, tid, h); err != nil {
			return err
		}
	}
	return errConflict
}

// storedHolder is a unique entry: index, index key, holder.
type storedHolder struct {
	id          int32
	key, pk, rk []byte
}

// takeOver removes the unique entry h of table tid if its holder is still expired, so the
// value is free again (an expired row holds no value; its other entries stay until it is
// purged or written). The holder's row is locked FOR UPDATE first: a write of it (which
// keeps or takes the value: keepOwn, or the swaps' deletion and insertion of its
// entries) either committed before, and the row is live, or waits until the entry is
// gone and then gives the row its entry again if the value is still free.
func (e *Engine) takeOver(ctx context.Context, tid int64, h storedHolder) error {
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var expired bool
		err := tx.QueryRow(ctx, e.q.ixLockHolder, tid, h.pk, h.rk).Scan(&expired)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && !expired {
			return nil // gone (its entry with it) or live again
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, e.q.ixTakeOver, tid, h.id, h.key, h.pk, h.rk)
		return err
	})
}

// indexDef finds index id among the declared indexes of settings raw.
func indexDef(raw []byte, id uint32) (storage.IndexDef, error) {
	s, err := storage.UnmarshalSettings(raw)
	if err != nil {
		return storage.IndexDef{}, err
	}
	for _, d := range s.Indexes {
		if d.ID == id {
			return d, nil
		}
	}
	return storage.IndexDef{}, storage.ErrIndexNotFound
}

// indexTable reads the table's id and index idx's declaration.
func (r reads) indexTable(ctx context.Context, account, table string, idx uint32) (int64, storage.IndexDef, error) {
	var (
		id  int64
		raw []byte
	)
	err := r.db.QueryRow(ctx, r.e.q.ixTable, []byte(account), []byte(storage.TableKey(table))).Scan(&id, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, storage.IndexDef{}, storage.ErrTableNotFound
	}
	if err != nil {
		return 0, storage.IndexDef{}, err
	}
	d, err := indexDef(raw, idx)
	return id, d, err
}

// spanLo is the start of sp as a statement takes it: a nil Lo (the first key) is the
// empty key, not NULL.
func spanLo(sp index.Span) []byte {
	if sp.Lo == nil {
		return []byte{}
	}
	return sp.Lo
}

// ScanIndex reads index req.Index (storage.IndexReader): for each span, statements of
// entries after the cursor in index order, each joined with its row; an entry whose row
// is expired or gone (purged since: a statement reads one snapshot, so only between
// statements) counts as examined. It stops after req.Limit rows, with Next the last
// entry returned.
func (r reads) ScanIndex(ctx context.Context, account, table string, req storage.IndexScanRequest) (storage.IndexScanResult, error) {
	if req.Limit <= 0 {
		return storage.IndexScanResult{}, fmt.Errorf("scan index: limit %d is not positive", req.Limit)
	}
	var res storage.IndexScanResult
	err := r.retry(ctx, "scan index", func() error {
		var err error
		res, err = r.scanIndex(ctx, account, table, req)
		return err
	})
	if err != nil {
		return storage.IndexScanResult{}, err
	}
	return res, nil
}

func (r reads) scanIndex(ctx context.Context, account, table string, req storage.IndexScanRequest) (storage.IndexScanResult, error) {
	tid, d, err := r.indexTable(ctx, account, table, req.Index)
	if err != nil {
		return storage.IndexScanResult{}, err
	}
	var res storage.IndexScanResult
	for _, sp := range req.Spans {
		// The cursor within this span: the entry after which to read.
		cur := storage.IndexCursor{Key: []byte{}}
		if a := req.After; a != nil {
			if sp.Hi != nil && bytes.Compare(a.Key, sp.Hi) >= 0 {
				continue // the span is behind the cursor
			}
			if bytes.Compare(a.Key, sp.Lo) >= 0 {
				cur = *a
			}
		}
		for {
			n := req.Limit - len(res.Records)
			if req.KeyFilter != nil {
				n = max(n, scanChunk)
			}
			n = min(n, scanChunk)
			sql, args := r.e.q.ixScan, []any{tid, int32(d.ID), spanLo(sp), cur.Key, []byte(cur.PartitionKey), []byte(cur.RowKey), n}
			if sp.Hi != nil {
				sql, args = r.e.q.ixScanTo, append(args, sp.Hi)
			}
			rows, err := r.db.Query(ctx, sql, args...)
			if err != nil {
				return storage.IndexScanResult{}, err
			}
			got, full := 0, false
			for rows.Next() {
				var (
					key, pk, rk, props []byte
					ver, exp           *int64
					live               *bool
				)
				if err := rows.Scan(&key, &pk, &rk, &ver, &props, &exp, &live); err != nil {
					rows.Close()
					return storage.IndexScanResult{}, err
				}
				got++
				cur = storage.IndexCursor{Key: key, PartitionKey: string(pk), RowKey: string(rk)}
				res.Examined++
				if req.KeyFilter != nil && !req.KeyFilter(cur.PartitionKey, cur.RowKey) {
					continue
				}
				if ver == nil || live == nil || !*live {
					continue
				}
				ps, err := entity.DecodeProps(props)
				if err != nil {
					rows.Close()
					return storage.IndexScanResult{}, fmt.Errorf("scan index: %w", err)
				}
				rec := storage.Record{Entity: entity.Entity{PartitionKey: cur.PartitionKey, RowKey: cur.RowKey, Props: ps}, Version: *ver}
				if exp != nil {
					rec.Expiry = *exp
				}
				res.Records = append(res.Records, rec)
				if len(res.Records) == req.Limit {
					full = true
					break
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return storage.IndexScanResult{}, err
			}
			if full {
				next := cur
				res.Next = &next
				return res, nil
			}
			if got < n {
				break // the span is done
			}
			if err := ctx.Err(); err != nil {
				return storage.IndexScanResult{}, err
			}
		}
	}
	return res, nil
}

// CountIndex counts index idx's entries within spans, up to limit (≤ 0: no limit), one
// bounded statement per span.
func (r reads) CountIndex(ctx context.Context, account, table string, idx uint32, spans []index.Span, limit int) (int, error) {
	total := 0
	err := r.retry(ctx, "count index", func() error {
		total = 0
		tid, d, err := r.indexTable(ctx, account, table, idx)
		if err != nil {
			return err
		}
		for _, sp := range spans {
			n := int64(1) << 62
			if limit > 0 {
				if total >= limit {
					break
				}
				n = int64(limit - total)
			}
			sql, args := r.e.q.ixCount, []any{tid, int32(d.ID), spanLo(sp), n}
			if sp.Hi != nil {
				sql, args = r.e.q.ixCountTo, append(args, sp.Hi)
			}
			var c int64
			if err := r.db.QueryRow(ctx, sql, args...).Scan(&c); err != nil {
				return err
			}
			total += int(c)
		}
		return nil
	})
	return total, err
}

// CountRows counts the table's stored rows from start up to end (nil: the table's end),
// up to limit (≤ 0: no limit), in one statement.
func (r reads) CountRows(ctx context.Context, account, table string, start storage.Key, end *storage.Key, limit int) (int, error) {
	var c int64
	err := r.retry(ctx, "count rows", func() error {
		n := int64(1) << 62
		if limit > 0 {
			n = int64(limit)
		}
		sql, args := r.e.q.ixCountRows, []any{[]byte(account), []byte(storage.TableKey(table)), []byte(start.PartitionKey), []byte(start.RowKey), n}
		if end != nil {
			sql, args = r.e.q.ixCountRowsTo, append(args, []byte(end.PartitionKey), []byte(end.RowKey))
		}
		var id int64
		err := r.db.QueryRow(ctx, sql, args...).Scan(&id, &c)
		if errors.Is(err, pgx.ErrNoRows) {
			return storage.ErrTableNotFound
		}
		return err
	})
	return int(c), err
}

// The Engine's index reads read the primary's latest state; a view's, its own
// (views.go).

func (e *Engine) ScanIndex(ctx context.Context, account, table string, req storage.IndexScanRequest) (storage.IndexScanResult, error) {
	return e.primary().ScanIndex(ctx, account, table, req)
}

func (e *Engine) CountIndex(ctx context.Context, account, table string, idx uint32, spans []index.Span, limit int) (int, error) {
	return e.primary().CountIndex(ctx, account, table, idx, spans, limit)
}

func (e *Engine) CountRows(ctx context.Context, account, table string, start storage.Key, end *storage.Key, limit int) (int, error) {
	return e.primary().CountRows(ctx, account, table, start, end, limit)
}

func (v *view) ScanIndex(ctx context.Context, account, table string, req storage.IndexScanRequest) (res storage.IndexScanResult, err error) {
	err = v.do(ctx, func(ctx context.Context, r reads) (err error) {
		res, err = r.ScanIndex(ctx, account, table, req)
		return
	})
	return res, err
}

func (v *view) CountIndex(ctx context.Context, account, table string, idx uint32, spans []index.Span, limit int) (n int, err error) {
	err = v.do(ctx, func(ctx context.Context, r reads) (err error) {
		n, err = r.CountIndex(ctx, account, table, idx, spans, limit)
		return
	})
	return n, err
}

func (v *view) CountRows(ctx context.Context, account, table string, start storage.Key, end *storage.Key, limit int) (n int, err error) {
	err = v.do(ctx, func(ctx context.Context, r reads) (err error) {
		n, err = r.CountRows(ctx, account, table, start, end, limit)
		return
	})
	return n, err
}
