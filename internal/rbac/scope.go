package rbac

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ceruleandb/cerulean/internal/auth"
)

// Scope is what an assignment reaches: every account (Account ""), one account (Table ""),
// or one table of one account. Table is kept as written; it compares case-insensitively,
// as table names do.
type Scope struct {
	Account string
	Table   string
}

// String is the scope in the short form ParseScope reads.
func (s Scope) String() string {
	switch {
	case s.Account == "":
		return "/"
	case s.Table == "":
		return "/" + s.Account
	}
	return "/" + s.Account + "/tables/" + s.Table
}

// ParseScope reads an assignment's scope in either of two forms.
//
// The short form names Cerulean's resources the way its URLs do:
//
//	/                                  every account
//	/<account>                         one account: all its tables, and its table service
//	/<account>/tables/<table>          one table
//
// Azure's form is the resource id `az role assignment create --scope` takes, so that a
// scope can be copied from Azure:
//
//	/subscriptions/<s>[/resourceGroups/<rg>]                                      every account
//	/providers/Microsoft.Management/managementGroups/<mg>                         every account
//	/subscriptions/<s>/resourceGroups/<rg>/providers/Microsoft.Storage/storageAccounts/<account>
//	    [/tableServices/default[/tables/<table>]]
//
// Cerulean has no subscriptions or resource groups, so a scope above a storage account
// reaches every account, as it reaches every account in it in Azure; their names are not
// checked. Segment keywords compare case-insensitively, as Azure resource ids do. Account
// names must be valid storage account names and table names valid table names.
func ParseScope(s string) (Scope, error) {
	if s == "" {
		return Scope{}, errors.New("empty scope: use \"/\" for every account")
	}
	if s == "/" {
		return Scope{}, nil
	}
	if s[0] != '/' {
		return Scope{}, fmt.Errorf("scope %q does not start with '/'", s)
	}
	segs := strings.Split(s[1:], "/")
	for _, seg := range segs {
		if seg == "" {
			return Scope{}, fmt.Errorf("scope %q has an empty segment", s)
		}
	}
	switch {
	case len(segs) == 1:
		return accountScope(s, segs[0])
	case len(segs) == 3 && segs[1] == "tables":
		sc, err := accountScope(s, segs[0])
		if err != nil {
			return sc, err
		}
		return tableScope(s, sc, segs[2])
	case strings.EqualFold(segs[0], "subscriptions") || strings.EqualFold(segs[0], "providers"):
		return azureScope(s, segs)
	}
	return Scope{}, fmt.Errorf("scope %q is neither \"/\", \"/<account>\", \"/<account>/tables/<table>\" nor an Azure resource id", s)
}

func accountScope(s, name string) (Scope, error) {
	if !auth.ValidAccountName(name) {
		return Scope{}, fmt.Errorf("scope %q: %q is not a storage account name (3-24 lowercase letters or digits)", s, name)
	}
	return Scope{Account: name}, nil
}

func tableScope(s string, sc Scope, name string) (Scope, error) {
	if !validTableName(name) {
		return Scope{}, fmt.Errorf("scope %q: %q is not a table name (3-63 letters or digits, a letter first)", s, name)
	}
	sc.Table = name
	return sc, nil
}

// azureScope reads an Azure resource id: keyword segments alternate with names.
func azureScope(s string, segs []string) (Scope, error) {
	bad := func(why string) (Scope, error) {
		return Scope{}, fmt.Errorf("scope %q: %s", s, why)
	}
	if strings.EqualFold(segs[0], "providers") {
		if len(segs) == 4 && strings.EqualFold(segs[1], "Microsoft.Management") && strings.EqualFold(segs[2], "managementGroups") {
			return Scope{}, nil
		}
		return bad("want /providers/Microsoft.Management/managementGroups/<group> or /subscriptions/…")
	}
	// segs[0] is "subscriptions".
	rest := segs[2:]
	if len(rest) == 0 {
		return Scope{}, nil
	}
	if len(rest) < 2 || !strings.EqualFold(rest[0], "resourceGroups") {
		return bad("want /subscriptions/<subscription>/resourceGroups/<group>/…")
	}
	rest = rest[2:]
	if len(rest) == 0 {
		return Scope{}, nil
	}
	if len(rest) < 4 || !strings.EqualFold(rest[0], "providers") || !strings.EqualFold(rest[1], "Microsoft.Storage") || !strings.EqualFold(rest[2], "storageAccounts") {
		return bad("want …/providers/Microsoft.Storage/storageAccounts/<account> below a resource group")
	}
	sc, err := accountScope(s, rest[3])
	if err != nil {
		return sc, err
	}
	rest = rest[4:]
	if len(rest) == 0 {
		return sc, nil
	}
	if len(rest) < 2 || !strings.EqualFold(rest[0], "tableServices") || rest[1] != "default" {
		return bad("below a storage account, want /tableServices/default[/tables/<table>]")
	}
	rest = rest[2:]
	if len(rest) == 0 {
		return sc, nil
	}
	if len(rest) != 2 || !strings.EqualFold(rest[0], "tables") {
		return bad("below tableServices/default, want /tables/<table>")
	}
	return tableScope(s, sc, rest[1])
}

// validTableName applies the Table service's naming rules (table.ValidateTableName, which
// this package does not import for the sake of its dependencies): 3-63 ASCII letters and
// digits, a letter first, not "tables".
func validTableName(name string) bool {
	if len(name) < 3 || len(name) > 63 || strings.EqualFold(name, "tables") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
