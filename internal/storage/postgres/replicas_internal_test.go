package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
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

// TestReplicaCoalescedGets reads many entities at once through replica views, with one
// group slot on the replica, so that the reads share round trips there as the primary's
// do (replica_gets.go): each gets its own answer — entities, missing entities, a missing
// table — from the replica, and each view's position covers the write it read; Session
// reads at a position the replica may not have replayed yet get the write whichever
// source serves them.
func TestReplicaCoalescedGets(t *testing.T) {
	ctx := context.Background()
	e, _, acct := hungReplicaEngine(t, Options{})
	rep := e.replicas.list[0]
	const rows = 50
	versions := make([]int64, rows)
	positions := make([]storage.Position, rows)
	for i := range rows {
		props := []entity.Property{{Name: "N", Value: entity.Int32Value(int32(i))}}
		res, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprintf("r%03d", i), Props: props}})
		if err != nil {
			t.Fatal(err)
		}
		versions[i], positions[i] = res.Versions[0], res.Position
	}
	deadline := time.Now().Add(30 * time.Second)
	for storage.Position(rep.replay.Load()) < positions[rows-1] {
		if time.Now().After(deadline) {
			t.Fatalf("the standby has not replayed the rows after 30 s: %+v", e.Replicas())
		}
		time.Sleep(10 * time.Millisecond)
	}
	rep.gets.slots = 1
	before, mergedBefore := rep.gets.shared.Load(), rep.gets.merged.Load()
	var fromReplica, fresh atomic.Int64
	var wg sync.WaitGroup
	for round := range 6 {
		for i := range rows + 30 {
			wg.Go(func() {
				opts := storage.ReadOptions{Consistency: storage.Eventual}
				if round%2 == 1 && i < rows {
					opts = storage.ReadOptions{Consistency: storage.Session, At: positions[i]}
				}
				v, err := e.ReadView(ctx, opts)
				if err != nil {
					t.Error(err)
					return
				}
				switch {
				case i >= rows+20: // a write the replica may not have replayed, read at its position
					res, err := e.Apply(ctx, acct, "T", "q", []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: fmt.Sprintf("w%d-%d", round, i),
						Props: []entity.Property{{Name: "N", Value: entity.Int32Value(int32(i))}}}})
					if err != nil {
						t.Error(err)
						return
					}
					v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: storage.Session, At: res.Position})
					if err != nil {
						t.Error(err)
						return
					}
					rec, err := v.Get(ctx, acct, "T", "q", fmt.Sprintf("w%d-%d", round, i))
					if err != nil || rec.Version != res.Versions[0] || v.Position() < res.Position {
						t.Errorf("round %d: session read of a fresh write from %s: %v, version %d want %d, view at %d want ≥ %d",
							round, v.Source(), err, rec.Version, res.Versions[0], v.Position(), res.Position)
					}
					if v.Source() != storage.SourcePrimary {
						fresh.Add(1)
					}
				case i >= rows+10: // a missing table
					if _, err := v.Get(ctx, acct, "Missing", "p", "r000"); !errors.Is(err, storage.ErrTableNotFound) {
						t.Errorf("round %d: get from a missing table: %v", round, err)
					}
				case i >= rows: // a missing entity
					if _, err := v.Get(ctx, acct, "T", "p", fmt.Sprintf("x%03d", i)); !errors.Is(err, storage.ErrNotFound) {
						t.Errorf("round %d: get of a missing entity: %v", round, err)
					}
				default:
					rec, err := v.Get(ctx, acct, "T", "p", fmt.Sprintf("r%03d", i))
					if err != nil {
						t.Errorf("round %d: get %d: %v", round, i, err)
						return
					}
					if rec.Version != versions[i] || rec.Entity.RowKey != fmt.Sprintf("r%03d", i) || len(rec.Entity.Props) != 1 ||
						rec.Entity.Props[0].Value.Int != int64(i) {
						t.Errorf("round %d: get %d: %+v, version %d", round, i, rec.Entity, rec.Version)
					}
					if v.Position() < positions[i] {
						t.Errorf("round %d: get %d: view at %d, below the write's %d", round, i, v.Position(), positions[i])
					}
					if v.Source() != storage.SourcePrimary {
						fromReplica.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if n := fromReplica.Load(); n < 6*rows/2 {
		t.Errorf("%d of %d reads of replayed entities served by the replica", n, 6*rows)
	}
	if rep.gets.shared.Load() == before {
		t.Error("no read on the replica shared a round trip")
	}
	if rep.gets.merged.Load() == mergedBefore {
		t.Error("no group of reads on the replica ran as one statement")
	}
	t.Logf("%d reads of replayed entities on the replica, %d session reads of fresh writes; %d shared a round trip there, in %d groups of one statement",
		fromReplica.Load(), fresh.Load(), rep.gets.shared.Load()-before, rep.gets.merged.Load()-mergedBefore)
}

// TestReplicaGroupReadTimeout: reads coalesced on a hung replica (one group slot, so
// that they queue behind the group in flight and join groups) wait no longer than
// Options.ReplicaReadTimeout each, and run again on the primary in the same call.
func TestReplicaGroupReadTimeout(t *testing.T) {
	const bound = 300 * time.Millisecond
	e, standby, acct := hungReplicaEngine(t, Options{ReplicaReadTimeout: bound})
	rep := e.replicas.list[0]
	rep.gets.slots = 1
	standby.Freeze()
	defer standby.Thaw()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var routed, slowest atomic.Int64
	for range 32 {
		wg.Go(func() {
			start := time.Now()
			v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: storage.Eventual})
			if err != nil {
				t.Error(err)
				return
			}
			if v.Source() != storage.SourcePrimary {
				routed.Add(1)
			}
			if _, err := v.Get(ctx, acct, "T", "p", "r"); err != nil {
				t.Errorf("read after %v: %v", time.Since(start).Round(time.Millisecond), err)
				return
			}
			took := time.Since(start)
			for {
				s := slowest.Load()
				if int64(took) <= s || slowest.CompareAndSwap(s, int64(took)) {
					break
				}
			}
			if v.Source() != storage.SourcePrimary {
				t.Errorf("read served by %s, want the primary", v.Source())
			}
		})
	}
	wg.Wait()
	if routed.Load() == 0 {
		t.Fatal("no read was routed to the replica")
	}
	if max := time.Duration(slowest.Load()); max > bound+2*time.Second {
		t.Errorf("slowest read took %v, want at most %v", max, bound+2*time.Second)
	}
	st := e.Replicas()[0]
	if st.InRotation || !strings.Contains(st.Error, "slow") {
		t.Fatalf("replica after the timeout: %+v, want out of rotation, slow", st)
	}
	t.Logf("%d reads routed to the hung replica, slowest answered in %v; replica: %s", routed.Load(),
		time.Duration(slowest.Load()).Round(time.Millisecond), st.Error)
}
