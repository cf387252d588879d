package pebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/index"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Secondary index entries (docs/indexes-design.md §3):
//
//	0x08 table id (8 bytes BE) index id (4 bytes BE) index key esc(PK) esc(RK) → (empty)
//
// one per stored row (expired or not) that has every property of the index, written and
// deleted in the batch that writes or deletes the row. The index key is the values'
// internal/index keys, concatenated.
const kindIndex byte = 0x08

// appendIndexPrefix appends the prefix of index id's entries in table tableID.
func appendIndexPrefix(dst []byte, tableID uint64, id uint32) []byte {
	dst = append(dst, kindIndex)
	dst = binary.BigEndian.AppendUint64(dst, tableID)
	return binary.BigEndian.AppendUint32(dst, id)
}

// appendIndexEntries appends to keys the entry keys, in each of defs, of the entity
// (pk, rk) with props: none for an index one of whose properties it lacks. Unique
// indexes have these entries too (besides their unique entries), so an index read is
// the same for both.
func appendIndexEntries(keys [][]byte, tableID uint64, defs []storage.IndexDef, pk, rk string, props []entity.Property) [][]byte {
	for i := range defs {
		k, ok := defs[i].AppendKey(appendIndexPrefix(nil, tableID, defs[i].ID), props)
		if ok {
			keys = append(keys, appendEscaped(appendEscaped(k, pk), rk))
		}
	}
	return keys
}

// putIndexChanges writes to b the change of a row's entries from old to new: the old
// entries that are not new go, the new ones that were not there come.
func putIndexChanges(b *pebbledb.Batch, old, new [][]byte) {
	for _, k := range old {
		if !slices.ContainsFunc(new, func(n []byte) bool { return bytes.Equal(n, k) }) {
			_ = b.Delete(k, nil)
		}
	}
	for _, k := range new {
		if !slices.ContainsFunc(old, func(o []byte) bool { return bytes.Equal(o, k) }) {
			_ = b.Set(k, nil, nil)
		}
	}
}

// markIndexes puts the format mark of index entries into b if settings declare an index
// and the store is not marked yet, and returns the mark to raise to once b commits (0:
// none). The caller holds ddlMu.
func (e *Engine) markIndexes(b *pebbledb.Batch, settings storage.TableSettings) uint64 {
	if len(settings.Indexes) == 0 || e.format.Load() >= formatIndexes {
		return 0
	}
	_ = b.Set(metaFormat, binary.BigEndian.AppendUint64(nil, formatIndexes), nil)
	return formatIndexes
}

// raiseFormat records that the store's format mark is now at least mark.
func (e *Engine) raiseFormat(mark uint64) {
	if mark > e.format.Load() {
		e.format.Store(mark)
	}
}

// indexTablePrefix is the start of table id's index entries (every index of it).
func indexTablePrefix(id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kindIndex}, id)
}

// indexesOf returns the indexes table id declares (nil for a deleted table, whose
// entries its purge removes whole).
func (e *Engine) indexesOf(id uint64) []storage.IndexDef {
	e.catMu.RLock()
	t := e.byID[id]
	e.catMu.RUnlock()
	if t == nil {
		return nil
	}
	return t.settings.Load().Indexes
}

// deleteRowEntries puts into b the deletion of the index entries of the stored row at
// key (named by its expiry index key k), read through it — its unique entries too,
// those that still name it: nothing if the row is gone. The caller holds the stripes
// held (ascending) besides the row's; it reports false, putting nothing, when one of
// the row's unique values is not among them.
func (e *Engine) deleteRowEntries(b *pebbledb.Batch, it *pebbledb.Iterator, id uint64, defs []storage.IndexDef, key, k []byte, held []uint32) (bool, error) {
	if !it.SeekPrefixGE(key) || !bytes.Equal(it.Key(), key) {
		return true, it.Error()
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return false, err
	}
	_, _, enc, err := parseValue(v)
	if err != nil {
		return false, err
	}
	props, err := entity.DecodeProps(enc)
	if err != nil {
		return false, err
	}
	_, _, pk, rk, err := decodeExpiryKey(k)
	if err != nil {
		return false, err
	}
	uks := appendUniqueKeys(nil, id, defs, props)
	for _, u := range uks {
		if _, ok := slices.BinarySearch(held, e.stripeOf(u.key)); !ok {
			return false, nil
		}
	}
	for _, ek := range appendIndexEntries(nil, id, defs, pk, rk, props) {
		_ = b.Delete(ek, nil)
	}
	mine := appendEscaped(appendEscaped(nil, pk), rk)
	for _, u := range uks {
		if !it.SeekPrefixGE(u.key) || !bytes.Equal(it.Key(), u.key) {
			if err := it.Error(); err != nil {
				return false, err
			}
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return false, err
		}
		if bytes.Equal(v, mine) {
			_ = b.Delete(u.key, nil)
		}
	}
	return true, nil
}

