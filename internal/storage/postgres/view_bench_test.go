package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
)

// BenchmarkViewGet prices a view's point read against the engine's own: the position
// bracket (views.go) on the primary, and reads served by a replica.
//
//	CERULEAN_TEST_POSTGRES_URL=... CERULEAN_TEST_POSTGRES_REPLICA_URL=... \
//	  CERULEAN_TEST_POSTGRES_DELAYED_REPLICA_URL=... go test -run '^$' -bench ViewGet ./storage/postgres
func BenchmarkViewGet(b *testing.B) {
	prompt, _ := replicaURLs(b)
	e := open(b, postgres.Options{ReplicaURLs: []string{prompt}})
	ctx, acct := context.Background(), newAccount()
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.DeleteTable(context.Background(), acct, "T") })
	const parts = 20
	var last storage.Position
	for p := range parts {
		var muts []storage.Mutation
		for r := range 100 {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%03d", r), Props: benchProps(p*100 + r)})
		}
		applied, err := e.Apply(ctx, acct, "T", fmt.Sprintf("p%03d", p), muts)
		if err != nil {
			b.Fatal(err)
		}
		last = applied.Position
	}
	// Wait until the replica has it all.
	if _, err := e.ReadView(ctx, storage.ReadOptions{Consistency: storage.Session, At: last}); err != nil {
		b.Fatal(err)
	}
	get := func(r storage.Reader) {
		if _, err := r.Get(ctx, acct, "T", fmt.Sprintf("p%03d", rand.IntN(parts)), fmt.Sprintf("r%03d", rand.IntN(100))); err != nil {
			b.Error(err)
		}
	}
	b.Run("engine", func(b *testing.B) {
		parallel32(b, func(int64, int) int { get(e); return 1 })
	})
	for _, c := range []storage.Consistency{storage.Strong, storage.Eventual} {
		b.Run("view-"+c.String(), func(b *testing.B) {
			parallel32(b, func(int64, int) int {
				v, err := e.ReadView(ctx, storage.ReadOptions{Consistency: c})
				if err != nil {
					b.Fatal(err)
				}
				get(v)
				return 1
			})
		})
	}
}
