package postgres

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5/pgconn"
)

// Apply runs the mutations on one partition atomically. There are three ways, chosen by
// what the mutations need:
//
//   - One mutation without merge: one plain statement on the table id of the front
//     end's cache, one round trip. The statement checks the precondition (ON CONFLICT …
//     WHERE expired for insert; version in the WHERE clause for replace and delete) and
//     the cached id and settings generation against the catalogue; when it writes
//     nothing, one more read (diagnose) tells why. Concurrent ones share a transaction
//     and its commit (coalesce.go).
//   - Several mutations on distinct rows, none a merge (the common entity group
//     transaction): one round trip. The statements are pipelined with a single Sync, so
//     the database runs them as one implicit transaction; each raises an error when its
//     precondition fails, which aborts the transaction, so either all commit or none.
//     They run in RowKey order, so two batches over the same rows take their row locks
//     in the same order and cannot deadlock. A batch of inserts only, or of
//     insert-or-replaces only, is a single statement over arrays (applyMany), which
//     costs the database far less than one statement per entity. On a failure one more
//     read names the first failing mutation in the caller's order.
//   - Anything with a merge, or several mutations on one row: read the rows (one round
//     trip), apply the mutations in order in Go exactly as the Pebble engine does
//     (merge, entity.ValidateShape of the result), then write every changed row with a
//     compare-and-swap on the version read, all in one pipelined transaction (one
//     round trip). If another writer got in between, a swap changes no row, the
//     transaction aborts, and the Apply starts again from the read. A single mutation's
//     read and its one swap go through the coalescers (coalesce.go), the read with the
//     point reads and the swap with the single writes, so that concurrent merges share
//     round trips and commits: 32 callers merging into entities of their own
//     (BenchmarkMerge) made 4,086–4,840 merges/s against 1,754–2,418 with a round trip
//     and a commit of their own each. A single InsertOrMerge either tries a plain insert
//     first and takes this path only if the entity exists, or takes it at once, by what
//     the front end's recent upserts found (applyUpsert).
//
// Why merges are not done in SQL: properties are the entity.AppendProps blob, which
// keeps every EDM value exactly — NUL inside strings, the bits of NaN and -0, raw bytes.
// JSONB cannot hold \u0000 and normalises numbers, and taking a binary blob apart in SQL
// needs procedural code that PostgreSQL, YugabyteDB and CockroachDB do not share. A merge
// therefore costs one extra round trip, and only a merge does; it holds no lock across
// round trips, and the version compare-and-swap makes it exactly as safe as a lock.
//
// Versions: the single and batch statements compute GREATEST(server clock,
// previous version + 1) in SQL; the read-modify-write path takes the server clock with
// its read and computes the same in Go, and its compare-and-swap guarantees the previous
// version is still the one it read. A re-inserted entity (after a delete) gets the server
// clock: the database keeps no tombstone, so that is "greater" only as long as the clock
// does not step back across the delete. An expired row is still stored, so a version
// written over it exceeds its own.
//
// Expiry: every written row stores storage.Expiry of the table's settings, its final
// properties and its new version. Where SQL computes the version, Go computes the
// time-to-live first (storage.Expiry at version 0, which also validates the entity's TTL
// property) from the settings cached per front end, and the statement stores version +
// TTL; the statement commits only if the table's settings generation is still the cached
// one (settings.go). A refused TTL property fails the Apply before any write is sent,
// once diagnose has checked the refusal against the current settings and found no
// earlier mutation failing its precondition.
// The read-modify-write path reads the settings with its rows and computes expiries in
// Go. Expired rows (expiry <= the database clock) are absent for every precondition:
// an insert over one succeeds, a replace or delete does not match it.
//
// Explicit expiry (storage.Mutation.Expiry, the data tools' exact copies): a batch of
// inserts only, or of insert-or-replaces only, each with an explicit expiry, on distinct
// rows (what the data tools' changesets are) is one statement, as applyMany, that stores
// the absolute expiries (insertManyAt, upsertManyAt); any other Apply with an explicit
// expiry takes the read-modify-write path, which computes every expiry in Go from the
// settings it reads with the rows and stores it as it is (the compare-and-swap statements
// take an absolute expiry), at one more round trip (the read). The other statements,
// which add a time-to-live to the version SQL computes, are unchanged.
//
// Every path ends with one pipeline that commits and then reads the commit position
// (positions.go), so a write costs the same round trips as before positions.
func (e *Engine) Apply(ctx context.Context, account, tableName, pk string, muts []storage.Mutation) (storage.Applied, error) {
	for i := range muts {
		switch muts[i].Op {
		case storage.Insert, storage.Replace, storage.Merge, storage.Delete, storage.InsertOrReplace, storage.InsertOrMerge:
		default:
			return storage.Applied{}, &storage.ApplyError{Index: i, Err: fmt.Errorf("unknown mutation %v", muts[i].Op)}
		}
	}
	a := applyArgs{acct: []byte(account), key: []byte(storage.TableKey(tableName)), pk: pk, muts: muts}
	var out storage.Applied
	err := e.retry(ctx, "apply", func() error {
		var err error
		if len(muts) == 0 {
			// Nothing to write: the table must exist.
			if err = e.primary().checkTable(ctx, a.acct, a.key); err == nil {
				out.Position, err = e.markPosition(ctx)
			}
			return err
		}
		out, err = e.applyOnce(ctx, &a)
		return err
	})
	if err != nil {
		return storage.Applied{}, err
	}
	return out, nil
}