// expiredValueStripes returns the lock stripes of the unique values held by the rows
// the expiry purge is about to delete (entries, their expiry index keys), read before
// their locks are taken: the purge takes them with the rows' (deleteRowEntries checks
// them again under the locks).
func (e *Engine) expiredValueStripes(entries [][]byte, rows []row) ([]uint32, error) {
	var out []uint32
	for i, k := range entries {
		id := binary.BigEndian.Uint64(k[1:9])
		defs := e.indexesOf(id)
		if !hasUnique(defs) {
			continue
		}
		v, closer, err := e.db.Get(rows[i].key)
		if errors.Is(err, pebbledb.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		_, _, enc, err := parseValue(v)
		var props []entity.Property
		if err == nil {
			props, err = entity.DecodeProps(enc)
		}
		closer.Close()
		if err != nil {
			return nil, err
		}
		for _, u := range appendUniqueKeys(nil, id, defs, props) {
			out = append(out, e.stripeOf(u.key))
		}
	}
	return out, nil
}

// ScanIndex reads index req.Index of the table (storage.IndexScanRequest): the entries in
// req.Spans after req.After, in order, and for each the row it names, from one snapshot;
// a row expired at the read's start is skipped, and an entry req.KeyFilter refuses is
// passed over before its row is read. It stops after req.Limit rows, with Next
// the last entry returned.
func (e *Engine) ScanIndex(ctx context.Context, account, tableName string, req storage.IndexScanRequest) (storage.IndexScanResult, error) {
	if err := e.enter(); err != nil {
		return storage.IndexScanResult{}, err
	}
	defer e.exit()
	if req.Limit <= 0 {
		return storage.IndexScanResult{}, fmt.Errorf("scan index: limit %d is not positive", req.Limit)
	}
	t, err := e.lookup(account, tableName)
	if err != nil {
		return storage.IndexScanResult{}, err
	}
	var def *storage.IndexDef
	for _, d := range t.settings.Load().Indexes {
		if d.ID == req.Index {
			def = &d
		}
	}
	if def == nil {
		return storage.IndexScanResult{}, storage.ErrIndexNotFound
	}
	snap := e.db.NewSnapshot()
	defer snap.Close()
	entries, err := snap.NewIterWithContext(ctx, nil)
	if err != nil {
		return storage.IndexScanResult{}, fmt.Errorf("scan index: %w", err)
	}
	defer entries.Close()
	rows, err := snap.NewIterWithContext(ctx, &l6Filters)
	if err != nil {
		return storage.IndexScanResult{}, fmt.Errorf("scan index: %w", err)
	}
	defer rows.Close()
	prefix := appendIndexPrefix(nil, t.id, def.ID)
	var after []byte
	if req.After != nil {
		after = appendEscaped(appendEscaped(append(slices.Clone(prefix), req.After.Key...), req.After.PartitionKey), req.After.RowKey)
	}
	now := e.clock.Now()
	var res storage.IndexScanResult
	for _, sp := range req.Spans {
		lo := append(slices.Clone(prefix), sp.Lo...)
		hi := index.PrefixEnd(prefix)
		if sp.Hi != nil {
			hi = append(slices.Clone(prefix), sp.Hi...)
		}
		if after != nil && bytes.Compare(after, hi) >= 0 {
			continue // the span is behind the cursor
		}
		ok := entries.SeekGE(lo)
		if after != nil && bytes.Compare(after, lo) >= 0 {
			ok = entries.SeekGE(after)
			if ok && bytes.Equal(entries.Key(), after) {
				ok = entries.Next()
			}
		}
		for ; ok && bytes.Compare(entries.Key(), hi) < 0; ok = entries.Next() {
			if err := ctx.Err(); err != nil {
				return storage.IndexScanResult{}, err
			}
			res.Examined++
			cur, err := parseIndexEntry(entries.Key()[len(prefix):], len(def.Properties))
			if err != nil {
				return storage.IndexScanResult{}, fmt.Errorf("scan index: %w", err)
			}
			if req.KeyFilter != nil && !req.KeyFilter(cur.PartitionKey, cur.RowKey) {
				continue // the query's key predicates exclude it: its row is not read
			}
			key := dataKey(t.id, cur.PartitionKey, cur.RowKey)
			if !rows.SeekPrefixGE(key) || !bytes.Equal(rows.Key(), key) {
				if err := rows.Error(); err != nil {
					return storage.IndexScanResult{}, fmt.Errorf("scan index: %w", err)
				}
				return storage.IndexScanResult{}, fmt.Errorf("scan index: the entry of %q/%q names no row", cur.PartitionKey, cur.RowKey)
			}
			v, err := rows.ValueAndErr()
			if err != nil {
				return storage.IndexScanResult{}, fmt.Errorf("scan index: %w", err)
			}
			ver, exp, enc, err := parseValue(v)
			if err != nil {
				return storage.IndexScanResult{}, fmt.Errorf("scan index: %w", err)
			}
			if storage.Expired(exp, now) {
				continue
			}
			props, err := entity.DecodeProps(enc)
			if err != nil {
				return storage.IndexScanResult{}, fmt.Errorf("scan index: %w", err)
			}
			res.Records = append(res.Records, storage.Record{
				Entity: entity.Entity{PartitionKey: cur.PartitionKey, RowKey: cur.RowKey, Props: props}, Version: ver, Expiry: exp})
			if len(res.Records) == req.Limit {
				res.Next = &cur
				return res, nil
			}
		}
		if err := entries.Error(); err != nil {
			return storage.IndexScanResult{}, fmt.Errorf("scan index: %w", err)
		}
	}
	return res, nil
}

// parseIndexEntry splits the part of an entry key after its index prefix: n values'
// keys, then the escaped PartitionKey and RowKey.
func parseIndexEntry(k []byte, n int) (storage.IndexCursor, error) {
	end := 0
	for range n {
		l, ok := index.ValueLen(k[end:])
		if !ok {
			return storage.IndexCursor{}, fmt.Errorf("index entry %x: bad index key", k)
		}
		end += l
	}
	pk, _, rest, err := decodeEscaped(k[end:])
	if err != nil {
		return storage.IndexCursor{}, fmt.Errorf("index entry %x: %w", k, err)
	}
	rk, _, rest, err := decodeEscaped(rest)
	if err != nil || len(rest) != 0 {
		return storage.IndexCursor{}, fmt.Errorf("index entry %x: bad keys", k)
	}
	return storage.IndexCursor{Key: slices.Clone(k[:end]), PartitionKey: pk, RowKey: rk}, nil
}

// CountIndex counts the entries of index idx in spans, stopping at limit
// (storage.IndexReader): a key-only walk of at most limit entries, which reads no row and
// no value. Entries of expired rows the purge has not removed yet count.
func (e *Engine) CountIndex(ctx context.Context, account, tableName string, idx uint32, spans []index.Span, limit int) (int, error) {
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.exit()
	t, err := e.lookup(account, tableName)
	if err != nil {
		return 0, err
	}
	if !slices.ContainsFunc(t.settings.Load().Indexes, func(d storage.IndexDef) bool { return d.ID == idx }) {
		return 0, storage.ErrIndexNotFound
	}
	if limit <= 0 {
		return 0, nil
	}
	prefix := appendIndexPrefix(nil, t.id, idx)
	it, err := e.db.NewIterWithContext(ctx, &pebbledb.IterOptions{LowerBound: prefix, UpperBound: index.PrefixEnd(prefix)})
	if err != nil {
		return 0, fmt.Errorf("count index: %w", err)
	}
	defer it.Close()
	n := 0
	for _, sp := range spans {
		lo := append(slices.Clone(prefix), sp.Lo...)
		var hi []byte
		if sp.Hi != nil {
			hi = append(slices.Clone(prefix), sp.Hi...)
		}
		for ok := it.SeekGE(lo); ok && (hi == nil || bytes.Compare(it.Key(), hi) < 0); ok = it.Next() {
			if n++; n == limit {
				return n, nil
			}
		}
		if err := it.Error(); err != nil {
			return 0, fmt.Errorf("count index: %w", err)
		}
	}
	return n, ctx.Err()
}

// CountRows counts the stored rows of the table from start up to end (nil: the table's
// end), stopping at limit (storage.IndexReader): a key-only walk of at most limit keys.
// Expired rows the purge has not removed yet count.
func (e *Engine) CountRows(ctx context.Context, account, tableName string, start storage.Key, end *storage.Key, limit int) (int, error) {
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.exit()
	t, err := e.lookup(account, tableName)
	if err != nil {
		return 0, err
	}
	if limit <= 0 || end != nil && !start.Less(*end) {
		return 0, nil
	}
	upper := tablePrefix(t.id + 1)
	if end != nil {
		upper = dataKey(t.id, end.PartitionKey, end.RowKey)
	}
	it, err := e.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: dataKey(t.id, start.PartitionKey, start.RowKey),
		UpperBound: upper,
	})
	if err != nil {
		return 0, fmt.Errorf("count rows: %w", err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n == limit {
			return n, nil
		}
	}
	if err := it.Error(); err != nil {
		return 0, fmt.Errorf("count rows: %w", err)
	}
	return n, ctx.Err()
}
