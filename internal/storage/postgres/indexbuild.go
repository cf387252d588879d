package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5"
)

// Online builds and the removal of dropped indexes' entries (docs/indexes-design.md §1,
// §5).
//
// SetTableSettings records its index changes in cerulean_index_work, in its own
// transaction: an index declared on a table (which may hold rows) gets a build row (kind
// workBuild), an index dropped, or a building one replaced, a drop row (kind workDrop).
// The background loop (indexLoop, every Options.IndexInterval and when a settings change wakes
// it) works through the rows; BuildIndexes runs one pass.
//
// A build goes over the table in key order, a chunk of buildChunk rows per transaction,
// which
//
//   - skips the table if another front end builds it (a transaction-scoped advisory
//     lock, tried, not waited for);
//   - locks the catalogue row FOR UPDATE: writes of a table with a building index take a
//     KEY SHARE lock of it in their transaction (indexes.go), so the chunk waits for the
//     writes in flight, and the writes that come after wait for the chunk; the rows the
//     chunk reads are committed and stay as read until it commits, so each row's entry
//     is exactly the one its write would have made (a row written later replaces it);
//   - writes the rows' entries (those already there, from writes, stay), the position
//     (the last key passed) and the index's Progress in the stored settings, all in the
//     one transaction, so a restart resumes after the last chunk committed;
//   - when the table has no rows left, marks the index ready (or, for a unique index
//     whose value two rows hold, failed, naming both, and its entries go as a dropped
//     index's).
//
// Writes that started before the declaration do not maintain the index and take no
// lock; before its first chunk, the build waits until every transaction that started
// before it has ended (pg_stat_activity; on PostgreSQL), so those writes have committed
// what the chunks then read. Marking ready changes no write (ready and building indexes
// are maintained alike), so it keeps the settings generation; failing stops the
// maintenance, so it takes a new one.

// Kinds of cerulean_index_work rows.
const (
	workBuild = 0
	workDrop  = 1
)

// buildChunk is how many rows one build transaction passes.
const buildChunk = 1000

// dropChunk is how many entries one statement of a drop removes.
const dropChunk = 5000

// buildLockClass is the first key of the advisory locks of builds (the second is the
// table id).
const buildLockClass = 460046

