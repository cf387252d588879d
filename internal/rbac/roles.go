package rbac

// Role is a role definition as Azure writes one: the control-plane actions it grants
// (Actions) less those it withholds (NotActions), and likewise for data actions. Patterns
// may hold '*' wildcards and compare case-insensitively, as Azure's do ("*/read" is every
// read action).
type Role struct {
	// Name is the role's name ("Storage Table Data Reader"), ID its role definition id (a
	// GUID; built-in roles have the same id in every tenant).
	Name string
	ID   string
	// Description says what the role is for.
	Description    string
	Actions        []string
	NotActions     []string
	DataActions    []string
	NotDataActions []string
}

// Grants reports whether the role holds p: a pattern of Actions (DataActions for a data
// action) matches it and none of NotActions (NotDataActions) does.
func (r *Role) Grants(p Permission) bool {
	grant, deny := r.Actions, r.NotActions
	if p.Data {
		grant, deny = r.DataActions, r.NotDataActions
	}
	return matchAny(grant, p.Action) && !matchAny(deny, p.Action)
}

// mask is the role's permissions among allPermissions, one bit each, so that a decision
// ORs and compares masks instead of matching patterns.
func (r *Role) mask() uint32 {
	var m uint32
	for i, p := range allPermissions {
		if r.Grants(p) {
			m |= 1 << uint(i)
		}
	}
	return m
}

func matchAny(patterns []string, action string) bool {
	for _, pat := range patterns {
		if wildcardMatch(pat, action) {
			return true
		}
	}
	return false
}

// wildcardMatch matches s against pattern, in which '*' stands for any run of characters
// ('/' included, as in Azure's "*/read"), ignoring ASCII case.
func wildcardMatch(pattern, s string) bool {
	// Iterative glob: on a mismatch, retry from the last '*' one character further on.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && lower(pattern[p]) == lower(s[i]):
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// BuiltinRoles are Azure's built-in roles that hold a permission of the Table service,
// with their real definitions: the two Storage Table Data roles, and the general roles
// whose wildcards reach the control-plane actions for ACLs and service properties (which
// neither data role holds). Sources: "Azure built-in roles"
// (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles, Storage
// section: the JSON of Storage Table Data Reader and Contributor), Storage Account
// Contributor's definition (updated 2021-11-11, as listed by azadvertizer.net and
// azure-rbac-catalog.org), and the General section for Owner, Contributor and Reader.
// Contributor's NotActions are abridged to the ones that matter for its breadth (none
// names Microsoft.Storage); the general roles hold no data action, so Owner can manage a
// table's ACL but read no entity — as in Azure, where "Owner, Contributor, and Storage
// Account Contributor permit a security principal to manage a storage account, but do not
// provide access to the table data within that account via Microsoft Entra ID".
var BuiltinRoles = []*Role{
	{
		Name:        "Storage Table Data Reader",
		ID:          "76199698-9eea-4c19-bc75-cec21354c6b6",
		Description: "Allows for read access to Azure Storage tables and entities",
		Actions:     []string{"Microsoft.Storage/storageAccounts/tableServices/tables/read"},
		DataActions: []string{"Microsoft.Storage/storageAccounts/tableServices/tables/entities/read"},
	},
	{
		Name:        "Storage Table Data Contributor",
		ID:          "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
		Description: "Allows for read, write and delete access to Azure Storage tables and entities",
		Actions: []string{
			"Microsoft.Storage/storageAccounts/tableServices/tables/read",
			"Microsoft.Storage/storageAccounts/tableServices/tables/write",
			"Microsoft.Storage/storageAccounts/tableServices/tables/delete",
		},
		DataActions: []string{
			"Microsoft.Storage/storageAccounts/tableServices/tables/entities/read",
			"Microsoft.Storage/storageAccounts/tableServices/tables/entities/write",
			"Microsoft.Storage/storageAccounts/tableServices/tables/entities/delete",
			"Microsoft.Storage/storageAccounts/tableServices/tables/entities/add/action",
			"Microsoft.Storage/storageAccounts/tableServices/tables/entities/update/action",
		},
	},
	{
		Name:        "Storage Account Contributor",
		ID:          "17d1049b-9a84-46fb-8f53-869881c3d3ab",
		Description: "Lets you manage storage accounts, including accessing storage account keys which provide full access to storage account data.",
		Actions: []string{
			"Microsoft.Authorization/*/read",
			"Microsoft.Insights/alertRules/*",
			"Microsoft.Insights/diagnosticSettings/*",
			"Microsoft.Network/virtualNetworks/subnets/joinViaServiceEndpoint/action",
			"Microsoft.ResourceHealth/availabilityStatuses/read",
			"Microsoft.Resources/deployments/*",
			"Microsoft.Resources/subscriptions/resourceGroups/read",
			"Microsoft.Storage/storageAccounts/*",
			"Microsoft.Support/*",
		},
	},
	{
		Name:        "Owner",
		ID:          "8e3af657-a8ff-443c-a75c-2fe8c4bcb635",
		Description: "Grants full access to manage all resources, including the ability to assign roles in Azure RBAC.",
		Actions:     []string{"*"},
	},
	{
		Name:        "Contributor",
		ID:          "b24988ac-6180-42a0-ab88-20f7382dd24c",
		Description: "Grants full access to manage all resources, but does not allow you to assign roles in Azure RBAC.",
		Actions:     []string{"*"},
		NotActions: []string{
			"Microsoft.Authorization/*/Delete",
			"Microsoft.Authorization/*/Write",
			"Microsoft.Authorization/elevateAccess/Action",
			"Microsoft.Blueprint/blueprintAssignments/write",
			"Microsoft.Blueprint/blueprintAssignments/delete",
			"Microsoft.Compute/galleries/share/action",
		},
	},
	{
		Name:        "Reader",
		ID:          "acdd72a7-3385-48ef-bd42-f606fba81ae7",
		Description: "View all resources, but does not allow you to make any changes.",
		Actions:     []string{"*/read"},
	},
}
