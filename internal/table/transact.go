package table

import (
	"context"
	"errors"
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// MaxBatchOperations is the most operations one entity group transaction may hold.
const MaxBatchOperations = 100

// BatchOp is one operation of an entity group transaction.
type BatchOp struct {
	// Op is Insert, or one of the write modes as WriteEntity would choose them
	// (Replace/Merge with a condition, InsertOrReplace/InsertOrMerge without), or Delete.
	Op     storage.Op
	Entity entity.Entity
	Cond   Condition
	// Expiry is the operation's explicit expiry (storage.Mutation.Expiry; zero: computed).
	Expiry int64
}

// BatchError reports the operation that failed a transaction and why. Nothing of the
// transaction was written.
type BatchError struct {
	Index int
	Err   *azerr.Error
}

func (e *BatchError) Error() string { return e.Err.Error() }

// OpFor maps a write mode and condition to the mutation kind, as single writes do.
func OpFor(mode Mode, cond Condition) storage.Op {
	switch {
	case mode == ReplaceMode && cond.Present:
		return storage.Replace
	case mode == ReplaceMode:
		return storage.InsertOrReplace
	case cond.Present:
		return storage.Merge
	default:
		return storage.InsertOrMerge
	}
}

// Transact runs an entity group transaction: every operation on one table and one
// partition, each entity at most once, at most 100 operations, all committed atomically
// by one engine Apply — or none, with a *BatchError naming the first failing operation.
// It reports each operation's new version (0 for a delete) and the commit's position,
// shared by every operation (one commit).
func (s *Service) Transact(ctx context.Context, account, table string, ops []BatchOp) (storage.Applied, error) {
	if len(ops) == 0 {
		return storage.Applied{}, nil
	}
	if len(ops) > MaxBatchOperations {
		return storage.Applied{}, &BatchError{Index: 0, Err: azerr.Newf(azerr.InvalidInput, "The batch request operation exceeds the maximum 100 changes per change set.")}
	}
	pk := ops[0].Entity.PartitionKey
	seen := make(map[string]struct{}, len(ops))
	muts := make([]storage.Mutation, len(ops))
	for i := range ops {
		op := &ops[i]
		e := &op.Entity
		if e.PartitionKey != pk {
			return storage.Applied{}, &BatchError{Index: i, Err: azerr.New(azerr.CommandsInBatchActOnDifferentPartitions)}
		}
		if _, dup := seen[e.RowKey]; dup {
			return storage.Applied{}, &BatchError{Index: i, Err: azerr.New(azerr.InvalidDuplicateRow)}
		}
		seen[e.RowKey] = struct{}{}
		var err error
		if op.Op == storage.Delete {
			if !op.Cond.Present {
				err = azerr.Newf(azerr.MissingRequiredHeader, "An HTTP header that's mandatory for this request is not specified.").WithDetail("If-Match")
			} else if err = entity.ValidateKey("PartitionKey", e.PartitionKey); err == nil {
				err = entity.ValidateKey("RowKey", e.RowKey)
			}
		} else {
			err = entity.Validate(e)
		}
		if err != nil {
			ae, _ := azerr.As(err)
			return storage.Applied{}, &BatchError{Index: i, Err: ae}
		}
		muts[i] = storage.Mutation{Op: op.Op, RowKey: e.RowKey, Props: e.Props, Expiry: op.Expiry}
		if op.Cond.Present {
			muts[i].IfMatch = op.Cond.ifMatch()
		}
	}
	applied, err := s.eng.Apply(ctx, account, table, pk, muts)
	if err != nil {
		var ae *storage.ApplyError
		index := 0
		if errors.As(err, &ae) {
			index = ae.Index
		}
		se, _ := azerr.As(s.mapErr(err, entityScope))
		return storage.Applied{}, &BatchError{Index: index, Err: se}
	}
	s.markAvailable()
	return applied, nil
}

// SameTable reports whether two table names address the same table.
func SameTable(a, b string) bool { return strings.EqualFold(a, b) }
