package rbac

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/identity"
)

var (
	entityReads  = []auth.OpKind{auth.OpQueryEntities, auth.OpGetEntity, auth.OpReadChanges}
	entityWrites = []auth.OpKind{auth.OpInsert, auth.OpUpdate, auth.OpMerge, auth.OpUpsertReplace, auth.OpUpsertMerge, auth.OpDelete}
	everyOp      = func() []auth.OpKind {
		var ops []auth.OpKind
		for k := auth.OpQueryEntities; k <= auth.OpUnknown; k++ {
			ops = append(ops, k)
		}
		return ops
	}()
)

// TestNeedsCoverEveryOperation: every operation the router names has a mapping, so none is
// refused for want of one (and a future one, unmapped, is refused: TestUnmappedRefused).
func TestNeedsCoverEveryOperation(t *testing.T) {
	for _, op := range everyOp {
		if _, ok := Needs[op]; !ok {
			t.Errorf("%v has no entry in Needs", op)
		}
	}
}

func TestUnmappedRefused(t *testing.T) {
	pol := mustParse(t, `{"assignments":[{"principal":"u","role":"Owner","scope":"/"},{"principal":"u","role":"Storage Table Data Contributor","scope":"/"}]}`)
	err := pol.Check(identity.Principal{ObjectID: "u"}, "acct", "t1", auth.OpUnknown+1)
	var d *DeniedError
	if !errors.As(err, &d) || d.Need != nil {
		t.Fatalf("unmapped op: %v, want a DeniedError without a Need", err)
	}
}

// TestNeedsAsAzureDocuments pins the table against the page it copies: each operation's
// alternatives, spelt out.
func TestNeedsAsAzureDocuments(t *testing.T) {
	const p = "Microsoft.Storage/storageAccounts/tableServices/"
	want := map[auth.OpKind]string{
		auth.OpSetServiceProps:  "write @account",
		auth.OpGetServiceProps:  "read @account",
		auth.OpGetServiceStats:  "read @account",
		auth.OpBatch:            "",
		auth.OpUnknown:          "",
		auth.OpQueryTables:      "tables/read @account",
		auth.OpCreateTable:      "tables/write",
		auth.OpDeleteTable:      "tables/delete",
		auth.OpGetACL:           "tables/getAcl/action",
		auth.OpSetACL:           "tables/setAcl/action",
		auth.OpQueryEntities:    "tables/entities/read",
		auth.OpGetEntity:        "tables/entities/read",
		auth.OpReadChanges:      "tables/entities/read",
		auth.OpInsert:           "tables/entities/write | tables/entities/add/action",
		auth.OpUpsertMerge:      "tables/entities/write | tables/entities/add/action+tables/entities/update/action",
		auth.OpUpsertReplace:    "tables/entities/write | tables/entities/add/action+tables/entities/update/action",
		auth.OpUpdate:           "tables/entities/write | tables/entities/update/action",
		auth.OpMerge:            "tables/entities/write | tables/entities/update/action",
		auth.OpDelete:           "tables/entities/delete",
		auth.OpGetTableSettings: "tables/read",
		auth.OpSetTableSettings: "tables/write",
	}
	for op, w := range want {
		n := Needs[op]
		var alts []string
		for _, alt := range n.AnyOf {
			var ps []string
			for _, perm := range alt {
				if !strings.HasPrefix(perm.Action, p) {
					t.Fatalf("%v: %s is not a table service action", op, perm.Action)
				}
				if perm.Data != strings.Contains(perm.Action, "/entities/") {
					t.Errorf("%v: %s: Data = %v", op, perm.Action, perm.Data)
				}
				ps = append(ps, strings.TrimPrefix(perm.Action, p))
			}
			alts = append(alts, strings.Join(ps, "+"))
		}
		got := strings.Join(alts, " | ")
		if n.AccountLevel {
			got += " @account"
		}
		if got != w {
			t.Errorf("%v needs %q, want %q", op, got, w)
		}
	}
}

