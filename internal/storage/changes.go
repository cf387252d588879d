package storage

import (
	"context"
	"errors"

	"github.com/ceruleandb/cerulean/internal/entity"
)

// Change feeds (docs/change-feed-design.md).
//
// A table whose settings have ChangeFeed on records every committed change in an ordered
// log, in the same engine batch or transaction as the change: each mutation of an Apply
// and each one of an ApplyEach that commits, the removal of an expired row, and the
// table's deletion. A table without it records nothing and costs nothing more.

// ChangeOp is what a change record reports. The first six are the mutation kinds (Op)
// with the same values, so a write's record names the mutation that was asked.
type ChangeOp uint8

// Change record kinds beyond the mutations.
const (
	// ChangeExpire is the removal of a row whose time-to-live passed: by the expiry
	// purge, or just before a write over the expired row (which then has its own record),
	// or just after a write whose explicit expiry had already passed.
	ChangeExpire ChangeOp = 16 + iota
	// ChangeTableDeleted is the table's deletion: the feed's last record.
	ChangeTableDeleted
	// ChangeFeedOff is the feed being turned off: changes after it, until the next
	// record (the feed turned on again), were not recorded.
	ChangeFeedOff
)

func (o ChangeOp) String() string {
	switch o {
	case ChangeExpire:
		return "expire"
	case ChangeTableDeleted:
		return "table-deleted"
	case ChangeFeedOff:
		return "feed-off"
	}
	return Op(o).String()
}

// Change is one record of a table's feed.
type Change struct {
	// Seq is the record's place in the feed: strictly increasing in feed order, never
	// reused for the feed, not dense.
	Seq uint64
	Op  ChangeOp
	// PartitionKey and RowKey name the entity; empty for the table-level records.
	PartitionKey string
	RowKey       string
	// Props is the entity's whole state after a write (merged, for a merge); nil for a
	// delete, an expiry and the table-level records.
	Props []entity.Property
	// Version is the entity's new version after a write (its Timestamp and ETag source,
	// as a read reports it); 0 otherwise.
	Version int64
	// At is when the change committed, in version ticks: Version for a write, the
	// engine clock at the commit otherwise. Retention goes by it.
	At int64
	// Expiry is the row's stored expiry after a write (0: never), so a copy can give the
	// row the same one (Mutation.Expiry).
	Expiry int64
}

// AfterNow, as ChangesRequest.After, starts at the feed's horizon: a page with no
// records whose Next is where the feed is now.
const AfterNow = ^uint64(0)

// ChangesRequest selects a page of a table's feed.
type ChangesRequest struct {
	// FeedID, when not 0, is the feed a continuation came from, and the read reads that
	// feed: it must be a feed of a table of this account and name (else
	// ErrChangesExpired), and a deleted table's feed stays readable by its FeedID up to
	// its ChangeTableDeleted record, also once a table is created again under the name
	// (whose feed has another FeedID). 0 reads the table's current feed.
	FeedID uint64
	// After selects the records with a larger Seq: 0 is the beginning, AfterNow the
	// horizon.
	After uint64
	// Limit caps the records returned; it must be positive.
	Limit int
	// StartPK and EndPK, when set, keep only the records of PartitionKeys in
	// [*StartPK, *EndPK) (the table-level records are always kept), so consumers can
	// split a table; records filtered out still advance Next.
	StartPK, EndPK *string
}

// ChangesPage is one page of a feed.
type ChangesPage struct {
	FeedID  uint64
	Changes []Change
	// Next is the After of the next read: every record of the feed with Seq ≤ Next
	// that the request selects is in this page or an earlier one, and every record
	// that will ever have Seq ≤ Next is already visible (the horizon), so resuming from
	// Next never misses nor repeats a record.
	Next uint64
	// Ended reports that the page holds the feed's ChangeTableDeleted record.
	Ended bool
}

// Errors of change feeds.
var (
	// ErrFeedOff means the table's change feed is off (a read without a FeedID).
	ErrFeedOff = errors.New("change feed is off")
	// ErrChangesExpired means records after the request's After have been removed (by
	// retention), or the FeedID is not the table's: the reader must start again.
	ErrChangesExpired = errors.New("changes after the continuation are no longer retained")
)

// ChangeReader reads a table's feed. An engine that records feeds implements it, and so
// do the Views it opens (a View reads at its source: a PostgreSQL replica serves a
// gap-free prefix of every feed, since records are numbered in commit order).
type ChangeReader interface {
	// ReadChanges returns up to req.Limit records of the table's feed after req.After,
	// in Seq order, none beyond the horizon (see ChangesPage.Next). ErrTableNotFound
	// for a missing table (without a FeedID), ErrFeedOff, ErrChangesExpired.
	ReadChanges(ctx context.Context, account, table string, req ChangesRequest) (ChangesPage, error)
}

// ChangeFeed is what an engine does with change feeds; both engines implement it, and
// it is part of Engine.
type ChangeFeed interface {
	ChangeReader
	// WaitChanges returns nil once the feed's horizon is past after, so that a
	// ReadChanges with that After returns records or a larger Next (long polling); or
	// ctx.Err() when ctx ends first; or what ReadChanges would fail with (a FeedID not
	// the table's, a missing table, the feed off). feedID is as ChangesRequest.FeedID.
	// It watches the engine's latest committed state (the primary), whatever View the
	// caller then reads from.
	WaitChanges(ctx context.Context, account, table string, feedID, after uint64) error
	// TrimChanges removes from every feed the records older (by At) than its retention,
	// at a cost proportional to what it removes, and returns how many it removed; a
	// deleted table's feed goes entirely once its last record has. The engine runs it in
	// the background too; it is a maintenance hook. A read whose After lies before what
	// was removed then fails with ErrChangesExpired, never skipping silently.
	TrimChanges(ctx context.Context) (int, error)
}

// ChangeFeedOn reports whether the table records a change feed.
func (s TableSettings) ChangeFeedOn() bool { return s.ChangeFeed > 0 }
