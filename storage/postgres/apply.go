package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ceruleandb/cerulean/entity"
	"github.com/ceruleandb/cerulean/storage"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Apply runs the mutations on one partition atomically. There are three ways, chosen by
// what the mutations need:
//
//   - One mutation without merge: one statement, one round trip. The statement checks
//     the precondition (ON CONFLICT DO NOTHING for insert; version in the WHERE clause
//     for replace and delete) and also answers why it failed, from the same snapshot.
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
//     transaction aborts, and the Apply starts again from the read.
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
// does not step back across the delete.
func (e *Engine) Apply(ctx context.Context, account, tableName, pk string, muts []storage.Mutation) (storage.Applied, error) {
	vs, err := e.apply(ctx, account, tableName, pk, muts)
	return storage.Applied{Versions: vs}, err // TODO(i11): position
}

func (e *Engine) apply(ctx context.Context, account, tableName, pk string, muts []storage.Mutation) ([]int64, error) {
	for i := range muts {
		switch muts[i].Op {
		case storage.Insert, storage.Replace, storage.Merge, storage.Delete, storage.InsertOrReplace, storage.InsertOrMerge:
		default:
			return nil, &storage.ApplyError{Index: i, Err: fmt.Errorf("unknown mutation %v", muts[i].Op)}
		}
	}
	a := applyArgs{acct: []byte(account), key: []byte(storage.TableKey(tableName)), pk: pk, muts: muts}
	if len(muts) == 0 {
		return nil, e.retry(ctx, "apply", func() error { return e.checkTable(ctx, a.acct, a.key) })
	}
	var out []int64
	err := e.retry(ctx, "apply", func() error {
		var err error
		out, err = e.applyOnce(ctx, &a)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

type applyArgs struct {
	acct, key []byte
	pk        string
	muts      []storage.Mutation
}

func (e *Engine) applyOnce(ctx context.Context, a *applyArgs) ([]int64, error) {
	if len(a.muts) == 1 {
		switch m := &a.muts[0]; m.Op {
		case storage.Merge:
			return e.applyRMW(ctx, a)
		case storage.InsertOrMerge:
			// Most upserts create: try a plain insert first, and merge only if the
			// entity turns out to exist.
			v, done, err := e.applySingle(ctx, a, &storage.Mutation{Op: storage.Insert, RowKey: m.RowKey, Props: m.Props})
			var ae *storage.ApplyError
			if errors.As(err, &ae) && errors.Is(ae.Err, storage.ErrExists) {
				return e.applyRMW(ctx, a)
			}
			if err != nil || !done {
				return nil, err
			}
			return []int64{v}, nil
		default:
			v, _, err := e.applySingle(ctx, a, m)
			if err != nil {
				return nil, err
			}
			return []int64{v}, nil
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

// applySingle runs one non-merge mutation as one statement. done is false only when
// nothing failed but nothing was written either (cannot happen for these ops).
func (e *Engine) applySingle(ctx context.Context, a *applyArgs, m *storage.Mutation) (int64, bool, error) {
	pk, rk := []byte(a.pk), []byte(m.RowKey)
	var row pgx.Row
	switch m.Op {
	case storage.Insert:
		row = e.pool.QueryRow(ctx, e.q.insert1, a.acct, a.key, pk, rk, entity.AppendProps(nil, m.Props))
	case storage.InsertOrReplace:
		row = e.pool.QueryRow(ctx, e.q.upsert1, a.acct, a.key, pk, rk, entity.AppendProps(nil, m.Props))
	case storage.Replace:
		row = e.pool.QueryRow(ctx, e.q.replace1, a.acct, a.key, pk, rk, entity.AppendProps(nil, m.Props), m.IfMatch)
	case storage.Delete:
		row = e.pool.QueryRow(ctx, e.q.delete1, a.acct, a.key, pk, rk, m.IfMatch)
	default:
		return 0, false, fmt.Errorf("applySingle: %v", m.Op)
	}
	var tid, ver, cur *int64
	if err := row.Scan(&tid, &ver, &cur); err != nil {
		return 0, false, err
	}
	switch {
	case tid == nil:
		return 0, false, storage.ErrTableNotFound
	case ver != nil && m.Op == storage.Delete:
		return 0, true, nil
	case ver != nil:
		return *ver, true, nil
	}
	switch m.Op {
	case storage.Insert:
		return 0, false, &storage.ApplyError{Index: 0, Err: storage.ErrExists}
	case storage.Replace, storage.Delete:
		// cur is the version in the statement's snapshot. Missing, or present with
		// If-Match * (then it was deleted while the statement waited for its lock):
		// not found. Present with a version: it differed, or was changed while we
		// waited; either way the expected version is no longer there.
		if cur == nil || m.IfMatch == 0 {
			return 0, false, &storage.ApplyError{Index: 0, Err: storage.ErrNotFound}
		}
		return 0, false, &storage.ApplyError{Index: 0, Err: storage.ErrVersionMismatch}
	}
	return 0, false, fmt.Errorf("apply %v: no row written", m.Op)
}

// isRaised reports the error raise() produces for a statement that changed no row.
func isRaised(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22012"
}

// applyBatch runs several non-merge mutations on distinct rows in one round trip.
func (e *Engine) applyBatch(ctx context.Context, a *applyArgs) ([]int64, error) {
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
			return e.applyMany(ctx, a, order)
		}
	}
	b := &pgx.Batch{}
	for _, i := range order {
		m := &a.muts[i]
		rk := []byte(m.RowKey)
		switch m.Op {
		case storage.Insert:
			b.Queue(e.q.insertB, a.acct, a.key, pk, rk, entity.AppendProps(nil, m.Props))
		case storage.InsertOrReplace:
			b.Queue(e.q.upsertB, a.acct, a.key, pk, rk, entity.AppendProps(nil, m.Props))
		case storage.Replace:
			b.Queue(e.q.replaceB, a.acct, a.key, pk, rk, entity.AppendProps(nil, m.Props), m.IfMatch)
		case storage.Delete:
			b.Queue(e.q.deleteB, a.acct, a.key, pk, rk, m.IfMatch)
		}
	}
	versions := make([]int64, len(a.muts))
	br := e.pool.SendBatch(ctx, b)
	var err error
	for _, i := range order {
		var v int64
		if err = br.QueryRow().Scan(&v); err != nil {
			break
		}
		if a.muts[i].Op != storage.Delete {
			versions[i] = v
		}
	}
	// Close reads to the end of the pipeline: the commit's own failure shows here.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if isRaised(err) {
		return nil, e.diagnose(ctx, a)
	}
	if err != nil {
		return nil, err
	}
	return versions, nil
}

// applyMany runs a batch of inserts only, or of insert-or-replaces only, as one
// statement over arrays of RowKeys and properties (in RowKey order, so concurrent
// batches take row locks in the same order). It costs the database one statement instead
// of one per entity.
func (e *Engine) applyMany(ctx context.Context, a *applyArgs, order []int) ([]int64, error) {
	rks := make([][]byte, len(order))
	props := make([][]byte, len(order))
	for j, i := range order {
		rks[j] = []byte(a.muts[i].RowKey)
		props[j] = entity.AppendProps(nil, a.muts[i].Props)
	}
	q := e.q.insertMany
	if a.muts[0].Op == storage.InsertOrReplace {
		q = e.q.upsertMany
	}
	var (
		gotRKs [][]byte
		gotVs  []int64
		one    int64
	)
	err := e.pool.QueryRow(ctx, q, a.acct, a.key, []byte(a.pk), rks, props, int64(len(rks))).Scan(&gotRKs, &gotVs, &one)
	if isRaised(err) {
		return nil, e.diagnose(ctx, a)
	}
	if err != nil {
		return nil, err
	}
	if len(gotRKs) != len(a.muts) || len(gotVs) != len(a.muts) {
		return nil, fmt.Errorf("apply: %d versions for %d mutations", len(gotVs), len(a.muts))
	}
	byRK := make(map[string]int64, len(gotRKs))
	for j := range gotRKs {
		byRK[string(gotRKs[j])] = gotVs[j]
	}
	versions := make([]int64, len(a.muts))
	for i := range a.muts {
		v, ok := byRK[a.muts[i].RowKey]
		if !ok {
			return nil, fmt.Errorf("apply: no version for %q", a.muts[i].RowKey)
		}
		versions[i] = v
	}
	return versions, nil
}

// diagnose names the first mutation (in the caller's order) of a failed batch whose
// precondition does not hold, by reading the rows again. If every precondition holds
// now, a concurrent write caused the failure and the batch is retried.
func (e *Engine) diagnose(ctx context.Context, a *applyArgs) error {
	st, err := e.readRows(ctx, a, e.q.diagnose, false)
	if err != nil {
		return err
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
	stored  bool  // exists in the database as read
	storedV int64 // its version as read
}

type readState struct {
	tableID int64
	now     int64
	rows    map[string]rowState
}

// readRows reads the table id, (optionally) the server clock, and the current state of
// every row the mutations touch.
func (e *Engine) readRows(ctx context.Context, a *applyArgs, query string, withNow bool) (*readState, error) {
	rks := make([][]byte, 0, len(a.muts))
	seen := make(map[string]struct{}, len(a.muts))
	for i := range a.muts {
		if _, ok := seen[a.muts[i].RowKey]; !ok {
			seen[a.muts[i].RowKey] = struct{}{}
			rks = append(rks, []byte(a.muts[i].RowKey))
		}
	}
	rows, err := e.pool.Query(ctx, query, a.acct, a.key, []byte(a.pk), rks)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	st := &readState{tableID: -1, rows: make(map[string]rowState, len(rks))}
	for rows.Next() {
		var (
			tid  int64
			now  int64
			rk   []byte
			ver  *int64
			blob []byte
		)
		if withNow {
			err = rows.Scan(&tid, &now, &rk, &ver, &blob)
		} else {
			err = rows.Scan(&tid, &rk, &ver)
		}
		if err != nil {
			return nil, err
		}
		st.tableID, st.now = tid, max(st.now, now)
		if ver != nil {
			st.rows[string(rk)] = rowState{stored: true, storedV: *ver, Row: storage.Row{Exists: true, Version: *ver, Encoded: blob}}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if st.tableID < 0 {
		return nil, storage.ErrTableNotFound
	}
	return st, nil
}

// applyRMW is the read-modify-write path: read, apply in Go, compare-and-swap.
func (e *Engine) applyRMW(ctx context.Context, a *applyArgs) ([]int64, error) {
	needProps := false
	for i := range a.muts {
		if op := a.muts[i].Op; op == storage.Merge || op == storage.InsertOrMerge {
			needProps = true
		}
	}
	q := e.q.readRows
	if needProps {
		q = e.q.readRowsProps
	}
	st, err := e.readRows(ctx, a, q, true)
	if err != nil {
		return nil, err
	}
	versions := make([]int64, len(a.muts))
	next := func(prev int64) int64 { return max(st.now, prev+1) }
	for i := range a.muts {
		m := &a.muts[i]
		r := st.rows[m.RowKey]
		v, err := storage.Step(a.pk, m, &r.Row, next)
		if err != nil {
			return nil, &storage.ApplyError{Index: i, Err: err}
		}
		versions[i] = v
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
		return versions, nil
	}
	slices.SortFunc(writes, func(x, y write) int { return strings.Compare(x.rk, y.rk) })
	pk := []byte(a.pk)
	queue := func(b *pgx.Batch, w *write, single bool) {
		rk := []byte(w.rk)
		switch {
		case w.r.stored && w.r.Exists:
			q := e.q.casUpdateB
			if single {
				q = e.q.casUpdate
			}
			b.Queue(q, st.tableID, pk, rk, w.r.storedV, w.r.Version, entity.AppendProps(nil, w.r.Props))
		case w.r.stored:
			q := e.q.casDeleteB
			if single {
				q = e.q.casDelete
			}
			b.Queue(q, st.tableID, pk, rk, w.r.storedV)
		default:
			q := e.q.casInsertB
			if single {
				q = e.q.casInsert
			}
			b.Queue(q, st.tableID, pk, rk, int64(0), w.r.Version, entity.AppendProps(nil, w.r.Props), a.acct, a.key)
		}
	}
	b := &pgx.Batch{}
	if len(writes) == 1 {
		queue(b, &writes[0], true)
		var v int64
		err := e.pool.QueryRow(ctx, b.QueuedQueries[0].SQL, b.QueuedQueries[0].Arguments...).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, errConflict
		}
		if err != nil {
			return nil, err
		}
		return versions, nil
	}
	for i := range writes {
		queue(b, &writes[i], false)
	}
	if err := e.pool.SendBatch(ctx, b).Close(); err != nil {
		if isRaised(err) {
			return nil, errConflict
		}
		return nil, err
	}
	return versions, nil
}