func TestBuiltinRoles(t *testing.T) {
	cases := []struct {
		role  string
		holds []Permission
	}{
		{"Storage Table Data Reader", []Permission{TablesRead, EntitiesRead}},
		{"Storage Table Data Contributor", []Permission{TablesRead, TablesWrite, TablesDelete, EntitiesRead, EntitiesWrite, EntitiesDelete, EntitiesAdd, EntitiesUpdate}},
		{"Storage Account Contributor", []Permission{TablesRead, TablesWrite, TablesDelete, TablesGetACL, TablesSetACL, ServiceRead, ServiceWrite}},
		{"Owner", []Permission{TablesRead, TablesWrite, TablesDelete, TablesGetACL, TablesSetACL, ServiceRead, ServiceWrite}},
		{"Contributor", []Permission{TablesRead, TablesWrite, TablesDelete, TablesGetACL, TablesSetACL, ServiceRead, ServiceWrite}},
		{"Reader", []Permission{TablesRead, ServiceRead}},
	}
	idx := newRoleIndex()
	for _, r := range BuiltinRoles {
		idx.add(r)
	}
	for _, c := range cases {
		r := idx.lookup(c.role)
		if r == nil {
			t.Fatalf("no built-in role %q", c.role)
		}
		holds := map[Permission]bool{}
		for _, p := range c.holds {
			holds[p] = true
		}
		for _, p := range allPermissions {
			if got := r.Grants(p); got != holds[p] {
				t.Errorf("%s grants %s: %v, want %v", c.role, p.Action, got, holds[p])
			}
		}
	}
	for name, id := range map[string]string{
		"Storage Table Data Reader":      "76199698-9eea-4c19-bc75-cec21354c6b6",
		"Storage Table Data Contributor": "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
	} {
		if r := idx.lookup(id); r == nil || r.Name != name {
			t.Errorf("role id %s is %v, want %q", id, r, name)
		}
		if r := idx.lookup("/subscriptions/s/providers/Microsoft.Authorization/roleDefinitions/" + strings.ToUpper(id)); r == nil || r.Name != name {
			t.Errorf("role definition resource id of %s is %v, want %q", id, r, name)
		}
	}
}

func TestWildcardMatch(t *testing.T) {
	cases := []struct {
		pat, s string
		want   bool
	}{
		{"*", "anything/at/all", true},
		{"*/read", "Microsoft.Storage/storageAccounts/tableServices/tables/read", true},
		{"*/read", "Microsoft.Storage/storageAccounts/tableServices/tables/write", false},
		{"*/read", "Microsoft.Storage/x/readiness", false},
		{"Microsoft.Storage/storageAccounts/*", "microsoft.storage/STORAGEACCOUNTS/tableServices/write", true},
		{"Microsoft.Storage/storageAccounts/*", "Microsoft.Storage/other", false},
		{"Microsoft.Authorization/*/Write", "Microsoft.Authorization/roleAssignments/write", true},
		{"a*b*c", "aXXbYYbZc", true},
		{"a*b*c", "aXXcYYb", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"", "", true},
		{"", "x", false},
	}
	for _, c := range cases {
		if got := wildcardMatch(c.pat, c.s); got != c.want {
			t.Errorf("wildcardMatch(%q, %q) = %v, want %v", c.pat, c.s, got, c.want)
		}
	}
}

const decisionsFile = `{
  "roleDefinitions": [
    {"roleName": "Appender", "id": "6f1d3c5e-8a52-4b8e-9a43-0e2f5d7c9b10",
     "dataActions": ["Microsoft.Storage/storageAccounts/tableServices/tables/entities/add/action"]},
    {"roleName": "Updater",
     "dataActions": ["Microsoft.Storage/storageAccounts/tableServices/tables/entities/*"],
     "notDataActions": ["*/delete", "*/add/action", "*/write", "*/READ"]}
  ],
  "assignments": [
    {"principal": "reader", "principalType": "User", "role": "Storage Table Data Reader", "scope": "/acct"},
    {"principal": "contrib", "principalType": "User", "role": "storage table data contributor", "scope": "/acct"},
    {"principal": "tablecontrib", "role": "0A9A7E1F-B9D0-4CC4-A60D-0319B160AAA3", "scope": "/acct/tables/Orders"},
    {"principal": "rootreader", "role": "Storage Table Data Reader", "scope": "/"},
    {"principal": "azurescoped", "role": "Storage Table Data Reader",
     "scope": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/acct/tableServices/default/tables/orders"},
    {"principal": "g-writers", "principalType": "Group", "role": "Storage Table Data Contributor", "scope": "/acct"},
    {"principal": "Tables.Read", "principalType": "AppRole", "role": "Storage Table Data Reader", "scope": "/acct"},
    {"principal": "issued", "role": "Storage Table Data Contributor", "scope": "/acct", "issuer": "https://idp.example/"},
    {"principal": "c1a2b3c4-d5e6-4789-8abc-def012345678", "principalType": "ServicePrincipal", "role": "Storage Table Data Reader", "scope": "/acct"},
    {"principal": "owner", "role": "Owner", "scope": "/acct"},
    {"principal": "reader-role", "role": "Reader", "scope": "/acct"},
    {"principal": "appender", "role": "Appender", "scope": "/acct"},
    {"principal": "addupdate", "role": "Appender", "scope": "/acct"},
    {"principal": "addupdate", "role": "Updater", "scope": "/acct/tables/orders"},
    {"principal": "Group-As-Any", "role": "Storage Table Data Reader", "scope": "/acct"}
  ]
}`