// buildSQL builds the statements of builds and drops (indexSQL calls it).
func buildSQL(q *queries) {
	q.ixWork = `SELECT table_id, index_id, kind FROM cerulean_index_work ORDER BY table_id, kind DESC, index_id`
	q.ixLockTable = `SELECT settings FROM cerulean_tables WHERE id = $1 FOR UPDATE`
	q.ixPosition = `SELECT pk, rk, waited FROM cerulean_index_work WHERE table_id = $1 AND index_id = $2 AND kind = 0`
	// The stored rows, expired ones included (a stored row's entries go with it).
	q.ixRows = `SELECT pk, rk, props FROM cerulean_entities WHERE table_id = $1 ORDER BY pk, rk LIMIT $2`
	q.ixRowsFrom = `SELECT pk, rk, props FROM cerulean_entities WHERE table_id = $1 AND (pk, rk) > ($3::BYTEA, $4::BYTEA)
		ORDER BY pk, rk LIMIT $2`
	// $1 table, $2 index, $3 … $5 PartitionKeys, RowKeys, index keys.
	q.ixBuildPlain = `INSERT INTO cerulean_index_entries (table_id, index_id, key, pk, rk)
		SELECT $1::BIGINT, $2::INT, u.key, u.pk, u.rk FROM unnest($3::BYTEA[], $4::BYTEA[], $5::BYTEA[]) AS u (pk, rk, key)
		ON CONFLICT DO NOTHING`
	q.ixBuildUnique = `INSERT INTO cerulean_unique_entries (table_id, index_id, key, pk, rk)
		SELECT $1::BIGINT, $2::INT, u.key, u.pk, u.rk FROM unnest($3::BYTEA[], $4::BYTEA[], $5::BYTEA[]) AS u (pk, rk, key)
		ON CONFLICT DO NOTHING`
	q.ixSetSettings = `UPDATE cerulean_tables SET settings = $2::BYTEA WHERE id = $1`
	q.ixFail = `UPDATE cerulean_tables SET settings = $2::BYTEA, gen = nextval('cerulean_table_gens') WHERE id = $1`
	q.ixAdvance = `UPDATE cerulean_index_work SET pk = $3::BYTEA, rk = $4::BYTEA, waited = TRUE WHERE table_id = $1 AND index_id = $2`
	// A build's own row only: a drop committed while the chunk waited for the catalogue
	// row has replaced it with its own (kind 1), whose entries must still go.
	q.ixDone = `DELETE FROM cerulean_index_work WHERE table_id = $1 AND index_id = $2 AND kind = 0`
	// Up to $3 entries of index $2 of table $1; ixDropTable: up to $2 of table $1.
	const drop = `WITH c AS (SELECT index_id, key, pk, rk FROM %[1]s WHERE table_id = $1%[2]s LIMIT %[3]s)
		DELETE FROM %[1]s x USING c WHERE x.table_id = $1 AND x.index_id = c.index_id AND x.key = c.key AND x.pk = c.pk AND x.rk = c.rk`
	for i, tab := range []string{"cerulean_index_entries", "cerulean_unique_entries"} {
		q.ixDropEntries[i] = fmt.Sprintf(drop, tab, ` AND index_id = $2`, "$3")
		q.ixDropTable[i] = fmt.Sprintf(drop, tab, "", "$2")
	}
	q.ixDropDone = `DELETE FROM cerulean_index_work WHERE table_id = $1 AND index_id = $2 AND kind = 1`
	// SetTableSettings' records: an index to build, an index dropped (whatever its work
	// was), a deleted table's work.
	q.ixWorkPut = `INSERT INTO cerulean_index_work (table_id, index_id, kind) VALUES ($1, $2, 0) ON CONFLICT DO NOTHING`
	q.ixWorkDrop = `INSERT INTO cerulean_index_work (table_id, index_id, kind) VALUES ($1, $2, 1)
		ON CONFLICT (table_id, index_id) DO UPDATE SET kind = 1, waited = FALSE`
	q.ixDropWaited = `SELECT waited FROM cerulean_index_work WHERE table_id = $1 AND index_id = $2 AND kind = 1`
	q.ixDropWait = `UPDATE cerulean_index_work SET waited = TRUE WHERE table_id = $1 AND index_id = $2 AND kind = 1`
	q.ixWorkForget = `DELETE FROM cerulean_index_work WHERE table_id = $1`
}

// recordIndexWork records, in the settings transaction tx of table tid, the index work a
// change from stored to assigned makes: a build for each new building index, a drop for
// each maintained or failed index no longer declared (the ids that stored has and
// assigned has not). It reports whether there is work.
func (e *Engine) recordIndexWork(ctx context.Context, tx pgx.Tx, tid int64, stored, assigned storage.TableSettings) (bool, error) {
	work := false
	for _, d := range assigned.Indexes {
		if d.State == storage.IndexBuilding && !slices.ContainsFunc(stored.Indexes, func(s storage.IndexDef) bool { return s.ID == d.ID }) {
			if _, err := tx.Exec(ctx, e.q.ixWorkPut, tid, int32(d.ID)); err != nil {
				return false, err
			}
			work = true
		}
	}
	for _, s := range stored.Indexes {
		if s.ID != 0 && !slices.ContainsFunc(assigned.Indexes, func(d storage.IndexDef) bool { return d.ID == s.ID }) {
			if _, err := tx.Exec(ctx, e.q.ixWorkDrop, tid, int32(s.ID)); err != nil {
				return false, err
			}
			work = true
		}
	}
	return work, nil
}

