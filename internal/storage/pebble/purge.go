package pebble

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	pebbledb "github.com/cockroachdb/pebble/v2"
)

// Purge range-deletes the rows of every deleted table now, instead of waiting for the
// background purger, and returns when done. It is a maintenance hook.
func (e *Engine) Purge(ctx context.Context) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.exit()
	return e.purgePending(ctx)
}

func (e *Engine) wakePurger() {
	select {
	case e.purgeWake <- struct{}{}:
	default:
	}
}

// backgroundSchedule is what a background loop of the engine runs by: a context cancelled
// when the engine closes (purgeStop), and a tick every expiryInterval (none when it is not
// positive). stop releases them.
func (e *Engine) backgroundSchedule() (ctx context.Context, tick <-chan time.Time, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-e.purgeStop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if e.expiryInterval <= 0 {
		return ctx, nil, cancel
	}
	t := time.NewTicker(e.expiryInterval)
	return ctx, t.C, func() { t.Stop(); cancel() }
}

func (e *Engine) purgeLoop() {
	defer close(e.purgeDone)
	ctx, tick, stop := e.backgroundSchedule()
	defer stop()
	for {
		woken := false
		select {
		case <-e.purgeStop:
			return
		case <-e.purgeWake:
			woken = true
		case <-tick:
		}
		if woken {
			if err := e.enter(); err != nil {
				return
			}
			err := e.purgePending(ctx)
			e.exit()
			// On a full disk the purge waits: the guard wakes it when space returns.
			if err != nil && ctx.Err() == nil && !errors.Is(err, storage.ErrNoSpace) {
				e.logger.Errorf("cerulean: purge deleted tables: %v", err)
			}
		}
		// Expired rows go on every tick, and after a wake-up (the disk guard's, when
		// space returns, included). On a full disk the pass stops and the next one
		// resumes where the index says.
		if _, err := e.purgeExpired(ctx); err != nil && ctx.Err() == nil &&
			!errors.Is(err, storage.ErrNoSpace) && !errors.Is(err, ErrClosed) {
			e.logger.Errorf("cerulean: purge expired rows: %v", err)
		}
		// And change records past their feeds' retention, on the same schedule.
		if _, err := e.TrimChanges(ctx); err != nil && ctx.Err() == nil &&
			!errors.Is(err, storage.ErrNoSpace) && !errors.Is(err, ErrClosed) {
			e.logger.Errorf("cerulean: trim change feeds: %v", err)
		}
	}
}

// PurgeExpired deletes every row expired by now, instead of waiting for the background
// pass, and returns how many it deleted. It is a maintenance hook.
//
// A pass walks the expiry index of each table that has one from its start up to now
// (the keys are in expiry order), so it reads the expired rows' index keys (no row) and
// one key more per table: its cost is proportional to what expired, not to the tables.
// It works in batches of expiryBatch rows, paced (expiryPace), each under the rows'
// locks and committed in one batch (not synced), deleting a row with its index key unless a write has moved
// it since the key was listed (deleteExpired). A crash between batches leaves the rest
// for the next pass.
func (e *Engine) PurgeExpired(ctx context.Context) (int, error) {
	return e.purgeExpired(ctx)
}

func (e *Engine) purgeExpired(ctx context.Context) (int, error) {
	e.expiryMu.Lock()
	defer e.expiryMu.Unlock()
	now := e.clock.Now()
	from := []byte{kindExpiry}
	total := 0
	for from != nil {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		// Entered per batch, so Close waits for one batch, not a whole pass.
		if err := e.enter(); err != nil {
			return total, err
		}
		start := time.Now()
		n, next, err := e.expireBatch(ctx, from, now)
		e.exit()
		total += n
		if err != nil {
			return total, fmt.Errorf("purge expired rows: %w", err)
		}
		from = next
		if from != nil {
			// Paced: between batches the pass rests expiryPace times as long as the
			// batch took, so a large expiry spreads out instead of taking the CPU and
			// the disk from the foreground in one burst.
			select {
			case <-ctx.Done():
				return total, ctx.Err()
			case <-time.After(time.Duration(expiryPace) * time.Since(start)):
			}
		}
	}
	return total, nil
}