func TestDecisions(t *testing.T) {
	pol := mustParse(t, decisionsFile)
	user := func(oid string) identity.Principal {
		return identity.Principal{ObjectID: oid, Issuer: "https://other/"}
	}
	type c struct {
		name  string
		p     identity.Principal
		acct  string
		table string
		ops   []auth.OpKind
		allow bool
	}
	var cases []c
	add := func(name string, p identity.Principal, acct, table string, allow bool, ops ...auth.OpKind) {
		for _, op := range ops {
			cases = append(cases, c{name, p, acct, table, []auth.OpKind{op}, allow})
		}
	}
	// Reader reads only.
	add("reader reads", user("reader"), "acct", "orders", true, entityReads...)
	add("reader lists tables", user("reader"), "acct", "", true, auth.OpQueryTables)
	add("reader writes", user("reader"), "acct", "orders", false, entityWrites...)
	add("reader manages tables", user("reader"), "acct", "orders", false, auth.OpCreateTable, auth.OpDeleteTable, auth.OpSetTableSettings)
	add("reader reads settings", user("reader"), "acct", "orders", true, auth.OpGetTableSettings)
	add("reader acl and service", user("reader"), "acct", "orders", false, auth.OpGetACL, auth.OpSetACL, auth.OpGetServiceProps, auth.OpSetServiceProps, auth.OpGetServiceStats)
	add("reader other account", user("reader"), "other", "orders", false, entityReads...)
	// Contributor: every entity operation, and tables; not ACLs or service properties.
	add("contributor entities", user("contrib"), "acct", "orders", true, append(entityReads, entityWrites...)...)
	add("contributor tables", user("contrib"), "acct", "neworders", true, auth.OpCreateTable, auth.OpDeleteTable, auth.OpGetTableSettings, auth.OpSetTableSettings)
	add("contributor lists", user("contrib"), "acct", "", true, auth.OpQueryTables)
	add("contributor acl and service", user("contrib"), "acct", "orders", false, auth.OpGetACL, auth.OpSetACL, auth.OpGetServiceProps, auth.OpSetServiceProps, auth.OpGetServiceStats)
	// Table scope reaches only its table (any case), and not the account's listing.
	add("table scope its table", user("tablecontrib"), "acct", "orders", true, append(entityReads, entityWrites...)...)
	add("table scope other case", user("tablecontrib"), "acct", "ORDERS", true, auth.OpInsert, auth.OpQueryEntities)
	add("table scope other table", user("tablecontrib"), "acct", "orders2", false, append(entityReads, entityWrites...)...)
	add("table scope list tables", user("tablecontrib"), "acct", "", false, auth.OpQueryTables)
	add("table scope list tables naming its table", user("tablecontrib"), "acct", "orders", false, auth.OpQueryTables)
	add("table scope create own", user("tablecontrib"), "acct", "Orders", true, auth.OpCreateTable, auth.OpDeleteTable)
	add("table scope service", user("tablecontrib"), "acct", "", false, auth.OpGetServiceProps)
	add("table scope other account", user("tablecontrib"), "acct2", "orders", false, auth.OpQueryEntities)
	add("azure table scope", user("azurescoped"), "acct", "Orders", true, auth.OpQueryEntities)
	add("azure table scope other", user("azurescoped"), "acct", "customers", false, auth.OpQueryEntities)
	// Root scope covers every account.
	add("root any account", user("rootreader"), "zzz", "t1x", true, auth.OpQueryEntities)
	add("root lists", user("rootreader"), "anyacct", "", true, auth.OpQueryTables)
	add("root no write", user("rootreader"), "anyacct", "t1x", false, auth.OpInsert)
	// Groups and app roles.
	add("group member", identity.Principal{ObjectID: "someone", Groups: []string{"x", "g-writers"}}, "acct", "orders", true, entityWrites...)
	add("not a member", identity.Principal{ObjectID: "someone", Groups: []string{"g-readers"}}, "acct", "orders", false, auth.OpQueryEntities)
	add("group id is not an object id", identity.Principal{ObjectID: "g-writers"}, "acct", "orders", false, auth.OpInsert)
	add("app role", identity.Principal{ObjectID: "app", Roles: []string{"Tables.Read"}}, "acct", "orders", true, auth.OpQueryEntities)
	add("app role value is exact", identity.Principal{ObjectID: "app", Roles: []string{"tables.read"}}, "acct", "orders", false, auth.OpQueryEntities)
	add("app role reads only", identity.Principal{ObjectID: "app", Roles: []string{"Tables.Read"}}, "acct", "orders", false, auth.OpInsert)
	add("untyped matches a group", identity.Principal{ObjectID: "x", Groups: []string{"Group-As-Any"}}, "acct", "orders", true, auth.OpQueryEntities)
	add("untyped matches an app role", identity.Principal{ObjectID: "x", Roles: []string{"Group-As-Any"}}, "acct", "orders", true, auth.OpQueryEntities)
	add("untyped never an app id", identity.Principal{ObjectID: "x", AppID: "Group-As-Any"}, "acct", "orders", false, auth.OpQueryEntities)
	// Service principal: by object id or app id, GUIDs in any case.
	add("sp by app id", identity.Principal{ObjectID: "user-oid", AppID: "C1A2B3C4-D5E6-4789-8ABC-DEF012345678"}, "acct", "orders", true, auth.OpQueryEntities)
	add("sp by object id", identity.Principal{ObjectID: "c1a2b3c4-d5e6-4789-8abc-def012345678"}, "acct", "orders", true, auth.OpQueryEntities)
	// Issuer restriction.
	add("issuer matches", identity.Principal{ObjectID: "issued", Issuer: "https://idp.example/"}, "acct", "orders", true, auth.OpInsert)
	add("issuer differs", identity.Principal{ObjectID: "issued", Issuer: "https://evil.example/"}, "acct", "orders", false, auth.OpInsert)
	add("no issuer", identity.Principal{ObjectID: "issued"}, "acct", "orders", false, auth.OpInsert)
	// Control-plane roles: Owner manages ACLs and service properties but reads no entity;
	// Reader ("*/read") reads the service's properties and lists tables.
	add("owner acl and service", user("owner"), "acct", "orders", true, auth.OpGetACL, auth.OpSetACL, auth.OpCreateTable)
	add("owner service", user("owner"), "acct", "", true, auth.OpGetServiceProps, auth.OpSetServiceProps, auth.OpGetServiceStats, auth.OpQueryTables)
	add("owner no data", user("owner"), "acct", "orders", false, append(entityReads, entityWrites...)...)
	add("reader role service", user("reader-role"), "acct", "", true, auth.OpGetServiceProps, auth.OpGetServiceStats, auth.OpQueryTables)
	add("reader role no writes", user("reader-role"), "acct", "orders", false, auth.OpSetServiceProps, auth.OpGetACL, auth.OpQueryEntities)
	// Add alone inserts but cannot upsert (which needs add and update); add at the account
	// with update at one table upserts on that table only.
	add("appender inserts", user("appender"), "acct", "orders", true, auth.OpInsert)
	add("appender no upsert", user("appender"), "acct", "orders", false, auth.OpUpsertMerge, auth.OpUpsertReplace, auth.OpUpdate, auth.OpMerge, auth.OpQueryEntities)
	add("add+update upserts", user("addupdate"), "acct", "orders", true, auth.OpUpsertMerge, auth.OpUpsertReplace, auth.OpUpdate, auth.OpMerge, auth.OpInsert)
	add("add+update no delete", user("addupdate"), "acct", "orders", false, auth.OpDelete, auth.OpQueryEntities)
	add("add+update elsewhere", user("addupdate"), "acct", "other", false, auth.OpUpsertMerge)
	// Nobody.
	add("unknown principal", user("nobody"), "acct", "orders", false, auth.OpQueryEntities, auth.OpQueryTables)
	add("empty principal", identity.Principal{}, "acct", "orders", false, auth.OpQueryEntities)
	// OpUnknown and the batch envelope need nothing by themselves.
	add("unknown op", user("nobody"), "acct", "orders", true, auth.OpUnknown, auth.OpBatch)

	for _, c := range cases {
		err := pol.Check(c.p, c.acct, c.table, c.ops...)
		if (err == nil) != c.allow {
			t.Errorf("%s: %v on %s/%s by %+v: err %v, want allowed %v", c.name, c.ops, c.acct, c.table, c.p, err, c.allow)
		}
		if got := pol.Allowed(c.p, c.acct, c.table, c.ops[0]); got != c.allow {
			t.Errorf("%s: Allowed = %v", c.name, got)
		}
	}
}

