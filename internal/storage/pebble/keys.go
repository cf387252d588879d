package pebble

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/ceruleandb/cerulean/internal/entity"
)

// Key space. Every key starts with one kind byte, so the kinds never interleave:
//
//	0x01 meta name                      → meta value (format, next table id, clock mark)
//	0x01 "svcprops" esc(account)        → the account's service properties (opaque bytes)
//	0x02 esc(account) esc(TableKey)     → table id (8 bytes BE) | display name
//	0x03 table id (8 bytes BE)          → (empty) a deleted table whose rows await purging
//	0x04 table id (8 bytes BE)          → the table's stored access policies (opaque bytes)
//	0x05 table id (8 bytes BE)          → the table's settings (storage.MarshalSettings);
//	                                      absent for a standard table
//	0x06 table id (8 bytes BE) expiry (8 bytes BE) esc(PK) esc(RK)
//	                                    → (empty) the expiry index: one key per stored row
//	                                      that expires, in expiry order within a table
//	0x07 table id (8 bytes BE) seq (8 bytes BE)
//	                                    → a change feed record (changes.go); seq 0 is
//	                                      the feed's mark (retention mark, owner); a
//	                                      lean record's state is its row's (format 4)
//	0x08 table id (8 bytes BE) index id (4 bytes BE) index key esc(PK) esc(RK)
//	                                    → (empty) a secondary index entry (indexes.go)
//	0x09 table id (8 bytes BE) index id (4 bytes BE) index key
//	                                    → esc(PK) esc(RK): the row holding a unique
//	                                      index's value (unique.go)
//	0x0A table id (8 bytes BE) index id (4 bytes BE)
//	                                    → esc(PK) esc(RK): how far an index's online
//	                                      build has come (build.go)
//	0x10 table id (8 bytes BE) esc(PK) esc(RK)
//	                                    → entity value (see appendValue)
//
// esc escapes every 0x00 byte as 0x00 0xFF and terminates with 0x00 0x01. Because the
// terminator sorts below every escaped byte (0x00 0x01 < 0x00 0xFF and < any byte ≥ 0x01),
// byte order of the encoded keys is exactly (PartitionKey, RowKey) byte order, for any bytes,
// and a string's encoding is never a prefix of a different string's encoding. A table id
// is never reused, so dropping a table is removing a catalogue entry and range-deleting
// [0x10 id, 0x10 id+1) later; a table created again under the name gets a fresh span.
// The ACL and settings keys go with the id too: DeleteTable and the purge remove them, and
// a table created again has a new id and so neither. Kinds 0x04 and the svcprops meta keys
// came after format 1 without a format change: a build that does not know them never
// reads them, and at worst leaves an unreachable ACL key of a table it deleted.
//
// Format 2 added the settings key, the expiry index and the tag-2 entity value (with an
// expiry). Every row with a non-zero expiry has exactly one index key, written and
// deleted in the same batch as the row whenever its expiry changes or it is overwritten
// or deleted, so the expiry purge walks only the index keys at or before now (the
// table's [0x06 id, 0x06 id now+1) span) and never the table. Open upgrades a format-1
// store in place (its rows stay tag 1 until written again) and a format-1 build refuses
// a format-2 store rather than misread its rows.
const (
	kindMeta     byte = 0x01
	kindCatalog  byte = 0x02
	kindPurge    byte = 0x03
	kindACL      byte = 0x04
	kindSettings byte = 0x05
	kindExpiry   byte = 0x06
	kindFeed     byte = 0x07
	// kindIndex (0x08), kindUnique (0x09) and kindBuild (0x0A) are in indexes.go,
	// unique.go and build.go.
	kindData byte = 0x10
)

// Meta keys.
var (
	metaFormat = []byte{kindMeta, 'f', 'o', 'r', 'm', 'a', 't'}
	metaNextID = []byte{kindMeta, 'n', 'e', 'x', 't', 'i', 'd'}
	metaClock  = []byte{kindMeta, 'c', 'l', 'o', 'c', 'k'}
)

// formatVersion is the on-disk layout described in this file; Open refuses a store written
// in a newer one. Format 3 added change feeds (kind 0x07); a store is marked 3 only when
// a table's feed is first turned on (newFeed), so that a format-2 build, which would
// write into a feed table without recording, refuses it, while stores without feeds stay
// at formatBase and open in either build. Format 4 added rows that hold the state of
// their change record (valueTagRef) and records that leave their state to the row
// (changes.go); a store with feeds is marked 4 (newFeed, and Open for a format-3 store,
// which then gets such rows), so that a format-3 build, which would misread them,
// refuses it.
//
// Format 5 added secondary index entries (kinds 0x08 to 0x0A: indexes.go, unique.go, build.go): a store is marked 5 when
// a table first declares an index (markIndexes), so that a format-4 build, which would
// write rows without their entries, refuses it; other stores keep their mark.
const (
	formatVersion = 5
	formatBase    = 2
	formatFeeds   = 3 // the first format with change feeds
	formatLean    = 4 // the first format with lean records
	formatIndexes = 5 // the first format with index entries
)

