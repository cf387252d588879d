package pebble

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"slices"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Unique indexes (docs/indexes-design.md §3). Besides its ordinary entries (kindIndex), a
// unique index has one unique entry per value held:
//
//	0x09 table id (8 bytes BE) index id (4 bytes BE) index key → esc(PK) esc(RK)
//
// naming the row that holds the value. A write that gives a row a value checks the entry
// and fails with storage.UniqueViolation if another row holds it; it is checked and
// written under the rows' locks plus the lock stripe of each unique entry the write reads
// or changes (the value's lock: the stripe hashed from the entry's key, in the same
// stripe table as the rows'), all taken in the one sorted acquisition of lockRows. Every
// writer that sets or deletes an entry holds its stripe, so two writers of one value
// serialize, and the second reads what the first committed.
//
// An expired row holds no value, as it holds no row key: an insert over an expired row
// succeeds, and so does a write of a value whose holder has expired, which takes the
// entry over. The expired row keeps its ordinary entries until it is purged or written,
// and whoever removes them deletes the unique entry only while it still names that row.
//
// Within one Apply the constraint holds on the state the Apply leaves (two rows may swap
// values; two rows that end with one value fail, the later mutation being the one
// reported). ApplyEach runs its mutations one after the other: each is checked against
// the state the ones before it left.
const kindUnique byte = 0x09

// appendUniquePrefix appends the prefix of unique index id's unique entries in table
// tableID.
func appendUniquePrefix(dst []byte, tableID uint64, id uint32) []byte {
	dst = append(dst, kindUnique)
	dst = binary.BigEndian.AppendUint64(dst, tableID)
	return binary.BigEndian.AppendUint32(dst, id)
}

// uniqueTablePrefix is the start of table id's unique entries (every index of it).
func uniqueTablePrefix(id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kindUnique}, id)
}

// uniqueKey is a unique entry's key and the index it belongs to.
type uniqueKey struct {
	key []byte
	def *storage.IndexDef
}

// appendUniqueKeys appends the unique entry keys, in the enforced unique indexes among
// defs, of an entity with props.
func appendUniqueKeys(dst []uniqueKey, tableID uint64, defs []storage.IndexDef, props []entity.Property) []uniqueKey {
	for i := range defs {
		if !enforced(&defs[i]) {
			continue
		}
		if k, ok := defs[i].AppendUniqueKey(appendUniquePrefix(nil, tableID, defs[i].ID), props); ok {
			dst = append(dst, uniqueKey{key: k, def: &defs[i]})
		}
	}
	return dst
}

// enforced reports whether d is a unique index writes must respect: one whose build
// found a value twice (failed) is not, being never used and waiting to be dropped; its
// unique entries stay as they were until then.
func enforced(d *storage.IndexDef) bool {
	return d.Unique && d.State != storage.IndexFailed
}

// hasUnique reports whether defs declare an enforced unique index.
func hasUnique(defs []storage.IndexDef) bool {
	return slices.ContainsFunc(defs, func(d storage.IndexDef) bool { return enforced(&d) })
}

func containsKey(ks []uniqueKey, k []byte) bool {
	return slices.ContainsFunc(ks, func(u uniqueKey) bool { return bytes.Equal(u.key, k) })
}

// stripeOf is the lock stripe of key k (a row's or a unique entry's).
func (e *Engine) stripeOf(k []byte) uint32 {
	return uint32(maphash.Bytes(e.seed, k) % lockStripes)
}

// valueStripes returns the lock stripes of the unique entries the mutations' own
// properties give values in: those a write may take, known before its rows are read.
// (Values a merge completes from stored properties, and those a row gives up, are found
// once the rows are read; uniqueCheck asks for them then.)
func (e *Engine) valueStripes(tableID uint64, defs []storage.IndexDef, muts []storage.Mutation) []uint32 {
	var out []uint32
	var ks []uniqueKey
	for i := range muts {
		ks = appendUniqueKeys(ks[:0], tableID, defs, muts[i].Props)
		for _, k := range ks {
			out = append(out, e.stripeOf(k.key))
		}
	}
	return out
}

// holding is who holds a unique value: ok is false when nobody does.
type holding struct {
	pk, rk string
	live   bool // the holder exists and is not expired
	ok     bool
}

// uniqueCheck checks and writes the unique entries of one Apply under its locks.
type uniqueCheck struct {
	e    *Engine
	id   uint64
	pk   string
	defs []storage.IndexDef
	now  int64
	held []uint32 // the stripes held, ascending
	// need are stripes of unique entries the Apply reads or changes that it does not
	// hold: it must take them (lockRows again) and start over.
	need []uint32
	it   *pebbledb.Iterator
	// stored caches the entries as stored; overlay, for ApplyEach, what the mutations
	// so far have made of them.
	stored  map[string]holding
	overlay map[string]holding
}

// covers reports whether the Apply holds k's stripe, noting it as needed if not.
func (u *uniqueCheck) covers(k []byte) bool {
	s := u.e.stripeOf(k)
	if _, ok := slices.BinarySearch(u.held, s); ok {
		return true
	}
	if !slices.Contains(u.need, s) {
		u.need = append(u.need, s)
	}
	return false
}

// lookup reads who holds k as stored (the caller holds k's stripe): the row the entry
// names, live if it is stored and not expired at u.now.
func (u *uniqueCheck) lookup(k []byte) (holding, error) {
	if h, ok := u.stored[string(k)]; ok {
		return h, nil
	}
	h, err := u.read(k)
	if err != nil {
		return holding{}, err
	}
	u.stored[string(k)] = h
	return h, nil
}

