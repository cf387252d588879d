package postgres

import (
	"context"
	"testing"
)

// BenchmarkNewConnection measures what a new pooled connection costs before its first
// use: the connection (the database's new process), the session's settings and the
// write statements' preparation (the pool's AfterConnect). A front end pays it for every
// connection it opens, and under a sudden load its first requests wait for it. On this
// project's 2-core machines about 35 ms, of which the connection is 20-25 ms and the
// eighteen prepares about 11 ms, the database's parsing and planning rather than the
// round trips: sent as one pipeline they cost the same.
//
//	CERULEAN_TEST_POSTGRES_URL=... go test -run '^$' -bench NewConnection ./storage/postgres
func BenchmarkNewConnection(b *testing.B) {
	ctx := context.Background()
	e := internalEngine(b)
	for b.Loop() {
		c, err := e.pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		// Taken out of the pool and closed, so the next Acquire makes a new one.
		if err := c.Hijack().Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
