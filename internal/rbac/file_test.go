package rbac

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/identity"
)

func TestGoodFiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.json")
	if len(files) == 0 {
		t.Fatal("no testdata/good files")
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestExampleFile reads the package documentation's example and checks what it decides.
func TestExampleFile(t *testing.T) {
	pol, err := Load("testdata/good/example.json")
	if err != nil {
		t.Fatal(err)
	}
	as := pol.Assignments()
	if len(as) != 4 {
		t.Fatalf("%d assignments", len(as))
	}
	if a := as[1]; a.Principal != "readers" || a.PrincipalType != Group || a.Role.Name != "Storage Table Data Reader" ||
		a.Scope != (Scope{Account: "devstoreaccount1", Table: "orders"}) || a.Line != 19 {
		t.Errorf("assignment 1 = %+v", a)
	}
	if a := as[2]; a.Role.Name != "Table Appender" || a.Scope != (Scope{Account: "devstoreaccount1", Table: "audit"}) || a.Description != "the audit writer" {
		t.Errorf("assignment 2 = %+v", a)
	}
	if a := as[3]; a.Role.Name != "Owner" || a.Scope != (Scope{}) {
		t.Errorf("assignment 3 = %+v", a)
	}
	const iss = "https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/v2.0"
	checks := []struct {
		p     identity.Principal
		table string
		op    auth.OpKind
		allow bool
	}{
		{identity.Principal{Issuer: iss, ObjectID: "2c5b1f0e-3d4a-4e7b-9c8d-1a2b3c4d5e6f"}, "any", auth.OpDelete, true},
		{identity.Principal{Issuer: "https://other", ObjectID: "2c5b1f0e-3d4a-4e7b-9c8d-1a2b3c4d5e6f"}, "any", auth.OpDelete, false},
		{identity.Principal{ObjectID: "u", Groups: []string{"readers"}}, "Orders", auth.OpQueryEntities, true},
		{identity.Principal{ObjectID: "u", Groups: []string{"readers"}}, "audit", auth.OpQueryEntities, false},
		{identity.Principal{ObjectID: "u", Roles: []string{"Tables.Append"}}, "Audit", auth.OpInsert, true},
		{identity.Principal{ObjectID: "u", Roles: []string{"Tables.Append"}}, "Audit", auth.OpQueryEntities, false},
		{identity.Principal{ObjectID: "ops"}, "audit", auth.OpSetACL, true},
		{identity.Principal{ObjectID: "ops"}, "audit", auth.OpQueryEntities, false},
	}
	for _, c := range checks {
		if got := pol.Allowed(c.p, "devstoreaccount1", c.table, c.op); got != c.allow {
			t.Errorf("%+v %v on %s: %v, want %v", c.p, c.op, c.table, got, c.allow)
		}
	}
}

// TestBadFiles: every file under testdata/bad is refused with an error that says where
// (line, and the field's path) and what is wrong.
func TestBadFiles(t *testing.T) {
	want := map[string]struct {
		line int
		path string
		msg  string
	}{
		"unknown_field.json":          {5, "assignments[1]", `unknown field "princpal"`},
		"field_case.json":             {2, "assignments[0]", `unknown field "Principal"`},
		"repeated_field.json":         {3, "assignments[0]", `field "role" repeated`},
		"unknown_role.json":           {3, "assignments[0].role", `unknown role "Storage Table Data Writer"`},
		"scope_keyword.json":          {3, "assignments[0].scope", `"/devstoreaccount1/tabels/orders" is neither`},
		"scope_table_name.json":       {2, "assignments[0].scope", `"1orders" is not a table name`},
		"scope_account_name.json":     {2, "assignments[0].scope", `"DevStoreAccount1" is not a storage account name`},
		"scope_azure.json":            {2, "assignments[0].scope", "want /tableServices/default"},
		"principal_type.json":         {2, "assignments[0].principalType", `"Person" is not User, ServicePrincipal, Group or AppRole`},
		"missing_scope.json":          {4, "assignments[1]", "scope is required"},
		"wrong_type.json":             {2, "assignments[0].scope", "want a string, not a number"},
		"syntax.json":                 {2, "assignments[0]", "invalid character"},
		"trailing.json":               {1, "", "data after the top-level object"},
		"top_level_field.json":        {2, "", `unknown field "assignment"`},
		"roledef_builtin_name.json":   {2, "roleDefinitions[0].roleName", `role "owner" is already defined`},
		"roledef_grants_nothing.json": {2, "roleDefinitions[0]", "role grants nothing"},
		"roledef_bad_id.json":         {2, "roleDefinitions[0].id", `"not-a-guid" is not a GUID`},
		"issuer_empty.json":           {2, "assignments[0].issuer", "want an issuer"},
		"truncated.json":              {2, "assignments[0]", "unexpected end of file"},
		"not_object.json":             {1, "", "want an object, not an array"},
		"principal_spaces.json":       {2, "assignments[0].principal", "without surrounding spaces"},
	}
	files, _ := filepath.Glob("testdata/bad/*.json")
	if len(files) != len(want) {
		t.Errorf("%d files in testdata/bad, %d expectations", len(files), len(want))
	}
	for _, f := range files {
		name := filepath.Base(f)
		w, ok := want[name]
		if !ok {
			t.Errorf("%s: no expectation", name)
			continue
		}
		_, err := Load(f)
		var fe *FileError
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a *FileError", name, err)
			continue
		}
		if fe.Line != w.line || fe.Path != w.path || !strings.Contains(fe.Err.Error(), w.msg) {
			t.Errorf("%s: line %d path %q err %q\nwant line %d path %q err containing %q", name, fe.Line, fe.Path, fe.Err, w.line, w.path, w.msg)
		}
		if !strings.HasPrefix(err.Error(), f+": line ") {
			t.Errorf("%s: message %q does not start with the file and line", name, err)
		}
	}
}

