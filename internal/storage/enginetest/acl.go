package enginetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
)

// getACL reads a table's ACL, which must succeed.
func (x *env) getACL(account, table string) []byte {
	x.t.Helper()
	acl, err := x.e.GetTableACL(x.ctx, account, table)
	if err != nil {
		x.t.Fatalf("GetTableACL(%q): %v", table, err)
	}
	return acl
}

func (x *env) setACL(account, table string, acl []byte) {
	x.t.Helper()
	if err := x.e.SetTableACL(x.ctx, account, table, acl); err != nil {
		x.t.Fatalf("SetTableACL(%q, %d bytes): %v", table, len(acl), err)
	}
}

func (x *env) wantACL(what, account, table string, want []byte) {
	x.t.Helper()
	got := x.getACL(account, table)
	if want == nil {
		if got != nil {
			x.t.Fatalf("%s: GetTableACL(%q) = %q, want nil", what, table, short64(got))
		}
		return
	}
	if !bytes.Equal(got, want) {
		x.t.Fatalf("%s: GetTableACL(%q) = %q, want %q", what, table, short64(got), short64(want))
	}
}

func (x *env) getProps(account string) []byte {
	x.t.Helper()
	p, err := x.e.GetServiceProperties(x.ctx, account)
	if err != nil {
		x.t.Fatalf("GetServiceProperties: %v", err)
	}
	return p
}

func (x *env) setProps(account string, p []byte) {
	x.t.Helper()
	if err := x.e.SetServiceProperties(x.ctx, account, p); err != nil {
		x.t.Fatalf("SetServiceProperties(%d bytes): %v", len(p), err)
	}
}

func (x *env) wantProps(what, account string, want []byte) {
	x.t.Helper()
	got := x.getProps(account)
	if want == nil {
		if got != nil {
			x.t.Fatalf("%s: GetServiceProperties = %q, want nil", what, short64(got))
		}
		return
	}
	if !bytes.Equal(got, want) {
		x.t.Fatalf("%s: GetServiceProperties = %q, want %q", what, short64(got), short64(want))
	}
}