// expireBatch deletes up to expiryBatch rows expired at now whose index keys are at or
// after from, and returns how many it deleted and where the next batch starts (nil when
// the index holds no more expired keys).
func (e *Engine) expireBatch(ctx context.Context, from []byte, now int64) (int, []byte, error) {
	entries, rows, next, err := e.expiredEntries(ctx, from, now)
	if err != nil || len(entries) == 0 {
		return 0, next, err
	}
	n, err := e.deleteExpired(entries, rows)
	if err != nil {
		return 0, nil, err
	}
	return n, next, nil
}

// deleteExpired locks the rows of entries and, in one batch, deletes each entry's index
// key and row if the index key is still there. It reads no row: under a row's lock its
// index key exists exactly when the row is stored with that expiry (Apply changes both
// in one batch under the lock, and the purges remove both together), so a row written
// or deleted since the index key was listed has lost that key and is left alone.
//
// The batch is not synced: it costs the foreground no WAL sync of its own, and losing it
// in a crash loses nothing (the rows come back expired, with their index keys, and the
// next pass deletes them again). A later synced write — an Apply that writes one of the
// rows again, say — syncs it too, since the WAL is written in order.
//
// Rows of a table whose change feed is on get an expire record each in the same batch,
// which is then synced: a record a reader has seen must survive a crash. The tables of
// such feeds are held (recordingFeeds) before the row locks, as Apply holds its table.
//
// Rows of a table with a feed (on or off, the table deleted or not) are read: a row that
// holds the state of a lean record has that record filled in the same batch
// (putFills).
func (e *Engine) deleteExpired(entries [][]byte, rows []row) (int, error) {
	ids := feedIDs(entries)
	feeds, release := e.recordingFeeds(ids)
	defer release()
	withFeed := e.feedsByID(ids)
	extra, err := e.expiredValueStripes(entries, rows)
	if err != nil {
		return 0, err
	}
	locks := e.lockRows(rows, extra)
	defer locks.unlock()
	// Created under the locks: its snapshot holds the index keys' latest state. The
	// index keys were just listed, so their blocks are in the cache.
	it, err := e.db.NewIter(nil)
	if err != nil {
		return 0, err
	}
	defer it.Close()
	b := e.db.NewBatch()
	defer b.Close()
	n := 0
	var expired map[*feedState][][]byte // the index keys of recorded rows, by feed
	if len(feeds) > 0 {
		expired = map[*feedState][][]byte{}
	}
	var fills []leanFill
	for i, k := range entries {
		e.expiryVisited.Add(1)
		if !it.SeekPrefixGE(k) || !bytes.Equal(it.Key(), k) {
			if err := it.Error(); err != nil {
				return 0, err
			}
			continue
		}
		id := binary.BigEndian.Uint64(k[1:9])
		if defs := e.indexesOf(id); len(defs) > 0 {
			ok, err := e.deleteRowEntries(b, it, id, defs, rows[i].key, k, locks.stripes())
			if err != nil {
				return 0, err
			}
			if !ok {
				continue // rewritten since listed, with a value whose lock it lacks: next pass
			}
		}
		if f := withFeed[id]; f != nil {
			fill, err := readLeanFill(it, f, rows[i].key, k)
			if err != nil {
				return 0, err
			}
			if fill.seq != 0 {
				fills = append(fills, fill)
			}
		}
		_ = b.Delete(rows[i].key, nil)
		_ = b.Delete(k, nil)
		n++
		if len(feeds) > 0 {
			if f := feeds[id]; f != nil {
				expired[f] = append(expired[f], k)
			}
		}
	}
	if n == 0 {
		return 0, nil
	}
	if len(fills) > 0 {
		unlock := e.putFills(b, fills)
		defer unlock()
	}
	sync := pebbledb.NoSync
	if len(expired) > 0 {
		sync = pebbledb.Sync
		now := e.clock.Now()
		var buf []byte
		var key [17]byte
		for f, ks := range expired {
			first := f.take(len(ks))
			defer f.finish(first)
			for j, k := range ks {
				_, _, pk, rk, err := decodeExpiryKey(k)
				if err != nil {
					return 0, err
				}
				buf = appendChange(buf[:0], &change{op: storage.ChangeExpire, rk: rk, at: now}, pk)
				_ = b.Set(appendFeedKey(key[:0], f.id, first+uint64(j)), buf, nil)
			}
		}
	}
	e.rows.begin(rows)
	defer e.rows.end(rows)
	if err := e.commitWith(b, sync); err != nil {
		return 0, err
	}
	return n, nil
}

