// Package rbac decides what a principal with a verified bearer token may do, the way Azure
// role-based access control decides it for the Table service (issue 47): roles hold
// permissions (Azure's actions and data actions), role assignments give a role to a
// principal at a scope, and an operation is allowed when the assignments that match the
// principal and cover the resource hold the permissions the operation needs (Needs).
// Refusals are Azure's 403 AuthorizationPermissionMismatch (DeniedError.AzureError).
//
// The assignments live in a JSON file that the server reloads when it changes
// (Authorizer). Its shape follows `az role assignment create --assignee --role --scope`
// and Azure's custom role definitions:
//
//	{
//	  "roleDefinitions": [
//	    {
//	      "roleName": "Table Appender",
//	      "id": "6f1d3c5e-8a52-4b8e-9a43-0e2f5d7c9b10",
//	      "description": "insert entities, nothing else",
//	      "actions": [],
//	      "dataActions": ["Microsoft.Storage/storageAccounts/tableServices/tables/entities/add/action"]
//	    }
//	  ],
//	  "assignments": [
//	    {
//	      "principal": "2c5b1f0e-3d4a-4e7b-9c8d-1a2b3c4d5e6f",
//	      "principalType": "User",
//	      "role": "Storage Table Data Contributor",
//	      "scope": "/devstoreaccount1",
//	      "issuer": "https://login.microsoftonline.com/<tenant>/v2.0"
//	    },
//	    {
//	      "principal": "readers",
//	      "principalType": "Group",
//	      "role": "76199698-9eea-4c19-bc75-cec21354c6b6",
//	      "scope": "/devstoreaccount1/tables/orders"
//	    },
//	    {
//	      "principal": "Tables.Append",
//	      "principalType": "AppRole",
//	      "role": "Table Appender",
//	      "scope": "/subscriptions/x/resourceGroups/y/providers/Microsoft.Storage/storageAccounts/devstoreaccount1/tableServices/default/tables/audit"
//	    }
//	  ]
//	}
//
// Both top-level fields are optional; a file without assignments allows nothing.
//
// An assignment's fields:
//   - principal (required): the id the token must carry — an object id (oid, else sub), an
//     application (client) id, a group id or an app role's value, per principalType.
//   - principalType: User (the object id), ServicePrincipal (the object id or the app
//     id), Group (the groups claim) or AppRole (the roles claim). Left out, the principal
//     matches the object id, the groups or the app roles, but never the app id (see
//     ServicePrincipal for why).
//   - role (required): a role's name (case-insensitive) or role definition id, bare or as
//     Azure's resource id (…/providers/Microsoft.Authorization/roleDefinitions/<id>): a
//     built-in role (BuiltinRoles) or one of the file's roleDefinitions.
//   - scope (required): "/", "/<account>", "/<account>/tables/<table>", or Azure's
//     resource id for the same (ParseScope). An account scope covers its tables and its
//     table service; "/" covers every account. Table names compare case-insensitively.
//   - issuer: the token issuer (iss) the assignment is for, compared exactly. Object ids
//     are unique only within one tenant or provider: with more than one issuer
//     configured, give every assignment its issuer.
//   - description: free text.
//
// A role definition's fields are Azure's custom role's: roleName (required, not a
// built-in's), id (optional GUID), description, and the patterns actions, notActions,
// dataActions and notDataActions ('*' wildcards, case-insensitive).
//
// Decoding is strict: unknown, misspelt (field names are case-sensitive) and repeated
// fields, values of the wrong type, unknown roles, bad scopes and data after the object
// are errors naming the line, column and field (FileError).
package rbac