// short64 shortens a value for a failure message.
func short64(b []byte) string {
	if len(b) > 64 {
		return fmt.Sprintf("%q… (%d bytes)", b[:64], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// randomBytes returns n bytes of the env's random source, NUL and 0xFF included.
func (x *env) randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(x.rnd.Uint32())
	}
	return b
}

// testACL sets, reads, replaces and clears a table's ACL: exact bytes back, per table,
// case-insensitive name, a copy the caller may change, and values above the 64 KiB the
// server allows.
func testACL(t *testing.T, x *env) {
	x.createTable("Policies")
	x.createTable("other")
	x.wantACL("new table", x.acct, "Policies", nil)

	acl := []byte("<SignedIdentifiers>\x00\xff</SignedIdentifiers>")
	x.setACL(x.acct, "Policies", acl)
	x.wantACL("after set", x.acct, "Policies", acl)
	x.wantACL("after set, other case", x.acct, "POLICIES", acl)
	x.wantACL("other table", x.acct, "other", nil)

	// The returned slice is the caller's.
	got := x.getACL(x.acct, "policies")
	got[0] ^= 0xff
	x.wantACL("after changing a returned slice", x.acct, "Policies", acl)
	// So is the slice passed in.
	in := bytes.Clone(acl)
	x.setACL(x.acct, "Policies", in)
	in[0] ^= 0xff
	x.wantACL("after changing the slice passed in", x.acct, "Policies", acl)

	replaced := []byte("replaced")
	x.setACL(x.acct, "policies", replaced)
	x.wantACL("after replace", x.acct, "Policies", replaced)

	x.setACL(x.acct, "Policies", nil)
	x.wantACL("after clearing with nil", x.acct, "Policies", nil)
	x.setACL(x.acct, "Policies", replaced)
	x.setACL(x.acct, "Policies", []byte{})
	x.wantACL("after clearing with empty", x.acct, "Policies", nil)

	// Larger than the server lets through: engines must still keep it exactly.
	for _, n := range []int{1, 64 << 10, 300 << 10} {
		big := x.randomBytes(n)
		x.setACL(x.acct, "Policies", big)
		x.wantACL(fmt.Sprintf("%d bytes", n), x.acct, "Policies", big)
	}

	// Entities are unaffected by ACL changes and the other way round.
	x.apply("Policies", "p", mut(storage.Insert, "r", str("S", "x")))
	x.setACL(x.acct, "Policies", acl)
	x.get("Policies", "p", "r")
	x.apply("Policies", "p", mut(storage.Delete, "r"))
	x.wantACL("after entity writes", x.acct, "Policies", acl)
	x.wantACL("other table at the end", x.acct, "other", nil)
}

// testACLMissingTable checks ErrTableNotFound for a table that never existed and for a
// deleted one, and that a table created again under the name starts without an ACL.
func testACLMissingTable(t *testing.T, x *env) {
	if _, err := x.e.GetTableACL(x.ctx, x.acct, "Nope"); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("GetTableACL of a missing table = %v, want ErrTableNotFound", err)
	}
	if err := x.e.SetTableACL(x.ctx, x.acct, "Nope", []byte("x")); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("SetTableACL of a missing table = %v, want ErrTableNotFound", err)
	}
	if err := x.e.SetTableACL(x.ctx, x.acct, "Nope", nil); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("SetTableACL(nil) of a missing table = %v, want ErrTableNotFound", err)
	}
	if _, err := x.e.GetTable(x.ctx, x.acct, "Nope"); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("SetTableACL created the table: GetTable = %v", err)
	}

	for cycle := range 3 {
		name := []string{"Again", "again", "AGAIN"}[cycle]
		x.createTable(name)
		x.wantACL(fmt.Sprintf("cycle %d: created", cycle), x.acct, name, nil)
		x.setACL(x.acct, name, []byte(fmt.Sprintf("acl %d", cycle)))
		if err := x.e.DeleteTable(x.ctx, x.acct, name); err != nil {
			t.Fatal(err)
		}
		if _, err := x.e.GetTableACL(x.ctx, x.acct, name); !errors.Is(err, storage.ErrTableNotFound) {
			t.Fatalf("cycle %d: GetTableACL of a deleted table = %v, want ErrTableNotFound", cycle, err)
		}
		if err := x.e.SetTableACL(x.ctx, x.acct, name, []byte("late")); !errors.Is(err, storage.ErrTableNotFound) {
			t.Fatalf("cycle %d: SetTableACL of a deleted table = %v, want ErrTableNotFound", cycle, err)
		}
		x.createTable(name)
		x.wantACL(fmt.Sprintf("cycle %d: created again", cycle), x.acct, name, nil)
		if err := x.e.DeleteTable(x.ctx, x.acct, name); err != nil {
			t.Fatal(err)
		}
	}
	// After the background purge too.
	time.Sleep(100 * time.Millisecond)
	x.createTable("Again")
	x.wantACL("created again after purge", x.acct, "Again", nil)
}

// testACLAccountsIsolated checks that tables of the same name in two accounts have their
// own ACLs.
func testACLAccountsIsolated(t *testing.T, x *env) {
	other := x.newAccount()
	x.createTable("Shared")
	if _, err := x.e.GetTableACL(x.ctx, other, "Shared"); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("GetTableACL in another account = %v, want ErrTableNotFound", err)
	}
	if err := x.e.SetTableACL(x.ctx, other, "Shared", []byte("x")); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("SetTableACL in another account = %v, want ErrTableNotFound", err)
	}
	if err := x.e.CreateTable(x.ctx, other, "shared", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	x.setACL(x.acct, "Shared", []byte("mine"))
	x.wantACL("other account after set", other, "Shared", nil)
	x.setACL(other, "shared", []byte("theirs"))
	x.wantACL("own account", x.acct, "Shared", []byte("mine"))
	x.wantACL("other account", other, "Shared", []byte("theirs"))
	if err := x.e.DeleteTable(x.ctx, other, "Shared"); err != nil {
		t.Fatal(err)
	}
	x.wantACL("own account after the other's delete", x.acct, "Shared", []byte("mine"))
}