type applyArgs struct {
	acct, key []byte
	pk        string
	muts      []storage.Mutation
	// ent is the table's settings the statements compute expiries with, and needGen
	// whether they check its generation (every statement does, deletes too: whether a
	// write records a change is a setting, the table's change feed).
	ent     tableEntry
	needGen bool
	// upsertFirst marks the plain insert an InsertOrMerge tries first (applyUpsert): its
	// change record names the write as asked, InsertOrMerge, not Insert.
	upsertFirst bool
}

func (a *applyArgs) ref() tableRef { return tableRef{string(a.acct), string(a.key)} }

// settings loads the table's cached settings into a and returns the time-to-live of
// each mutation's properties (0 for deletes), or nil and the first validation error.
func (e *Engine) settings(ctx context.Context, a *applyArgs) ([]int64, error) {
	a.needGen = true
	ent, err := e.entry(ctx, a.acct, a.key)
	if err != nil {
		return nil, err
	}
	a.ent = ent
	ttls := make([]int64, len(a.muts))
	for i := range a.muts {
		if m := &a.muts[i]; m.Op != storage.Delete {
			if ttls[i], err = storage.Expiry(ent.settings, m.Props, 0); err != nil {
				return nil, err
			}
		}
	}
	return ttls, nil
}

func (e *Engine) applyOnce(ctx context.Context, a *applyArgs) (storage.Applied, error) {
	// A table whose change feed is on (as cached: a stale entry fails the statements'
	// generation check and is refreshed) takes the same paths, with statements that
	// record their changes (changes.go), but for explicit expiries: the
	// read-modify-write path records those (and an expiry already past).
	ent, err := e.entry(ctx, a.acct, a.key)
	if err != nil {
		return storage.Applied{}, err
	}
	if defs := maintained(ent.settings); len(defs) > 0 {
		// Index entries go with the write: a single plain write's in its statement, any
		// other's with the swaps (indexes.go). A stale entry that shows no index sends
		// a plain statement, which fails its generation check.
		a.ent = ent
		if res, ok, err := e.applyIndexed(ctx, a, defs); ok {
			return res, err
		}
		return e.applyRMW(ctx, a)
	}
	if explicitExpiry(a.muts) {
		if manyAt(a.muts) && !e.feedOn(ent.settings) {
			return e.applyManyAt(ctx, a)
		}
		return e.applyRMW(ctx, a)
	}
	if len(a.muts) == 1 {
		switch m := &a.muts[0]; m.Op {
		case storage.Merge:
			return e.applyRMW(ctx, a)
		case storage.InsertOrMerge:
			return e.applyUpsert(ctx, a)
		default:
			ttls, err := e.settings(ctx, a)
			if err != nil {
				return storage.Applied{}, e.invalid(ctx, a, err)
			}
			res, written, err := e.applySingle(ctx, a, m, ttls[0])
			if err == nil && !written {
				return storage.Applied{}, e.diagnose(ctx, a)
			}
			return res, err
		}
	}
	seen := make(map[string]struct{}, len(a.muts))
	for i := range a.muts {
		m := &a.muts[i]
		if _, dup := seen[m.RowKey]; dup || m.Op == storage.Merge || m.Op == storage.InsertOrMerge {
			return e.applyRMW(ctx, a)
		}
		seen[m.RowKey] = struct{}{}
	}
	return e.applyBatch(ctx, a)
}

// applyUpsert is a single InsertOrMerge, made one of two ways, by what the recent upserts
// of this front end found (e.upserts):
//
//   - While they mostly created their entities: a plain insert first (one statement, one
//     round trip, merged with other inserts by the coalescer), and the read-modify-write
//     only if the entity turns out to exist (or its TTL property is refused: the merged
//     result decides that, and the merge path explains it). An upsert of an existing
//     entity then costs three statements: the insert that found it, the read, the swap.
//   - While they mostly found them: the read-modify-write straight away, which creates
//     the entity (compare-and-swap on its absence) if it is not there: two statements
//     either way.
//
// Both are exact; the choice only saves the database a statement per upsert. Under 32
// callers merging into existing entities (BenchmarkMerge) the insert attempt took a
// third of the statements, and the machine (database and front end on two cores) was the
// limit, not the round trips: reading alongside the insert attempt, in parallel, gained
// nothing.
func (e *Engine) applyUpsert(ctx context.Context, a *applyArgs) (storage.Applied, error) {
	m := &a.muts[0]
	if e.upserts.Load() >= 0 {
		unlock, err := e.locks.lock(ctx, a)
		if err != nil {
			return storage.Applied{}, err
		}
		defer unlock()
		st, err := e.readRows(ctx, a, true)
		if err != nil {
			return storage.Applied{}, err
		}
		e.leanUpserts(st.rows[m.RowKey].Exists)
		return e.swapRows(ctx, a, st)
	}
	ins := storage.Mutation{Op: storage.Insert, RowKey: m.RowKey, Props: m.Props}
	b := applyArgs{acct: a.acct, key: a.key, pk: a.pk, muts: []storage.Mutation{ins}, upsertFirst: true}
	ttls, err := e.settings(ctx, &b)
	var az *azerr.Error
	if errors.As(err, &az) {
		return e.applyRMW(ctx, a)
	}
	if err != nil {
		return storage.Applied{}, err
	}
	res, written, err := e.applySingle(ctx, &b, &b.muts[0], ttls[0])
	if err == nil && !written {
		// The entity exists (or the cache was stale, or the table is gone): the merge
		// path reads what is there and the current settings.
		e.leanUpserts(true)
		return e.applyRMW(ctx, a)
	}
	if err == nil {
		e.leanUpserts(false)
	}
	return res, err
}

