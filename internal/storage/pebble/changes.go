package pebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	pebbledb "github.com/cockroachdb/pebble/v2"
)

// Change feeds (docs/change-feed-design.md, "Pebble").
//
// A feed's records are keys (kindFeed, table id, Seq) in the batch of the change they
// record, so both commit or neither does. Seq 0 of a feed is its mark: the retention
// mark (the highest Seq removed), the retention, and the table's account and name, which
// keep a deleted table's feed readable by its id after a restart. Seq 1 is never a
// record: a feed starts with its horizon at 1, so a page's Next is never 0 and After 0
// always means "the beginning" (the oldest record retained).
//
// Numbers are taken from the feed's counter under the row locks, after the
// preconditions, so two changes of one row are numbered in commit order, and a change
// acknowledged before another started has the smaller number. Batches of different rows
// may become visible out of number order, so a reader reads only up to the horizon: one
// below the smallest number still in flight, a number being in flight from when it is
// taken until its batch is synced (or failed). A reader thus never sees a record a crash
// could lose, and never reads past a number that could still appear.

// maxFeedExamined bounds how many records a read examines for a PartitionKey range
// before it returns the page it has, so a narrow range over a busy feed costs a bounded
// read per page.
const maxFeedExamined = 4096

// feedState is a feed's counter and horizon. A table with the feed on, or whose feed
// still has records, has one (Engine.feeds).
type feedState struct {
	id           uint64
	account, key string // the owning table's account and TableKey
	// t is the owning table while it is in the catalogue (nil for a deleted table's
	// feed). on is whether changes are recorded; it changes only under t.mu held
	// exclusively, and Apply and the expiry purge hold t.mu shared while they record.
	t  *table
	on bool

	// markMu serialises the writes of the mark (a retention change, a trim), each a
	// read-modify-write of removed and retention; it is never held by a write path.
	markMu    sync.Mutex
	retention int32 // seconds (guarded by markMu; read by the trim under it)

	mu       sync.Mutex
	next     uint64      // the next number to hand out
	inflight []feedRange // taken and not yet synced or failed, in taking order
	horizon  uint64      // every record with Seq ≤ horizon is visible or will never be
	removed  uint64      // retention mark: records with Seq ≤ removed are gone
	// advanced is closed, and replaced, whenever horizon moves (WaitChanges); nil
	// until a waiter asks for it.
	advanced chan struct{}
}

type feedRange struct {
	first uint64
	done  bool
}

// take hands out n consecutive numbers (n > 0) and returns the first; finish must be
// called with it once the batch holding them is synced or has failed.
func (f *feedState) take(n int) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	first := f.next
	f.next += uint64(n)
	f.inflight = append(f.inflight, feedRange{first: first})
	return first
}

// finish retires the numbers taken from first on and advances the horizon past every
// range retired in taking order.
func (f *feedState) finish(first uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.inflight {
		if f.inflight[i].first == first {
			f.inflight[i].done = true
			break
		}
	}
	k := 0
	for k < len(f.inflight) && f.inflight[k].done {
		k++
	}
	f.inflight = f.inflight[:copy(f.inflight, f.inflight[k:])]
	h := f.next - 1
	if len(f.inflight) > 0 {
		h = f.inflight[0].first - 1
	}
	if h != f.horizon && f.advanced != nil {
		close(f.advanced)
		f.advanced = nil
	}
	f.horizon = h
}

// waitPast returns nil once the horizon is past after, or ctx.Err().
func (f *feedState) waitPast(ctx context.Context, after uint64) error {
	for {
		f.mu.Lock()
		if f.horizon > after && after != storage.AfterNow {
			f.mu.Unlock()
			return nil
		}
		if f.advanced == nil {
			f.advanced = make(chan struct{})
		}
		ch := f.advanced
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// removedNow is the retention mark as it stands.
func (f *feedState) removedNow() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.removed
}

func (f *feedState) horizonNow() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.horizon
}

// feedPrefix is the first key of feed id's span (its mark); feedPrefix(id+1) bounds it.
func feedPrefix(id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kindFeed}, id)
}

