package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/pgtest"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
	"github.com/jackc/pgx/v5"
)

// syncRepEngine opens an engine with opts on a private primary, with table T of account
// "acct", and then makes the primary wait for a synchronous standby that never answers
// (synchronous_standby_names names one that does not exist). It returns the engine, an
// admin connection to the primary and a function that runs statements on it.
func syncRepEngine(t *testing.T, opts postgres.Options) (*postgres.Engine, *pgx.Conn, func(sqls ...string)) {
	t.Helper()
	pgtest.PrimaryURL(t) // skips without PostgreSQL (fails in CI)
	p := pgtest.StartPrimary(t, pgtest.PrimaryOptions{Database: "cer"})
	ctx := context.Background()
	e, err := postgres.Open(ctx, p.URL("cer"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	exec := func(sqls ...string) {
		t.Helper()
		for _, s := range sqls {
			if _, err := admin.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	exec("alter system set synchronous_standby_names = 'nobody'", "select pg_reload_conf()")
	time.Sleep(200 * time.Millisecond) // every backend has reloaded
	return e, admin, exec
}

// TestUnconfirmedCommitFails: on a primary whose synchronous standby never answers
// (synchronous_standby_names names one that does not exist), a write's commit waits for
// it. When that wait is cancelled (here pg_cancel_backend, as an operator, a pooler or a
// tool may do; the statement timeout does not apply to a commit), PostgreSQL reports the
// commit as a success, with a WARNING that it is committed locally but maybe not
// replicated. The engine must not acknowledge it: the write fails with
// storage.ErrUnavailable (503) — an entity write or a write of the catalogue (tables,
// settings, ACLs, service properties) — and the next write, once no standby is
// required, succeeds.
func TestUnconfirmedCommitFails(t *testing.T) {
	ctx := context.Background()
	e, admin, exec := syncRepEngine(t, postgres.Options{DisablePurger: true})
	props := []entity.Property{{Name: "N", Value: entity.Int32Value(1)}}
	// unconfirmed runs write, cancels its commit's wait once it waits, and wants the
	// write to fail with ErrUnavailable.
	unconfirmed := func(what string, write func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- write() }()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var n int
			if err := admin.QueryRow(ctx, `select count(pg_cancel_backend(pid)) from pg_stat_activity where wait_event = 'SyncRep'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no commit waits for the synchronous standby", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
		select {
		case err := <-done:
			if !errors.Is(err, storage.ErrUnavailable) {
				t.Fatalf("%s, whose commit no synchronous standby confirmed: %v, want ErrUnavailable", what, err)
			}
			t.Logf("unconfirmed %s: %v", what, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not return after its commit's wait was cancelled", what)
		}
	}
	unconfirmed("insert", func() error {
		_, err := e.Apply(ctx, "acct", "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "unconfirmed", Props: props}})
		return err
	})
	// The catalogue's writes keep the same promise.
	unconfirmed("create table", func() error { return e.CreateTable(ctx, "acct", "U", storage.TableSettings{}) })
	unconfirmed("set table ACL", func() error { return e.SetTableACL(ctx, "acct", "T", []byte("<SignedIdentifiers/>")) })
	unconfirmed("set table settings", func() error { return e.SetTableSettings(ctx, "acct", "T", storage.TableSettings{}) })
	unconfirmed("set service properties", func() error { return e.SetServiceProperties(ctx, "acct", []byte("<StorageServiceProperties/>")) })
	unconfirmed("delete table", func() error { return e.DeleteTable(ctx, "acct", "T") })
	exec("alter system reset synchronous_standby_names", "select pg_reload_conf()")
	time.Sleep(200 * time.Millisecond)
	if err := e.CreateTable(ctx, "acct", "V", storage.TableSettings{}); err != nil {
		t.Fatalf("create a table once no standby is required: %v", err)
	}
	if _, err := e.Apply(ctx, "acct", "V", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "confirmed", Props: props}}); err != nil {
		t.Fatalf("a write once no standby is required: %v", err)
	}
}

// TestStuckCommitAnswered: on a primary whose synchronous standby never answers (as under
// synchronous_mode_strict with every standby lost), a write's commit waits for it, and
// nothing in PostgreSQL bounds that wait. The engine cancels waits older than
// Options.SyncCommitTimeout itself, so the write answers ErrUnavailable (503) within
// about the bound instead of hanging — entity writes and the catalogue's alike.
func TestStuckCommitAnswered(t *testing.T) {
	ctx := context.Background()
	const bound = time.Second
	e, _, _ := syncRepEngine(t, postgres.Options{DisablePurger: true, SyncCommitTimeout: bound})
	props := []entity.Property{{Name: "N", Value: entity.Int32Value(1)}}
	for _, w := range []struct {
		what  string
		write func() error
	}{
		{"insert", func() error {
			_, err := e.Apply(ctx, "acct", "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "stuck", Props: props}})
			return err
		}},
		{"create table", func() error { return e.CreateTable(ctx, "acct", "U", storage.TableSettings{}) }},
	} {
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- w.write() }()
		select {
		case err := <-done:
			took := time.Since(start)
			if !errors.Is(err, storage.ErrUnavailable) {
				t.Fatalf("%s whose commit no synchronous standby confirms: %v after %v, want ErrUnavailable", w.what, err, took)
			}
			if took < bound {
				t.Errorf("%s answered after %v, before the bound %v", w.what, took, bound)
			}
			t.Logf("stuck %s answered after %v: %v", w.what, took.Round(time.Millisecond), err)
		case <-time.After(bound + 10*time.Second):
			t.Fatalf("%s still waits %v after it began (bound %v)", w.what, time.Since(start).Round(time.Millisecond), bound)
		}
	}
}