// TestBatchIsTheUnion: a batch is allowed when every contained operation is, and the
// refusal names the first that is not.
func TestBatchIsTheUnion(t *testing.T) {
	pol := mustParse(t, decisionsFile)
	app := identity.Principal{ObjectID: "appender"}
	if err := pol.Check(app, "acct", "orders", auth.OpBatch, auth.OpInsert, auth.OpInsert); err != nil {
		t.Fatalf("batch of inserts by an appender: %v", err)
	}
	err := pol.Check(app, "acct", "orders", auth.OpBatch, auth.OpInsert, auth.OpDelete, auth.OpInsert)
	var d *DeniedError
	if !errors.As(err, &d) || d.Op != auth.OpDelete {
		t.Fatalf("batch with a delete by an appender: %v, want a refusal of Delete Entity", err)
	}
	if got := d.Missing(); len(got) != 1 || len(got[0]) != 1 || got[0][0] != EntitiesDelete.Action {
		t.Errorf("missing = %v", got)
	}
	contrib := identity.Principal{ObjectID: "contrib"}
	if err := pol.Check(contrib, "acct", "orders", auth.OpBatch, auth.OpInsert, auth.OpDelete, auth.OpUpsertMerge, auth.OpGetEntity); err != nil {
		t.Fatalf("mixed batch by a contributor: %v", err)
	}
	reader := identity.Principal{ObjectID: "reader"}
	if err := pol.Check(reader, "acct", "orders", auth.OpBatch, auth.OpGetEntity, auth.OpUpdate); err == nil {
		t.Fatal("batch with an update allowed to a reader")
	}
}