// appendFeedKey appends the key of record seq of feed id.
func appendFeedKey(dst []byte, id, seq uint64) []byte {
	dst = append(dst, kindFeed)
	dst = binary.BigEndian.AppendUint64(dst, id)
	return binary.BigEndian.AppendUint64(dst, seq)
}

func feedKey(id, seq uint64) []byte { return appendFeedKey(make([]byte, 0, 17), id, seq) }

func decodeFeedKey(k []byte) (id, seq uint64, err error) {
	if len(k) != 17 || k[0] != kindFeed {
		return 0, 0, errCorruptKey
	}
	return binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[9:]), nil
}

// feedMark is a feed's mark (Seq 0): removed (8 BE) | retention (4 BE) | esc(account) |
// esc(TableKey).
type feedMark struct {
	removed      uint64
	retention    int32
	account, key string
}

func (m *feedMark) value() []byte {
	v := binary.BigEndian.AppendUint64(nil, m.removed)
	v = binary.BigEndian.AppendUint32(v, uint32(m.retention))
	v = appendEscaped(v, m.account)
	return appendEscaped(v, m.key)
}

func decodeMark(v []byte) (feedMark, error) {
	if len(v) < 12 {
		return feedMark{}, errCorruptKey
	}
	m := feedMark{removed: binary.BigEndian.Uint64(v), retention: int32(binary.BigEndian.Uint32(v[8:]))}
	account, _, rest, err := decodeEscaped(v[12:])
	if err != nil {
		return feedMark{}, err
	}
	key, _, rest, err := decodeEscaped(rest)
	if err != nil || len(rest) != 0 {
		return feedMark{}, errCorruptKey
	}
	m.account, m.key = account, key
	return m, nil
}

// mark is f's mark as it stands (the caller holds markMu).
func (f *feedState) mark() feedMark {
	f.mu.Lock()
	removed := f.removed
	f.mu.Unlock()
	return feedMark{removed: removed, retention: f.retention, account: f.account, key: f.key}
}

// change is a record being written: everything but its number and PartitionKey.
type change struct {
	op      storage.ChangeOp
	rk      string
	props   []entity.Property
	version int64
	at      int64
	expiry  int64
	// lean: the record leaves its state to its row, which the same batch writes with
	// the record's number (valueTagRef).
	lean bool
}

// leanRecord marks, in a record's op byte, a record whose state is its row's.
//
// Lean records. A write's record carries the entity's whole state, and so did the row
// it wrote: every byte of a feed table's write went through the WAL, the memtable and
// the flush twice. So the last write of a row in an Apply that its feed records is
// written lean (no properties) and its row with a reference to it (valueTagRef: the
// record's number and op). Whenever such a row is written again or removed — by an
// Apply, the feed on or off, by the expiry purge, or by the purge of its deleted table
// — the same batch writes the record in full from the row's stored state first (a
// fill), unless retention has already removed it. So in any snapshot a lean record's row
// holds exactly its state (the row's version and reference say so), and a read of the
// feed takes the properties from the row, in the same snapshot. A write costs its bytes
// once; a change written over costs them again, as every change did before; a feed read
// costs a point read per lean record.
const leanRecord = 0x80

// appendChange encodes a record:
//
//	op | version (8 BE) | at (8 BE) | expiry (8 BE) | esc(PK) | esc(RK) | props
//
// with the properties in entity.AppendProps form, as rows are stored; a lean one has
// leanRecord in its op byte and no properties.
func appendChange(dst []byte, c *change, pk string) []byte {
	op := byte(c.op)
	if c.lean {
		op |= leanRecord
	}
	dst = append(dst, op)
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.version))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.at))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.expiry))
	dst = appendEscaped(dst, pk)
	dst = appendEscaped(dst, c.rk)
	if c.lean {
		return dst
	}
	return entity.AppendProps(dst, c.props)
}

