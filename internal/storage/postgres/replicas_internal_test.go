package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/pgtest"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5"
)

// hungReplicaEngine opens an engine whose one replica is a private standby, with a table
// T holding entity (p, r) that the standby has replayed, and returns it with the standby
// and the account.
func hungReplicaEngine(t *testing.T, opts Options) (*Engine, *pgtest.Standby, string) {
	t.Helper()
	ctx := context.Background()
	url := internalURL(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	standby := pgtest.StartStandby(t, pgtest.StandbyOptions{})
	opts.ReplicaURLs = []string{standby.URL(cfg.Database)}
	opts.DisablePurger = true
	e, err := Open(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	acct := fmt.Sprintf("hung%016x", rand.Uint64())
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	applied, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "r",
		Props: []entity.Property{{Name: "N", Value: entity.Int64Value(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	rep := e.replicas.list[0]
	deadline := time.Now().Add(30 * time.Second)
	for !rep.rotation.Load() || storage.Position(rep.replay.Load()) < applied.Position {
		if time.Now().After(deadline) {
			t.Fatalf("the standby is not in rotation with the entity after 30 s: %+v", e.Replicas())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return e, standby, acct
}

// TestReplicaLeavingCancelsReads: a read under way on a replica (here a hung one, with a
// read timeout far longer than the test) is cancelled the moment the replica leaves
// rotation, and runs again on the primary in the same call.
func TestReplicaLeavingCancelsReads(t *testing.T) {
	e, standby, acct := hungReplicaEngine(t, Options{ReplicaReadTimeout: time.Minute})
	rep := e.replicas.list[0]
	standby.Freeze()
	defer standby.Thaw()
	type result struct {
		source string
		err    error
		at     time.Time
	}
	done := make(chan result, 1)
	go func() {
		v, err := e.ReadView(context.Background(), storage.ReadOptions{Consistency: storage.Eventual})
		if err != nil {
			done <- result{err: err, at: time.Now()}
			return
		}
		_, err = v.Get(context.Background(), acct, "T", "p", "r")
		done <- result{v.Source(), err, time.Now()}
	}()
	select {
	case r := <-done:
		t.Fatalf("the read on the hung replica returned before it left rotation: %+v", r)
	case <-time.After(500 * time.Millisecond):
	}
	left := time.Now()
	rep.out(true, "test: taken out of rotation")
	select {
	case r := <-done:
		if r.err != nil || r.source != storage.SourcePrimary {
			t.Fatalf("the read ended with %v from %q, want success from the primary", r.err, r.source)
		}
		t.Logf("the read ran again on the primary %v after the replica left rotation", r.at.Sub(left).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatalf("the read on the replica still waits 5 s after the replica left rotation")
	}
}

// TestReplicaReadTimeout: a read on a hung replica waits no longer than
// Options.ReplicaReadTimeout, runs again on the primary in the same call, and the replica
// leaves rotation saying it was slow.
func TestReplicaReadTimeout(t *testing.T) {
	const bound = 300 * time.Millisecond
	e, standby, acct := hungReplicaEngine(t, Options{ReplicaReadTimeout: bound})
	standby.Freeze()
	defer standby.Thaw()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: storage.Eventual})
	if err != nil {
		t.Fatal(err)
	}
	if v.Source() == storage.SourcePrimary {
		t.Skip("the replica left rotation (a poll timed out) before the read was routed")
	}
	if _, err := v.Get(ctx, acct, "T", "p", "r"); err != nil {
		t.Fatalf("read after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	took := time.Since(start)
	if v.Source() != storage.SourcePrimary || took > bound+2*time.Second {
		t.Fatalf("read from %s after %v, want the primary within %v", v.Source(), took, bound+2*time.Second)
	}
	st := e.Replicas()[0]
	if st.InRotation || !strings.Contains(st.Error, "slow") {
		t.Fatalf("replica after the timeout: %+v, want out of rotation, slow", st)
	}
	t.Logf("read served by the primary after %v; replica: %s", took.Round(time.Millisecond), st.Error)
}
