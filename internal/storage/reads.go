package storage

import (
	"context"
	"fmt"
)

// Consistency is how fresh a read must be. The levels are Cosmos DB's, strongest first;
// an engine without read replicas serves every level from its latest state (Strong).
type Consistency uint8

const (
	// Strong reads the latest committed state: every write that returned before the read
	// started, from any front end. The zero value, and what Azure Tables offers.
	Strong Consistency = iota
	// BoundedStaleness reads a state no older than a bound (the engine's, in time) behind
	// the latest.
	BoundedStaleness
	// Session reads a state that holds every write up to ReadOptions.At (a session
	// token's position): read-your-writes and monotonic reads for a client that passes
	// along the token of its last answer. Without a position it is Strong.
	Session
	// ConsistentPrefix reads some committed state: never a partial transaction, never
	// writes out of their commit order, but possibly old.
	ConsistentPrefix
	// Eventual is ConsistentPrefix without the promise of order across reads; engines
	// serve it as ConsistentPrefix.
	Eventual
)

var consistencyNames = [...]string{"Strong", "BoundedStaleness", "Session", "ConsistentPrefix", "Eventual"}

// String is the level's name as Cosmos DB spells it (x-ms-consistency-level).
func (c Consistency) String() string {
	if int(c) < len(consistencyNames) {
		return consistencyNames[c]
	}
	return fmt.Sprintf("Consistency(%d)", uint8(c))
}

// ParseConsistency reads a level by its exact name; ok is false for anything else.
func ParseConsistency(s string) (c Consistency, ok bool) {
	for i, n := range consistencyNames {
		if s == n {
			return Consistency(i), true
		}
	}
	return Strong, false
}

// ReadOptions says what state a read must see.
type ReadOptions struct {
	// Consistency is the level asked for.
	Consistency Consistency
	// At is a position the read must cover at every level: every write up to it is seen
	// (a session token's, or the position a previous page was read at, so that paging
	// never goes back in time). 0 asks for nothing beyond the level.
	At Position
}

// Reader is every read an engine serves: entities and the catalogue. An Engine's own
// methods read its latest committed state (what a write that returned has written, from
// any front end); a View's read the state it was opened at, or a later one.
type Reader interface {
	IndexReader
	Get(ctx context.Context, account, table, partitionKey, rowKey string) (Record, error)
	// GetEncoded is Get for a caller that only writes the entity out (a point read's
	// response): where the engine keeps the stored entity.AppendProps form, the record
	// carries it in Record.Encoded and Entity.Props is nil, so the properties are never
	// decoded into values. The bag is checked, and read-only: it may be the engine's
	// cached copy, which stays as it is for as long as the record is held, whatever is
	// written later. An engine that does not keep that form returns what Get does.
	GetEncoded(ctx context.Context, account, table, partitionKey, rowKey string) (Record, error)
	Scan(ctx context.Context, account, table string, req ScanRequest) (ScanResult, error)
	GetTable(ctx context.Context, account, name string) (TableInfo, error)
	// ListTables returns up to limit tables whose TableKey is ≥ TableKey(from), in
	// TableKey order, and the name to resume from ("" when there are no more).
	ListTables(ctx context.Context, account, from string, limit int) ([]TableInfo, string, error)
	// GetTableACL returns the table's stored access policies as last set (nil when never
	// set). ErrTableNotFound for a missing table. A table deleted and created again
	// starts with none.
	GetTableACL(ctx context.Context, account, table string) ([]byte, error)
	// GetServiceProperties returns the account's service properties as last set (nil
	// when never set).
	GetServiceProperties(ctx context.Context, account string) ([]byte, error)
}

// View is a Reader for one request, opened by Engine.ReadView at a consistency level:
// its reads are served by one source (the primary, or a replica the level allows) and
// see at least every write up to ReadOptions.At.
//
// Position is what a later read must ask for (ReadOptions.At) to never see an older
// state than this view's reads did: an upper bound of the writes they saw, at or above
// ReadOptions.At, and covered by the latest committed state. It grows as the view
// reads; ask for it after the reads. A view is not safe for concurrent use.
type View interface {
	Reader
	// Source names where the reads were served: "primary", or "replica <name>".
	Source() string
	// Position is the position the view's reads are covered by (see above).
	Position() Position
}

// SourcePrimary is View.Source for reads served by the engine's own (primary) store.
const SourcePrimary = "primary"

// ReplicaSource is View.Source for reads served by the named replica.
func ReplicaSource(name string) string { return "replica " + name }