// wakeIndexes wakes the index loop (a settings change recorded work).
func (e *Engine) wakeIndexes() {
	select {
	case e.indexWake <- struct{}{}:
	default:
	}
}

// indexLoop is the background loop of builds and drops.
func (e *Engine) indexLoop() {
	e.every(e.opts.IndexInterval, e.indexWake, func(ctx context.Context) {
		for ctx.Err() == nil {
			n, err := e.indexPass(ctx)
			if err != nil {
				if ctx.Err() == nil {
					e.log.Warn("cerulean: build indexes", "err", e.mapErr(ctx, "build indexes", err))
				}
				return
			}
			if n == 0 {
				return
			}
		}
	})
}

// BuildIndexes advances every index build by a chunk and removes a dropped index's
// entries by a chunk (storage.IndexBuilder); it returns the rows the builds passed.
func (e *Engine) BuildIndexes(ctx context.Context) (int, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	n, err := e.indexPass(ctx)
	return n, e.mapErr(ctx, "build indexes", err)
}

// indexPass is one pass of the index work: a chunk of each drop, then of each table's
// lowest building index. It returns the rows built plus the entries dropped (0: no work
// was done).
func (e *Engine) indexPass(ctx context.Context) (int, error) {
	type work struct {
		tid  int64
		idx  int32
		kind int16
	}
	var todo []work
	rows, err := e.pool.Query(ctx, e.q.ixWork)
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		var w work
		if err := rows.Scan(&w.tid, &w.idx, &w.kind); err != nil {
			rows.Close()
			return 0, err
		}
		todo = append(todo, w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	// The work outstanding, for Stats: the listing, then less what this pass finishes
	// (buildChunk, dropChunk), so that a pass that ends the last of it leaves 0 without
	// another listing.
	var builds, drops int64
	for _, w := range todo {
		if w.kind == workDrop {
			drops++
		} else {
			builds++
		}
	}
	e.indexBuilds.Store(builds)
	e.indexDrops.Store(drops)
	total := 0
	built := map[int64]bool{}
	for _, w := range todo {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		switch {
		case w.kind == workDrop:
			n, err := e.dropChunk(ctx, w.tid, w.idx)
			if err != nil {
				return total, fmt.Errorf("drop index %d of table %d: %w", w.idx, w.tid, err)
			}
			total += n
		case !built[w.tid]:
			built[w.tid] = true
			n, err := e.buildChunk(ctx, w.tid, w.idx)
			if err != nil {
				return total, fmt.Errorf("build index %d of table %d: %w", w.idx, w.tid, err)
			}
			total += n
		}
	}
	return total, nil
}

// dropChunk removes up to dropChunk entries of each entries table of a dropped index, and
// its work row once none are left. It returns how many it removed. Before its first
// chunk it waits for the writes that started before the drop (waitOlder), which may
// still add entries of the index.
func (e *Engine) dropChunk(ctx context.Context, tid int64, idx int32) (int, error) {
	var waited bool
	if err := e.pool.QueryRow(ctx, e.q.ixDropWaited, tid, idx).Scan(&waited); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			e.indexDrops.Add(-1) // done meanwhile (by another front end)
			return 0, nil
		}
		return 0, err
	}
	if !waited {
		if err := e.waitOlder(ctx); err != nil {
			return 0, err
		}
		if _, err := e.pool.Exec(ctx, e.q.ixDropWait, tid, idx); err != nil {
			return 0, err
		}
	}
	n, err := e.dropEntries(ctx, e.q.ixDropEntries, tid, idx, dropChunk)
	if err != nil || n > 0 {
		return n, err
	}
	if _, err := e.pool.Exec(ctx, e.q.ixDropDone, tid, idx); err != nil {
		return 0, err
	}
	e.indexDrops.Add(-1)
	return 0, nil
}