// leanUpserts moves e.upserts one step towards reading first (an upsert found its
// entity) or inserting first (it created it), within ±upsertLean. A lost race between two
// updates only drops a step.
func (e *Engine) leanUpserts(found bool) {
	n := e.upserts.Load()
	switch {
	case found && n < upsertLean:
		e.upserts.CompareAndSwap(n, n+1)
	case !found && n > -upsertLean:
		e.upserts.CompareAndSwap(n, n-1)
	}
}

// upsertLean bounds e.upserts: after a run of upserts of one kind, about this many of the
// other kind turn applyUpsert round.
const upsertLean = 32

// invalid handles an error of settings: a refused TTL property is reported by
// diagnose, which reads the rows and the current settings, so that an earlier failing
// precondition wins and a stale cache is refreshed first; other errors pass.
func (e *Engine) invalid(ctx context.Context, a *applyArgs, err error) error {
	var az *azerr.Error
	if errors.As(err, &az) {
		return e.diagnose(ctx, a)
	}
	return err
}

// applySingle runs one non-merge mutation as one statement, m's time-to-live being ttl,
// on the table id of the front end's cache. It reports false, having written nothing,
// when the statement wrote no row: a failed precondition, or a cache entry gone stale
// (the table deleted, created again or given new settings). The caller finds out which,
// off the fast path.
func (e *Engine) applySingle(ctx context.Context, a *applyArgs, m *storage.Mutation, ttl int64) (storage.Applied, bool, error) {
	pk, rk := []byte(a.pk), []byte(m.RowKey)
	var ver int64
	st := e.singleStmt(a, m, pk, rk, ttl, &ver)
	if st.sql == "" {
		return storage.Applied{}, false, fmt.Errorf("applySingle: %v", m.Op)
	}
	at, err := e.singles.do(ctx, &st, a.ent.id, pk, rk)
	pos := at.hi
	if err != nil {
		if st.feed != nil && isRaised(err) {
			// The seal refused: the feed was turned off meanwhile. The write runs again
			// and fails its generation check, which refreshes the settings.
			err = errConflict
		}
		return storage.Applied{}, false, err
	}
	switch st.rows {
	case 0:
		return storage.Applied{}, false, nil
	case 1:
	default:
		return storage.Applied{}, false, fmt.Errorf("apply: %d result rows", st.rows)
	}
	if m.Op == storage.Delete {
		ver = 0
	}
	return storage.Applied{Versions: []int64{ver}, Position: pos}, true, nil
}

// singleStmt is applySingle's statement for m (no SQL for an op it does not make), of
// the row pk, rk, on the table id and generation in a.ent, answering the new version (the
// old one for a delete) into ver. On a table whose feed is on (a.ent's settings) it is
// the statement's variant that records its changes (recording).
func (e *Engine) singleStmt(a *applyArgs, m *storage.Mutation, pk, rk []byte, ttl int64, ver *int64) stmt {
	st := e.plainStmt(a, m, pk, rk, ttl, ver)
	if st.sql != "" && e.feedOn(a.ent.settings) {
		op := m.Op
		if a.upsertFirst {
			op = storage.InsertOrMerge
		}
		st = e.recording(st, op, a.ent.id, false, 0)
	}
	return st
}

// plainStmt is singleStmt without recording.
func (e *Engine) plainStmt(a *applyArgs, m *storage.Mutation, pk, rk []byte, ttl int64, ver *int64) stmt {
	st := stmt{dest: []any{ver}}
	switch m.Op {
	case storage.Insert:
		st.sql, st.args = e.q.insert1, []any{a.ent.id, a.acct, a.key, pk, rk, entity.AppendProps(nil, m.Props), a.ent.gen, ttl}
	case storage.InsertOrReplace:
		st.sql, st.args = e.q.upsert1, []any{a.ent.id, a.acct, a.key, pk, rk, entity.AppendProps(nil, m.Props), a.ent.gen, ttl}
	case storage.Replace:
		st.sql, st.args = e.q.replace1, []any{a.ent.id, a.acct, a.key, pk, rk, entity.AppendProps(nil, m.Props), a.ent.gen, ttl, m.IfMatch}
	case storage.Delete:
		st.sql, st.args = e.q.delete1, []any{a.ent.id, a.acct, a.key, pk, rk, m.IfMatch, a.ent.gen}
	}
	return st
}

