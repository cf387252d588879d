package pebble

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Online index builds (docs/indexes-design.md §5). An index declared on a table that may
// hold rows starts building: from its declaration on every write maintains it, and the
// builder adds the entries of the rows written before, a chunk of rows at a time in key
// order. Each chunk's rows are read again under their locks (and, for a unique index,
// their values' locks), so the entries written are those of the rows as they are — a
// row written meanwhile already has its entries, and writing them again changes nothing
// — and the chunk's entries, the position reached and the index's Progress are
// committed in one synced batch, with the build position kept under
//
//	0x0A table id (8 bytes BE) index id (4 bytes BE) → esc(PK) esc(RK) of the last row passed
//
// so a restart resumes after the last chunk committed. When the scan ends the index
// becomes ready; a unique index that meets one value in two live rows becomes failed,
// naming both, and is no longer enforced (it is never used; the user drops it).
const kindBuild byte = 0x0A

// testHookBuildBeforeCommit, when set by a test, runs in a build chunk with its rows
// read and its locks held, before its commit.
var testHookBuildBeforeCommit func()

// buildChunk is how many rows a build passes per synced batch: few row locks held at a
// time (as the expiry purge's batches), and a restart redoes at most that many.
const buildChunk = 256

// buildKey is the key of the build position of index id of table tableID.
func buildKey(tableID uint64, id uint32) []byte {
	k := binary.BigEndian.AppendUint64([]byte{kindBuild}, tableID)
	return binary.BigEndian.AppendUint32(k, id)
}

// buildTablePrefix is the start of table id's build positions.
func buildTablePrefix(id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kindBuild}, id)
}

// BuildIndexes advances every building index by a chunk of buildChunk rows
// (storage.IndexBuilder) and returns how many rows it passed: 0 when no index is left to
// build. Calls are serialized; the background builder (buildLoop) calls it too.
func (e *Engine) BuildIndexes(ctx context.Context) (int, error) {
	e.buildMu.Lock()
	defer e.buildMu.Unlock()
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.exit()
	e.catMu.RLock()
	var tables []*table
	for _, t := range e.byID {
		if slices.ContainsFunc(t.settings.Load().Indexes, func(d storage.IndexDef) bool { return d.State == storage.IndexBuilding }) {
			tables = append(tables, t)
		}
	}
	e.catMu.RUnlock()
	slices.SortFunc(tables, func(a, b *table) int { return cmp.Compare(a.id, b.id) })
	total := 0
	for _, t := range tables {
		for _, d := range t.settings.Load().Indexes {
			if d.State != storage.IndexBuilding {
				continue
			}
			if err := ctx.Err(); err != nil {
				return total, err
			}
			n, err := e.buildIndexChunk(ctx, t, d.ID)
			total += n
			if err != nil {
				return total, fmt.Errorf("build index %s: %w", d.Name, err)
			}
		}
	}
	return total, nil
}

// builtRow is a row a build chunk passes: its keys and its data key.
type builtRow struct {
	pk  string
	rk  string
	key []byte
}

