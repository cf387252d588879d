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