// mergeSingles makes one statement of a group of coalesced single writes that are all
// inserts, or all insert-or-replaces (applySingle's insert1 and upsert1), on distinct
// rows: insertGroup or upsertGroup, which sets each write's rows and dest as its own
// statement would have. One statement costs the database one Bind and Execute and one
// executor start-up for the group, and its rows go in the group's (table id,
// PartitionKey, RowKey) order, as the group's statements would. Any other group runs
// statement by statement. Single writes of tables with indexes (ixInsert1, ixUpsert1)
// merge the same way, with their entries (ixInsertGroup, ixUpsertGroup).
func (e *Engine) mergeSingles(group []*single) (stmt, bool) {
	one := group[0].st.sql
	var sql string
	nargs := 8
	switch one {
	case e.q.insert1:
		sql = e.q.insertGroup
	case e.q.upsert1:
		sql = e.q.upsertGroup
	case e.q.ixInsert1[0], e.q.ixInsert1[1], e.q.ixUpsert1[0], e.q.ixUpsert1[1]:
		nargs = 11
		for v := range 2 {
			switch one {
			case e.q.ixInsert1[v]:
				sql = e.q.ixInsertGroup[v]
			case e.q.ixUpsert1[v]:
				sql = e.q.ixUpsertGroup[v]
			}
		}
	case e.q.feedInsert1, e.q.feedUpsert1:
		// One feed table's: the group's records are numbered as one statement's.
		sql, nargs = e.q.feedInsertGroup, 9
		if one == e.q.feedUpsert1 {
			sql = e.q.feedUpsertGroup
		}
		if group[0].tid != group[len(group)-1].tid {
			return stmt{}, false
		}
	default:
		return stmt{}, false
	}
	n := len(group)
	ids, gens, ttls := make([]int64, n), make([]int64, n), make([]int64, n)
	var ents groupEntries // an indexed group's entries (indexes.go)
	var bs [5][][]byte    // account, table key, PartitionKey, RowKey, properties
	for j := range bs {
		bs[j] = make([][]byte, n)
	}
	for i, s := range group {
		a := s.st.args
		if s.st.sql != one || len(a) != nargs || len(s.st.dest) != 1 {
			return stmt{}, false
		}
		if i > 0 && s.tid == group[i-1].tid && bytes.Equal(s.pk, group[i-1].pk) && bytes.Equal(s.rk, group[i-1].rk) {
			return stmt{}, false // two writes of a row: one after the other, as statements
		}
		var ok [8]bool
		ids[i], ok[0] = a[0].(int64)
		for j := range bs {
			bs[j][i], ok[j+1] = a[j+1].([]byte)
		}
		gens[i], ok[6] = a[6].(int64)
		ttls[i], ok[7] = a[7].(int64)
		if ok != [8]bool{true, true, true, true, true, true, true, true} {
			return stmt{}, false
		}
		if nargs == 11 && !ents.add(ids[i], bs[2][i], bs[3][i], a[8:]) {
			return stmt{}, false
		}
	}
	each := func(m valueScanner, fds []pgconn.FieldDescription, vals [][]byte) error {
		if len(fds) != 4 {
			return fmt.Errorf("write group: %d columns, want 4", len(fds))
		}
		var id int64
		var pk, rk []byte
		for j, d := range []any{&id, &pk, &rk} {
			if err := scanValue(m, fds[j].DataTypeOID, fds[j].Format, vals[j], d); err != nil {
				return fmt.Errorf("write group: scan column %s: %w", fds[j].Name, err)
			}
		}
		// The group is in (table id, PartitionKey, RowKey) order, its rows distinct.
		i, found := slices.BinarySearchFunc(group, id, func(s *single, _ int64) int {
			if c := cmp.Compare(s.tid, id); c != 0 {
				return c
			}
			if c := bytes.Compare(s.pk, pk); c != 0 {
				return c
			}
			return bytes.Compare(s.rk, rk)
		})
		if !found || group[i].st.rows > 0 {
			return fmt.Errorf("write group: unexpected row for table %d", id)
		}
		st := group[i].st
		st.rows++
		return scanColumns(m, fds[3:], vals[3:], st.dest)
	}
	st := stmt{sql: sql, args: []any{ids, bs[0], bs[1], bs[2], bs[3], bs[4], gens, ttls}, each: each}
	if nargs == 11 {
		st.args = append(st.args, ents.tids, ents.pks, ents.rks, ents.ids, ents.keys, ents.uniq)
	}
	if nargs == 9 {
		pos := make([]int32, n)
		for i := range pos {
			pos[i] = int32(i)
		}
		st.args = append(st.args, int64(0), pos)
		st.feed = &feedNote{tid: ids[0], n: 2 * n, ordArg: 8}
	}
	return st, true
}

