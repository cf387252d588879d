// Package storage defines the engine boundary: the contract every storage engine
// (storage/pebble, storage/postgres) implements and storage/enginetest verifies.
//
// The boundary is entity-level and semantic so that a SQL engine can check preconditions
// and merge inside the database in one round trip, and a key-value engine can do the same
// under its own locks inside one atomic batch. Concurrency control is the engine's job:
// several front ends may share one engine's backing store.
package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
)

// Errors an engine reports. Apply wraps entity-level ones in *ApplyError.
var (
	ErrTableNotFound   = errors.New("table not found")
	ErrTableExists     = errors.New("table already exists")
	ErrNotFound        = errors.New("entity not found")
	ErrExists          = errors.New("entity already exists")
	ErrVersionMismatch = errors.New("entity version mismatch")
	// ErrUnavailable means the backing store cannot be reached; the request may be retried.
	ErrUnavailable = errors.New("storage unavailable")
	// ErrNoSpace means the engine refuses writes because its volume is (nearly) full:
	// nothing of the refused write was applied, reads keep working, and the write may be
	// retried once space is freed. It is a state of the engine, not of the request.
	ErrNoSpace = errors.New("no space left on the storage volume")
)

// ApplyError reports which mutation of an Apply failed and why. Err is ErrNotFound,
// ErrExists, ErrVersionMismatch, or an entity validation error (an *azerr.Error) found
// when checking a merged result. Nothing of the Apply was written.
type ApplyError struct {
	Index int
	Err   error
}

func (e *ApplyError) Error() string { return fmt.Sprintf("mutation %d: %v", e.Index, e.Err) }
func (e *ApplyError) Unwrap() error { return e.Err }

// Op is a mutation kind.
type Op uint8

// Mutation kinds and their preconditions.
const (
	// Insert requires that the entity does not exist (else ErrExists).
	Insert Op = 1 + iota
	// Replace requires that the entity exists (else ErrNotFound) and, if IfMatch is set,
	// has that version (else ErrVersionMismatch); it replaces all properties.
	Replace
	// Merge has Replace's preconditions; it overlays Props on the stored properties.
	Merge
	// Delete has Replace's preconditions; it removes the entity.
	Delete
	// InsertOrReplace has no precondition.
	InsertOrReplace
	// InsertOrMerge has no precondition; on a missing entity it inserts Props.
	InsertOrMerge
)

