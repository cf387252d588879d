package table

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// uniqueEngine plays an engine with a unique index ByEmail on the property Email, as the
// engines report its conflicts (storage.UniqueViolation, as an ApplyError's Err in Apply
// and as the mutation's error in ApplyEach): a value taken by another entity refuses the
// write whole. anonymous leaves the holder out, as an engine that does not know it does.
type uniqueEngine struct {
	storage.Engine
	anonymous bool
	mu        sync.Mutex
	holders   map[string]storage.Key // Email → the entity holding it
}

// conflict is the violation m would cause on partition pk, or nil.
func (u *uniqueEngine) conflict(pk string, m storage.Mutation) error {
	for _, p := range m.Props {
		if p.Name != "Email" {
			continue
		}
		if h, ok := u.holders[p.Value.Str]; ok && h != (storage.Key{PartitionKey: pk, RowKey: m.RowKey}) {
			if u.anonymous {
				return &storage.UniqueViolation{Index: "ByEmail"}
			}
			return &storage.UniqueViolation{Index: "ByEmail", PartitionKey: h.PartitionKey, RowKey: h.RowKey}
		}
	}
	return nil
}

func (u *uniqueEngine) hold(pk string, m storage.Mutation) {
	for _, p := range m.Props {
		if p.Name == "Email" {
			u.holders[p.Value.Str] = storage.Key{PartitionKey: pk, RowKey: m.RowKey}
		}
	}
}

func (u *uniqueEngine) Apply(ctx context.Context, account, table, pk string, muts []storage.Mutation) (storage.Applied, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, m := range muts {
		if err := u.conflict(pk, m); err != nil {
			return storage.Applied{}, &storage.ApplyError{Index: i, Err: err}
		}
	}
	a, err := u.Engine.Apply(ctx, account, table, pk, muts)
	if err == nil {
		for _, m := range muts {
			u.hold(pk, m)
		}
	}
	return a, err
}

func (u *uniqueEngine) ApplyEach(ctx context.Context, account, table, pk string, muts []storage.Mutation) (storage.Each, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	each := storage.Each{Versions: make([]int64, len(muts)), Errs: make([]error, len(muts))}
	for i, m := range muts {
		if each.Errs[i] = u.conflict(pk, m); each.Errs[i] != nil {
			continue
		}
		a, err := u.Engine.Apply(ctx, account, table, pk, []storage.Mutation{m})
		if err != nil {
			var ae *storage.ApplyError
			if errors.As(err, &ae) {
				each.Errs[i] = ae.Err
				continue
			}
			return storage.Each{}, err
		}
		u.hold(pk, m)
		each.Versions[i], each.Position = a.Versions[0], max(each.Position, a.Position)
	}
	return each, nil
}

// A write refused by a unique index is 409 UniqueIndexViolation naming the index and the
// entity holding the value (or saying another entity does, when the engine does not know
// which): for a single write; in a batch, as that operation's failure, nothing of the
// batch written; in a bulk request, as that operation's, the others applied.
func TestUniqueViolationAnswers(t *testing.T) {
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ue := &uniqueEngine{Engine: eng, holders: map[string]storage.Key{}}
	s := New(ue, nil)
	ctx := context.Background()
	if err := s.CreateTable(ctx, "acct", "people", &storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	person := func(pk, rk, email string) entity.Entity {
		return entity.Entity{PartitionKey: pk, RowKey: rk, Props: []entity.Property{str("Email", email)}}
	}
	const held = "The entity holds a value of the unique index 'ByEmail' that the entity with PartitionKey 'p1' and RowKey 'ann' holds."
	is409 := func(what string, e *azerr.Error, msg string) {
		t.Helper()
		if e == nil || e.Code != azerr.UniqueIndexViolation || e.Status != 409 || e.Message != msg {
			t.Errorf("%s: %+v; want 409 UniqueIndexViolation %q", what, e, msg)
		}
	}
	ann := person("p1", "ann", "a@x")
	if _, err := s.InsertEntity(ctx, "acct", "people", &ann); err != nil {
		t.Fatal(err)
	}

	// A single write.
	dup := person("p2", "bob", "a@x")
	_, err = s.InsertEntity(ctx, "acct", "people", &dup)
	ae, _ := azerr.As(err)
	is409("insert", ae, held)
	if _, _, err := s.GetEntity(ctx, "acct", "people", "p2", "bob", Read{}); err == nil {
		t.Error("the refused insert was written")
	}

	// A batch: the failing operation's index, nothing written.
	_, err = s.Transact(ctx, "acct", "people", []BatchOp{
		{Op: storage.Insert, Entity: person("p3", "c", "c@x")},
		{Op: storage.Insert, Entity: person("p3", "d", "a@x")},
	})
	var be *BatchError
	if !errors.As(err, &be) || be.Index != 1 {
		t.Fatalf("batch: %v; want a BatchError for operation 1", err)
	}
	is409("batch", be.Err, held)
	if _, _, err := s.GetEntity(ctx, "acct", "people", "p3", "c", Read{}); err == nil {
		t.Error("the refused batch wrote its first operation")
	}

	// A bulk request: that operation fails, the others are applied — before and after
	// it in its engine write, in the partition's later writes (more than
	// MaxBatchOperations operations: a violation does not halt the request, as a failure
	// of the whole call would), and in another partition.
	ops := []BulkOp{{Op: storage.Insert, Entity: person("p4", "e", "e@x")}, {Op: storage.Insert, Entity: person("p4", "f", "a@x")}}
	for i := range MaxBatchOperations + 10 {
		rk := fmt.Sprintf("r%03d", i)
		ops = append(ops, BulkOp{Op: storage.Insert, Entity: person("p4", rk, rk+"@x")})
	}
	ops = append(ops, BulkOp{Op: storage.Insert, Entity: person("p5", "h", "h@x")})
	res, err := s.Bulk(ctx, "acct", "people", ops)
	if err != nil {
		t.Fatal(err)
	}
	if res.Succeeded != len(ops)-1 || res.Failed != 1 {
		t.Errorf("bulk: %d succeeded, %d failed; want %d and 1", res.Succeeded, res.Failed, len(ops)-1)
	}
	for i, it := range res.Items {
		if i == 1 {
			is409("bulk item 1", it.Err, held)
		} else if it.Err != nil {
			t.Errorf("bulk item %d: %v; want it applied", i, it.Err)
		}
	}

	// The holder unknown.
	ue.anonymous = true
	_, err = s.InsertEntity(ctx, "acct", "people", &dup)
	ae, _ = azerr.As(err)
	is409("insert, holder unknown", ae, "The entity holds a value of the unique index 'ByEmail' that another entity of the table holds.")
}