// isRaised reports the error raise() produces for a statement that changed no row.
func isRaised(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22012"
}

// applyBatch runs several non-merge mutations on distinct rows in one round trip.
func (e *Engine) applyBatch(ctx context.Context, a *applyArgs) (storage.Applied, error) {
	ttls, err := e.settings(ctx, a)
	if err != nil {
		return storage.Applied{}, e.invalid(ctx, a, err)
	}
	order := make([]int, len(a.muts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return strings.Compare(a.muts[i].RowKey, a.muts[j].RowKey) })
	pk := []byte(a.pk)
	if op := a.muts[0].Op; op == storage.Insert || op == storage.InsertOrReplace {
		same := true
		for i := range a.muts {
			same = same && a.muts[i].Op == op
		}
		if same {
			return e.applyMany(ctx, a, order, ttls)
		}
	}
	stmts := make([]stmt, len(order))
	got := make([]int64, len(order))
	feed := e.feedOn(a.ent.settings)
	for j, i := range order {
		m := &a.muts[i]
		rk := []byte(m.RowKey)
		st := &stmts[j]
		if feed {
			// The single statements that record, raising as the B statements do; the
			// records go in the mutations' order.
			*st = e.recording(e.plainStmt(a, m, pk, rk, ttls[i], &got[j]), m.Op, a.ent.id, true, i)
			continue
		}
		st.dest = []any{&got[j]}
		switch m.Op {
		case storage.Insert:
			st.sql, st.args = e.q.insertB, []any{a.acct, a.key, pk, rk, entity.AppendProps(nil, m.Props), a.ent.gen, ttls[i]}
		case storage.InsertOrReplace:
			st.sql, st.args = e.q.upsertB, []any{a.acct, a.key, pk, rk, entity.AppendProps(nil, m.Props), a.ent.gen, ttls[i]}
		case storage.Replace:
			st.sql, st.args = e.q.replaceB, []any{a.acct, a.key, pk, rk, entity.AppendProps(nil, m.Props), a.ent.gen, ttls[i], m.IfMatch}
		case storage.Delete:
			st.sql, st.args = e.q.deleteB, []any{a.acct, a.key, pk, rk, m.IfMatch, a.ent.gen}
		}
	}
	pos, err := e.exec(ctx, stmts)
	if isRaised(err) {
		return storage.Applied{}, e.diagnose(ctx, a)
	}
	if err != nil {
		return storage.Applied{}, err
	}
	versions := make([]int64, len(a.muts))
	for j, i := range order {
		if stmts[j].rows != 1 {
			return storage.Applied{}, fmt.Errorf("apply: %d result rows", stmts[j].rows)
		}
		if a.muts[i].Op != storage.Delete {
			versions[i] = got[j]
		}
	}
	return storage.Applied{Versions: versions, Position: pos}, nil
}

// applyMany runs a batch of inserts only, or of insert-or-replaces only, as one
// statement over arrays of RowKeys, properties and time-to-lives (in RowKey order, so
// concurrent batches take row locks in the same order). It costs the database one
// statement instead of one per entity.
func (e *Engine) applyMany(ctx context.Context, a *applyArgs, order []int, ttls []int64) (storage.Applied, error) {
	return e.applyManyWith(ctx, a, order, ttls, false)
}

// applyManyWith is applyMany, or with at the same with absolute expiries in ttls
// (insertManyAt, upsertManyAt).
func (e *Engine) applyManyWith(ctx context.Context, a *applyArgs, order []int, ttls []int64, at bool) (storage.Applied, error) {
	rks := make([][]byte, len(order))
	props := make([][]byte, len(order))
	rowTTLs := make([]int64, len(order))
	for j, i := range order {
		rks[j] = []byte(a.muts[i].RowKey)
		props[j] = entity.AppendProps(nil, a.muts[i].Props)
		rowTTLs[j] = ttls[i]
	}
	q := e.q.insertMany
	switch {
	case at && a.muts[0].Op == storage.InsertOrReplace:
		q = e.q.upsertManyAt
	case at:
		q = e.q.insertManyAt
	case a.muts[0].Op == storage.InsertOrReplace:
		q = e.q.upsertMany
	}
	var (
		gotRKs [][]byte
		gotVs  []int64
		one    int64
	)
	stmts := []stmt{{sql: q, args: []any{a.acct, a.key, []byte(a.pk), rks, props, int64(len(rks)), rowTTLs, a.ent.gen},
		dest: []any{&gotRKs, &gotVs, &one}}}
	if !at && e.feedOn(a.ent.settings) {
		// The records go in the mutations' order.
		st := &stmts[0]
		st.sql = e.q.feedInsertMany
		if a.muts[0].Op == storage.InsertOrReplace {
			st.sql = e.q.feedUpsertMany
		}
		places := make([]int32, len(order))
		for j, i := range order {
			places[j] = int32(i)
		}
		st.feed = &feedNote{tid: a.ent.id, n: 2 * len(order), ordArg: 9}
		st.args = append(st.args, a.ent.id, int64(0), places)
	}
	pos, err := e.exec(ctx, stmts)
	if isRaised(err) {
		return storage.Applied{}, e.diagnose(ctx, a)
	}
	if err != nil {
		return storage.Applied{}, err
	}
	if len(gotRKs) != len(a.muts) || len(gotVs) != len(a.muts) {
		return storage.Applied{}, fmt.Errorf("apply: %d versions for %d mutations", len(gotVs), len(a.muts))
	}
	byRK := make(map[string]int64, len(gotRKs))
	for j := range gotRKs {
		byRK[string(gotRKs[j])] = gotVs[j]
	}
	versions := make([]int64, len(a.muts))
	for i := range a.muts {
		v, ok := byRK[a.muts[i].RowKey]
		if !ok {
			return storage.Applied{}, fmt.Errorf("apply: no version for %q", a.muts[i].RowKey)
		}
		versions[i] = v
	}
	return storage.Applied{Versions: versions, Position: pos}, nil
}