// expiredEntries reads up to expiryBatch index keys expired at now from from on, with
// the rows they name (to lock), skipping from each table's first unexpired key to the
// next table.
func (e *Engine) expiredEntries(ctx context.Context, from []byte, now int64) ([][]byte, []row, []byte, error) {
	it, err := e.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: from,
		UpperBound: []byte{kindExpiry + 1},
	})
	if err != nil {
		return nil, nil, nil, err
	}
	defer it.Close()
	var entries [][]byte
	var rows []row
	for valid := it.First(); valid; {
		k := it.Key()
		e.expiryVisited.Add(1)
		id, expiry, pk, rk, err := decodeExpiryKey(k)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("read expiry index: %w", err)
		}
		if expiry > now {
			// Nothing more of this table has expired: on to the next table's keys.
			valid = it.SeekGE(expiryPrefix(id + 1))
			continue
		}
		if len(entries) == expiryBatch {
			return entries, rows, bytes.Clone(k), nil
		}
		key := dataKey(id, pk, rk)
		entries = append(entries, bytes.Clone(k))
		rows = append(rows, row{key: key, rk: rk, stripe: uint32(maphash.Bytes(e.seed, key) % lockStripes)})
		valid = it.Next()
	}
	if err := it.Error(); err != nil {
		return nil, nil, nil, fmt.Errorf("read expiry index: %w", err)
	}
	return entries, rows, nil, nil
}

// purgePending purges every table with a purge marker: one synced batch per table
// range-deletes its span and its expiry index span, removes its ACL and settings keys
// and the marker, so a crash in between leaves the marker
// and the purge is redone on the next Open. A range deletion costs the same whatever the
// table's size; compactions reclaim the space later.
func (e *Engine) purgePending(ctx context.Context) error {
	e.purgeMu.Lock()
	defer e.purgeMu.Unlock()
	ids, err := e.pendingPurges(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Lean records of the table's feed get their state before the rows go; the
		// feed's mark is held until they have gone, so that no fill (putFills) races
		// with the trim.
		e.feedsMu.Lock()
		f := e.feeds[id]
		e.feedsMu.Unlock()
		if f != nil {
			f.markMu.Lock()
			if err := e.fillLean(ctx, f); err != nil {
				f.markMu.Unlock()
				return fmt.Errorf("purge table %d: %w", id, err)
			}
		}
		b := e.db.NewBatch()
		_ = b.DeleteRange(tablePrefix(id), tablePrefix(id+1), nil)
		_ = b.DeleteRange(expiryPrefix(id), expiryPrefix(id+1), nil)
		_ = b.DeleteRange(indexTablePrefix(id), indexTablePrefix(id+1), nil)
		_ = b.DeleteRange(uniqueTablePrefix(id), uniqueTablePrefix(id+1), nil)
		_ = b.DeleteRange(buildTablePrefix(id), buildTablePrefix(id+1), nil)
		_ = b.Delete(aclKey(id), nil) // DeleteTable removed it; this covers older stores
		_ = b.Delete(settingsKey(id), nil)
		_ = b.Delete(purgeKey(id), nil)
		err := e.commit(b)
		b.Close()
		if f != nil {
			f.markMu.Unlock()
		}
		if err != nil {
			return fmt.Errorf("purge table %d: %w", id, err)
		}
	}
	return nil
}

// pendingPurges lists the ids of deleted tables whose rows are not purged yet.
func (e *Engine) pendingPurges(ctx context.Context) ([]uint64, error) {
	it, err := e.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: []byte{kindPurge},
		UpperBound: []byte{kindPurge + 1},
	})
	if err != nil {
		return nil, fmt.Errorf("list purges: %w", err)
	}
	defer it.Close()
	var ids []uint64
	for it.First(); it.Valid(); it.Next() {
		if k := it.Key(); len(k) == 9 {
			ids = append(ids, binary.BigEndian.Uint64(k[1:]))
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("list purges: %w", err)
	}
	return ids, nil
}

// leanFill is a lean record to write in full: record seq of feed f, as value.
type leanFill struct {
	f     *feedState
	seq   uint64
	value []byte
}

