package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestExecReadsPosition: a group of reads run by execReads (one Sync, the position read
// before it) answers its rows and a position at or past the commit of a write it sees;
// a statement the database refuses fails the group with the database's error, and the
// connection is left idle for the next group (the refused group's position query was
// skipped, not left to be read by the next).
func TestExecReadsPosition(t *testing.T) {
	e, acct := tableEngine(t, "xr")
	ctx := context.Background()
	res, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "r",
		Props: []entity.Property{{Name: "N", Value: entity.Int32Value(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	get := func() *getOne { return newGetOne(e.q.get, acct, "T", "p", "r") }
	for i := range 2 * int(e.pool.Config().MaxConns) { // every connection, some twice
		g := get()
		stmts := []stmt{g.st}
		at, err := e.execReads(ctx, stmts, false)
		if err != nil {
			t.Fatal(err)
		}
		if stmts[0].rows != 1 || !g.ver.Valid || g.ver.Int64 != res.Versions[0] {
			t.Fatalf("read %d: %d rows, version %v, want %d", i, stmts[0].rows, g.ver, res.Versions[0])
		}
		if at.hi < res.Position || at.hi == 0 {
			t.Fatalf("read %d: position %v before the write's commit at %v", i, at.hi, res.Position)
		}

		// A group whose second statement the database refuses (division by zero).
		st := get().st
		bad := []stmt{st, {sql: `SELECT 1 / (SELECT count(*) FROM cerulean_tables WHERE false)`, dest: []any{new(int64)}}, st}
		_, err = e.execReads(ctx, bad, false)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "22012" {
			t.Fatalf("refused group: %v, want division_by_zero", err)
		}
	}
}