// dropEntries runs the two statements of sqls (plain and unique entries) with args and
// returns the entries they removed.
func (e *Engine) dropEntries(ctx context.Context, sqls [2]string, args ...any) (int, error) {
	n := 0
	for _, s := range sqls {
		tag, err := e.pool.Exec(ctx, s, args...)
		if err != nil {
			return n, err
		}
		n += int(tag.RowsAffected())
	}
	return n, nil
}

// purgeTableEntries removes every entry and the index work of a deleted table (the table
// purge, tables.go), a chunk per statement.
func (e *Engine) purgeTableEntries(ctx context.Context, tid int64) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := e.dropEntries(ctx, e.q.ixDropTable, tid, dropChunk)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	_, err := e.pool.Exec(ctx, e.q.ixWorkForget, tid)
	return err
}

// waitOlder waits until every client transaction of the database that started before
// now has ended (PostgreSQL only).
func (e *Engine) waitOlder(ctx context.Context) error {
	if e.dialect != dialectPostgres {
		return nil
	}
	var t0 time.Time
	if err := e.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t0); err != nil {
		return err
	}
	for {
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()
			AND xact_start < $1`, t0).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// buildChunk passes the next chunk of index idx's build on table tid (see above) and
// returns how many rows it passed.
func (e *Engine) buildChunk(ctx context.Context, tid int64, idx int32) (int, error) {
	var waited bool
	if err := e.pool.QueryRow(ctx, e.q.ixPosition, tid, idx).Scan(new([]byte), new([]byte), &waited); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			e.indexBuilds.Add(-1) // done meanwhile
			return 0, nil
		}
		return 0, err
	}
	if !waited {
		if err := e.waitOlder(ctx); err != nil {
			return 0, err
		}
	}
	passed := 0
	end := buildGoesOn // what the chunk made of the build, once committed
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		passed, end = 0, buildGoesOn
		if e.dialect == dialectPostgres {
			var got bool
			if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1, ($2::BIGINT % 2147483647)::INT)`, buildLockClass, tid).Scan(&got); err != nil || !got {
				return err // another front end builds the table
			}
		}
		var raw []byte
		err := tx.QueryRow(ctx, e.q.ixLockTable, tid).Scan(&raw)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // the table is deleted: its purge removes the work and entries
		}
		if err != nil {
			return err
		}
		settings, err := storage.UnmarshalSettings(raw)
		if err != nil {
			return err
		}
		at := slices.IndexFunc(settings.Indexes, func(d storage.IndexDef) bool { return d.ID == uint32(idx) })
		if at < 0 || settings.Indexes[at].State != storage.IndexBuilding {
			end = buildEnded
			_, err := tx.Exec(ctx, e.q.ixDone, tid, idx) // dropped: a drop row replaced it
			return err
		}
		def := settings.Indexes[at]
		var pk, rk []byte
		if err := tx.QueryRow(ctx, e.q.ixPosition, tid, idx).Scan(&pk, &rk, new(bool)); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				end = buildEnded
				return nil
			}
			return err
		}
		var rows pgx.Rows
		if pk == nil {
			rows, err = tx.Query(ctx, e.q.ixRows, tid, buildChunk)
		} else {
			rows, err = tx.Query(ctx, e.q.ixRowsFrom, tid, buildChunk, pk, rk)
		}
		if err != nil {
			return err
		}
		var pks, rks, keys, exact [][]byte // exact: the unique entries' keys
		n := 0
		for rows.Next() {
			var props []byte
			if err := rows.Scan(&pk, &rk, &props); err != nil {
				rows.Close()
				return err
			}
			n++
			ps, err := entity.DecodeProps(props)
			if err != nil {
				rows.Close()
				return err
			}
			if k, ok := def.AppendKey(nil, ps); ok {
				pks, rks, keys = append(pks, slices.Clone(pk)), append(rks, slices.Clone(rk)), append(keys, k)
				if def.Unique {
					x, _ := def.AppendUniqueKey(nil, ps)
					exact = append(exact, x)
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		failure := ""
		if def.Unique {
			failure, err = e.buildUnique(ctx, tx, tid, def, pks, rks, exact)
		}
		if err == nil && failure == "" && len(keys) > 0 {
			_, err = tx.Exec(ctx, e.q.ixBuildPlain, tid, idx, pks, rks, keys)
		}
		if err != nil {
			return err
		}
		passed = n
		d := &settings.Indexes[at]
		switch {
		case failure != "":
			end = buildFailed
			d.State, d.Failure = storage.IndexFailed, failure
			d.Progress += int64(n)
			if _, err := tx.Exec(ctx, e.q.ixFail, tid, storage.MarshalSettings(settings)); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, e.q.ixWorkDrop, tid, idx) // its entries go
			return err
		case n < buildChunk:
			end = buildEnded
			d.State = storage.IndexReady
			d.Progress += int64(n)
			if _, err := tx.Exec(ctx, e.q.ixDone, tid, idx); err != nil {
				return err
			}
		default:
			d.Progress += int64(n)
			if _, err := tx.Exec(ctx, e.q.ixAdvance, tid, idx, pk, rk); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, e.q.ixSetSettings, tid, storage.MarshalSettings(settings))
		return err
	})
	if err != nil {
		return 0, err
	}
	e.buildRows.Add(uint64(passed)) // as Progress counts them
	switch end {
	case buildEnded:
		e.indexBuilds.Add(-1)
	case buildFailed:
		e.indexBuilds.Add(-1)
		e.indexDrops.Add(1) // its entries go as a dropped index's
	}
	return passed, nil
}

