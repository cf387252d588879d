package pebble

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/ceruleandb/cerulean/entity"
)

// Key space. Every key starts with one kind byte, so the kinds never interleave:
//
//	0x01 meta name                      → meta value (format, next table id, clock mark)
//	0x01 "svcprops" esc(account)        → the account's service properties (opaque bytes)
//	0x02 esc(account) esc(TableKey)     → table id (8 bytes BE) | display name
//	0x03 table id (8 bytes BE)          → (empty) a deleted table whose rows await purging
//	0x04 table id (8 bytes BE)          → the table's stored access policies (opaque bytes)
//	0x10 table id (8 bytes BE) esc(PK) esc(RK)
//	                                    → entity value (see appendValue)
//
// esc escapes every 0x00 byte as 0x00 0xFF and terminates with 0x00 0x01. Because the
// terminator sorts below every escaped byte (0x00 0x01 < 0x00 0xFF and < any byte ≥ 0x01),
// byte order of the encoded keys is exactly (PartitionKey, RowKey) byte order, for any bytes,
// and a string's encoding is never a prefix of a different string's encoding. A table id
// is never reused, so dropping a table is removing a catalogue entry and range-deleting
// [0x10 id, 0x10 id+1) later; a table created again under the name gets a fresh span.
// The ACL key goes with the id too: DeleteTable and the purge remove it, and a table
// created again has a new id and so no ACL. Kinds 0x04 and the svcprops meta keys came
// after format 1 without a format change: a build that does not know them never reads
// them, and at worst leaves an unreachable ACL key of a table it deleted.
const (
	kindMeta    byte = 0x01
	kindCatalog byte = 0x02
	kindPurge   byte = 0x03
	kindACL     byte = 0x04
	kindData    byte = 0x10
)

// Meta keys.
var (
	metaFormat = []byte{kindMeta, 'f', 'o', 'r', 'm', 'a', 't'}
	metaNextID = []byte{kindMeta, 'n', 'e', 'x', 't', 'i', 'd'}
	metaClock  = []byte{kindMeta, 'c', 'l', 'o', 'c', 'k'}
)

// formatVersion is the on-disk layout described in this file; Open refuses a store written
// in a newer one.
const formatVersion = 1

// valueTag is the first byte of every entity value. A later layout (for example one with
// an expiry) gets a new tag, so old rows stay readable without a migration.
const valueTag byte = 0x01

// valueHeader is the tag plus the 8-byte version.
const valueHeader = 1 + 8

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

// appendValue appends an entity value: tag | version (8 bytes BE) | entity.AppendProps.
// The props encoding keeps every EDM type exact and lets a reader find one property
// without decoding the rest (entity.FindProperty).
func appendValue(dst []byte, version int64, props []entity.Property) []byte {
	dst = append(dst, valueTag)
	dst = binary.BigEndian.AppendUint64(dst, uint64(version))
	return entity.AppendProps(dst, props)
}

// valueVersion returns the version of an entity value.
func valueVersion(v []byte) (int64, error) {
	if len(v) < valueHeader || v[0] != valueTag {
		return 0, fmt.Errorf("value: %w", entity.ErrCorrupt)
	}
	return int64(binary.BigEndian.Uint64(v[1:valueHeader])), nil
}

// decodeValue returns an entity value's version and properties (copied out of v).
func decodeValue(v []byte) (int64, []entity.Property, error) {
	ver, err := valueVersion(v)
	if err != nil {
		return 0, nil, err
	}
	props, err := entity.DecodeProps(v[valueHeader:])
	if err != nil {
		return 0, nil, fmt.Errorf("value: %w", err)
	}
	return ver, props, nil
}
