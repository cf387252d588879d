package rbac

import "github.com/ceruleandb/cerulean/internal/auth"

// Permission is one Azure RBAC action: a control-plane action (a role's Actions and
// NotActions grant or withhold it) or a data action (DataActions and NotDataActions). Azure
// keeps the two apart — a role whose Actions are "*" (Owner) holds no data action at all —
// so the kind is part of the permission, not something a pattern decides.
type Permission struct {
	Action string
	Data   bool
}

// The actions the Table service's operations need, as Azure names them.
var (
	TablesRead      = Permission{Action: "Microsoft.Storage/storageAccounts/tableServices/tables/read"}
	TablesWrite     = Permission{Action: "Microsoft.Storage/storageAccounts/tableServices/tables/write"}
	TablesDelete    = Permission{Action: "Microsoft.Storage/storageAccounts/tableServices/tables/delete"}
	TablesGetACL    = Permission{Action: "Microsoft.Storage/storageAccounts/tableServices/tables/getAcl/action"}
	TablesSetACL    = Permission{Action: "Microsoft.Storage/storageAccounts/tableServices/tables/setAcl/action"}
	ServiceRead     = Permission{Action: "Microsoft.Storage/storageAccounts/tableServices/read"}
	ServiceWrite    = Permission{Action: "Microsoft.Storage/storageAccounts/tableServices/write"}
	EntitiesRead    = Permission{Action: "Microsoft.Storage/storageAccounts/tableServices/tables/entities/read", Data: true}
	EntitiesWrite   = Permission{Action: "Microsoft.Storage/storageAccounts/tableServices/tables/entities/write", Data: true}
	EntitiesDelete  = Permission{Action: "Microsoft.Storage/storageAccounts/tableServices/tables/entities/delete", Data: true}
	EntitiesAdd     = Permission{Action: "Microsoft.Storage/storageAccounts/tableServices/tables/entities/add/action", Data: true}
	EntitiesUpdate  = Permission{Action: "Microsoft.Storage/storageAccounts/tableServices/tables/entities/update/action", Data: true}
	allPermissions  = []Permission{TablesRead, TablesWrite, TablesDelete, TablesGetACL, TablesSetACL, ServiceRead, ServiceWrite, EntitiesRead, EntitiesWrite, EntitiesDelete, EntitiesAdd, EntitiesUpdate}
	permissionIndex = func() map[Permission]uint {
		m := make(map[Permission]uint, len(allPermissions))
		for i, p := range allPermissions {
			m[p] = uint(i)
		}
		return m
	}()
)

// Need is what one operation requires: the permissions of any one of AnyOf, each an
// alternative whose permissions are all needed (Azure's "write, or add and update"), held
// through assignments whose scope covers the operation's resource. AccountLevel
// operations act on the account's table service itself, not on a table: only an
// assignment at the account or above covers them, whatever table the request names.
type Need struct {
	AnyOf        [][]Permission
	AccountLevel bool
}

func one(p ...Permission) [][]Permission { return [][]Permission{p} }