// appendFilled encodes in full the lean record whose state a row stores: the row's
// value v (valueTagRef) and its keys, the properties copied as stored.
func appendFilled(dst, v []byte, pk, rk string) ([]byte, error) {
	version, expiry, enc, err := parseValue(v)
	if err != nil {
		return dst, err
	}
	_, op := valueRef(v)
	dst = append(dst, op&^leanRecord)
	dst = binary.BigEndian.AppendUint64(dst, uint64(version))
	dst = binary.BigEndian.AppendUint64(dst, uint64(version)) // a write's At is its version
	dst = binary.BigEndian.AppendUint64(dst, uint64(expiry))
	dst = appendEscaped(dst, pk)
	dst = appendEscaped(dst, rk)
	return append(dst, enc...), nil
}

// decodeChange decodes a record's value; its properties are decoded only if the
// record passes keep. A lean record (lean true) comes without them: they are its row's.
func decodeChange(seq uint64, v []byte, keep func(pk string) bool) (c storage.Change, ok, lean bool, err error) {
	if len(v) < 25 {
		return storage.Change{}, false, false, fmt.Errorf("change record: %w", entity.ErrCorrupt)
	}
	c = storage.Change{
		Seq:     seq,
		Op:      storage.ChangeOp(v[0] &^ leanRecord),
		Version: int64(binary.BigEndian.Uint64(v[1:9])),
		At:      int64(binary.BigEndian.Uint64(v[9:17])),
		Expiry:  int64(binary.BigEndian.Uint64(v[17:25])),
	}
	pk, _, rest, err := decodeEscaped(v[25:])
	if err != nil {
		return storage.Change{}, false, false, fmt.Errorf("change record: %w", err)
	}
	rk, _, rest, err := decodeEscaped(rest)
	if err != nil {
		return storage.Change{}, false, false, fmt.Errorf("change record: %w", err)
	}
	c.PartitionKey, c.RowKey = pk, rk
	if c.Op < storage.ChangeExpire && !keep(pk) {
		return c, false, false, nil
	}
	if v[0]&leanRecord != 0 {
		return c, true, true, nil
	}
	if props, err := entity.DecodeProps(rest); err != nil {
		return storage.Change{}, false, false, fmt.Errorf("change record: %w", err)
	} else if len(props) > 0 {
		c.Props = props
	}
	return c, true, false, nil
}

// leanProps reads the properties of lean record c of feed id from its row, through rows
// (an iterator over the table's rows in the snapshot the record was read in).
func leanProps(rows *pebbledb.Iterator, id uint64, c *storage.Change) error {
	key := dataKey(id, c.PartitionKey, c.RowKey)
	if !rows.SeekPrefixGE(key) || !bytes.Equal(rows.Key(), key) {
		if err := rows.Error(); err != nil {
			return err
		}
		return fmt.Errorf("change record %d: its row is gone: %w", c.Seq, entity.ErrCorrupt)
	}
	v, err := rows.ValueAndErr()
	if err != nil {
		return err
	}
	version, _, enc, err := parseValue(v)
	if err != nil {
		return err
	}
	if seq, _ := valueRef(v); seq != c.Seq || version != c.Version {
		return fmt.Errorf("change record %d: its row holds another state: %w", c.Seq, entity.ErrCorrupt)
	}
	props, err := entity.DecodeProps(enc)
	if err != nil {
		return fmt.Errorf("change record %d: %w", c.Seq, err)
	}
	if len(props) > 0 {
		c.Props = props
	}
	return nil
}

// putChanges numbers cs from the table's feed and puts them into b, keyed by number;
// it returns the first number, for feedState.finish once b is synced or has failed.
func putChanges(b *pebbledb.Batch, f *feedState, pk string, cs []change, buf []byte) (uint64, []byte) {
	first := f.take(len(cs))
	var key [17]byte
	for i := range cs {
		buf = appendChange(buf[:0], &cs[i], pk)
		_ = b.Set(appendFeedKey(key[:0], f.id, first+uint64(i)), buf, nil)
	}
	return first, buf
}