func (u *uniqueCheck) read(k []byte) (holding, error) {
	it := u.it
	if !it.SeekPrefixGE(k) || !bytes.Equal(it.Key(), k) {
		return holding{}, it.Error()
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return holding{}, err
	}
	pk, _, rest, err := decodeEscaped(v)
	if err != nil {
		return holding{}, err
	}
	rk, _, _, err := decodeEscaped(rest)
	if err != nil {
		return holding{}, err
	}
	h := holding{pk: pk, rk: rk, ok: true}
	key := dataKey(u.id, pk, rk)
	if it.SeekPrefixGE(key) && bytes.Equal(it.Key(), key) {
		rv, err := it.ValueAndErr()
		if err != nil {
			return holding{}, err
		}
		_, exp, _, err := parseValue(rv)
		if err != nil {
			return holding{}, err
		}
		h.live = !storage.Expired(exp, u.now)
	}
	return h, it.Error()
}

// holder is who holds k now: in ApplyEach after the mutations so far, else as stored.
func (u *uniqueCheck) holder(k []byte) (holding, error) {
	if h, ok := u.overlay[string(k)]; ok {
		return h, nil
	}
	return u.lookup(k)
}

// violation is the error of row rk taking value k held by h.
func violation(k uniqueKey, h holding) *storage.UniqueViolation {
	return &storage.UniqueViolation{Index: k.def.Name, PartitionKey: h.pk, RowKey: h.rk}
}

// takeEach checks, for ApplyEach, that row rk may go from the values old to new (its
// state before and after one mutation) given what the mutations before it left, and
// records the change. It returns the violation, if any; nil also when a stripe it needs
// is not held (u.need then says so, and the Apply starts over).
func (u *uniqueCheck) takeEach(rk string, old, new []uniqueKey) (*storage.UniqueViolation, error) {
	for _, k := range slices.Concat(old, new) {
		if !u.covers(k.key) {
			return nil, nil
		}
	}
	for _, k := range new {
		h, err := u.holder(k.key)
		if err != nil {
			return nil, err
		}
		if h.ok && h.live && (h.pk != u.pk || h.rk != rk) {
			return violation(k, h), nil
		}
	}
	for _, k := range old {
		if containsKey(new, k.key) {
			continue
		}
		if h, err := u.holder(k.key); err != nil {
			return nil, err
		} else if h.ok && h.pk == u.pk && h.rk == rk {
			u.overlay[string(k.key)] = holding{}
		}
	}
	for _, k := range new {
		u.overlay[string(k.key)] = holding{pk: u.pk, rk: rk, live: true, ok: true}
	}
	return nil, nil
}

// checkFinal checks, for Apply, the state the Apply leaves: old[j] and new[j] are the
// values of rows[j] as stored and as left (nil for a row the Apply does not write), last[j]
// the index of the last mutation that wrote it. It returns the failing mutation's index
// and violation (-1 when none, or when a stripe it needs is not held: u.need says so).
func (u *uniqueCheck) checkFinal(rows []row, old, new [][]uniqueKey, last []int) (int, *storage.UniqueViolation, error) {
	for j := range rows {
		for _, k := range slices.Concat(old[j], new[j]) {
			u.covers(k.key)
		}
	}
	if len(u.need) > 0 {
		return -1, nil, nil
	}
	// Rows in the order of their last write, so of two rows ending with one value the
	// later write is the one that fails.
	order := make([]int, 0, len(rows))
	for j := range rows {
		if len(new[j]) > 0 {
			order = append(order, j)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return last[a] - last[b] })
	byRK := make(map[string]int, len(rows))
	for j := range rows {
		byRK[rows[j].rk] = j
	}
	taken := map[string]int{}
	for _, j := range order {
		for _, k := range new[j] {
			if o, ok := taken[string(k.key)]; ok {
				return last[j], violation(k, holding{pk: u.pk, rk: rows[o].rk}), nil
			}
			taken[string(k.key)] = j
			h, err := u.lookup(k.key)
			if err != nil {
				return -1, nil, err
			}
			if !h.ok || !h.live || h.pk == u.pk && h.rk == rows[j].rk {
				continue
			}
			if o, in := byRK[h.rk]; in && h.pk == u.pk && rows[o].Dirty {
				// The holder is written by this Apply too: it gives the value up,
				// or it is the other row ending with it, found above or below.
				continue
			}
			return last[j], violation(k, h), nil
		}
	}
	return -1, nil, nil
}

// putUniqueDeletes puts into b the deletion of the unique entries row r (named rk)
// gives up, going from old to new, that still name it. Apply puts every row's deletions
// before any row's sets (putUniqueSets), so that a value one row gives up and another
// takes ends with the taker.
func (u *uniqueCheck) putUniqueDeletes(b *pebbledb.Batch, rk string, old, new []uniqueKey) error {
	for _, k := range old {
		if containsKey(new, k.key) {
			continue
		}
		h, err := u.lookup(k.key)
		if err != nil {
			return err
		}
		if h.ok && h.pk == u.pk && h.rk == rk {
			_ = b.Delete(k.key, nil)
		}
	}
	return nil
}

// putUniqueSets puts into b the unique entries of new that do not name row rk yet.
func (u *uniqueCheck) putUniqueSets(b *pebbledb.Batch, rk string, new []uniqueKey) error {
	var v []byte
	for _, k := range new {
		h, err := u.lookup(k.key)
		if err != nil {
			return err
		}
		if !h.ok || h.pk != u.pk || h.rk != rk {
			v = appendEscaped(appendEscaped(v[:0], u.pk), rk)
			_ = b.Set(k.key, v, nil)
		}
	}
	return nil
}