// readLeanFill reads, through it, the stored row key of feed f's table (whose expiry index
// key is k) and, if it holds the state of a lean record, returns that record in full.
func readLeanFill(it *pebbledb.Iterator, f *feedState, key, k []byte) (leanFill, error) {
	if !it.SeekPrefixGE(key) || !bytes.Equal(it.Key(), key) {
		return leanFill{}, it.Error()
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return leanFill{}, err
	}
	seq, _ := valueRef(v)
	if seq == 0 {
		return leanFill{}, nil
	}
	_, _, pk, rk, err := decodeExpiryKey(k)
	if err != nil {
		return leanFill{}, err
	}
	full, err := appendFilled(nil, v, pk, rk)
	if err != nil {
		return leanFill{}, err
	}
	return leanFill{f: f, seq: seq, value: full}, nil
}

// putFills puts into b the fills of records that retention has not removed, holding
// the marks of their feeds (in id order) so that no trim removes one in between, and
// returns the function that lets the marks go once b is committed. A feed removed whole
// (its table deleted, its last record gone) gets none.
func (e *Engine) putFills(b *pebbledb.Batch, fills []leanFill) func() {
	slices.SortFunc(fills, func(x, y leanFill) int { return cmp.Compare(x.f.id, y.f.id) })
	var held []*feedState
	var key [17]byte
	for i, fl := range fills {
		f := fl.f
		if i == 0 || fills[i-1].f != f {
			f.markMu.Lock()
			held = append(held, f)
		}
		e.feedsMu.Lock()
		registered := e.feeds[f.id] == f
		e.feedsMu.Unlock()
		if registered && fl.seq > f.removedNow() {
			_ = b.Set(appendFeedKey(key[:0], f.id, fl.seq), fl.value, nil)
		}
	}
	return func() {
		for _, f := range held {
			f.markMu.Unlock()
		}
	}
}

// fillLean writes in full every lean record of f that retention has kept, from the rows
// of its deleted table, before the purge removes them; the caller holds f.markMu. Its
// cost is that of the feed's records (one point read per lean one), in synced batches
// of expiryBatch records.
func (e *Engine) fillLean(ctx context.Context, f *feedState) error {
	it, err := e.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: feedKey(f.id, f.removedNow()+1),
		UpperBound: feedPrefix(f.id + 1),
	})
	if err != nil {
		return err
	}
	defer it.Close()
	var rows *pebbledb.Iterator
	defer func() {
		if rows != nil {
			rows.Close()
		}
	}()
	b := e.db.NewBatch()
	defer func() { b.Close() }()
	var buf []byte
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if len(v) == 0 || v[0]&leanRecord == 0 {
			continue
		}
		_, seq, err := decodeFeedKey(it.Key())
		if err != nil {
			return err
		}
		c, _, _, err := decodeChange(seq, v, func(string) bool { return true })
		if err != nil {
			return err
		}
		if rows == nil {
			if rows, err = it.Clone(pebbledb.CloneOptions{IterOptions: &pebbledb.IterOptions{
				LowerBound: tablePrefix(f.id),
				UpperBound: tablePrefix(f.id + 1),
			}}); err != nil {
				return err
			}
		}
		key := dataKey(f.id, c.PartitionKey, c.RowKey)
		if !rows.SeekPrefixGE(key) || !bytes.Equal(rows.Key(), key) {
			if err := rows.Error(); err != nil {
				return err
			}
			return fmt.Errorf("change record %d: its row is gone: %w", seq, entity.ErrCorrupt)
		}
		rv, err := rows.ValueAndErr()
		if err != nil {
			return err
		}
		if ref, _ := valueRef(rv); ref != seq {
			return fmt.Errorf("change record %d: its row holds another state: %w", seq, entity.ErrCorrupt)
		}
		if buf, err = appendFilled(buf[:0], rv, c.PartitionKey, c.RowKey); err != nil {
			return err
		}
		_ = b.Set(it.Key(), buf, nil)
		if b.Count() == expiryBatch {
			if err := e.commit(b); err != nil {
				return err
			}
			b.Close()
			b = e.db.NewBatch()
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	if b.Count() == 0 {
		return nil
	}
	return e.commit(b)
}
