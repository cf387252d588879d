package edmjson

import (
	"strconv"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// ChangeOpName is a change record's op as a feed page writes it: the mutation as the
// bulk extension names it (insert, update, merge, upsert, upsertMerge, delete), or
// expire, tableDeleted, feedOff.
func ChangeOpName(op storage.ChangeOp) string {
	switch op {
	case storage.ChangeOp(storage.Insert):
		return "insert"
	case storage.ChangeOp(storage.Replace):
		return "update"
	case storage.ChangeOp(storage.Merge):
		return "merge"
	case storage.ChangeOp(storage.InsertOrReplace):
		return "upsert"
	case storage.ChangeOp(storage.InsertOrMerge):
		return "upsertMerge"
	case storage.ChangeOp(storage.Delete):
		return "delete"
	case storage.ChangeExpire:
		return "expire"
	case storage.ChangeTableDeleted:
		return "tableDeleted"
	case storage.ChangeFeedOff:
		return "feedOff"
	}
	return "unknown"
}

// AppendChangesStart appends the start of a feed page, up to its first record.
func AppendChangesStart(dst []byte) []byte {
	return append(dst, `{"changes":[`...)
}

// AppendChange appends one record of a feed page (docs/change-feed.md):
//
//	{"seq":12,"op":"merge","at":"2026-…Z","PartitionKey":"p","RowKey":"r",
//	 "entity":{"odata.etag":"W/…","PartitionKey":"p","RowKey":"r","Timestamp":"…",…}}
//
// The entity, after a write only, is the row's whole new state as a read at minimal
// metadata writes it (with its ETag, and cerulean.expiry when it has one), so it can be
// written back as it is. first says whether it is the page's first record.
func AppendChange(dst []byte, c *storage.Change, first bool) []byte {
	if !first {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, c.Seq, 10)
	dst = append(dst, `,"op":"`...)
	dst = append(dst, ChangeOpName(c.Op)...)
	dst = append(dst, `","at":"`...)
	dst = entity.AppendTicks(dst, c.At)
	dst = append(dst, '"')
	if c.Op < storage.ChangeTableDeleted {
		dst = append(dst, `,"PartitionKey":`...)
		dst = AppendString(dst, c.PartitionKey)
		dst = append(dst, `,"RowKey":`...)
		dst = AppendString(dst, c.RowKey)
	}
	if c.Version != 0 {
		rec := storage.Record{
			Entity:  entity.Entity{PartitionKey: c.PartitionKey, RowKey: c.RowKey, Props: c.Props},
			Version: c.Version, Expiry: c.Expiry,
		}
		dst = append(dst, `,"entity":`...)
		dst = AppendRecord(dst, &rec, EntityOptions{Level: MinimalMetadata, Expiry: true})
	}
	return append(dst, '}')
}

// AppendChangesEnd appends the end of a feed page: the continuation to read on from, and
// whether the feed has ended (its table was deleted).
func AppendChangesEnd(dst []byte, continuation string, ended bool) []byte {
	dst = append(dst, `],"continuation":`...)
	dst = AppendString(dst, continuation)
	dst = append(dst, `,"ended":`...)
	dst = strconv.AppendBool(dst, ended)
	return append(dst, '}')
}
