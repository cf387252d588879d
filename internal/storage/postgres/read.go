package postgres

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// scanChunk is how many rows one scan statement fetches when a scan needs several.
	scanChunk = 1000
	// maxSingleScan is the largest unfiltered page read with one statement; larger pages
	// are read in chunks inside a read-only transaction.
	maxSingleScan = 5000
	// scanCheckEvery is how many examined records a Scan goes between deadline checks.
	// The first check comes after that many, so every Scan makes progress.
	scanCheckEvery = 64
)

// rdb is what reads run through: the primary's pool, or a view's handle (views.go),
// which reads the position around each statement.
type rdb interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// reads are the engine's read statements (entities and catalogue) over one rdb.
type reads struct {
	e  *Engine
	db rdb
	// once runs each read once, without the retries of transient failures: a replica's
	// view falls back to the primary instead of waiting on a replica that fails.
	once bool
	// grouped: point reads go through a coalescer, which sends concurrent ones together
	// (coalesce.go): Engine.gets on the primary, the replica's own on a replica's view.
	grouped bool
	view    *view
}

// primary reads the latest state through the pool.
func (e *Engine) primary() reads { return reads{e: e, db: e.pool, grouped: true} }

// retry is Engine.retry; with once, a single attempt whose error is returned as the
// database gave it, for the view to judge (view.do maps it).
func (r reads) retry(ctx context.Context, op string, fn func() error) error {
	if !r.once {
		return r.e.retry(ctx, op, fn)
	}
	if r.e.closed.Load() {
		return ErrClosed
	}
	if err := fn(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// The Engine's own reads read the primary's latest state.

func (e *Engine) Get(ctx context.Context, account, tableName, pk, rk string) (storage.Record, error) {
	return e.primary().Get(ctx, account, tableName, pk, rk)
}

func (e *Engine) GetEncoded(ctx context.Context, account, tableName, pk, rk string) (storage.Record, error) {
	return e.primary().GetEncoded(ctx, account, tableName, pk, rk)
}

func (e *Engine) Scan(ctx context.Context, account, tableName string, req storage.ScanRequest) (storage.ScanResult, error) {
	return e.primary().Scan(ctx, account, tableName, req)
}

func (e *Engine) GetTable(ctx context.Context, account, name string) (storage.TableInfo, error) {
	return e.primary().GetTable(ctx, account, name)
}

func (e *Engine) ListTables(ctx context.Context, account, from string, limit int) ([]storage.TableInfo, string, error) {
	return e.primary().ListTables(ctx, account, from, limit)
}

func (e *Engine) GetTableACL(ctx context.Context, account, name string) ([]byte, error) {
	return e.primary().GetTableACL(ctx, account, name)
}

func (e *Engine) GetServiceProperties(ctx context.Context, account string) ([]byte, error) {
	return e.primary().GetServiceProperties(ctx, account)
}

// Get reads one entity: one statement that also tells a missing table from a missing
// (or expired) entity.
func (r reads) Get(ctx context.Context, account, tableName, pk, rk string) (storage.Record, error) {
	return r.get(ctx, account, tableName, pk, rk, false)
}

// GetEncoded is Get with the properties left in the stored form: the bag as the
// statement returned it (pgx copies it out of the connection's buffer), checked.
func (r reads) GetEncoded(ctx context.Context, account, tableName, pk, rk string) (storage.Record, error) {
	return r.get(ctx, account, tableName, pk, rk, true)
}

func (r reads) get(ctx context.Context, account, tableName, pk, rk string, encoded bool) (storage.Record, error) {
	var rec storage.Record
	g := newGetOne(r.e.q.get, account, tableName, pk, rk)
	err := r.retry(ctx, "get entity", func() error {
		g.clear()
		if r.grouped {
			c := &r.e.gets
			if r.view != nil && r.view.rep != nil {
				c = &r.view.rep.gets
			}
			if r.view != nil {
				r.view.startRound()
			}
			at, err := c.do(ctx, &g.st, 0, g.acct, g.key)
			if r.view != nil {
				r.view.endRound()
			}
			if err != nil {
				return err
			}
			if r.view != nil {
				if err := r.view.noteGroup(at); err != nil {
					return err
				}
			}
			if g.st.rows == 0 {
				return storage.ErrTableNotFound
			}
		} else {
			err := r.db.QueryRow(ctx, g.st.sql, g.acct, g.key, g.pk, g.rk).Scan(g.st.dest...)
			if errors.Is(err, pgx.ErrNoRows) {
				return storage.ErrTableNotFound
			}
			if err != nil {
				return err
			}
		}
		if !g.ver.Valid {
			return storage.ErrNotFound
		}
		var props []entity.Property
		var err error
		if encoded {
			err = entity.CheckProps(g.blob)
		} else {
			props, err = entity.DecodeProps(g.blob)
		}
		if err != nil {
			return fmt.Errorf("decode entity: %w", err)
		}
		rec = storage.Record{Entity: entity.Entity{PartitionKey: pk, RowKey: rk, Props: props}, Version: g.ver.Int64}
		if g.exp.Valid {
			rec.Expiry = g.exp.Int64
		}
		if encoded {
			rec.Encoded = g.blob
		}
		return nil
	})
	return rec, err
}

// getOne is one point read (q.get): its statement, the statement's arguments and its
// answer, in one allocation. The arguments point at its keys, which share the bytes of
// the strings they came from (the statement only reads them), and the destinations at
// its own fields; a read that went through a pgx statement with []any arguments and
// destinations, []byte copies of its keys and a new *int64 for its version made a dozen
// allocations more, which showed in the front end's CPU per read.
type getOne struct {
	st                stmt
	args, dest        [4]any
	acct, key, pk, rk []byte
	tid               int64
	ver, exp          sql.NullInt64
	blob              []byte
}

// newGetOne makes the read of (pk, rk) in account's table by query, q.get.
func newGetOne(query, account, tableName, pk, rk string) *getOne {
	g := &getOne{acct: readOnlyBytes(account), key: readOnlyBytes(storage.TableKey(tableName)), pk: readOnlyBytes(pk), rk: readOnlyBytes(rk)}
	g.args = [4]any{&g.acct, &g.key, &g.pk, &g.rk}
	g.dest = [4]any{&g.tid, &g.ver, &g.blob, &g.exp}
	g.st = stmt{sql: query, args: g.args[:], dest: g.dest[:]}
	return g
}

// clear readies g for an attempt: no answer yet.
func (g *getOne) clear() {
	g.st.rows, g.tid, g.ver, g.exp, g.blob = 0, 0, sql.NullInt64{}, sql.NullInt64{}, nil
}

// readOnlyBytes is s's bytes without a copy, for arguments that are only read. An
// empty s gives an empty slice, never nil, which would be NULL.
func readOnlyBytes(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// mergeGets makes one getMany statement of a group of Gets (reads.get's getOne
// statements: arguments account, table key, PartitionKey and RowKey; dest table id,
// version, props and expiry), which sets each Get's rows and dest as its get statement
// would have: one row if its table exists, none if not. One statement of many keys costs the database far
// less than as many statements: one Bind and Execute, one executor start-up, one
// snapshot. The keys are then read from one snapshot, taken within the group's round
// trip, so the position read after the group still bounds what each saw.
func (e *Engine) mergeGets(group []*single) (stmt, bool) {
	n := len(group)
	idx := make([]int64, n)
	cols := [4][][]byte{make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n)}
	for i, s := range group {
		if s.st.sql != e.q.get || len(s.st.args) != len(cols) || len(s.st.dest) != 4 {
			return stmt{}, false
		}
		for j := range cols {
			b, ok := s.st.args[j].(*[]byte)
			if !ok {
				return stmt{}, false
			}
			cols[j][i] = *b
		}
		idx[i] = int64(i)
	}
	each := func(m valueScanner, fds []pgconn.FieldDescription, vals [][]byte) error {
		if len(fds) != 5 {
			return fmt.Errorf("get group: %d columns, want 5", len(fds))
		}
		var k int64
		if err := scanValue(m, fds[0].DataTypeOID, fds[0].Format, vals[0], &k); err != nil {
			return fmt.Errorf("get group: scan key index: %w", err)
		}
		if k < 0 || k >= int64(n) || group[k].st.rows > 0 {
			return fmt.Errorf("get group: unexpected row for key %d of %d", k, n)
		}
		st := group[k].st
		st.rows++
		return scanColumns(m, fds[1:], vals[1:], st.dest)
	}
	return stmt{sql: e.q.getMany, args: []any{idx, cols[0], cols[1], cols[2], cols[3]}, each: each}, true
}

// checkTable fails with ErrTableNotFound unless the table exists.
func (r reads) checkTable(ctx context.Context, acct, key []byte) error {
	var id int64
	err := r.db.QueryRow(ctx, r.e.q.tableExists, acct, key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.ErrTableNotFound
	}
	return err
}

// querier is what a scan reads through: the pool, or a read-only transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Scan reads the key range in (PartitionKey, RowKey) byte order, from one snapshot.
//
// A page that one statement can produce — no filter and at most maxSingleScan records,
// or a filtered scan that finishes within its first scanChunk rows — is one statement
// and one round trip (a statement reads one snapshot). Otherwise the scan runs again
// from its start inside a REPEATABLE READ READ ONLY transaction, statement by statement
// in chunks of scanChunk rows, all from the transaction's one snapshot; records of the
// first attempt whose version is unchanged reuse their filter verdict, so the filter
// sees each record once. A missing table shows as an empty result, which is then told
// apart with one more read.
//
// With MaxBytes, statements are capped by size in the database too (scanCapped): one
// returns no more rows than the page has room for, plus one, so a page of a few large
// records does not transfer a thousand of them (rows a page does not keep are read and
// dropped: a result set is read to its end). Unfiltered, that is exactly the rows the
// page needs; filtered, rejected rows take room too, so the scan goes on with more
// statements while the page has room.
//
// Expired rows never leave the database: every scan statement filters them out before
// its limit and its size window, so they are neither returned nor counted and take no
// room in a page.
func (r reads) Scan(ctx context.Context, account, tableName string, req storage.ScanRequest) (storage.ScanResult, error) {
	if req.Limit <= 0 {
		return storage.ScanResult{}, fmt.Errorf("scan: limit %d is not positive", req.Limit)
	}
	s := &scanner{r: r, req: &req, acct: []byte(account), key: []byte(storage.TableKey(tableName))}
	var res storage.ScanResult
	err := r.retry(ctx, "scan", func() error {
		var err error
		res, err = s.run(ctx)
		return err
	})
	if err == nil {
		// A scan cut short by its caller's going away is not a page (storage.ScanResult).
		err = ctx.Err()
	}
	if err != nil {
		return storage.ScanResult{}, err
	}
	return res, nil
}

type scanner struct {
	r         reads
	req       *storage.ScanRequest
	acct, key []byte
	// verdicts of the first attempt, by key, for records it examined: version and
	// whether the filter accepted the record.
	verdicts map[storage.Key]verdict
}

type verdict struct {
	version int64
	rec     *storage.Record // nil if rejected
}

// scanPass is the state of one attempt.
type scanPass struct {
	res      storage.ScanResult
	bytes    int // storage.RecordSize of res.Records, summed
	examined int
	rows     int // rows read in total
	done     bool
	last     storage.Key // last examined key
}

// add appends an accepted record of the given size to the page, unless MaxBytes leaves
// no room for it: then the page ends there (Next is the record's key) and add reports
// false.
func (p *scanPass) add(req *storage.ScanRequest, rec storage.Record, size int) bool {
	if req.MaxBytes > 0 && len(p.res.Records) > 0 && p.bytes+size > req.MaxBytes {
		p.res.Next = &storage.Key{PartitionKey: rec.Entity.PartitionKey, RowKey: rec.Entity.RowKey}
		p.done = true
		return false
	}
	p.bytes += size
	p.res.Records = append(p.res.Records, rec)
	return true
}

func (s *scanner) run(ctx context.Context) (storage.ScanResult, error) {
	req := s.req
	if req.End != nil && !req.Start.Less(*req.End) {
		return storage.ScanResult{}, s.r.checkTable(ctx, s.acct, s.key)
	}
	if req.Filter != nil || req.Limit < maxSingleScan {
		n := req.Limit + 1
		if req.Filter != nil {
			n = max(n, scanChunk)
		}
		var p scanPass
		s.verdicts = nil
		if req.Filter != nil {
			s.verdicts = make(map[storage.Key]verdict)
		}
		_, more, err := s.chunk(ctx, s.r.db, &p, req.Start, n, true)
		if err != nil {
			return storage.ScanResult{}, err
		}
		if !p.done && !more {
			p.done = true // range exhausted
		}
		if p.done {
			if p.rows == 0 {
				// An empty range, or no table at all.
				if err := s.r.checkTable(ctx, s.acct, s.key); err != nil {
					return storage.ScanResult{}, err
				}
			}
			p.res.Examined = p.examined
			return p.res, nil
		}
	}
	// Several statements: one snapshot for all of them.
	var res storage.ScanResult
	err := pgx.BeginTxFunc(ctx, s.r.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var p scanPass
		start := req.Start
		for first := true; ; first = false {
			n := scanChunk
			if req.Filter == nil {
				n = min(scanChunk, req.Limit-len(p.res.Records)+1)
			}
			_, more, err := s.chunk(ctx, tx, &p, start, n, false)
			if err != nil {
				return err
			}
			if p.done {
				break
			}
			if !more {
				if first && p.rows == 0 {
					if err := s.r.checkTable(ctx, s.acct, s.key); err != nil {
						return err
					}
				}
				break // range exhausted
			}
			if expired(ctx, req.Deadline) {
				// Stop between chunks: resume just after the last examined key.
				p.res.Next = &storage.Key{PartitionKey: p.last.PartitionKey, RowKey: p.last.RowKey + "\x00"}
				break
			}
			start = storage.Key{PartitionKey: p.last.PartitionKey, RowKey: p.last.RowKey + "\x00"}
		}
		res = p.res
		res.Examined = p.examined
		return nil
	})
	return res, err
}

// chunk reads up to n rows from start and examines them; it returns how many rows the
// statement produced (or would have, up to where it stopped reading: then p.done), and
// whether rows may remain in range after them (it produced n, or its size cap cut it).
func (s *scanner) chunk(ctx context.Context, q querier, p *scanPass, start storage.Key, n int, record bool) (int, bool, error) {
	req := s.req
	var (
		rows pgx.Rows
		err  error
	)
	// limit is the statement's size cap (scanCapped): what the page has room for. The
	// statement returns at least two rows, so an unfiltered page whose first record is
	// over the budget still sees the next one (to end there), and every statement
	// progresses. Without MaxBytes, -1: no cap.
	limit := int64(-1)
	if req.MaxBytes > 0 {
		limit = int64(max(req.MaxBytes-p.bytes, 0))
	}
	pk, rk := []byte(start.PartitionKey), []byte(start.RowKey)
	switch {
	case req.End != nil && limit >= 0:
		rows, err = q.Query(ctx, s.r.e.q.scanToCapped, s.acct, s.key, pk, rk, n, []byte(req.End.PartitionKey), []byte(req.End.RowKey), limit)
	case req.End != nil:
		rows, err = q.Query(ctx, s.r.e.q.scanTo, s.acct, s.key, pk, rk, n, []byte(req.End.PartitionKey), []byte(req.End.RowKey))
	case limit >= 0:
		rows, err = q.Query(ctx, s.r.e.q.scanCapped, s.acct, s.key, pk, rk, n, limit)
	default:
		rows, err = q.Query(ctx, s.r.e.q.scan, s.acct, s.key, pk, rk, n)
	}
	if err != nil {
		return 0, false, err
	}
	defer rows.Close()
	for _, fd := range rows.FieldDescriptions() {
		if fd.Format != pgx.BinaryFormatCode {
			return 0, false, fmt.Errorf("scan: column %s not in binary format", fd.Name)
		}
	}
	got, read := 0, int64(0) // rows, their sizes
	more := func() bool {
		// The row after the last one read was left out by the cap iff it would have
		// been the third or later and the sizes before it exceed the cap (scanCapped).
		return got == n || (limit >= 0 && got >= 2 && read > limit)
	}
	var pkEnc []byte // the previous row's PartitionKey, so one partition allocates one string
	var pkStr string
	for rows.Next() {
		got++
		p.rows++
		raw := rows.RawValues()
		if len(raw) != 5 || raw[0] == nil || raw[1] == nil || raw[3] == nil {
			return got, false, fmt.Errorf("scan: unexpected row shape")
		}
		size := len(raw[0]) + len(raw[1]) + len(raw[3])
		read += int64(size)
		if pkEnc == nil || string(raw[0]) != string(pkEnc) {
			pkEnc = append(pkEnc[:0], raw[0]...)
			pkStr = string(raw[0])
		}
		k := storage.Key{PartitionKey: pkStr, RowKey: string(raw[1])}
		if len(p.res.Records) == req.Limit || (p.examined > 0 && p.examined%scanCheckEvery == 0 && expired(ctx, req.Deadline)) {
			p.res.Next = &k
			p.done = true
			return got, true, nil
		}
		p.examined++
		p.last = k
		if len(raw[2]) != 8 {
			return got, false, fmt.Errorf("scan: version of %d bytes", len(raw[2]))
		}
		ver := int64(binary.BigEndian.Uint64(raw[2]))
		var exp int64 // the stored expiry, NULL for none
		if raw[4] != nil {
			if len(raw[4]) != 8 {
				return got, false, fmt.Errorf("scan: expiry of %d bytes", len(raw[4]))
			}
			exp = int64(binary.BigEndian.Uint64(raw[4]))
		}
		if v, ok := s.verdicts[k]; ok && !record && v.version == ver {
			if v.rec != nil && !p.add(req, *v.rec, size) {
				return got, true, nil
			}
			continue
		}
		if req.Filter == nil && req.MaxBytes > 0 && len(p.res.Records) > 0 && p.bytes+size > req.MaxBytes {
			// Full: end the page here without decoding the record.
			p.res.Next = &k
			p.done = true
			return got, true, nil
		}
		props, err := entity.DecodeProps(raw[3])
		if err != nil {
			return got, false, fmt.Errorf("scan: decode entity: %w", err)
		}
		rec := storage.Record{Entity: entity.Entity{PartitionKey: k.PartitionKey, RowKey: k.RowKey, Props: props}, Version: ver, Expiry: exp}
		if req.Filter != nil && !req.Filter(&rec) {
			if record {
				s.verdicts[k] = verdict{version: ver}
			}
			continue
		}
		if record && s.verdicts != nil {
			s.verdicts[k] = verdict{version: ver, rec: &rec}
		}
		if !p.add(req, rec, size) {
			return got, true, nil
		}
	}
	if err := rows.Err(); err != nil {
		return got, false, err
	}
	return got, more(), nil
}

func expired(ctx context.Context, deadline time.Time) bool {
	return ctx.Err() != nil || (!deadline.IsZero() && !time.Now().Before(deadline))
}
