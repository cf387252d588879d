package storage

import (
	"fmt"

	"github.com/ceruleandb/cerulean/internal/entity"
)

// Row is an entity's state while an engine evaluates an Apply's mutations in memory
// (read the rows, run the mutations in order, write the final states). Engines that do so
// share Step, so every precondition and merge is decided the same way everywhere.
type Row struct {
	Exists  bool  // exists after the mutations applied so far
	Dirty   bool  // changed by the Apply
	Version int64 // version after the mutations applied so far
	// Props are the properties after the mutations applied so far. While Encoded is set
	// they have not been decoded from it yet.
	Props []entity.Property
	// Encoded, if set, is the stored property bag (entity.AppendProps), decoded only
	// when a merge needs it.
	Encoded []byte
}

// Step applies mutation m to row r of partition pk: it checks m's precondition, computes
// the properties, and gives a written row the version next(r.Version). It returns the new
// version (0 for Delete) or why m fails: ErrExists, ErrNotFound, ErrVersionMismatch, or
// the validation error of a merged result (entity.ValidateShape). On failure the caller
// must discard every row of the Apply.
func Step(pk string, m *Mutation, r *Row, next func(prev int64) int64) (int64, error) {
	switch m.Op {
	case Insert:
		if r.Exists {
			return 0, ErrExists
		}
		r.Props, r.Encoded = m.Props, nil
	case InsertOrReplace:
		r.Props, r.Encoded = m.Props, nil
	case InsertOrMerge:
		if !r.Exists {
			r.Props, r.Encoded = m.Props, nil
			break
		}
		if err := r.merge(pk, m); err != nil {
			return 0, err
		}
	case Replace, Merge, Delete:
		if !r.Exists {
			return 0, ErrNotFound
		}
		if m.IfMatch != 0 && m.IfMatch != r.Version {
			return 0, ErrVersionMismatch
		}
		switch m.Op {
		case Replace:
			r.Props, r.Encoded = m.Props, nil
		case Merge:
			if err := r.merge(pk, m); err != nil {
				return 0, err
			}
		case Delete:
			if m.Expiry != ExpiryComputed {
				return 0, fmt.Errorf("a delete takes no expiry")
			}
			// The version stays, so a re-insert in the same Apply exceeds it.
			r.Exists, r.Dirty, r.Props, r.Encoded = false, true, nil, nil
			return 0, nil
		}
	default:
		return 0, fmt.Errorf("unknown mutation %v", m.Op)
	}
	r.Exists, r.Dirty = true, true
	r.Version = next(r.Version)
	return r.Version, nil
}

func (r *Row) merge(pk string, m *Mutation) error {
	if r.Encoded != nil {
		props, err := entity.DecodeProps(r.Encoded)
		if err != nil {
			return fmt.Errorf("decode stored entity: %w", err)
		}
		r.Props, r.Encoded = props, nil
	}
	merged := entity.Merge(r.Props, m.Props)
	if err := entity.ValidateShape(&entity.Entity{PartitionKey: pk, RowKey: m.RowKey, Props: merged}); err != nil {
		return err
	}
	r.Props = merged
	return nil
}