func TestDeniedError(t *testing.T) {
	pol := mustParse(t, decisionsFile)
	err := pol.Check(identity.Principal{ObjectID: "reader"}, "acct", "orders", auth.OpUpsertMerge)
	var d *DeniedError
	if !errors.As(err, &d) {
		t.Fatalf("err = %v", err)
	}
	const want = "Insert Or Merge Entity on acct/orders needs " +
		"Microsoft.Storage/storageAccounts/tableServices/tables/entities/write, or " +
		"Microsoft.Storage/storageAccounts/tableServices/tables/entities/add/action and " +
		"Microsoft.Storage/storageAccounts/tableServices/tables/entities/update/action"
	if d.Error() != want {
		t.Errorf("Error() = %q\nwant      %q", d.Error(), want)
	}
	ae := d.AzureError()
	if ae.Status != http.StatusForbidden || ae.Code != azerr.AuthorizationPermissionMismatch ||
		ae.Message != "This request is not authorized to perform this operation using this permission." || ae.Detail != want {
		t.Errorf("AzureError() = %+v", ae)
	}
	var nilPol *Policy
	if nilPol.Check(identity.Principal{ObjectID: "x"}, "acct", "t", auth.OpQueryEntities) == nil {
		t.Error("a nil policy allowed")
	}
}

func mustParse(t testing.TB, s string) *Policy {
	t.Helper()
	pol, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return pol
}

// TestCheckAllocatesNothing: the decision path, allowed or group-matched, allocates
// nothing (the server calls it on every request).
func TestCheckAllocatesNothing(t *testing.T) {
	pol := mustParse(t, decisionsFile)
	p := identity.Principal{ObjectID: "someone", Groups: []string{"a", "b", "g-writers"}, Roles: []string{"Tables.Read"}}
	n := testing.AllocsPerRun(100, func() {
		if pol.Check(p, "acct", "orders", auth.OpInsert) != nil {
			t.Fatal("refused")
		}
	})
	if n != 0 {
		t.Errorf("Check allocates %v times", n)
	}
}

func BenchmarkCheck(b *testing.B) {
	pol := mustParse(b, decisionsFile)
	p := identity.Principal{ObjectID: "someone", Groups: []string{"a", "b", "g-writers"}}
	for b.Loop() {
		_ = pol.Check(p, "acct", "orders", auth.OpInsert)
	}
}
