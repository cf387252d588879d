package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/index"
)

// Secondary indexes of elastic tables (docs/indexes-design.md): declared in the table's
// settings, maintained by the engine with the entities.

// Limits of index declarations.
const (
	// MaxIndexes is the most indexes a table declares.
	MaxIndexes = 8
	// MaxIndexProperties is the most properties one index orders by.
	MaxIndexProperties = 4
	// MaxIndexNameLen is the longest index name.
	MaxIndexNameLen = 63
)

// IndexState is where an index stands: only a ready index answers queries.
type IndexState string

// The states of an index.
const (
	// IndexBuilding: declared on a table that may hold entities it has no entries for
	// yet; writes maintain it, a builder adds the rest.
	IndexBuilding IndexState = "building"
	// IndexReady: every entity with the index's properties has its entry.
	IndexReady IndexState = "ready"
	// IndexFailed: a unique index whose build found two entities with one value; never
	// used, kept so that its state (and why) shows until it is dropped.
	IndexFailed IndexState = "failed"
)

// IndexDef is one declared index.
type IndexDef struct {
	// Name is the index's name: 1–MaxIndexNameLen ASCII letters and digits starting with
	// a letter, unique in the table without regard to case.
	Name string `json:"name"`
	// Properties are the properties the index orders by, the first first: 1 to
	// MaxIndexProperties distinct valid property names, none of them PartitionKey, RowKey
	// or Timestamp.
	Properties []string `json:"properties"`
	// Unique: no two entities of the table hold equal values in all of Properties.
	Unique bool `json:"unique,omitempty"`
	// ID is the engine's number of the index, never reused in its table; 0 until the
	// engine assigns it (SetTableSettings, CreateTable).
	ID uint32 `json:"id,omitempty"`
	// State is the engine's: IndexBuilding, IndexReady or IndexFailed ("" until assigned).
	State IndexState `json:"state,omitempty"`
	// Progress is the engine's: while building, how many of the table's rows the build
	// has passed (compare with the table's approximate row count); kept once ready.
	Progress int64 `json:"progress,omitempty"`
	// Failure is the engine's: why a failed index failed (the two entities holding one
	// value of a unique index, named by their keys).
	Failure string `json:"failure,omitempty"`
}

// AppendKey appends to dst the index key of an entity with props in d: its values' keys
// (index.AppendValue), concatenated in d's order. It reports false, appending nothing,
// when the entity has no entry in d: it lacks one of d's properties, or holds one in a
// type no index orders. Both engines and the conformance suite key entries with it.
func (d *IndexDef) AppendKey(dst []byte, props []entity.Property) ([]byte, bool) {
	return d.appendKey(dst, props, false)
}

// AppendUniqueKey is AppendKey made exact (index.AppendOffsets): the key of the entity's
// unique entry in d, which two entities share exactly when they hold equal values. Index
// keys hold numbers as float64s, so two Int64s beyond 2^53 that round alike share an index
// key, and a unique index keyed by it would refuse one for the other. The exact key is the
// index key for nearly every entity (all but those holding such Int64s), and it starts
// with the index key always, so the spans of index.Spans hold it wherever they hold its
// index key: a unique index's entries are read as its plain entries are.
func (d *IndexDef) AppendUniqueKey(dst []byte, props []entity.Property) ([]byte, bool) {
	return d.appendKey(dst, props, true)
}

func (d *IndexDef) appendKey(dst []byte, props []entity.Property, exact bool) ([]byte, bool) {
	n := len(dst)
	var vals [MaxIndexProperties]entity.Value
	for j, name := range d.Properties {
		i := slices.IndexFunc(props, func(p entity.Property) bool { return p.Name == name })
		if i < 0 || !index.Known(props[i].Value.Type) || j >= len(vals) {
			return dst[:n], false
		}
		vals[j] = props[i].Value
		dst = index.AppendValue(dst, vals[j])
	}
	if exact {
		dst = index.AppendOffsets(dst, vals[:len(d.Properties)])
	}
	return dst, true
}