// What a committed build chunk made of its build's work row (buildChunk), for the
// counts of work outstanding.
const (
	buildGoesOn = iota // the build goes on from the chunk's last row
	buildEnded         // the row is gone: the index is ready, or was dropped
	buildFailed        // the row became a drop: a unique index's build failed
)

// buildUnique writes a chunk's unique entries, and returns the failure of the index when
// one of its values is held by two rows (in the chunk, or one of them already indexed).
func (e *Engine) buildUnique(ctx context.Context, tx pgx.Tx, tid int64, d storage.IndexDef, pks, rks, keys [][]byte) (string, error) {
	// Two rows of the chunk with one value.
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return bytes.Compare(keys[i], keys[j]) })
	for j := 1; j < len(order); j++ {
		a, b := order[j-1], order[j]
		if bytes.Equal(keys[a], keys[b]) {
			return duplicate(pks[a], rks[a], pks[b], rks[b]), nil
		}
	}
	if len(keys) == 0 {
		return "", nil
	}
	if _, err := tx.Exec(ctx, e.q.ixBuildUnique, tid, int32(d.ID), pks, rks, keys); err != nil {
		return "", err
	}
	// A value already held by another row (from an earlier chunk or a write).
	ids := make([]int32, len(keys))
	for i := range ids {
		ids[i] = int32(d.ID)
	}
	rows, err := tx.Query(ctx, e.q.ixHolders, tid, ids, keys)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	holders := map[string][2][]byte{}
	for rows.Next() {
		var (
			id          int32
			key, hp, hr []byte
		)
		if err := rows.Scan(&id, &key, &hp, &hr); err != nil {
			return "", err
		}
		holders[string(key)] = [2][]byte{hp, hr}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	for i, k := range keys {
		if h, ok := holders[string(k)]; ok && (!bytes.Equal(h[0], pks[i]) || !bytes.Equal(h[1], rks[i])) {
			return duplicate(h[0], h[1], pks[i], rks[i]), nil
		}
	}
	return "", nil
}

// duplicate is the Failure of a unique index two rows hold one value of.
func duplicate(pk1, rk1, pk2, rk2 []byte) string {
	return fmt.Sprintf("the entities (%q, %q) and (%q, %q) hold one value", pk1, rk1, pk2, rk2)
}
