package rbac

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/identity"
)

const devIssuer = "https://127.0.0.1:10002/.cerulean/issuer"

func TestRoleClaimRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in, role, scope string
	}{
		{"Storage Table Data Reader@/devstoreaccount1/tables/orders", "Storage Table Data Reader", "/devstoreaccount1/tables/orders"},
		{"storage table data contributor@/acct", "Storage Table Data Contributor", "/acct"},
		{"0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3@/", "Storage Table Data Contributor", "/"},
		{"Owner", "Owner", "/"},
	} {
		r, sc, err := ParseRoleClaim(tc.in)
		if err != nil || r.Name != tc.role || sc.String() != tc.scope {
			t.Errorf("ParseRoleClaim(%q) = %v, %v, %v; want %s at %s", tc.in, r, sc, err, tc.role, tc.scope)
			continue
		}
		if v := RoleClaim(r, sc); v != tc.role+"@"+tc.scope {
			t.Errorf("RoleClaim = %q", v)
		}
	}
	for _, bad := range []string{"Tables.Read", "Storage Table Data Reader@/UPPER", "Storage Table Data Reader@/acct/tables/x", "@/acct", "Table Appender@/acct"} {
		if _, _, err := ParseRoleClaim(bad); err == nil {
			t.Errorf("ParseRoleClaim(%q) took it", bad)
		}
	}
}

// TestClaimAuthorizer: the development issuer's role claims decide as the same
// assignments in a file would — a Reader reads, a Contributor writes, a table scope
// reaches its table — and give nothing to the tokens of any other issuer, nor for values
// that do not parse.
func TestClaimAuthorizer(t *testing.T) {
	c, err := NewClaimAuthorizer(devIssuer)
	if err != nil {
		t.Fatal(err)
	}
	dev := func(roles ...string) identity.Principal {
		return identity.Principal{Issuer: devIssuer, ObjectID: "developer", Roles: roles}
	}
	reader := dev("Storage Table Data Reader@/acct")
	contrib := dev("Storage Table Data Contributor@/acct")
	scoped := dev("Storage Table Data Contributor@/acct/tables/orders")
	type c1 struct {
		name        string
		p           identity.Principal
		acct, table string
		ops         []auth.OpKind
		allow       bool
	}
	cases := []c1{
		{"reader reads", reader, "acct", "orders", entityReads, true},
		{"reader lists", reader, "acct", "", []auth.OpKind{auth.OpQueryTables}, true},
		{"reader writes", reader, "acct", "orders", entityWrites, false},
		{"reader other account", reader, "acct2", "orders", entityReads, false},
		{"contributor writes", contrib, "acct", "orders", append(entityWrites, auth.OpCreateTable, auth.OpDeleteTable), true},
		{"contributor no acl", contrib, "acct", "orders", []auth.OpKind{auth.OpSetACL, auth.OpSetServiceProps}, false},
		{"scoped its table", scoped, "acct", "ORDERS", append(entityReads, entityWrites...), true},
		{"scoped other table", scoped, "acct", "orders2", append(entityReads, entityWrites...), false},
		{"scoped lists", scoped, "acct", "", []auth.OpKind{auth.OpQueryTables}, false},
		{"two roles", dev("Storage Table Data Reader@/acct", "Storage Table Data Contributor@/acct/tables/orders"), "acct", "orders", entityWrites, true},
		{"two roles, read elsewhere", dev("Storage Table Data Reader@/acct", "Storage Table Data Contributor@/acct/tables/orders"), "acct", "other", entityReads, true},
		{"two roles, no write elsewhere", dev("Storage Table Data Reader@/acct", "Storage Table Data Contributor@/acct/tables/orders"), "acct", "other", entityWrites, false},
		{"every account", dev("Storage Table Data Contributor@/"), "zzz", "t1x", entityWrites, true},
		{"bare role", dev("Storage Table Data Reader"), "zzz", "t1x", entityReads, true},
		{"unknown role", dev("Tables.Read@/acct"), "acct", "orders", entityReads, false},
		{"bad scope", dev("Storage Table Data Reader@/ACCT"), "acct", "orders", entityReads, false},
		{"no roles", dev(), "acct", "orders", entityReads, false},
		{"another issuer", identity.Principal{Issuer: "https://idp.example/", ObjectID: "developer", Roles: contrib.Roles}, "acct", "orders", append(entityReads, entityWrites...), false},
		{"no issuer", identity.Principal{ObjectID: "developer", Roles: contrib.Roles}, "acct", "orders", entityReads, false},
	}
	for _, tc := range cases {
		for _, op := range tc.ops {
			if got := c.Allowed(tc.p, tc.acct, tc.table, op); got != tc.allow {
				t.Errorf("%s: %v on %s/%s: allowed %v, want %v", tc.name, op, tc.acct, tc.table, got, tc.allow)
			}
		}
	}
	if _, err := NewClaimAuthorizer(""); err == nil {
		t.Error("NewClaimAuthorizer without an issuer")
	}
}

// TestClaimAuthorizerCache: many distinct role sets keep the cache bounded, and the
// decisions stay right after it starts over.
func TestClaimAuthorizerCache(t *testing.T) {
	c, _ := NewClaimAuthorizer(devIssuer)
	for i := range maxClaimPolicies + 10 {
		p := identity.Principal{Issuer: devIssuer, ObjectID: "d", Roles: []string{fmt.Sprintf("Storage Table Data Reader@/acct/tables/tab%d", i)}}
		if !c.Allowed(p, "acct", fmt.Sprintf("TAB%d", i), auth.OpQueryEntities) || c.Allowed(p, "acct", "other", auth.OpQueryEntities) {
			t.Fatalf("role set %d decided wrong", i)
		}
	}
	if n := len(c.policies); n > maxClaimPolicies {
		t.Errorf("%d policies cached, want at most %d", n, maxClaimPolicies)
	}
}

// TestUnion: either Decider's grant suffices; none, nothing.
func TestUnion(t *testing.T) {
	file := mustParse(t, `{"assignments":[{"principal":"filereader","role":"Storage Table Data Reader","scope":"/acct"}]}`)
	claims, _ := NewClaimAuthorizer(devIssuer)
	u := Union{file, claims}
	fromFile := identity.Principal{Issuer: "https://idp.example/", ObjectID: "filereader"}
	fromClaim := identity.Principal{Issuer: devIssuer, ObjectID: "developer", Roles: []string{"Storage Table Data Contributor@/acct"}}
	if !u.Allowed(fromFile, "acct", "t1x", auth.OpQueryEntities) || u.Allowed(fromFile, "acct", "t1x", auth.OpInsert) {
		t.Error("the file's reader through the union")
	}
	if !u.Allowed(fromClaim, "acct", "t1x", auth.OpInsert) {
		t.Error("the claim's contributor through the union")
	}
	if (Union{}).Allowed(fromClaim, "acct", "t1x", auth.OpQueryEntities) {
		t.Error("an empty union allowed")
	}
	if !strings.Contains(RoleClaim(BuiltinRole("reader"), Scope{}), "Reader@/") {
		t.Error("BuiltinRole(\"reader\") is Azure's Reader role")
	}
}