// SameDefinition reports whether d and o declare the same index (name, properties and
// uniqueness), whatever their ids and states.
func (d IndexDef) SameDefinition(o IndexDef) bool {
	return strings.EqualFold(d.Name, o.Name) && d.Unique == o.Unique && slices.Equal(d.Properties, o.Properties)
}

// validIndexName reports whether name is an index name (see IndexDef.Name).
func validIndexName(name string) bool {
	if name == "" || len(name) > MaxIndexNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// validateIndexes checks the declarations of a table of settings s: elastic tables only,
// at most MaxIndexes, each well formed, names unique. Errors are *azerr.Error (400
// InvalidInput) naming the index and what is wrong.
func validateIndexes(s TableSettings) error {
	if len(s.Indexes) == 0 {
		return nil
	}
	if !s.Elastic {
		return azerr.Newf(azerr.InvalidInput, "Secondary indexes are available on elastic tables only.")
	}
	if len(s.Indexes) > MaxIndexes {
		return azerr.Newf(azerr.InvalidInput, "A table has at most %d indexes; %d are declared.", MaxIndexes, len(s.Indexes))
	}
	for i, d := range s.Indexes {
		if !validIndexName(d.Name) {
			return azerr.Newf(azerr.InvalidInput, "The index name '%s' is not valid: it must be 1 to %d letters and digits, starting with a letter.", d.Name, MaxIndexNameLen)
		}
		for _, o := range s.Indexes[:i] {
			if strings.EqualFold(o.Name, d.Name) {
				return azerr.Newf(azerr.InvalidInput, "The index name '%s' is declared twice.", d.Name)
			}
		}
		if len(d.Properties) == 0 || len(d.Properties) > MaxIndexProperties {
			return azerr.Newf(azerr.InvalidInput, "The index '%s' must name 1 to %d properties; it names %d.", d.Name, MaxIndexProperties, len(d.Properties))
		}
		for j, p := range d.Properties {
			switch p {
			case "PartitionKey", "RowKey", "Timestamp":
				return azerr.Newf(azerr.InvalidInput, "The index '%s' names '%s', which is not an indexable property: entities are ordered by PartitionKey and RowKey already.", d.Name, p)
			}
			if entity.ValidatePropertyName(p) != nil {
				return azerr.Newf(azerr.InvalidInput, "The index '%s' names '%s', which is not a valid property name.", d.Name, p)
			}
			if slices.Contains(d.Properties[:j], p) {
				return azerr.Newf(azerr.InvalidInput, "The index '%s' names the property '%s' twice.", d.Name, p)
			}
		}
		switch d.State {
		case "", IndexBuilding, IndexReady, IndexFailed:
		default:
			return azerr.Newf(azerr.InvalidInput, "The index '%s' has the state '%s', which is none of building, ready and failed.", d.Name, d.State)
		}
	}
	return nil
}

// AssignIndexIDs returns next, settings replacing stored, with the engine's part of its
// index declarations filled in: an index whose definition (SameDefinition) stored has
// keeps that one's id and state; any other gets the next id above the table's
// high-water mark (IndexIDs, carried over from stored and advanced) and starts building,
// or ready when empty reports the table holds no entities yet. Ids and states next
// carries are ignored: only the engine assigns them. Engines call it under the lock that
// orders the table's settings changes, so ids are never handed out twice.
func AssignIndexIDs(stored, next TableSettings, empty bool) TableSettings {
	next.IndexIDs = max(stored.IndexIDs, next.IndexIDs)
	if len(next.Indexes) == 0 {
		return next
	}
	out := make([]IndexDef, len(next.Indexes))
	for i, d := range next.Indexes {
		d.Properties = slices.Clone(d.Properties)
		d.ID, d.State, d.Progress, d.Failure = 0, "", 0, ""
		for _, s := range stored.Indexes {
			if s.SameDefinition(d) && s.ID != 0 {
				d.ID, d.State, d.Progress, d.Failure = s.ID, s.State, s.Progress, s.Failure
				break
			}
		}
		if d.ID == 0 {
			next.IndexIDs++
			d.ID, d.State = next.IndexIDs, IndexBuilding
			if empty {
				d.State = IndexReady
			}
		}
		out[i] = d
	}
	next.Indexes = out
	return next
}

// ErrIndexNotFound: the table declares no index of the id asked for (dropped, or never
// declared).
var ErrIndexNotFound = errors.New("index not found")

// IndexCursor is an entry of an index: where an index read resumes (after it).
type IndexCursor struct {
	// Key is the entry's index key (internal/index: its values' keys, concatenated).
	Key          []byte
	PartitionKey string
	RowKey       string
}

// IndexScanRequest is a read of one index (Engine.ScanIndex).
type IndexScanRequest struct {
	// Index is the index's id (IndexDef.ID).
	Index uint32
	// Spans are the index keys to read, sorted and disjoint (index.Spans); an entry is
	// in a span when its index key is.
	Spans []index.Span
	// After, when set, resumes after that entry.
	After *IndexCursor
	// Limit bounds the rows returned (> 0).
	Limit int
	// KeyFilter, when set, drops entries whose row keys it refuses before their rows are
	// read (the key predicates of the query's filter): they count as Examined, not
	// against Limit.
	KeyFilter func(partitionKey, rowKey string) bool
}

// IndexScanResult is a page of an index read: the stored, unexpired rows of the entries
// read, in index order (index key, PartitionKey, RowKey), and the entry to resume after
// (nil when the spans are exhausted).
type IndexScanResult struct {
	Records []Record
	Next    *IndexCursor
	// Examined is how many entries the read went through (rows expired but not yet
	// purged are entries without a record).
	Examined int
}

// IndexReader is the index part of Reader (docs/indexes-design.md §4): Engines and
// their Views serve it, so index plans run on replicas too.
type IndexReader interface {
	// ScanIndex reads, in index order, the stored unexpired rows whose entries in index
	// req.Index fall in req.Spans (IndexScanRequest). ErrTableNotFound for a missing
	// table, ErrIndexNotFound when the table declares no index of that id.
	ScanIndex(ctx context.Context, account, table string, req IndexScanRequest) (IndexScanResult, error)
	// CountIndex counts the entries of index idx within spans, stopping at limit: a
	// bounded probe the planner weighs an index plan with (its cost is at most about
	// limit entries' reads, never a row's). Expired rows not yet purged may count.
	CountIndex(ctx context.Context, account, table string, idx uint32, spans []index.Span, limit int) (int, error)
	// CountRows counts the stored rows from start up to end (nil: the table's end),
	// stopping at limit: the key plan's side of the same probe. Expired rows not yet
	// purged may count.
	CountRows(ctx context.Context, account, table string, start Key, end *Key, limit int) (int, error)
}

// IndexBuilder builds the indexes declared on tables with data (docs/indexes-design.md
// §5); it is part of Engine.
type IndexBuilder interface {
	// BuildIndexes advances every building index by a chunk of its table's rows, writing
	// the entries of the rows passed and the position reached in one batch or
	// transaction (so a restart resumes there), and marks an index ready when its scan
	// ends, or failed when a unique index meets a value twice. It returns how many rows
	// it passed (0: nothing left to build). The engine runs it in the background too; it
	// is a maintenance hook, safe to call from several front ends at once.
	BuildIndexes(ctx context.Context) (int, error)
}

// UniqueViolation is the ApplyError.Err (or EachResult error) of a write that would give
// a unique index a value another entity of the table holds: nothing of the Apply was
// written. PartitionKey and RowKey name the entity holding the value, when the engine
// knows it (empty otherwise).
type UniqueViolation struct {
	Index                string
	PartitionKey, RowKey string
}

func (u *UniqueViolation) Error() string {
	if u.PartitionKey == "" && u.RowKey == "" {
		return fmt.Sprintf("unique index %s: the value is held by another entity", u.Index)
	}
	return fmt.Sprintf("unique index %s: the value is held by the entity (%q, %q)", u.Index, u.PartitionKey, u.RowKey)
}