// newFeed starts the feed of table t (none so far): its mark goes into b, and the
// store's format mark is raised so that a build without feeds refuses the store rather
// than write into a feed table without recording.
func (e *Engine) newFeed(b *pebbledb.Batch, t *table, account, key string, retention int32) *feedState {
	m := feedMark{retention: retention, account: account, key: key}
	_ = b.Set(feedKey(t.id, 0), m.value(), nil)
	if e.format.Load() < formatLean {
		// Raised in memory by the caller's Open-time mark only: a feed's first batch is
		// rare, and writing the mark again is harmless.
		_ = b.Set(metaFormat, binary.BigEndian.AppendUint64(nil, formatLean), nil)
	}
	return &feedState{id: t.id, account: account, key: key, t: t, retention: retention, next: 2, horizon: 1}
}

// addFeed makes f known to the engine and its table once its batch has committed.
func (e *Engine) addFeed(f *feedState) {
	e.feedsMu.Lock()
	e.feeds[f.id] = f
	e.feedsMu.Unlock()
	if f.t != nil {
		f.t.feed = f
	}
}

// loadFeeds finds every feed by its mark and starts its counter past its last record
// and its retention mark: one seek per feed, not a read of the records.
func (e *Engine) loadFeeds(settings map[uint64]storage.TableSettings) error {
	it, err := e.db.NewIter(&pebbledb.IterOptions{
		LowerBound: []byte{kindFeed},
		UpperBound: []byte{kindFeed + 1},
	})
	if err != nil {
		return fmt.Errorf("read change feeds: %w", err)
	}
	defer it.Close()
	for valid := it.First(); valid; {
		id, seq, err := decodeFeedKey(it.Key())
		if err != nil || seq != 0 {
			return fmt.Errorf("read change feeds: feed without a mark: %w", errCorruptKey)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("read change feeds: %w", err)
		}
		m, err := decodeMark(v)
		if err != nil {
			return fmt.Errorf("read change feeds: %w", err)
		}
		last := uint64(0)
		if it.SeekLT(feedPrefix(id + 1)) {
			if _, last, err = decodeFeedKey(it.Key()); err != nil {
				return fmt.Errorf("read change feeds: %w", err)
			}
		}
		f := &feedState{id: id, account: m.account, key: m.key, removed: m.removed, retention: m.retention}
		f.next = max(last, m.removed, 1) + 1
		f.horizon = f.next - 1
		if t := e.tables[tableRef{m.account, m.key}]; t != nil && t.id == id {
			f.t = t
			f.on = settings[id].ChangeFeedOn()
		}
		e.addFeed(f)
		valid = it.SeekGE(feedPrefix(id + 1))
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("read change feeds: %w", err)
	}
	return nil
}