// manyAt reports whether muts can be one insertManyAt or upsertManyAt statement: several
// inserts, or several insert-or-replaces, on distinct rows, each with an explicit expiry.
func manyAt(muts []storage.Mutation) bool {
	if len(muts) < 2 {
		return false
	}
	op := muts[0].Op
	if op != storage.Insert && op != storage.InsertOrReplace {
		return false
	}
	seen := make(map[string]struct{}, len(muts))
	for i := range muts {
		m := &muts[i]
		if _, dup := seen[m.RowKey]; dup || m.Op != op || m.Expiry == storage.ExpiryComputed {
			return false
		}
		seen[m.RowKey] = struct{}{}
	}
	return true
}

// applyManyAt runs a manyAt batch as one statement storing each row's explicit expiry, on
// the cached table settings (which must be an elastic table's: storage.MutationExpiry
// refuses a standard one, as diagnose confirms against the current settings) and their
// generation, as applyMany does.
func (e *Engine) applyManyAt(ctx context.Context, a *applyArgs) (storage.Applied, error) {
	ent, err := e.entry(ctx, a.acct, a.key)
	if err != nil {
		return storage.Applied{}, err
	}
	a.ent, a.needGen = ent, true
	exps := make([]int64, len(a.muts))
	for i := range a.muts {
		m := &a.muts[i]
		if exps[i], err = storage.MutationExpiry(ent.settings, m, m.Props, 0); err != nil {
			return storage.Applied{}, e.invalid(ctx, a, err)
		}
	}
	order := make([]int, len(a.muts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return strings.Compare(a.muts[i].RowKey, a.muts[j].RowKey) })
	return e.applyManyWith(ctx, a, order, exps, true)
}

// diagnose names the first mutation (in the caller's order) that fails of a failed or
// refused batch without merges, or of a single write that wrote nothing: its
// precondition, then its TTL property under the table's current settings, by reading
// the rows and the settings. If the settings (or the table's id) changed since they
// were cached, the cache is refreshed and the Apply runs again (errStale); if nothing
// fails now, a concurrent write caused the failure and the Apply runs again too.
func (e *Engine) diagnose(ctx context.Context, a *applyArgs) error {
	st, err := e.readRows(ctx, a, false)
	if err != nil {
		return err
	}
	if (a.ent.id != 0 && st.tableID != a.ent.id) || (a.needGen && st.gen != a.ent.gen) {
		return errStale // readRows refreshed the cache
	}
	for i := range a.muts {
		m := &a.muts[i]
		r := st.rows[m.RowKey]
		var ferr error
		switch m.Op {
		case storage.Insert:
			if r.Exists {
				ferr = storage.ErrExists
			}
			r.Exists = true
		case storage.Replace, storage.Merge, storage.Delete:
			if !r.Exists {
				ferr = storage.ErrNotFound
			} else if m.IfMatch != 0 && m.IfMatch != r.Version {
				ferr = storage.ErrVersionMismatch
			}
			r.Exists = m.Op != storage.Delete
			r.Version = 0 // a later mutation of the row in this batch would see a new one
		default:
			r.Exists = true
		}
		if ferr == nil && (m.Op == storage.Insert || m.Op == storage.Replace || m.Op == storage.InsertOrReplace) {
			_, ferr = storage.MutationExpiry(st.settings, m, m.Props, 0)
		}
		if ferr != nil {
			return &storage.ApplyError{Index: i, Err: ferr}
		}
		st.rows[m.RowKey] = r
	}
	return errConflict
}

// rowState is one entity as an Apply sees it.
type rowState struct {
	storage.Row
	stored  bool  // stored in the database as read (expired or not)
	storedV int64 // its version as read
	expiry  int64 // the expiry of the row as written (0: never)
	// expiredStored is a stored row found expired, until a mutation writes over it: a
	// change feed records its expiry first (noteChange).
	expiredStored bool
}

type readState struct {
	tableID  int64
	gen      int64
	settings storage.TableSettings
	now      int64
	rows     map[string]rowState
}

