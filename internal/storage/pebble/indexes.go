package pebble

import (
	"bytes"
	"encoding/binary"
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
// (pk, rk) with props: none for an index one of whose properties it lacks.
func appendIndexEntries(keys [][]byte, tableID uint64, defs []storage.IndexDef, pk, rk string, props []entity.Property) [][]byte {
	for _, d := range defs {
		k := appendIndexPrefix(nil, tableID, d.ID)
		ok := true
		for _, name := range d.Properties {
			i := slices.IndexFunc(props, func(p entity.Property) bool { return p.Name == name })
			if i < 0 || !index.Known(props[i].Value.Type) {
				ok = false
				break
			}
			k = index.AppendValue(k, props[i].Value)
		}
		if ok {
			k = appendEscaped(appendEscaped(k, pk), rk)
			keys = append(keys, k)
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
// key (named by its expiry index key k), read through it; nothing if the row is gone.
func deleteRowEntries(b *pebbledb.Batch, it *pebbledb.Iterator, id uint64, defs []storage.IndexDef, key, k []byte) error {
	if !it.SeekPrefixGE(key) || !bytes.Equal(it.Key(), key) {
		return it.Error()
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return err
	}
	_, _, enc, err := parseValue(v)
	if err != nil {
		return err
	}
	props, err := entity.DecodeProps(enc)
	if err != nil {
		return err
	}
	_, _, pk, rk, err := decodeExpiryKey(k)
	if err != nil {
		return err
	}
	for _, ek := range appendIndexEntries(nil, id, defs, pk, rk, props) {
		_ = b.Delete(ek, nil)
	}
	return nil
}