func TestParseScope(t *testing.T) {
	good := map[string]Scope{
		"/":                                 {},
		"/devstoreaccount1":                 {Account: "devstoreaccount1"},
		"/devstoreaccount1/tables/Orders":   {Account: "devstoreaccount1", Table: "Orders"},
		"/subscriptions/s":                  {},
		"/subscriptions":                    {Account: "subscriptions"},
		"/subscriptions/tables/abc":         {Account: "subscriptions", Table: "abc"},
		"/SUBSCRIPTIONS/s/resourcegroups/g": {},
		"/providers/Microsoft.Management/managementGroups/mg":                                                                    {},
		"/subscriptions/s/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/acct":                                     {Account: "acct"},
		"/subscriptions/s/resourceGroups/g/providers/microsoft.storage/storageaccounts/acct/tableServices/default":               {Account: "acct"},
		"/subscriptions/s/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/acct/tableServices/default/tables/Order1": {Account: "acct", Table: "Order1"},
	}
	for s, w := range good {
		got, err := ParseScope(s)
		if err != nil || got != w {
			t.Errorf("ParseScope(%q) = %+v, %v; want %+v", s, got, err, w)
		}
	}
	for _, s := range []string{
		"", "acct", "//", "/acct/", "/acct//tables/t", "/ab", "/acct/tables/tables", "/acct/tables/ab",
		"/acct/tables/a_b_c", "/acct/tables/t/extra", "/acct/queues/q", "/subscriptions/s/resourceGroups",
		"/subscriptions/s/foo/g", "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/vm",
		"/subscriptions/s/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/acct/tableServices/other",
		"/subscriptions/s/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/acct/tableServices/default/tables",
		"/providers/Microsoft.Storage/storageAccounts/acct",
	} {
		if sc, err := ParseScope(s); err == nil {
			t.Errorf("ParseScope(%q) = %+v, want an error", s, sc)
		}
	}
	for _, s := range []string{"/", "/acct", "/acct/tables/Orders"} {
		sc, _ := ParseScope(s)
		if sc.String() != s {
			t.Errorf("ParseScope(%q).String() = %q", s, sc.String())
		}
	}
}

// TestParseTruncated feeds every prefix of the good example: each is refused cleanly
// (the seed of FuzzParse, exhaustively over truncation).
func TestParseTruncated(t *testing.T) {
	data, err := os.ReadFile("testdata/good/example.json")
	if err != nil {
		t.Fatal(err)
	}
	full := strings.TrimRight(string(data), "\n")
	for i := 0; i < len(full); i++ {
		if _, err := Parse([]byte(full[:i])); err == nil {
			t.Fatalf("prefix of %d bytes parsed", i)
		}
	}
}

func TestIsGUID(t *testing.T) {
	for s, w := range map[string]bool{
		"76199698-9eea-4c19-bc75-cec21354c6b6": true,
		"76199698-9EEA-4C19-BC75-CEC21354C6B6": true,
		"76199698-9eea-4c19-bc75-cec21354c6b":  false,
		"76199698x9eea-4c19-bc75-cec21354c6b6": false,
		"76199698-9eea-4c19-bc75-cec21354c6bg": false,
	} {
		if isGUID(s) != w {
			t.Errorf("isGUID(%q) = %v", s, !w)
		}
	}
}