// buildIndexChunk builds index id of t over the next chunk of rows after its position,
// and returns how many rows it passed.
func (e *Engine) buildIndexChunk(ctx context.Context, t *table, id uint32) (int, error) {
	from := tablePrefix(t.id)
	pos, err := e.getBytes(buildKey(t.id, id), "read build position")
	if err != nil {
		return 0, err
	}
	if pos != nil {
		from = append(append(from, pos...), 0) // just past the last row passed
	}
	// The chunk's rows, and the stripes of the values they hold, read before the locks.
	def := indexByID(t.settings.Load().Indexes, id)
	if def == nil {
		return 0, nil
	}
	chunk, extra, end, err := e.readChunk(ctx, t.id, from, def)
	if err != nil {
		return 0, err
	}

	t.mu.RLock() // as Apply: no settings change or table deletion until committed
	defer t.mu.RUnlock()
	settings := *t.settings.Load()
	def = indexByID(settings.Indexes, id)
	if t.dropped || def == nil || def.State != storage.IndexBuilding {
		return 0, nil // dropped, or built by another call meanwhile
	}
	rows := make([]row, len(chunk))
	for i, c := range chunk {
		rows[i] = row{key: c.key, rk: c.rk, stripe: e.stripeOf(c.key)}
	}
	for {
		locks := e.lockRows(rows, extra)
		b, failure, need, err := e.buildBatch(t.id, def, chunk, locks.stripes())
		if err != nil || len(need) > 0 {
			locks.unlock()
			if b != nil {
				b.Close()
			}
			if err != nil {
				return 0, err
			}
			extra = append(extra, need...) // rewritten since read: start over holding them
			continue
		}
		next := settings
		next.Indexes = slices.Clone(settings.Indexes)
		d := indexByID(next.Indexes, id)
		d.Progress += int64(len(chunk))
		switch {
		case failure != "":
			d.State, d.Failure = storage.IndexFailed, failure
			_ = b.Delete(buildKey(t.id, id), nil)
		case end:
			d.State = storage.IndexReady
			_ = b.Delete(buildKey(t.id, id), nil)
		default:
			last := chunk[len(chunk)-1].key
			_ = b.Set(buildKey(t.id, id), last[9:], nil)
		}
		_ = b.Set(settingsKey(t.id), storage.MarshalSettings(next), nil)
		if testHookBuildBeforeCommit != nil {
			testHookBuildBeforeCommit()
		}
		err = e.commit(b)
		b.Close()
		locks.unlock()
		if err != nil {
			return 0, err
		}
		t.settings.Store(&next)
		e.buildRows.Add(uint64(len(chunk))) // as Progress counts them
		return len(chunk), nil
	}
}

// indexByID returns the declaration of index id in defs (nil: none).
func indexByID(defs []storage.IndexDef, id uint32) *storage.IndexDef {
	for i := range defs {
		if defs[i].ID == id {
			return &defs[i]
		}
	}
	return nil
}

// readChunk reads up to buildChunk row keys of table id from from on, and for a unique
// def the lock stripes of the values they hold; end reports that no row follows them.
func (e *Engine) readChunk(ctx context.Context, id uint64, from []byte, def *storage.IndexDef) ([]builtRow, []uint32, bool, error) {
	it, err := e.db.NewIterWithContext(ctx, &pebbledb.IterOptions{LowerBound: from, UpperBound: tablePrefix(id + 1)})
	if err != nil {
		return nil, nil, false, err
	}
	defer it.Close()
	var chunk []builtRow
	extra := make([]uint32, 0, 8) // never nil: lockRows then reports what it holds
	for ok := it.First(); ok; ok = it.Next() {
		if len(chunk) == buildChunk {
			return chunk, extra, false, nil
		}
		_, pk, rk, err := decodeDataKey(it.Key())
		if err != nil {
			return nil, nil, false, err
		}
		chunk = append(chunk, builtRow{pk: pk, rk: rk, key: bytes.Clone(it.Key())})
		if def.Unique {
			v, err := it.ValueAndErr()
			if err != nil {
				return nil, nil, false, err
			}
			for _, u := range uniqueOf(id, def, v) {
				extra = append(extra, e.stripeOf(u.key))
			}
		}
	}
	return chunk, extra, true, it.Error()
}

// uniqueOf is the unique entry key of stored value v in unique index def (none for a
// value that cannot be read: the build reads it again under the locks and fails there).
func uniqueOf(id uint64, def *storage.IndexDef, v []byte) []uniqueKey {
	_, _, enc, err := parseValue(v)
	if err != nil {
		return nil
	}
	props, err := entity.DecodeProps(enc)
	if err != nil {
		return nil
	}
	return appendUniqueKeys(nil, id, []storage.IndexDef{*def}, props)
}

