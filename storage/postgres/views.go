package postgres

import (
	"context"

	"github.com/ceruleandb/cerulean/storage"
)

// ReadView opens a view for one request's reads (see storage.View).
func (e *Engine) ReadView(ctx context.Context, opts storage.ReadOptions) (storage.View, error) {
	if err := e.waitPrimary(ctx, opts.At); err != nil {
		return nil, err
	}
	return &primaryView{Engine: e, at: opts.At}, nil
}

type primaryView struct {
	*Engine
	at storage.Position
}

func (v *primaryView) Source() string { return storage.SourcePrimary }

func (v *primaryView) Position() storage.Position {
	return max(v.at, storage.Position(v.highest.Load()))
}

// ReplicaStatus is what the engine knows of one replica, for diagnostics.
type ReplicaStatus struct {
	// Name is the replica's host:port (its URL without credentials).
	Name string `json:"name"`
	// Reachable: the last poll answered.
	Reachable bool `json:"reachable"`
	// InRotation: reads may go to it (reachable, a standby of this primary, not
	// further behind than Options.ReplicaMaxLag).
	InRotation bool `json:"inRotation"`
	// ReplayPosition is the last replay position read from it; PrimaryPosition the
	// primary's at about the same time.
	ReplayPosition  uint64 `json:"replayPosition"`
	PrimaryPosition uint64 `json:"primaryPosition"`
	// LagBytes is PrimaryPosition − ReplayPosition (0 when caught up).
	LagBytes uint64 `json:"lagBytes"`
	// StalenessSeconds bounds how old the replica's state is: it holds every write
	// the primary had committed that long ago.
	StalenessSeconds float64 `json:"stalenessSeconds"`
	// Reads is how many views this front end has served from it.
	Reads uint64 `json:"reads"`
	// Error is why it is out of rotation, if it is.
	Error string `json:"error,omitempty"`
}

// Replicas reports the state of each configured replica, in the order configured.
func (e *Engine) Replicas() []ReplicaStatus { return nil }