// testServiceProperties sets, replaces and clears an account's service properties, with
// accounts isolated.
func testServiceProperties(t *testing.T, x *env) {
	other := x.newAccount()
	x.wantProps("never set", x.acct, nil)
	p1 := []byte("<StorageServiceProperties>\x00\xff</StorageServiceProperties>")
	x.setProps(x.acct, p1)
	x.wantProps("after set", x.acct, p1)
	x.wantProps("other account", other, nil)

	got := x.getProps(x.acct)
	got[0] ^= 0xff
	x.wantProps("after changing a returned slice", x.acct, p1)

	p2 := []byte("theirs")
	x.setProps(other, p2)
	x.wantProps("own after the other's set", x.acct, p1)
	x.wantProps("other after set", other, p2)

	p3 := []byte("replaced")
	x.setProps(x.acct, p3)
	x.wantProps("after replace", x.acct, p3)
	x.wantProps("other after own replace", other, p2)

	for _, n := range []int{64 << 10, 300 << 10} {
		big := x.randomBytes(n)
		x.setProps(x.acct, big)
		x.wantProps(fmt.Sprintf("%d bytes", n), x.acct, big)
	}

	x.setProps(x.acct, nil)
	x.wantProps("after clearing", x.acct, nil)
	x.wantProps("other after own clear", other, p2)
	x.setProps(x.acct, p1)
	x.setProps(x.acct, []byte{})
	x.wantProps("after clearing with empty", x.acct, nil)

	// Tables have nothing to do with them.
	x.setProps(x.acct, p1)
	x.createTable("T")
	if err := x.e.DeleteTable(x.ctx, x.acct, "T"); err != nil {
		t.Fatal(err)
	}
	x.wantProps("after a table's create and delete", x.acct, p1)
}

// testACLRacingDelete runs SetTableACL against DeleteTable: once the delete has returned,
// every Set fails with ErrTableNotFound, and a table created again under the name has no
// ACL, then and after the purge.
func testACLRacingDelete(t *testing.T, x *env) {
	const rounds = 5
	for round := range rounds {
		name := fmt.Sprintf("Race%d", round)
		x.createTable(name)
		var wg sync.WaitGroup
		var stop atomic.Bool
		var sets atomic.Int64
		errs := make(chan error, 4)
		for w := range 4 {
			wg.Go(func() {
				for i := 0; !stop.Load(); i++ {
					err := x.e.SetTableACL(x.ctx, x.acct, name, []byte(fmt.Sprintf("w%d-%d", w, i)))
					switch {
					case err == nil:
						sets.Add(1)
					case errors.Is(err, storage.ErrTableNotFound):
						return
					default:
						errs <- err
						return
					}
				}
			})
		}
		deadline := time.Now().Add(5 * time.Second)
		for sets.Load() < 20 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if err := x.e.DeleteTable(x.ctx, x.acct, name); err != nil {
			t.Fatalf("round %d: DeleteTable: %v", round, err)
		}
		if err := x.e.SetTableACL(x.ctx, x.acct, name, []byte("late")); !errors.Is(err, storage.ErrTableNotFound) {
			t.Fatalf("round %d: SetTableACL after DeleteTable returned = %v, want ErrTableNotFound", round, err)
		}
		// Every setter's next call fails and it stops. They are waited for before the
		// name is used again, since a Set after the create would set the new table's ACL
		// legitimately; what must not happen is a Set that raced the delete showing up on
		// the new table, or being kept anywhere (the reopen tests cover stale keys).
		stop.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: setter: %v", round, err)
		}
		x.createTable(name)
		for range 3 {
			x.wantACL(fmt.Sprintf("round %d: re-created after %d sets", round, sets.Load()), x.acct, name, nil)
			time.Sleep(30 * time.Millisecond)
		}
	}
}

// testReopenACL checks that ACLs and service properties survive a restart, and that a
// deleted table's ACL stays gone.
func testReopenACL(t *testing.T, x *env) {
	if x.h.Reopen == nil {
		t.Skip("harness has no Reopen")
	}
	x.createTable("Kept")
	x.createTable("Gone")
	kept := x.randomBytes(1000)
	props := x.randomBytes(2000)
	x.setACL(x.acct, "Kept", kept)
	x.setACL(x.acct, "Gone", []byte("gone"))
	x.setProps(x.acct, props)
	if err := x.e.DeleteTable(x.ctx, x.acct, "Gone"); err != nil {
		t.Fatal(err)
	}

	x.reopen()

	x.wantACL("after reopen", x.acct, "Kept", kept)
	x.wantProps("after reopen", x.acct, props)
	if _, err := x.e.GetTableACL(x.ctx, x.acct, "Gone"); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("GetTableACL of a deleted table after reopen = %v, want ErrTableNotFound", err)
	}
	x.createTable("Gone")
	x.wantACL("deleted, reopened, created again", x.acct, "Gone", nil)

	// Clearing is durable too.
	x.setACL(x.acct, "Kept", nil)
	x.setProps(x.acct, nil)
	x.reopen()
	x.wantACL("cleared, after reopen", x.acct, "Kept", nil)
	x.wantProps("cleared, after reopen", x.acct, nil)
}