// The first byte of every entity value is a tag naming its layout, so rows written in an
// older layout stay readable without a migration:
//
//	valueTag:       tag | version (8 bytes BE) | props
//	valueTagExpiry: tag | version (8 bytes BE) | expiry (8 bytes BE) | props
//	valueTagRef:    tag | version (8 bytes BE) | expiry (8 bytes BE) | seq (8 bytes BE) |
//	                op | props
//
// A row that never expires is written with valueTag (the format-1 layout, 8 bytes
// shorter); one with an expiry with valueTagExpiry. A row of a feed table written by a
// change that its feed recorded is written with valueTagRef (format 4): seq is the number
// of that change's record in the table's feed and op its operation, and the record holds
// no properties, the row's being its state (changes.go, "lean records"). Readers of the
// row ignore seq and op.
const (
	valueTag       byte = 0x01
	valueTagExpiry byte = 0x02
	valueTagRef    byte = 0x03
)

// valueHeader is the length of the valueTag header; valueHeaderExpiry of valueTagExpiry's,
// valueHeaderRef of valueTagRef's.
const (
	valueHeader       = 1 + 8
	valueHeaderExpiry = 1 + 8 + 8
	valueHeaderRef    = 1 + 8 + 8 + 8 + 1
)

var errCorruptKey = errors.New("corrupt key")

// appendEscaped appends the order-preserving, self-terminating encoding of s.
func appendEscaped(dst []byte, s string) []byte {
	for {
		i := strings.IndexByte(s, 0)
		if i < 0 {
			break
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, 0x00, 0xFF)
		s = s[i+1:]
	}
	dst = append(dst, s...)
	return append(dst, 0x00, 0x01)
}

// decodeEscaped decodes one escaped string from the front of b and returns it, its raw
// encoding (including the terminator) and the rest of b.
func decodeEscaped(b []byte) (s string, enc []byte, rest []byte, err error) {
	// Fast path: no escaped zero before the terminator.
	if i := bytes.IndexByte(b, 0); i >= 0 && i+1 < len(b) && b[i+1] == 0x01 {
		return string(b[:i]), b[:i+2], b[i+2:], nil
	}
	var out []byte
	for j := 0; ; {
		k := bytes.IndexByte(b[j:], 0)
		if k < 0 || j+k+1 >= len(b) {
			return "", nil, nil, errCorruptKey
		}
		i := j + k
		out = append(out, b[j:i]...)
		switch b[i+1] {
		case 0x01:
			return string(out), b[:i+2], b[i+2:], nil
		case 0xFF:
			out = append(out, 0)
		default:
			return "", nil, nil, errCorruptKey
		}
		j = i + 2
	}
}

// tablePrefix is the first key of a table's data span; tablePrefix(id+1) bounds it.
func tablePrefix(id uint64) []byte {
	return appendTablePrefix(make([]byte, 0, 9), id)
}

func appendTablePrefix(dst []byte, id uint64) []byte {
	dst = append(dst, kindData)
	return binary.BigEndian.AppendUint64(dst, id)
}

// appendDataKey appends the key of entity (pk, rk) in table id.
func appendDataKey(dst []byte, id uint64, pk, rk string) []byte {
	dst = appendTablePrefix(dst, id)
	dst = appendEscaped(dst, pk)
	return appendEscaped(dst, rk)
}

func dataKey(id uint64, pk, rk string) []byte {
	return appendDataKey(make([]byte, 0, 9+len(pk)+len(rk)+4), id, pk, rk)
}

// decodeDataKey splits a data key into its table id, PartitionKey and RowKey.
func decodeDataKey(k []byte) (id uint64, pk, rk string, err error) {
	if len(k) < 9 || k[0] != kindData {
		return 0, "", "", errCorruptKey
	}
	id = binary.BigEndian.Uint64(k[1:9])
	pk, _, rest, err := decodeEscaped(k[9:])
	if err != nil {
		return 0, "", "", err
	}
	rk, _, rest, err = decodeEscaped(rest)
	if err != nil || len(rest) != 0 {
		return 0, "", "", errCorruptKey
	}
	return id, pk, rk, nil
}

// catalogPrefix is the prefix of every catalogue key of one account.
func catalogPrefix(account string) []byte {
	return appendEscaped([]byte{kindCatalog}, account)
}

// catalogKey is the catalogue key of a table; key is its TableKey.
func catalogKey(account, key string) []byte {
	return appendEscaped(catalogPrefix(account), key)
}

// prefixEnd returns the smallest key greater than every key with an escaped-string
// prefix p (which ends in the terminator 0x00 0x01): the same bytes ending in 0x00 0x02.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	end[len(end)-1]++
	return end
}

func purgeKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kindPurge}, id)
}

// aclKey is the key of table id's stored access policies.
func aclKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kindACL}, id)
}

// svcPropsKey is the key of an account's service properties.
func svcPropsKey(account string) []byte {
	return appendEscaped([]byte{kindMeta, 's', 'v', 'c', 'p', 'r', 'o', 'p', 's'}, account)
}