func (o Op) String() string {
	switch o {
	case Insert:
		return "insert"
	case Replace:
		return "replace"
	case Merge:
		return "merge"
	case Delete:
		return "delete"
	case InsertOrReplace:
		return "insert-or-replace"
	case InsertOrMerge:
		return "insert-or-merge"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Mutation is one entity write inside an Apply. The PartitionKey is the Apply's.
type Mutation struct {
	Op     Op
	RowKey string
	// IfMatch, when non-zero, is the version the entity must have (Replace, Merge, Delete).
	// Zero means "any existing version" (If-Match: *).
	IfMatch int64
	Props   []entity.Property
	// Expiry, when not ExpiryComputed (the zero value), is the expiry the row gets from
	// this write instead of the one storage.Expiry computes: ExpiryNever, or an instant in
	// version ticks (positive). It is for a write that reproduces an entity exactly (the
	// data tools' copy): the table's settings and the TTL property do not enter into it,
	// and the TTL property is not checked. See "Explicit expiry" in Engine's contracts.
	Expiry int64
}

// Record is a stored entity with its version. The version is the entity's Timestamp in
// 100 ns ticks since the Unix epoch (entity.TicksToTime) and the source of its ETag.
type Record struct {
	Entity  entity.Entity
	Version int64
	// Encoded, when non-nil, holds the properties in their stored entity.AppendProps form
	// instead of Entity.Props (which is then nil): what a scan asked for Encoded records
	// returns from an engine that stores that form, so a reader that only writes the
	// properties out (a query response) skips decoding them into values. The bag has been
	// checked (entity.CheckProps); it may share memory with other records of the page and
	// is read-only.
	Encoded []byte
	// Expiry is the row's stored expiry, in version ticks (storage.Expiry's unit), or 0
	// when it never expires: what the write that gave the row its version stored,
	// computed or explicit (Mutation.Expiry). Every read fills it — Get, GetEncoded, Scan
	// (Encoded records too), on the engine and on its Views — from the same stored row as
	// the rest of the record. A record returned is never expired at the read's clock, so
	// Expiry is 0 or after the read.
	Expiry int64
}

// Applied is what a committed Apply reports: each mutation's new version (0 for Delete),
// in the mutations' order, and the commit's Position.
type Applied struct {
	Versions []int64
	Position Position
}

// Each is what ApplyEach reports: for every mutation, in the mutations' order, its new
// version (0 for Delete) when it committed, or in Errs why it did not; and a Position that
// covers every commit of the call (0 when nothing committed).
type Each struct {
	Versions []int64
	Errs     []error
	Position Position
}

// PerMutation reports whether err, a mutation's Err in an Each, is about that mutation
// alone (a failed precondition, a unique index's value held by another entity, or an
// entity the mutation would leave invalid) rather than about the call as a whole (the
// table is gone, the store cannot be reached or is full, the caller gave up).
func PerMutation(err error) bool {
	if errors.Is(err, ErrExists) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrVersionMismatch) {
		return true
	}
	var ae *azerr.Error
	var uv *UniqueViolation
	return errors.As(err, &ae) || errors.As(err, &uv)
}

// Key addresses an entity within a table.
type Key struct {
	PartitionKey string
	RowKey       string
}

// Less orders keys as the service does: by PartitionKey, then RowKey, comparing bytes.
func (k Key) Less(o Key) bool {
	if k.PartitionKey != o.PartitionKey {
		return k.PartitionKey < o.PartitionKey
	}
	return k.RowKey < o.RowKey
}

// ScanRequest selects a key range of one table.
type ScanRequest struct {
	// Start is the first key to return (inclusive).
	Start Key
	// End, if non-nil, is the first key not to return (exclusive).
	End *Key
	// Limit caps the records returned; it must be positive.
	Limit int
	// MaxBytes, if positive, caps the page by size as well as by count: a record whose
	// RecordSize would take the page's total past MaxBytes ends the page (the result then
	// carries a resume key at that record) — unless the page is still empty, so that a
	// page holds at least one record whenever one matches in range and a scan always
	// progresses. A page's size is thus at most max(MaxBytes, the size of its first
	// record). Records the filter rejects do not count. Engines should also keep the data
	// they read and discard for a page near MaxBytes, so that a small budget over large
	// records does not cost a large read per page.
	MaxBytes int
	// Deadline, if set, ends the scan early; the result then carries a resume key.
	Deadline time.Time
	// Filter, if set, is applied to each record in the range; records it rejects are
	// examined but not returned and do not count against Limit.
	Filter func(*Record) bool
	// EncodedFilter, if set, is Filter over the stored form: the keys, the version and the
	// property bag in entity.AppendProps encoding. An engine that keeps properties in that
	// encoding should call it instead of Filter and decode only the records it accepts, so
	// a filtered scan reads just the properties the filter names; an engine that does not
	// uses Filter. Callers set both, and they must agree. An error means the stored bag is
	// corrupt and fails the scan.
	EncodedFilter func(pk, rk string, version int64, props []byte) (bool, error)
	// Encoded lets the engine return records with their properties still in the stored
	// entity.AppendProps form (Record.Encoded) rather than decoded, when it keeps that
	// form; an engine that does not returns decoded records as usual. Callers that set it
	// must accept both. The engine checks each returned bag (entity.CheckProps), so a
	// corrupt one fails the scan as a decoding error would.
	Encoded bool
}

// ScanResult is one page of a scan. Next, when non-nil, is the key to resume from
// (pass it as the next request's Start); nil means the range is exhausted. Next lies after
// the last returned record and at or before the next unreturned one, and never before the
// request's Start. Without Filter, Deadline or MaxBytes a page holds exactly Limit records
// when that many remain; with them it may hold fewer, even none (never none for MaxBytes
// alone), and still carry Next.
//
// A Scan whose context is done before it completes returns the context's error, not a
// partial page: the caller is gone, and engines stop reading within a bounded number of
// records of the cancellation.
type ScanResult struct {
	Records []Record
	// Blocks are the buffers (from GetBlock) that the Encoded records' bags lie in, for
	// a caller done with the records to hand back with PutBlocks; nil when there are none.
	Blocks []*[]byte
	Next   *Key
	// Examined is how many stored records the scan read to produce Records (at least
	// len(Records)): those a filter rejected and, in the pebble engine, expired ones
	// too. Examined against returned is what tells a filter that does not use keys.
	Examined int
}

// BlockSize is the capacity of the buffers GetBlock hands out: 32 KiB, the largest the Go
// allocator still serves from its size classes, about thirty 1 KiB property bags.
const BlockSize = 32 << 10

var blockPool = sync.Pool{New: func() any { b := make([]byte, 0, BlockSize); return &b }}

// GetBlock returns an empty buffer of capacity BlockSize for an Encoded scan's property
// bags (ScanResult.Blocks), recycled when its last reader returned it with PutBlocks.
func GetBlock() *[]byte {
	bp := blockPool.Get().(*[]byte)
	*bp = (*bp)[:0]
	return bp
}

// PutBlocks recycles blocks. The caller must not use any record whose bag lies in them
// afterwards: the next scan overwrites them.
func PutBlocks(blocks []*[]byte) {
	for _, bp := range blocks {
		if cap(*bp) == BlockSize {
			blockPool.Put(bp)
		}
	}
}

// RecordSize is a record's size for ScanRequest.MaxBytes: its keys plus its properties in
// the entity.AppendProps encoding, which is how both engines store them. It tracks the
// memory the record takes once read (decoded strings and bytes are about as long).
func RecordSize(r *Record) int {
	if r.Encoded != nil {
		return len(r.Entity.PartitionKey) + len(r.Entity.RowKey) + len(r.Encoded)
	}
	return len(r.Entity.PartitionKey) + len(r.Entity.RowKey) + entity.EncodedSize(r.Entity.Props)
}

// TableInfo describes a table in the catalogue. Name keeps the case it was created with.
type TableInfo struct {
	Name     string
	Settings TableSettings
}

// Engine is the storage boundary. Table names are matched case-insensitively (TableKey)
// and kept in their original case. Each account has its own namespace of tables.
//
// Contracts every engine keeps:
//   - Apply is all or nothing: either every mutation commits or none does and the error is
//     an *ApplyError naming the first failing mutation. Mutations run in order, so a later
//     one sees the effect of an earlier one on the same row.
//   - Every committed write gives the entity a version strictly greater than any version
//     it had before — across deletes, re-inserts and restarts — at 100 ns resolution,
//     close to the wall clock (it is the Timestamp).
//   - An Apply with no mutations does nothing; an unknown Op is an error.
//   - Apply returns only after the write is durable (synced or committed).
//   - ApplyEach is not atomic: each of its mutations commits or fails on its own, under
//     exactly the rules (preconditions, merge, validation, expiry) of an Apply of that
//     mutation alone, and Each.Errs[i] then holds what that Apply's ApplyError would: the
//     failed mutation wrote nothing, and no other mutation of the call depends on it.
//     The mutations must name distinct rows (else an error, and nothing is written). Its
//     cost is linear in the mutations whatever fails: a failure never makes the engine
//     apply the others again. An error that is not about one mutation (the table is
//     missing, the store unavailable or full, ctx done) is returned when nothing of the
//     call committed, and is otherwise the Err of each mutation it kept from committing.
//     What ApplyEach reports as committed is durable when it returns.
//   - Two concurrent conditional writes on one entity never both succeed; Applies on
//     different partitions do not wait for each other.
//   - DeleteTable is instant; the rows are purged in the background, and a table created
//     again under the same name never shows them.
//
// Table settings and expiry (elastic tables):
//   - A table's TableSettings are part of its catalogue entry: CreateTable stores them
//     with the table, SetTableSettings replaces them, GetTable and ListTables report them,
//     and a table created again under the name starts with the settings it is created
//     with. A change applies to every Apply that starts after SetTableSettings returns,
//     on every front end; entities keep the expiry they were written with.
//   - Every row an Apply writes gets the expiry storage.Expiry computes from the
//     table's settings at the time of the write, the row's properties after the mutation
//     (merged) and its new version; an error from it fails the Apply with an *ApplyError
//     naming the mutation that left the row with the refused TTL property, and nothing
//     is written.
//   - An expired row (Expired(expiry, now) with now from the engine's one clock: the
//     process's for Pebble, the database server's for PostgreSQL) is absent for every
//     read and precondition: Get answers ErrNotFound, Scan skips it (it is examined but
//     neither returned nor counted), Insert succeeds over it, Replace, Merge and Delete
//     fail with ErrNotFound; a version written over it is still greater than its own.
//   - Expired rows are removed in the background within a bounded delay (about a
//     minute), at a cost proportional to the rows that expire, not to the table.
//
// Explicit expiry (Mutation.Expiry), for writes that reproduce an entity exactly:
//   - A mutation with an explicit expiry gives the row it writes that expiry (ExpiryNever:
//     none) instead of the computed one, in Apply and ApplyEach alike; the TTL property is
//     then not checked, and the row keeps the expiry until it is written again. Later
//     writes without one compute theirs as above (a merge included: the explicit expiry
//     does not stick to the row).
//   - It is refused on a standard table: the mutation fails with an *azerr.Error (400
//     InvalidInput), judged by the settings the write reads, as a refused TTL property
//     is. On an elastic table it is taken whatever the TTL setting: an entity written
//     while time-to-live was on keeps its expiry after it is turned off, and a copy of it
//     must too.
//   - An explicit instant at or before the write's own new version (its Timestamp) is
//     accepted, and the row is expired at once: the mutation succeeds and reports its
//     version, but the row is absent from then on, for later mutations of the same Apply
//     too, exactly as a row whose expiry has come (the engine may keep it stored until
//     the purge, or not store it at all). A copy races the clock, and refusing such a
//     write would fail a whole changeset for the sake of one entity that has just expired.
//   - A Delete takes none, and a value below ExpiryNever is invalid: the mutation fails
//     (not with an *azerr.Error: the caller checks what it is given).
//
// Commit positions (session tokens):
//   - Every committed Apply reports a Position that covers its own commit and is greater
//     than the Position of every Apply that returned before it started, across restarts.
//     (Two Applies that overlap may report the same Position: PostgreSQL reads it after
//     the commit, when a later commit may already be in.)
//   - ReadView(ctx, opts) returns a View whose reads see every write whose Position is
//     at most opts.At. If no source the level allows has reached it within a short wait
//     (about a second), it fails with ErrFuturePosition; it never returns a view that
//     could miss such a write. Position(ctx) covers every write that returned before it.
//
// Read consistency (read replicas):
//   - At Strong, and at Session without a position, a View reads the latest committed
//     state, as the Engine's own methods do. Weaker levels may read an older committed
//     state (a replica's): never a partial Apply, never a write without the writes
//     committed before it. An engine without replicas reads its latest state at every
//     level.
//   - A View's Position covers what its reads saw, so a View opened at it never reads an
//     older state whichever front end and replica serve it (paging stays consistent).
//   - A replica that cannot serve is never an error: the read goes to another source,
//     at worst the primary.
//
// Stored access policies (a table's ACL) and service properties are opaque bytes to the
// engine: the server encodes and decodes them; an engine only keeps them. Contracts:
//   - Set* returns only after the value is durable (synced or committed), and every later
//     call — from any front end sharing the backing store — sees it at once: engines whose
//     store is shared (PostgreSQL) keep no copy in process memory.
//   - Setting nil or an empty slice clears the value; Get* then returns nil. Get* returns
//     nil when nothing was ever set, and otherwise a copy the caller may keep.
//   - Accounts are isolated: one account's ACLs and properties are never another's.
//   - A table's ACL belongs to the table (its id), not its name: deleting the table
//     removes it, and a table created again under the name starts with none. A
//     SetTableACL racing DeleteTable either lands before the delete (and is removed with
//     the table) or fails with ErrTableNotFound; it never attaches to a later table.
//   - Callers bound the size (at most 64 KiB); engines work with larger values too.
type Engine interface {
	Reader
	// ChangeFeed reads, waits on and trims the change feeds of tables that record one
	// (changes.go).
	ChangeFeed
	// IndexBuilder builds indexes declared on tables with data (indexes.go).
	IndexBuilder

	// Name is the engine's name ("pebble", "postgres"); Positions of different engines
	// are not comparable.
	Name() string

	CreateTable(ctx context.Context, account, name string, settings TableSettings) error
	// SetTableSettings replaces a table's settings. ErrTableNotFound for a missing table.
	// Like SetTableACL it never attaches to a table created after a racing DeleteTable.
	SetTableSettings(ctx context.Context, account, name string, settings TableSettings) error
	DeleteTable(ctx context.Context, account, name string) error

	// Apply runs mutations on one partition atomically and returns each mutation's new
	// version (0 for Delete) and the commit's position.
	Apply(ctx context.Context, account, table, partitionKey string, muts []Mutation) (Applied, error)
	// ApplyEach runs mutations of distinct rows on one partition each on its own, not as
	// a transaction, and reports each one's outcome (see above): the engine write of
	// bulk requests, whose operations succeed or fail one by one.
	ApplyEach(ctx context.Context, account, table, partitionKey string, muts []Mutation) (Each, error)
	// ReadView opens a View for one request's reads at the given consistency (see
	// above and View).
	ReadView(ctx context.Context, opts ReadOptions) (View, error)
	// Position is a position that covers every write that returned before the call, as
	// a session token for writes that do not report one (table-level changes).
	Position(ctx context.Context) (Position, error)

	// SetTableACL replaces them (nil or empty clears). ErrTableNotFound for a missing table.
	SetTableACL(ctx context.Context, account, table string, acl []byte) error
	// SetServiceProperties replaces them (nil or empty clears).
	SetServiceProperties(ctx context.Context, account string, props []byte) error

	Close() error
}

// TableKey is the case-folded form under which a table name is unique.
func TableKey(name string) string { return strings.ToLower(name) }