// ReadChanges reads a page of a table's feed up to its horizon (storage.ChangeFeed). The
// retention mark and the records are read through one iterator, so from one snapshot: a
// read racing a removal sees either the records or ErrChangesExpired.
func (e *Engine) ReadChanges(ctx context.Context, account, table string, req storage.ChangesRequest) (storage.ChangesPage, error) {
	if req.Limit <= 0 {
		return storage.ChangesPage{}, fmt.Errorf("read changes: limit %d is not positive", req.Limit)
	}
	if err := e.enter(); err != nil {
		return storage.ChangesPage{}, err
	}
	defer e.exit()
	f, err := e.feedOf(account, table, req.FeedID)
	if err != nil {
		return storage.ChangesPage{}, err
	}
	horizon := f.horizonNow()
	page := storage.ChangesPage{FeedID: f.id, Next: horizon}
	if req.After == storage.AfterNow {
		return page, nil
	}
	page.Next = max(horizon, req.After)
	if req.After >= horizon {
		return page, nil
	}
	it, err := e.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: feedPrefix(f.id),
		UpperBound: feedKey(f.id, horizon+1),
	})
	if err != nil {
		return storage.ChangesPage{}, fmt.Errorf("read changes: %w", err)
	}
	defer it.Close()
	if !it.First() {
		if err := it.Error(); err != nil {
			return storage.ChangesPage{}, fmt.Errorf("read changes: %w", err)
		}
		return storage.ChangesPage{}, storage.ErrChangesExpired // removed whole since feedOf
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return storage.ChangesPage{}, fmt.Errorf("read changes: %w", err)
	}
	m, err := decodeMark(v)
	if err != nil {
		return storage.ChangesPage{}, fmt.Errorf("read changes: %w", err)
	}
	after := req.After
	switch {
	case after == 0:
		after = m.removed // the beginning: the oldest record retained
	case after < m.removed:
		return storage.ChangesPage{}, storage.ErrChangesExpired
	}
	keep := func(pk string) bool {
		return (req.StartPK == nil || pk >= *req.StartPK) && (req.EndPK == nil || pk < *req.EndPK)
	}
	var rows *pebbledb.Iterator // the table's rows in it's snapshot, for lean records
	defer func() {
		if rows != nil {
			rows.Close()
		}
	}()
	examined := 0
	for valid := it.SeekGE(feedKey(f.id, after+1)); valid; valid = it.Next() {
		_, seq, err := decodeFeedKey(it.Key())
		if err != nil {
			return storage.ChangesPage{}, fmt.Errorf("read changes: %w", err)
		}
		if len(page.Changes) == req.Limit || examined == maxFeedExamined {
			page.Next = seq - 1 // the page covers every record before this one
			break
		}
		examined++
		v, err := it.ValueAndErr()
		if err != nil {
			return storage.ChangesPage{}, fmt.Errorf("read changes: %w", err)
		}
		c, ok, lean, err := decodeChange(seq, v, keep)
		if err != nil {
			return storage.ChangesPage{}, fmt.Errorf("read changes: %w", err)
		}
		if lean {
			if rows == nil {
				if rows, err = it.Clone(pebbledb.CloneOptions{IterOptions: &pebbledb.IterOptions{
					LowerBound: tablePrefix(f.id),
					UpperBound: tablePrefix(f.id + 1),
				}}); err != nil {
					return storage.ChangesPage{}, fmt.Errorf("read changes: %w", err)
				}
			}
			if err := leanProps(rows, f.id, &c); err != nil {
				return storage.ChangesPage{}, fmt.Errorf("read changes: %w", err)
			}
		}
		if ok {
			page.Changes = append(page.Changes, c)
			page.Ended = page.Ended || c.Op == storage.ChangeTableDeleted
		}
	}
	if err := it.Error(); err != nil {
		return storage.ChangesPage{}, fmt.Errorf("read changes: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return storage.ChangesPage{}, err
	}
	return page, nil
}

// WaitChanges waits for the feed's horizon to pass after (storage.ChangeFeed): woken by
// the commit that moves it, with no polling.
func (e *Engine) WaitChanges(ctx context.Context, account, table string, feedID, after uint64) error {
	if err := e.enter(); err != nil {
		return err
	}
	f, err := e.feedOf(account, table, feedID)
	e.exit() // a waiter must not hold up Close
	if err != nil {
		return err
	}
	return f.waitPast(ctx, after)
}

// feedOf finds the feed a read names: the table's, or (with a FeedID) the feed of that
// id if it belongs to the table's account and name, the table deleted or not.
func (e *Engine) feedOf(account, table string, id uint64) (*feedState, error) {
	if id != 0 {
		e.feedsMu.Lock()
		f := e.feeds[id]
		e.feedsMu.Unlock()
		if f == nil || f.account != account || f.key != storage.TableKey(table) {
			return nil, storage.ErrChangesExpired
		}
		return f, nil
	}
	t, err := e.lookup(account, table)
	if err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.dropped {
		return nil, storage.ErrTableNotFound
	}
	if t.feed == nil || !t.feed.on {
		return nil, storage.ErrFeedOff
	}
	return t.feed, nil
}

// recordingFeeds holds shared, in ascending id order, the tables of the feeds that
// rows (expired rows of several tables, listed by the purge) belong to and that record
// changes, and returns them by id with a function that lets them go. Held before the
// row locks, as Apply holds its table, so that the feed cannot be turned off (or its
// table deleted) between the purge's decision to record and its commit.
func (e *Engine) recordingFeeds(ids []uint64) (map[uint64]*feedState, func()) {
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var held []*table
	out := map[uint64]*feedState{}
	e.feedsMu.Lock()
	fs := make([]*feedState, 0, len(ids))
	for _, id := range ids {
		if f := e.feeds[id]; f != nil && f.t != nil {
			fs = append(fs, f)
		}
	}
	e.feedsMu.Unlock()
	for _, f := range fs {
		f.t.mu.RLock()
		held = append(held, f.t)
		if !f.t.dropped && f.on {
			out[f.id] = f
		}
	}
	return out, func() {
		for _, t := range held {
			t.mu.RUnlock()
		}
	}
}