// buildBatch reads the chunk's rows under their locks (held, with the values' stripes
// held) and returns the batch of their entries in def; for a unique def, the failure
// when two live rows hold one value, or the stripes it needs and does not hold.
func (e *Engine) buildBatch(id uint64, def *storage.IndexDef, chunk []builtRow, held []uint32) (*pebbledb.Batch, string, []uint32, error) {
	it, err := e.db.NewIter(&l6Filters) // under the locks: the rows' latest state
	if err != nil {
		return nil, "", nil, err
	}
	defer it.Close()
	now := e.clock.Now()
	uc := &uniqueCheck{e: e, id: id, now: now, held: held, it: it, stored: map[string]holding{}}
	defs := []storage.IndexDef{*def}
	b := e.db.NewBatch()
	for _, c := range chunk {
		if !it.SeekPrefixGE(c.key) || !bytes.Equal(it.Key(), c.key) {
			if err := it.Error(); err != nil {
				return b, "", nil, err
			}
			continue // deleted since read: nothing to build
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return b, "", nil, err
		}
		_, exp, enc, err := parseValue(v)
		if err != nil {
			return b, "", nil, err
		}
		props, err := entity.DecodeProps(enc)
		if err != nil {
			return b, "", nil, err
		}
		for _, k := range appendIndexEntries(nil, id, defs, c.pk, c.rk, props) {
			_ = b.Set(k, nil, nil)
		}
		if !def.Unique || storage.Expired(exp, now) {
			continue // an expired row holds no value
		}
		for _, u := range appendUniqueKeys(nil, id, defs, props) {
			if !uc.covers(u.key) {
				continue
			}
			h, err := uc.lookup(u.key)
			if err != nil {
				return b, "", nil, err
			}
			if h.ok && h.pk == c.pk && h.rk == c.rk {
				continue
			}
			if h.ok && h.live {
				return b, fmt.Sprintf("the entities (%q, %q) and (%q, %q) hold one value of the unique index %s",
					h.pk, h.rk, c.pk, c.rk, def.Name), nil, nil
			}
			_ = b.Set(u.key, appendEscaped(appendEscaped(nil, c.pk), c.rk), nil)
			uc.stored[string(u.key)] = holding{pk: c.pk, rk: c.rk, live: true, ok: true}
		}
	}
	return b, "", uc.need, nil
}

// wakeBuilder asks the background builder to look for indexes to build.
func (e *Engine) wakeBuilder() {
	select {
	case e.buildWake <- struct{}{}:
	default:
	}
}

// buildLoop is the background builder: woken when an index is declared on a table (and
// once at Open, to resume builds a restart interrupted), and on the expiry pass's
// schedule, it builds chunk after chunk until nothing is left, resting expiryPace times
// as long as each chunk took, as the expiry purge does.
func (e *Engine) buildLoop() {
	defer close(e.buildDone)
	ctx, tick, stop := e.backgroundSchedule()
	defer stop()
	for {
		select {
		case <-e.purgeStop:
			return
		case <-e.buildWake:
		case <-tick:
		}
		for {
			start := time.Now()
			n, err := e.BuildIndexes(ctx)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, storage.ErrNoSpace) && !errors.Is(err, ErrClosed) {
					e.logger.Errorf("cerulean: build indexes: %v", err)
				}
				break
			}
			if n == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(expiryPace) * time.Since(start)):
			}
		}
	}
}

// putDroppedIndexes puts into b, which replaces a table's settings stored by next, the
// removal of everything of the indexes stored declares and next does not (dropped, or
// redefined under a new id): their entries, unique entries and build position, each a
// range deletion, so a drop costs the same whatever the index holds and compactions
// reclaim the space. The caller holds the table exclusively, so no write of the old
// settings is in flight and none after it writes a dropped index's entries (nor does a
// build: buildIndexChunk holds the table and checks the index is still declared). It
// reports whether next has an index to build.
func putDroppedIndexes(b *pebbledb.Batch, tableID uint64, stored, next storage.TableSettings) bool {
	for _, d := range stored.Indexes {
		if indexByID(next.Indexes, d.ID) != nil {
			continue
		}
		_ = b.DeleteRange(appendIndexPrefix(nil, tableID, d.ID), appendIndexPrefix(nil, tableID, d.ID+1), nil)
		_ = b.DeleteRange(appendUniquePrefix(nil, tableID, d.ID), appendUniquePrefix(nil, tableID, d.ID+1), nil)
		_ = b.Delete(buildKey(tableID, d.ID), nil)
	}
	return slices.ContainsFunc(next.Indexes, func(d storage.IndexDef) bool { return d.State == storage.IndexBuilding })
}
