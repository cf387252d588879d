package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// BenchmarkPositionCost measures what reading the commit position costs a write: the
// same single-entity insert statement sent as writes sent it before positions (pgx's
// QueryRow: one statement, one Sync), through the engine's own pipeline without the
// position (the plumbing alone), and as Apply sends it now (the statement, a Sync, the
// position query, a Sync; one round trip). 32 concurrent callers, as in bench_test.go:
//
//	CERULEAN_TEST_POSTGRES_URL=... go test -run '^$' -bench PositionCost ./storage/postgres
func BenchmarkPositionCost(b *testing.B) {
	ctx := context.Background()
	e := internalEngine(b)
	acct := fmt.Sprintf("bench%016x", rand.Uint64())
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = e.DeleteTable(ctx, acct, "T")
		_ = e.Purge(ctx)
	}()
	key := []byte("t")
	en, err := e.entry(ctx, []byte(acct), key)
	if err != nil {
		b.Fatal(err)
	}
	props := entity.AppendProps(nil, []entity.Property{{Name: "Name", Value: entity.StringValue("customer")},
		{Name: "Age", Value: entity.Int32Value(42)}})
	var run atomic.Int64
	for _, mode := range []string{"queryrow", "pipeline", "pipeline+position"} {
		b.Run(mode, func(b *testing.B) {
			r := run.Add(1)
			var worker atomic.Int64
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := worker.Add(1)
				pk := []byte(fmt.Sprintf("r%d-w%03d", r, w))
				for i := 0; pb.Next(); i++ {
					args := []any{en.id, []byte(acct), key, pk, []byte(fmt.Sprintf("%08d", i)), props, en.gen, int64(0)}
					var ver *int64
					dest := []any{&ver}
					var err error
					switch mode {
					case "queryrow":
						err = e.pool.QueryRow(ctx, e.q.insert1, args...).Scan(dest...)
					case "pipeline":
						_, err = e.pipeline(ctx, []stmt{{sql: e.q.insert1, args: args, dest: dest}}, false)
					default:
						_, err = e.exec(ctx, []stmt{{sql: e.q.insert1, args: args, dest: dest}})
					}
					if err != nil || ver == nil {
						b.Errorf("insert: %v", err)
						return
					}
				}
			})
		})
	}
}