// feedsByID returns the registered feeds, on or off, of the tables ids.
func (e *Engine) feedsByID(ids []uint64) map[uint64]*feedState {
	var out map[uint64]*feedState
	e.feedsMu.Lock()
	defer e.feedsMu.Unlock()
	for _, id := range ids {
		if f := e.feeds[id]; f != nil {
			if out == nil {
				out = map[uint64]*feedState{}
			}
			out[id] = f
		}
	}
	return out
}

// feedIDs is the table ids of the expiry index keys entries.
func feedIDs(entries [][]byte) []uint64 {
	var ids []uint64
	for _, k := range entries {
		if len(k) >= 9 {
			id := binary.BigEndian.Uint64(k[1:9])
			if len(ids) == 0 || ids[len(ids)-1] != id {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

var _ storage.ChangeFeed = (*Engine)(nil)

// TrimChanges removes the records older than each feed's retention (storage.ChangeFeed):
// per feed, it walks from the first record retained to the first one young enough — a
// cost of the records it removes plus one — and removes them with one range deletion, in
// one synced batch with the new retention mark, so a read (which reads the mark and the
// records from one snapshot) sees either the records or ErrChangesExpired. A deleted
// table's feed whose table-deleted record goes is removed whole, mark included.
func (e *Engine) TrimChanges(ctx context.Context) (int, error) {
	e.trimMu.Lock()
	defer e.trimMu.Unlock()
	e.feedsMu.Lock()
	fs := make([]*feedState, 0, len(e.feeds))
	for _, f := range e.feeds {
		fs = append(fs, f)
	}
	e.feedsMu.Unlock()
	total := 0
	for _, f := range fs {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		if err := e.enter(); err != nil { // per feed, so Close waits for one, not a pass
			return total, err
		}
		n, err := e.trimFeed(ctx, f)
		e.exit()
		total += n
		if err != nil {
			return total, fmt.Errorf("trim change feed %d: %w", f.id, err)
		}
	}
	return total, nil
}

func (e *Engine) trimFeed(ctx context.Context, f *feedState) (int, error) {
	f.markMu.Lock()
	defer f.markMu.Unlock()
	cutoff := e.clock.Now() - int64(f.retention)*10_000_000
	horizon := f.horizonNow()
	m := f.mark()
	if m.removed >= horizon {
		return 0, nil
	}
	it, err := e.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: feedKey(f.id, m.removed+1),
		UpperBound: feedKey(f.id, horizon+1),
	})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	n, last, ended := 0, m.removed, false
	for valid := it.First(); valid; valid = it.Next() {
		_, seq, err := decodeFeedKey(it.Key())
		if err != nil {
			return 0, err
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return 0, err
		}
		if len(v) < 25 {
			return 0, fmt.Errorf("change record: %w", entity.ErrCorrupt)
		}
		if int64(binary.BigEndian.Uint64(v[9:17])) >= cutoff {
			break
		}
		n, last = n+1, seq
		ended = storage.ChangeOp(v[0]&^leanRecord) == storage.ChangeTableDeleted
	}
	if err := it.Error(); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	b := e.db.NewBatch()
	defer b.Close()
	if ended {
		// The feed's last record: nothing is left to read or to number.
		_ = b.DeleteRange(feedPrefix(f.id), feedPrefix(f.id+1), nil)
	} else {
		_ = b.DeleteRange(feedKey(f.id, 1), feedKey(f.id, last+1), nil)
		m.removed = last
		_ = b.Set(feedKey(f.id, 0), m.value(), nil)
	}
	if err := e.commit(b); err != nil {
		return 0, err
	}
	f.mu.Lock()
	f.removed = last
	f.mu.Unlock()
	if ended {
		e.feedsMu.Lock()
		delete(e.feeds, f.id)
		e.feedsMu.Unlock()
	}
	return n, nil
}
