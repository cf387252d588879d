// Sign-in with an identity through the JavaScript SDK (issue 47, docs/identity.md): a
// TokenCredential (@azure/core-auth's shape: getToken returns {token, expiresOnTimestamp})
// hands @azure/data-tables the bearer tokens the Go test obtained, one per principal:
//
//   CERULEAN_ENDPOINT        https://127.0.0.1:PORT/devstoreaccount1 (trusted through NODE_EXTRA_CA_CERTS)
//   CERULEAN_TOKEN_CONTRIBUTOR, CERULEAN_TOKEN_READER, CERULEAN_TOKEN_SCOPED
//                            a Storage Table Data Contributor's, a Reader's, and a
//                            Contributor's on CERULEAN_SCOPED_TABLE only
//   CERULEAN_TABLE, CERULEAN_SCOPED_TABLE   the tables to use (neither exists yet)
//
// The Contributor does every entity operation, the Reader only reads (each write 403
// AuthorizationPermissionMismatch), the table-scoped one reaches only its table. Run by
// e2e/identity_sdks_test.go (TestBearerJS, TestDevIssuerJS); exits non-zero on a failure.

import assert from "node:assert/strict";
import { TableServiceClient, TableClient } from "@azure/data-tables";

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (see the comment at the top of this file)`);
  return v;
}

// StaticTokenCredential is the smallest TokenCredential: it returns the token it was
// given, as a credential returns the token `cerulean token` printed.
class StaticTokenCredential {
  constructor(token) {
    this.token = token;
  }
  async getToken(scopes) {
    const s = [].concat(scopes);
    assert.deepEqual(s, ["https://storage.azure.com/.default"], "the SDK asks for the storage resource's scope");
    return { token: this.token, expiresOnTimestamp: Date.now() + 3600 * 1000 };
  }
}

const endpoint = env("CERULEAN_ENDPOINT");
const table = env("CERULEAN_TABLE");
const scopedTable = env("CERULEAN_SCOPED_TABLE");
const DENIED = "AuthorizationPermissionMismatch";
const options = { retryOptions: { maxRetries: 0 } };

function clients(tokenVar) {
  const cred = new StaticTokenCredential(env(tokenVar));
  return {
    service: new TableServiceClient(endpoint, cred, options),
    table: (name) => new TableClient(endpoint, name, cred, options),
  };
}

async function denied(what, promise) {
  try {
    await promise;
  } catch (err) {
    const code = err.code ?? err.details?.errorCode;
    if (err.statusCode === 403 && (code === DENIED || String(err.message).includes(DENIED))) {
      console.log(`ok   ${what}: 403 ${DENIED}`);
      return;
    }
    throw new Error(`${what}: ${err.statusCode} ${code} ${err.message}; want 403 ${DENIED}`);
  }
  throw new Error(`${what} succeeded; want 403 ${DENIED}`);
}

async function ok(what, promise) {
  const r = await promise;
  console.log(`ok   ${what}`);
  return r;
}

async function first(iter) {
  for await (const x of iter) return x;
  return undefined;
}

const contrib = clients("CERULEAN_TOKEN_CONTRIBUTOR");
const reader = clients("CERULEAN_TOKEN_READER");
const scoped = clients("CERULEAN_TOKEN_SCOPED");

// The Contributor: tables and every entity operation.
await ok("Contributor createTable", contrib.service.createTable(table));
await ok("Contributor createTable (scoped)", contrib.service.createTable(scopedTable));
const c = contrib.table(table);
const ent = (rowKey, n) => ({ partitionKey: "p", rowKey, N: n });
await ok("Contributor createEntity", c.createEntity(ent("a", 1)));
assert.equal((await ok("Contributor getEntity", c.getEntity("p", "a"))).N, 1);
await ok("Contributor updateEntity (Replace)", c.updateEntity(ent("a", 2), "Replace"));
await ok("Contributor updateEntity (Merge)", c.updateEntity(ent("a", 3), "Merge"));
await ok("Contributor upsertEntity (Merge)", c.upsertEntity(ent("b", 1), "Merge"));
await ok("Contributor upsertEntity (Replace)", c.upsertEntity(ent("c", 1), "Replace"));
const listed = [];
for await (const e of c.listEntities()) listed.push(e.rowKey);
assert.deepEqual(listed, ["a", "b", "c"], "Contributor listEntities");
console.log("ok   Contributor listEntities");
await ok("Contributor submitTransaction", c.submitTransaction([["create", ent("d", 1)], ["delete", ent("c", 1)]]));
await ok("Contributor deleteEntity", c.deleteEntity("p", "b"));
assert.ok(await ok("Contributor listTables", first(contrib.service.listTables())));

// The Reader reads; every write is 403 and writes nothing.
const r = reader.table(table);
assert.equal((await ok("Reader getEntity", r.getEntity("p", "a"))).N, 3);
assert.ok(await ok("Reader listEntities", first(r.listEntities())));
assert.ok(await ok("Reader listTables", first(reader.service.listTables())));
await denied("Reader createEntity", r.createEntity(ent("r", 1)));
await denied("Reader upsertEntity", r.upsertEntity(ent("a", 9), "Merge"));
await denied("Reader updateEntity", r.updateEntity(ent("a", 9), "Replace"));
await denied("Reader deleteEntity", r.deleteEntity("p", "a"));
await denied("Reader createTable", reader.service.createTable(table + "r"));
await denied("Reader submitTransaction", r.submitTransaction([["create", ent("r", 1)]]));
assert.equal((await c.getEntity("p", "a")).N, 3, "the Reader's writes changed nothing");

// A table-scoped role reaches its table only.
await ok("scoped createEntity on its table", scoped.table(scopedTable).createEntity(ent("s", 1)));
await ok("scoped getEntity on its table", scoped.table(scopedTable).getEntity("p", "s"));
await denied("scoped getEntity on another table", scoped.table(table).getEntity("p", "a"));
await denied("scoped createEntity on another table", scoped.table(table).createEntity(ent("s", 1)));
await denied("scoped listTables", first(scoped.service.listTables()));

console.log("identity.mjs: all passed");