// readRows reads the table's id and settings, the server clock, and the stored state of
// every row the mutations touch (with properties if withProps). A row expired at that
// clock is stored (a compare-and-swap must match its version) but does not exist. The
// settings read refresh the front end's cache.
func (e *Engine) readRows(ctx context.Context, a *applyArgs, withProps bool) (*readState, error) {
	rks := make([][]byte, 0, len(a.muts))
	seen := make(map[string]struct{}, len(a.muts))
	for i := range a.muts {
		if _, ok := seen[a.muts[i].RowKey]; !ok {
			seen[a.muts[i].RowKey] = struct{}{}
			rks = append(rks, []byte(a.muts[i].RowKey))
		}
	}
	query, rkArg := e.q.readRows, any(rks)
	switch {
	case len(rks) == 1 && withProps:
		query, rkArg = e.q.readRowProps, rks[0]
	case len(rks) == 1:
		query, rkArg = e.q.readRow, rks[0]
	case withProps:
		query = e.q.readRowsProps
	}
	type stored struct {
		ver, expiry int64
		blob        []byte
	}
	found := make(map[string]stored, len(rks))
	st := &readState{tableID: -1, rows: make(map[string]rowState, len(rks))}
	var rawSettings []byte
	row := func(m valueScanner, fds []pgconn.FieldDescription, vals [][]byte) error {
		var (
			rk       []byte
			ver, exp *int64
			blob     []byte
			now      int64
		)
		if err := scanColumns(m, fds, vals, []any{&st.tableID, &st.gen, &rawSettings, &now, &rk, &ver, &exp, &blob}); err != nil {
			return err
		}
		st.now = max(st.now, now)
		if ver != nil {
			s := stored{ver: *ver, blob: blob}
			if exp != nil {
				s.expiry = *exp
			}
			found[string(rk)] = s
		}
		return nil
	}
	q := stmt{sql: query, args: []any{a.acct, a.key, []byte(a.pk), rkArg}, each: row}
	if len(a.muts) == 1 {
		// A single write's read (a merge's) shares a round trip with the point reads
		// (coalesce.go) rather than taking a connection of its own. Should its group be
		// refused and run again, row sees the rows twice; it keeps the last of each, and
		// a row it kept from the first run that is gone by the second fails the
		// compare-and-swap, which starts the Apply again.
		if _, err := e.gets.do(ctx, &q, 0, a.acct, a.key); err != nil {
			return nil, err
		}
	} else {
		rows, err := e.pool.Query(ctx, query, q.args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			if err := row(rows.Conn().TypeMap(), rows.FieldDescriptions(), rows.RawValues()); err != nil {
				return nil, err
			}
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	if st.tableID < 0 {
		e.cache.drop(a.ref())
		return nil, storage.ErrTableNotFound
	}
	settings, err := storage.UnmarshalSettings(rawSettings)
	if err != nil {
		return nil, err
	}
	st.settings = settings
	e.cache.put(a.ref(), tableEntry{id: st.tableID, gen: st.gen, settings: st.settings})
	for rk, s := range found {
		r := rowState{stored: true, storedV: s.ver, Row: storage.Row{Version: s.ver}}
		if !storage.Expired(s.expiry, st.now) {
			r.Exists, r.Encoded, r.expiry = true, s.blob, s.expiry
		} else {
			r.expiredStored = true
		}
		st.rows[rk] = r
	}
	return st, nil
}

// applyRMW is the read-modify-write path: read, apply in Go, compare-and-swap, holding
// the front end's locks of the rows throughout (rowlocks.go).
func (e *Engine) applyRMW(ctx context.Context, a *applyArgs) (storage.Applied, error) {
	unlock, err := e.locks.lock(ctx, a)
	if err != nil {
		return storage.Applied{}, err
	}
	defer unlock()
	needProps := false
	for i := range a.muts {
		if op := a.muts[i].Op; op == storage.Merge || op == storage.InsertOrMerge {
			needProps = true
		}
	}
	st, err := e.readRows(ctx, a, needProps)
	if err != nil {
		return storage.Applied{}, err
	}
	return e.swapRows(ctx, a, st)
}

// swapRows applies a's mutations to the rows read into st and compare-and-swaps the
// rows they change; the caller holds the rows' locks.
func (e *Engine) swapRows(ctx context.Context, a *applyArgs, st *readState) (storage.Applied, error) {
	versions := make([]int64, len(a.muts))
	next := func(prev int64) int64 { return max(st.now, prev+1) }
	feed := st.settings.ChangeFeedOn() && e.dialect == dialectPostgres
	var changes []change
	for i := range a.muts {
		m := &a.muts[i]
		r := st.rows[m.RowKey]
		v, err := storage.Step(a.pk, m, &r.Row, next)
		if err != nil {
			return storage.Applied{}, &storage.ApplyError{Index: i, Err: err}
		}
		props := r.Props // the state the mutation left, before an expiry past already
		if m.Op != storage.Delete {
			if r.expiry, err = storage.SettleExpiry(st.settings, m, &r.Row); err != nil {
				return storage.Applied{}, &storage.ApplyError{Index: i, Err: err}
			}
		}
		versions[i] = v
		if feed {
			changes = noteChange(changes, &r, m.RowKey, m, props, v, st.now)
		}
		st.rows[m.RowKey] = r
	}

	type write struct {
		rk string
		r  rowState
	}
	var writes []write
	for rk, r := range st.rows {
		if r.Dirty && (r.stored || r.Exists) {
			writes = append(writes, write{rk, r})
		}
	}
	if len(writes) == 0 {
		var pos storage.Position
		var err error
		if len(changes) > 0 {
			// Changes that leave no row to write (an insert and a delete of one row).
			pos, err = e.exec(ctx, []stmt{e.recordsStmt(st.tableID, []byte(a.pk), changes)})
			if isRaised(err) {
				return storage.Applied{}, errConflict // the feed was turned off: again
			}
		} else {
			pos, err = e.markPosition(ctx)
		}
		if err != nil {
			return storage.Applied{}, err
		}
		return storage.Applied{Versions: versions, Position: pos}, nil
	}
	slices.SortFunc(writes, func(x, y write) int { return strings.Compare(x.rk, y.rk) })
	pk := []byte(a.pk)
	// One write is a statement that answers no row when its swap fails; several raise,
	// so that a failed swap aborts the transaction. A table with indexes sends its
	// entries in the swaps' transaction (indexes.go), so its swaps raise too.
	defs := maintained(st.settings)
	single := len(writes) == 1 && len(defs) == 0
	pick := func(one, many string) string {
		if single {
			return one
		}
		return many
	}
	// Several swaps of a feed table fill the lean records of the rows they write over
	// (a single one takes the feed's statement, below, which does).
	updateB, deleteB := e.q.casUpdateB, e.q.casDeleteB
	if feed {
		updateB, deleteB = e.q.fillCasUpdateB, e.q.fillCasDeleteB
	}
	stmts := make([]stmt, len(writes))
	for i := range writes {
		w, rk := &writes[i], []byte(writes[i].rk)
		switch {
		case w.r.stored && w.r.Exists:
			stmts[i] = stmt{sql: pick(e.q.casUpdate, updateB),
				args: []any{st.tableID, pk, rk, w.r.storedV, w.r.Version, entity.AppendProps(nil, w.r.Props), w.r.expiry, st.gen}}
		case w.r.stored:
			stmts[i] = stmt{sql: pick(e.q.casDelete, deleteB), args: []any{st.tableID, pk, rk, w.r.storedV, st.gen}}
		default:
			stmts[i] = stmt{sql: pick(e.q.casInsert, e.q.casInsertB),
				args: []any{st.tableID, pk, rk, int64(0), w.r.Version, entity.AppendProps(nil, w.r.Props), w.r.expiry, a.acct, a.key, st.gen}}
		}
	}
	var (
		ixRows []ixRow
		last   map[string]int
	)
	if len(defs) > 0 {
		ixRows = make([]ixRow, len(writes))
		for i, w := range writes {
			ixRows[i] = ixRow{rk: w.rk, exists: w.r.Exists, props: w.r.Props}
		}
		last = make(map[string]int, len(writes))
		for i := range a.muts {
			last[a.muts[i].RowKey] = i
		}
		first, after, err := e.indexStmts(st.tableID, st.gen, defs, pk, ixRows, last)
		if err != nil {
			return storage.Applied{}, err
		}
		stmts = append(append([]stmt{first}, stmts...), after...)
	}
	var (
		pos storage.Position
		err error
	)
	if len(changes) > 0 {
		if single {
			// The changes go with the swap, recorded only if it wins.
			feedSQL := e.q.feedCasInsert
			switch stmts[0].sql {
			case e.q.casUpdate:
				feedSQL = e.q.feedCasUpdate
			case e.q.casDelete:
				feedSQL = e.q.feedCasDelete
			}
			stmts[0] = withChanges(stmts[0], feedSQL, st.tableID, changes)
		} else {
			// Every swap raises when it loses, aborting the transaction with the records.
			stmts = append(stmts, e.recordsStmt(st.tableID, pk, changes))
		}
	}
	if single {
		// Its own transaction would cost a commit per merge: it goes with the single
		// writes (coalesce.go), whose statements answer rather than raise, as this one does.
		var at bounds
		at, err = e.singles.do(ctx, &stmts[0], st.tableID, pk, []byte(writes[0].rk))
		pos = at.hi
	} else {
		pos, err = e.exec(ctx, stmts)
	}
	if isRaised(err) || (err == nil && single && stmts[0].rows == 0) {
		return storage.Applied{}, errConflict
	}
	if err != nil && len(defs) > 0 {
		err = e.uniqueError(ctx, err, false, st.tableID, defs, pk, ixRows, last)
	}
	if err != nil {
		return storage.Applied{}, err
	}
	return storage.Applied{Versions: versions, Position: pos}, nil
}

// explicitExpiry reports whether any mutation gives its row an explicit expiry.
func explicitExpiry(muts []storage.Mutation) bool {
	for i := range muts {
		if muts[i].Expiry != storage.ExpiryComputed {
			return true
		}
	}
	return false
}