// Needs maps each operation of the Table service, named by the router's auth.OpKind (the
// kind SAS authorization and the access log's operation names already use), to what Azure
// requires of a bearer token's principal. It is the table "Permissions for Table service
// operations" of "Authorize with Microsoft Entra ID (REST API)",
// https://learn.microsoft.com/rest/api/storageservices/authorize-with-azure-active-directory#permissions-for-calling-data-operations
// (MicrosoftDocs/azure-docs-rest-apis, docs-ref-conceptual/storageservices/authorize-with-azure-active-directory.md,
// ms.date 2025-03-27), verbatim:
//
//	Set Table Service Properties   tableServices/write
//	Get Table Service Properties   tableServices/read
//	Get Table Service Stats        tableServices/read
//	Entity Group Transaction       sub-operation authorizes separately
//	Query Tables                   tables/read (scoped to the storage account or above)
//	Create Table                   tables/write
//	Delete Table                   tables/delete
//	Get Table ACL                  tables/getAcl/action
//	Set Table ACL                  tables/setAcl/action
//	Query Entities                 tables/entities/read
//	Insert Entity                  entities/write or entities/add/action
//	Insert Or Merge Entity         entities/write or (entities/add/action and entities/update/action)
//	Insert Or Replace Entity       entities/write or (entities/add/action and entities/update/action)
//	Update Entity, Merge Entity    entities/write or entities/update/action
//	Delete Entity                  entities/delete
//
// ACLs and service properties are allowed with OAuth, through control-plane actions that
// neither Storage Table Data role holds: Owner, Contributor and Storage Account
// Contributor hold them (BuiltinRoles), Reader holds the read ones ("*/read").
//
// Cerulean's choices where the page says nothing:
//   - Get Entity is a Query Entities (one entity by its keys); reading a table's change
//     feed (OpReadChanges) reads the entities' states, so it needs entities/read too.
//   - Reading one table by its own URL (GET /Tables('t')) is routed as Query Tables and so
//     needs tables/read at account scope: the safe answer, since a table-scoped assignment
//     would otherwise learn whether other tables exist by name.
//   - Cerulean's table settings (comp=properties) are the table's own properties, as a
//     container's are in the Blob service (Get Container Properties: containers/read, Set
//     Container Metadata: containers/write): tables/read and tables/write at table scope.
//   - OpBatch (a $batch or a bulk write envelope) needs nothing itself: the server passes
//     every contained operation to Check with it, which then needs the union.
//   - OpUnknown names no operation of the service; it needs nothing, so the server answers
//     it 400 as it does for every caller rather than 403 for an operation that does not
//     exist (as SAS authorization does).
//
// An OpKind missing from Needs is refused: a new operation is denied until mapped.
var Needs = map[auth.OpKind]Need{
	auth.OpQueryEntities:    {AnyOf: one(EntitiesRead)},
	auth.OpGetEntity:        {AnyOf: one(EntitiesRead)},
	auth.OpReadChanges:      {AnyOf: one(EntitiesRead)},
	auth.OpInsert:           {AnyOf: [][]Permission{{EntitiesWrite}, {EntitiesAdd}}},
	auth.OpUpdate:           {AnyOf: [][]Permission{{EntitiesWrite}, {EntitiesUpdate}}},
	auth.OpMerge:            {AnyOf: [][]Permission{{EntitiesWrite}, {EntitiesUpdate}}},
	auth.OpUpsertReplace:    {AnyOf: [][]Permission{{EntitiesWrite}, {EntitiesAdd, EntitiesUpdate}}},
	auth.OpUpsertMerge:      {AnyOf: [][]Permission{{EntitiesWrite}, {EntitiesAdd, EntitiesUpdate}}},
	auth.OpDelete:           {AnyOf: one(EntitiesDelete)},
	auth.OpQueryTables:      {AnyOf: one(TablesRead), AccountLevel: true},
	auth.OpCreateTable:      {AnyOf: one(TablesWrite)},
	auth.OpDeleteTable:      {AnyOf: one(TablesDelete)},
	auth.OpGetACL:           {AnyOf: one(TablesGetACL)},
	auth.OpSetACL:           {AnyOf: one(TablesSetACL)},
	auth.OpGetServiceProps:  {AnyOf: one(ServiceRead), AccountLevel: true},
	auth.OpSetServiceProps:  {AnyOf: one(ServiceWrite), AccountLevel: true},
	auth.OpGetServiceStats:  {AnyOf: one(ServiceRead), AccountLevel: true},
	auth.OpGetTableSettings: {AnyOf: one(TablesRead)},
	auth.OpSetTableSettings: {AnyOf: one(TablesWrite)},
	auth.OpBatch:            {},
	auth.OpUnknown:          {},
}

// needMask is a Need compiled to bit masks over allPermissions.
type needMask struct {
	anyOf        []uint32
	accountLevel bool
	alts         [][]Permission
}

var needMasks = func() map[auth.OpKind]needMask {
	m := make(map[auth.OpKind]needMask, len(Needs))
	for k, n := range Needs {
		nm := needMask{accountLevel: n.AccountLevel, alts: n.AnyOf}
		for _, alt := range n.AnyOf {
			var bits uint32
			for _, p := range alt {
				bits |= 1 << permissionIndex[p]
			}
			nm.anyOf = append(nm.anyOf, bits)
		}
		m[k] = nm
	}
	return m
}()
