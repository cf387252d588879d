package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5/pgconn"
)

// ApplyEach applies each mutation on its own (bulk requests). It takes rounds, and a
// round costs a fixed number of round trips whatever it holds and whatever fails:
//
//   - The merges (Merge, InsertOrMerge), and writes with an explicit expiry
//     (storage.Mutation.Expiry), read their rows first, under the front end's row locks
//     (rowlocks.go), and are applied in Go as in applyRMW; one that fails there is decided
//     (its failure is what the row read shows).
//   - One pipelined transaction then writes everything (exec): each plain mutation with
//     its single statement (insert1, upsert1, replace1, delete1), or all of them with one
//     statement over arrays (insertGroup, upsertGroup) when they are all inserts or all
//     insert-or-replaces, and each merge with a compare-and-swap on the version read.
//     None of these statements raises: a precondition that fails makes its statement
//     write nothing and answer no row, so the transaction commits what succeeded — which
//     is why a failure costs no re-run of the others, where a transaction that aborted on
//     it would (an Apply).
//   - The plain mutations that wrote nothing, if any, are explained by one read of their
//     rows and the table's settings, as diagnose explains an Apply: the failed
//     precondition (or refused TTL property) is reported, which is the state that read
//     saw, so the failure is linearizable there.
//
// What is left for another round is only what lost to a concurrent write (a
// compare-and-swap that changed nothing, a mutation whose read shows it would succeed
// now) or found the cached table settings stale; rounds back off as retry does, and after
// maxAttempts what is left fails as contention. Every statement takes its row lock in
// RowKey order, the order of every batch of the engine, so concurrent writes of the same
// rows do not deadlock. On a table whose change feed is on, the same statements record
// what they write (their variants of changes.go), in the mutations' order.
func (e *Engine) ApplyEach(ctx context.Context, account, tableName, pk string, muts []storage.Mutation) (storage.Each, error) {
	if e.closed.Load() {
		return storage.Each{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return storage.Each{}, err
	}
	out := storage.Each{Versions: make([]int64, len(muts)), Errs: make([]error, len(muts))}
	todo := make([]int, 0, len(muts))
	seen := make(map[string]struct{}, len(muts))
	for i := range muts {
		m := &muts[i]
		if _, dup := seen[m.RowKey]; dup {
			return storage.Each{}, fmt.Errorf("apply each: row %q named twice", m.RowKey)
		}
		seen[m.RowKey] = struct{}{}
		switch m.Op {
		case storage.Insert, storage.Replace, storage.Merge, storage.Delete, storage.InsertOrReplace, storage.InsertOrMerge:
			todo = append(todo, i)
		default:
			out.Errs[i] = fmt.Errorf("unknown mutation %v", m.Op)
		}
	}
	slices.SortFunc(todo, func(i, j int) int { return strings.Compare(muts[i].RowKey, muts[j].RowKey) })
	a := applyArgs{acct: []byte(account), key: []byte(storage.TableKey(tableName)), pk: pk}
	committed := false
	for attempt := 1; len(todo) > 0; attempt++ {
		left, err := e.eachRound(ctx, &a, muts, todo, &out, &committed)
		if err == nil && len(left) == 0 {
			break
		}
		if err == nil {
			err = errConflict
		}
		if !retryable(err) || attempt >= maxAttempts || ctx.Err() != nil || e.closed.Load() {
			err = e.mapErr(ctx, "apply", err)
			if !committed {
				return storage.Each{}, err
			}
			for _, i := range left {
				out.Errs[i] = err
			}
			break
		}
		if contended(err) {
			e.retries.Add(1)
		}
		todo = left
		t := time.NewTimer(time.Duration(rand.Int64N(int64(min(attempt, 20)) * int64(time.Millisecond))))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	return out, nil
}

// eachRound is one round of ApplyEach over the mutations todo (indexes into muts, in
// RowKey order): it records in out what it decides, sets *committed once a transaction
// of the call committed, and returns what is left for another round. On an error the
// mutations not decided are left; none of them was committed by this round.
func (e *Engine) eachRound(ctx context.Context, a *applyArgs, muts []storage.Mutation, todo []int, out *storage.Each, committed *bool) ([]int, error) {
	decided := func(rest []int) []int { // todo without what this round decided
		left := make([]int, 0, len(rest))
		for _, i := range rest {
			if out.Errs[i] == nil {
				left = append(left, i)
			}
		}
		return left
	}
	for _, i := range todo {
		out.Errs[i] = nil
	}

	ent, err := e.entry(ctx, a.acct, a.key)
	if err != nil {
		return todo, err
	}
	a.ent = ent
	if len(maintained(ent.settings)) > 0 {
		return e.eachIndexed(ctx, a, muts, todo, out, committed)
	}
	// A table whose change feed is on (as cached; a stale entry fails the statements'
	// generation check) sends the statements that record their changes, the records in
	// the mutations' order.
	feed := e.feedOn(ent.settings)

	// The merges' rows, read under their locks, which are held until the writes answered.
	var st *readState
	var rmw []storage.Mutation
	for _, i := range todo {
		if readFirst(&muts[i]) {
			rmw = append(rmw, muts[i])
		}
	}
	if len(rmw) > 0 {
		ra := applyArgs{acct: a.acct, key: a.key, pk: a.pk, muts: rmw}
		unlock, err := e.locks.lock(ctx, &ra)
		if err != nil {
			return todo, err
		}
		defer unlock()
		if st, err = e.readRows(ctx, &ra, true); err != nil {
			return todo, err
		}
		if len(maintained(st.settings)) > 0 {
			return todo, errStale // an index was declared: the next round sees it
		}
	}
	record := st != nil && st.settings.ChangeFeedOn() && e.dialect == dialectPostgres
	var noRow []change // changes of mutations that write no row
	noRowAt := 0       // the first of them

	pk := []byte(a.pk)
	var (
		stmts  []stmt
		of     []int // the mutation of each statement
		check  []int // plain mutations to explain: they wrote nothing, or their TTL was refused
		plain  []int // plain mutations with a statement
		vers   = make([]int64, len(muts))
		kinds  = map[storage.Op]int{}
		merges = 0
		// wroteNothing are mutations that succeed without a statement: an explicit expiry
		// already past on a row that is not stored (storage.SettleExpiry).
		wroteNothing []int
	)
	for _, i := range todo {
		m := &muts[i]
		rk := []byte(m.RowKey)
		switch {
		case readFirst(m):
			r := st.rows[m.RowKey]
			v, err := storage.Step(a.pk, m, &r.Row, func(prev int64) int64 { return max(st.now, prev+1) })
			props := r.Props // the state the mutation left, before an expiry past already
			if err == nil && m.Op != storage.Delete {
				r.expiry, err = storage.SettleExpiry(st.settings, m, &r.Row)
			}
			if err != nil {
				out.Errs[i] = err // what the read saw
				continue
			}
			vers[i] = v
			var cs []change
			if record {
				cs = noteChange(nil, &r, m.RowKey, m, props, v, st.now)
			}
			var s stmt
			switch {
			case r.stored && r.Exists:
				s = stmt{sql: e.q.casUpdate, args: []any{st.tableID, pk, rk, r.storedV, v, entity.AppendProps(nil, r.Props), r.expiry, st.gen}}
				if record {
					s = withChanges(s, e.q.feedCasUpdate, st.tableID, cs)
				}
			case r.stored:
				// Expired at once by an explicit expiry (storage.SettleExpiry): nothing stays.
				s = stmt{sql: e.q.casDelete, args: []any{st.tableID, pk, rk, r.storedV, st.gen}}
				if record {
					s = withChanges(s, e.q.feedCasDelete, st.tableID, cs)
				}
			case r.Exists:
				s = stmt{sql: e.q.casInsert, args: []any{st.tableID, pk, rk, int64(0), v, entity.AppendProps(nil, r.Props), r.expiry, a.acct, a.key, st.gen}}
				if record {
					s = withChanges(s, e.q.feedCasInsert, st.tableID, cs)
				}
			default:
				wroteNothing = append(wroteNothing, i) // expired at once, and nothing stored
				if len(noRow) == 0 {
					noRowAt = i
				}
				noRow = append(noRow, cs...)
				continue
			}
			if s.feed != nil {
				s.feed.pos = i
			}
			stmts, of = append(stmts, s), append(of, i)
			merges++
		default:
			var ttl int64
			if m.Op != storage.Delete {
				if ttl, err = storage.Expiry(ent.settings, m.Props, 0); err != nil {
					check = append(check, i) // under the current settings, diagnose decides
					continue
				}
			}
			s := e.plainStmt(a, m, pk, rk, ttl, &vers[i])
			if feed {
				s = e.recording(s, m.Op, ent.id, false, i)
			}
			stmts, of = append(stmts, s), append(of, i)
			plain = append(plain, i)
			kinds[m.Op]++
		}
	}
	// All inserts, or all insert-or-replaces: one statement over arrays.
	var group map[string]int // RowKey → mutation, of the group statement's rows
	if merges == 0 && len(plain) > 1 && len(kinds) == 1 && (kinds[storage.Insert] > 0 || kinds[storage.InsertOrReplace] > 0) {
		group = make(map[string]int, len(plain))
		stmts = []stmt{e.eachGroup(a, muts, plain, stmts, vers, group, feed)}
	}

	if len(noRow) > 0 {
		rs := e.recordsStmt(st.tableID, pk, noRow)
		rs.feed.pos = noRowAt
		stmts = append(stmts, rs)
	}
	var pos storage.Position
	if len(stmts) > 0 {
		if pos, err = e.exec(ctx, stmts); err != nil {
			if isRaised(err) {
				err = errConflict // the feed was turned off (the seal refused): again
			}
			return decided(todo), err
		}
	}
	var left []int
	wrote := func(i int) { // the transaction wrote mutation i
		if muts[i].Op != storage.Delete {
			out.Versions[i] = vers[i]
		}
		*committed = true
		out.Position = max(out.Position, pos)
	}
	for _, i := range wroteNothing {
		wrote(i)
	}
	if group != nil {
		for _, i := range plain {
			if _, ok := group[muts[i].RowKey]; ok {
				check = append(check, i) // no row answered for it
			} else {
				wrote(i)
			}
		}
	} else {
		for k, i := range of {
			switch {
			case stmts[k].rows == 1:
				wrote(i)
			case readFirst(&muts[i]):
				left = append(left, i) // lost its compare-and-swap
			default:
				check = append(check, i)
			}
		}
	}
	if len(check) == 0 {
		return left, nil
	}

	// Why the plain mutations in check wrote nothing: read their rows and the settings.
	slices.SortFunc(check, func(i, j int) int { return strings.Compare(muts[i].RowKey, muts[j].RowKey) })
	da := applyArgs{acct: a.acct, key: a.key, pk: a.pk, muts: make([]storage.Mutation, len(check))}
	for k, i := range check {
		da.muts[k] = muts[i]
	}
	now, err := e.readRows(ctx, &da, false)
	if err != nil {
		return append(left, check...), err
	}
	for _, i := range check {
		m := &muts[i]
		if now.tableID != ent.id || now.gen != ent.gen {
			left = append(left, i) // stale settings: readRows refreshed the cache
			continue
		}
		r := now.rows[m.RowKey]
		var ferr error
		switch m.Op {
		case storage.Insert:
			if r.Exists {
				ferr = storage.ErrExists
			}
		case storage.Replace, storage.Delete:
			if !r.Exists {
				ferr = storage.ErrNotFound
			} else if m.IfMatch != 0 && m.IfMatch != r.Version {
				ferr = storage.ErrVersionMismatch
			}
		}
		if ferr == nil && m.Op != storage.Delete {
			_, ferr = storage.Expiry(now.settings, m.Props, 0)
		}
		if ferr == nil {
			left = append(left, i) // it would succeed now: a concurrent write got in between
			continue
		}
		out.Errs[i] = ferr
	}
	return left, nil
}

// readFirst reports whether ApplyEach reads m's row and applies m in Go (then writes
// with a compare-and-swap) rather than sending m's single statement: a merge, or a write
// with an explicit expiry (storage.Mutation.Expiry), which the single statements cannot
// store.
func readFirst(m *storage.Mutation) bool {
	return m.Op == storage.Merge || m.Op == storage.InsertOrMerge || m.Expiry != storage.ExpiryComputed
}

// eachGroup makes the single statements stmts of the plain mutations plain (all inserts,
// or all insert-or-replaces, in RowKey order) one insertGroup or upsertGroup statement.
// Each row it answers is taken out of group (filled here with every RowKey) and its
// version put in vers, so that what is left in group wrote nothing.
//
// On a feed table (feed) it is feedInsertGroup or feedUpsertGroup, the records in the
// mutations' order.
func (e *Engine) eachGroup(a *applyArgs, muts []storage.Mutation, plain []int, stmts []stmt, vers []int64, group map[string]int, feed bool) stmt {
	n := len(plain)
	ids, gens, ttls := make([]int64, n), make([]int64, n), make([]int64, n)
	accts, keys, pks, rks, props := make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n)
	pk := []byte(a.pk)
	for k, i := range plain {
		args := stmts[k].args // singleStmt's: id, account, key, pk, rk, props, gen, ttl
		ids[k], accts[k], keys[k], pks[k], rks[k] = a.ent.id, a.acct, a.key, pk, []byte(muts[i].RowKey)
		props[k], gens[k], ttls[k] = args[5].([]byte), a.ent.gen, args[7].(int64)
		group[muts[i].RowKey] = i
	}
	sql := e.q.insertGroup
	if muts[plain[0]].Op == storage.InsertOrReplace {
		sql = e.q.upsertGroup
	}
	each := func(m valueScanner, fds []pgconn.FieldDescription, vals [][]byte) error {
		var (
			id     int64
			gpk    []byte
			rk     []byte
			ver    int64
			target = []any{&id, &gpk, &rk, &ver}
		)
		if err := scanColumns(m, fds, vals, target); err != nil {
			return fmt.Errorf("write group: %w", err)
		}
		i, ok := group[string(rk)]
		if !ok || id != a.ent.id {
			return fmt.Errorf("write group: unexpected row %q of table %d", rk, id)
		}
		delete(group, string(rk))
		vers[i] = ver
		return nil
	}
	st := stmt{sql: sql, args: []any{ids, accts, keys, pks, rks, props, gens, ttls}, each: each}
	if feed {
		st.sql = e.q.feedInsertGroup
		if sql == e.q.upsertGroup {
			st.sql = e.q.feedUpsertGroup
		}
		places := make([]int32, n)
		for k, i := range plain {
			places[k] = int32(i)
		}
		st.args = append(st.args, int64(0), places)
		st.feed = &feedNote{tid: a.ent.id, n: 2 * len(muts), ordArg: 8}
	}
	return st
}

// eachIndexed is a round of ApplyEach on a table that declares indexes: each mutation is
// an Apply of its own (whose transaction carries the row's index entries, indexes.go), in
// RowKey order. A mutation's failure (a failed precondition, a refused property, a
// unique value held by another entity) is its own; an error of the table or the database
// leaves the mutations not yet done.
func (e *Engine) eachIndexed(ctx context.Context, a *applyArgs, muts []storage.Mutation, todo []int, out *storage.Each, committed *bool) ([]int, error) {
	for j, i := range todo {
		b := applyArgs{acct: a.acct, key: a.key, pk: a.pk, muts: muts[i : i+1]}
		var res storage.Applied
		err := e.retry(ctx, "apply", func() error {
			var err error
			res, err = e.applyOnce(ctx, &b)
			return err
		})
		var ae *storage.ApplyError
		switch {
		case err == nil:
			out.Versions[i] = res.Versions[0]
			out.Position = max(out.Position, res.Position)
			*committed = true
		case errors.As(err, &ae):
			out.Errs[i] = ae.Err
		default:
			return todo[j:], err
		}
	}
	return nil, nil
}