// catalogValue encodes a catalogue entry: table id and display name.
func catalogValue(id uint64, name string) []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(name)), id)
	return append(v, name...)
}

func decodeCatalogValue(v []byte) (uint64, string, error) {
	if len(v) < 8 {
		return 0, "", errCorruptKey
	}
	return binary.BigEndian.Uint64(v), string(v[8:]), nil
}

// appendValue appends an entity value: the version, the expiry when it is not zero, and
// the properties in entity.AppendProps form, which keeps every EDM type exact and lets a
// reader find one property without decoding the rest (entity.FindProperty).
func appendValue(dst []byte, version, expiry int64, props []entity.Property) []byte {
	if expiry == 0 {
		dst = append(dst, valueTag)
		dst = binary.BigEndian.AppendUint64(dst, uint64(version))
	} else {
		dst = append(dst, valueTagExpiry)
		dst = binary.BigEndian.AppendUint64(dst, uint64(version))
		dst = binary.BigEndian.AppendUint64(dst, uint64(expiry))
	}
	return entity.AppendProps(dst, props)
}

// appendValueRef appends a valueTagRef entity value: the row's state is that of record
// seq of its table's feed, a change of operation op.
func appendValueRef(dst []byte, version, expiry int64, seq uint64, op byte, props []entity.Property) []byte {
	dst = append(dst, valueTagRef)
	dst = binary.BigEndian.AppendUint64(dst, uint64(version))
	dst = binary.BigEndian.AppendUint64(dst, uint64(expiry))
	dst = binary.BigEndian.AppendUint64(dst, seq)
	dst = append(dst, op)
	return entity.AppendProps(dst, props)
}

// parseValue splits an entity value into its version, expiry (0: never) and encoded
// properties (a slice of v).
func parseValue(v []byte) (version, expiry int64, props []byte, err error) {
	switch {
	case len(v) >= valueHeader && v[0] == valueTag:
		return int64(binary.BigEndian.Uint64(v[1:9])), 0, v[valueHeader:], nil
	case len(v) >= valueHeaderExpiry && v[0] == valueTagExpiry:
		return int64(binary.BigEndian.Uint64(v[1:9])), int64(binary.BigEndian.Uint64(v[9:17])), v[valueHeaderExpiry:], nil
	case len(v) >= valueHeaderRef && v[0] == valueTagRef:
		return int64(binary.BigEndian.Uint64(v[1:9])), int64(binary.BigEndian.Uint64(v[9:17])), v[valueHeaderRef:], nil
	}
	return 0, 0, nil, fmt.Errorf("value: %w", entity.ErrCorrupt)
}

// valueRef returns the feed record whose state a valueTagRef value holds, its number
// and operation; seq is 0 for the other layouts.
func valueRef(v []byte) (seq uint64, op byte) {
	if len(v) >= valueHeaderRef && v[0] == valueTagRef {
		return binary.BigEndian.Uint64(v[17:25]), v[25]
	}
	return 0, 0
}

// decodeValue returns an entity value's version, expiry and properties (copied out of v).
func decodeValue(v []byte) (int64, int64, []entity.Property, error) {
	ver, exp, enc, err := parseValue(v)
	if err != nil {
		return 0, 0, nil, err
	}
	props, err := entity.DecodeProps(enc)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("value: %w", err)
	}
	return ver, exp, props, nil
}

// settingsKey is the key of table id's settings.
func settingsKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kindSettings}, id)
}

// expiryPrefix is the first key of table id's expiry index; expiryPrefix(id+1) bounds it.
func expiryPrefix(id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kindExpiry}, id)
}

// expiryBound is the first expiry index key of table id for rows expiring after now: the
// keys before it, from expiryPrefix(id), are the table's expired rows.
func expiryBound(id uint64, now int64) []byte {
	return binary.BigEndian.AppendUint64(expiryPrefix(id), uint64(now)+1)
}

// appendExpiryKey appends the expiry index key of row (pk, rk) of table id expiring at
// expiry.
func appendExpiryKey(dst []byte, id uint64, expiry int64, pk, rk string) []byte {
	dst = append(dst, kindExpiry)
	dst = binary.BigEndian.AppendUint64(dst, id)
	dst = binary.BigEndian.AppendUint64(dst, uint64(expiry))
	dst = appendEscaped(dst, pk)
	return appendEscaped(dst, rk)
}

// decodeExpiryKey splits an expiry index key into its table id, expiry, PartitionKey
// and RowKey.
func decodeExpiryKey(k []byte) (id uint64, expiry int64, pk, rk string, err error) {
	if len(k) < 17 || k[0] != kindExpiry {
		return 0, 0, "", "", errCorruptKey
	}
	id = binary.BigEndian.Uint64(k[1:9])
	expiry = int64(binary.BigEndian.Uint64(k[9:17]))
	pk, _, rest, err := decodeEscaped(k[17:])
	if err != nil {
		return 0, 0, "", "", err
	}
	rk, _, rest, err = decodeEscaped(rest)
	if err != nil || len(rest) != 0 {
		return 0, 0, "", "", errCorruptKey
	}
	return id, expiry, pk, rk, nil
}
