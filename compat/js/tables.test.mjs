// Compatibility suite: drives a running cerulean server through the real JavaScript SDK,
// @azure/data-tables (pinned in package.json), with Node's built-in test runner.
//
//   CERULEAN_CONNECTION_STRING='DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=...;TableEndpoint=http://127.0.0.1:PORT/devstoreaccount1;' \
//     node --test compat/js/
//
// e2e/compat_js_test.go (TestCompatJS) starts a server and runs this on each engine.
// See docs/protocol.md §11 for the SDK's wire quirks this exercises
// (SharedKeyLite, Prefer: return-no-content, its paging stop rule and batch parsing).

import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomBytes, randomUUID } from "node:crypto";
import {
  TableServiceClient,
  TableClient,
  TableTransaction,
  AzureNamedKeyCredential,
  AzureSASCredential,
  RestError,
  odata,
  generateTableSas,
  generateAccountSas,
} from "@azure/data-tables";

const connectionString = process.env.CERULEAN_CONNECTION_STRING;
if (!connectionString) {
  throw new Error("CERULEAN_CONNECTION_STRING is not set (see the comment at the top of this file)");
}
const csParts = Object.fromEntries(
  connectionString
    .split(";")
    .filter((p) => p.includes("="))
    .map((p) => {
      const i = p.indexOf("=");
      return [p.slice(0, i), p.slice(i + 1)];
    }),
);
const accountName = csParts.AccountName;
const accountKey = csParts.AccountKey;
const endpoint = csParts.TableEndpoint.replace(/\/$/, "");
const credential = new AzureNamedKeyCredential(accountName, accountKey);
const clientOptions = { allowInsecureConnection: true };

const service = TableServiceClient.fromConnectionString(connectionString, clientOptions);
const run = randomBytes(3).toString("hex");
let tableCounter = 0;
const created = [];

// uniqueTableName returns a valid, unique table name (letters and digits, starts with a letter).
function uniqueTableName(prefix) {
  tableCounter++;
  return `js${prefix}${run}${tableCounter}`;
}

async function newTable(prefix) {
  const name = uniqueTableName(prefix);
  await service.createTable(name);
  created.push(name);
  return TableClient.fromConnectionString(connectionString, name, clientOptions);
}

// rejects asserts that fn throws a RestError with the given status and error code and returns it.
async function rejectsWith(fn, statusCode, code) {
  let err;
  try {
    await fn();
  } catch (e) {
    err = e;
  }
  assert.ok(err, `expected a ${statusCode} ${code} error, got success`);
  assert.ok(err instanceof RestError, `expected a RestError, got ${err?.name}: ${err?.message}`);
  assert.equal(err.statusCode, statusCode, `status (message: ${err.message})`);
  if (code) assert.equal(errorCode(err), code, `error code (message: ${err.message})`);
  return err;
}

// errorCode is the service error code as the SDK surfaces it. For transactions the SDK sets
// err.code from the sub-response's odata.error; for every other operation 13.3.2 leaves
// err.code undefined (core-client looks for parsedBody.error.code, while the table mapper
// yields parsedBody.odataError.code), so the code is read from the deserialized body — and
// then the x-ms-error-code header must agree with it.
function errorCode(err) {
  if (err.code !== undefined) return err.code;
  const bodyCode = err.response?.parsedBody?.odataError?.code;
  const headerCode = err.response?.headers?.get("x-ms-error-code");
  assert.equal(headerCode, bodyCode, "x-ms-error-code header matches odata.error.code");
  return bodyCode;
}

async function collect(iter) {
  const out = [];
  for await (const e of iter) out.push(e);
  return out;
}

after(async () => {
  for (const name of created) {
    try {
      await service.deleteTable(name);
    } catch {
      // best effort
    }
  }
});

describe("tables", () => {
  test("create, list, query by name, delete", async () => {
    const a = uniqueTableName("tbla");
    const b = uniqueTableName("tblb");
    await service.createTable(a);
    await service.createTable(b);
    const names = (await collect(service.listTables())).map((t) => t.name);
    assert.ok(names.includes(a), `listTables contains ${a}`);
    assert.ok(names.includes(b), `listTables contains ${b}`);

    const filtered = (await collect(service.listTables({ queryOptions: { filter: odata`TableName eq ${a}` } }))).map(
      (t) => t.name,
    );
    assert.deepEqual(filtered, [a]);

    // Creating an existing table through the service client is a no-op in this SDK (it swallows 409).
    await service.createTable(a);
    // ... but through a TableClient's createTable it is too; the raw 409 is visible via onResponse.
    let status;
    await service.createTable(a, { onResponse: (r) => (status = r.status) });
    assert.equal(status, 409);

    await service.deleteTable(a);
    await service.deleteTable(b);
    const after = (await collect(service.listTables())).map((t) => t.name);
    assert.ok(!after.includes(a) && !after.includes(b), "deleted tables are gone");
    // Deleting a missing table is swallowed by the SDK (404 → success); check the raw status.
    await service.deleteTable(a, { onResponse: (r) => (status = r.status) });
    assert.equal(status, 404);
  });

  test("listTables pages", async () => {
    const prefix = `jspage${run}x`;
    const names = [];
    for (let i = 0; i < 5; i++) {
      const n = `${prefix}${i}`;
      await service.createTable(n);
      created.push(n);
      names.push(n);
    }
    const seen = [];
    let pages = 0;
    const iter = service
      .listTables({ queryOptions: { filter: odata`TableName ge ${prefix} and TableName lt ${prefix + "z"}` } })
      .byPage({ maxPageSize: 2 });
    for await (const page of iter) {
      pages++;
      assert.ok(page.length <= 2, `page size ${page.length} <= 2`);
      seen.push(...page.map((t) => t.name));
    }
    assert.deepEqual(seen, names);
    assert.ok(pages >= 3, `at least 3 pages, got ${pages}`);
  });

  test("TableClient.createTable / deleteTable", async () => {
    const name = uniqueTableName("tc");
    const client = TableClient.fromConnectionString(connectionString, name, clientOptions);
    await client.createTable();
    created.push(name);
    await client.createEntity({ partitionKey: "p", rowKey: "r" });
    await client.deleteTable();
    await rejectsWith(() => client.getEntity("p", "r"), 404, "TableNotFound");
  });
});

describe("service", () => {
  // getStatistics asks for the secondary by renaming the first host label, which cannot
  // apply to 127.0.0.1, so with the printed connection string it calls the path-style
  // primary endpoint; Cerulean serves stats there (docs/operations.md, "Service stats").
  test("getStatistics with the connection string", async () => {
    let url;
    const stats = await service.getStatistics({ onResponse: (r) => (url = r.request.url) });
    assert.equal(stats.geoReplication?.status, "live");
    const last = stats.geoReplication?.lastSyncTime;
    assert.ok(last instanceof Date && Math.abs(Date.now() - last.getTime()) < 5 * 60 * 1000, `lastSyncTime ${last}`);
    assert.ok(url.includes("comp=stats"), `request URL ${url}`);
  });

  test("getStatistics on the -secondary endpoint", async () => {
    const secondary = endpoint.replace(new RegExp(`/${accountName}$`), `/${accountName}-secondary`);
    assert.notEqual(secondary, endpoint, "the endpoint is path-style");
    const svc = new TableServiceClient(secondary, credential, clientOptions);
    const stats = await svc.getStatistics();
    assert.equal(stats.geoReplication?.status, "live");
  });
});

describe("entities", () => {
  let client;
  before(async () => {
    client = await newTable("ent");
  });

  test("createEntity, getEntity, select", async () => {
    const res = await client.createEntity({ partitionKey: "p1", rowKey: "r1", name: "Alice", age: 30, city: "Paris" });
    assert.ok(res.etag, "createEntity returns an etag");
    assert.match(res.etag, /^W\/"datetime'.+'"$/);

    const e = await client.getEntity("p1", "r1");
    assert.equal(e.partitionKey, "p1");
    assert.equal(e.rowKey, "r1");
    assert.equal(e.name, "Alice");
    assert.equal(e.age, 30);
    assert.equal(e.city, "Paris");
    assert.equal(e.etag, res.etag);
    assert.ok(e.timestamp, "timestamp present");
    assert.ok(!Number.isNaN(new Date(e.timestamp).getTime()), "timestamp parses");

    const s = await client.getEntity("p1", "r1", { queryOptions: { select: ["name"] } });
    assert.equal(s.name, "Alice");
    assert.equal(s.age, undefined);
    assert.equal(s.city, undefined);
    assert.ok(s.etag, "etag present with select");

    // Duplicate insert.
    await rejectsWith(() => client.createEntity({ partitionKey: "p1", rowKey: "r1" }), 409, "EntityAlreadyExists");
    // Missing entity.
    await rejectsWith(() => client.getEntity("p1", "missing"), 404, "ResourceNotFound");
  });

  test("keys with quotes and special characters", async () => {
    const pk = "o'brien & co";
    const rk = "it's 100% & more";
    await client.createEntity({ partitionKey: pk, rowKey: rk, v: 1 });
    const e = await client.getEntity(pk, rk);
    assert.equal(e.partitionKey, pk);
    assert.equal(e.rowKey, rk);
    await client.updateEntity({ partitionKey: pk, rowKey: rk, v: 2 }, "Merge");
    assert.equal((await client.getEntity(pk, rk)).v, 2);
    const q = await collect(client.listEntities({ queryOptions: { filter: odata`PartitionKey eq ${pk} and RowKey eq ${rk}` } }));
    assert.equal(q.length, 1);
    await client.deleteEntity(pk, rk);
    await rejectsWith(() => client.getEntity(pk, rk), 404, "ResourceNotFound");
  });

  test("updateEntity Replace and Merge, with etag and with *", async () => {
    const created = await client.createEntity({ partitionKey: "p2", rowKey: "r1", a: "A", b: "B" });

    // Replace with the current etag: b disappears.
    const rep = await client.updateEntity({ partitionKey: "p2", rowKey: "r1", a: "A2" }, "Replace", {
      etag: created.etag,
    });
    assert.ok(rep.etag && rep.etag !== created.etag, "replace returns a new etag");
    let e = await client.getEntity("p2", "r1");
    assert.equal(e.a, "A2");
    assert.equal(e.b, undefined);
    assert.equal(e.etag, rep.etag);

    // Merge with the current etag: c is added, a is kept.
    const mer = await client.updateEntity({ partitionKey: "p2", rowKey: "r1", c: "C" }, "Merge", { etag: rep.etag });
    assert.ok(mer.etag && mer.etag !== rep.etag, "merge returns a new etag");
    e = await client.getEntity("p2", "r1");
    assert.equal(e.a, "A2");
    assert.equal(e.c, "C");

    // Stale etag: 412 UpdateConditionNotSatisfied for both modes, and the entity is unchanged.
    await rejectsWith(
      () => client.updateEntity({ partitionKey: "p2", rowKey: "r1", a: "stale" }, "Replace", { etag: created.etag }),
      412,
      "UpdateConditionNotSatisfied",
    );
    await rejectsWith(
      () => client.updateEntity({ partitionKey: "p2", rowKey: "r1", a: "stale" }, "Merge", { etag: rep.etag }),
      412,
      "UpdateConditionNotSatisfied",
    );
    e = await client.getEntity("p2", "r1");
    assert.equal(e.a, "A2");

    // "*" (also the SDK's default).
    await client.updateEntity({ partitionKey: "p2", rowKey: "r1", d: "D" }, "Merge", { etag: "*" });
    await client.updateEntity({ partitionKey: "p2", rowKey: "r1", only: 1 }, "Replace", { etag: "*" });
    await client.updateEntity({ partitionKey: "p2", rowKey: "r1", two: 2 }); // default: Merge, If-Match *
    e = await client.getEntity("p2", "r1");
    assert.equal(e.only, 1);
    assert.equal(e.two, 2);
    assert.equal(e.a, undefined);

    // Update of a missing entity: 404.
    await rejectsWith(
      () => client.updateEntity({ partitionKey: "p2", rowKey: "nope", x: 1 }, "Replace"),
      404,
      "ResourceNotFound",
    );
    await rejectsWith(() => client.updateEntity({ partitionKey: "p2", rowKey: "nope", x: 1 }, "Merge"), 404, "ResourceNotFound");
  });

  test("upsertEntity Merge and Replace", async () => {
    // Inserts when missing (both modes).
    await client.upsertEntity({ partitionKey: "p3", rowKey: "m", a: 1 }, "Merge");
    await client.upsertEntity({ partitionKey: "p3", rowKey: "r", a: 1 }, "Replace");
    assert.equal((await client.getEntity("p3", "m")).a, 1);
    assert.equal((await client.getEntity("p3", "r")).a, 1);

    // Merge keeps existing properties, Replace drops them.
    const m = await client.upsertEntity({ partitionKey: "p3", rowKey: "m", b: 2 }, "Merge");
    assert.ok(m.etag, "upsert returns an etag");
    await client.upsertEntity({ partitionKey: "p3", rowKey: "r", b: 2 }, "Replace");
    const em = await client.getEntity("p3", "m");
    const er = await client.getEntity("p3", "r");
    assert.deepEqual([em.a, em.b], [1, 2]);
    assert.deepEqual([er.a, er.b], [undefined, 2]);
    // Default mode is Merge.
    await client.upsertEntity({ partitionKey: "p3", rowKey: "m", c: 3 });
    const em2 = await client.getEntity("p3", "m");
    assert.deepEqual([em2.a, em2.b, em2.c], [1, 2, 3]);
  });

  test("deleteEntity with etag, with *, and conflicts", async () => {
    const c = await client.createEntity({ partitionKey: "p4", rowKey: "r1", v: 1 });
    const u = await client.updateEntity({ partitionKey: "p4", rowKey: "r1", v: 2 }, "Merge");
    await rejectsWith(() => client.deleteEntity("p4", "r1", { etag: c.etag }), 412, "UpdateConditionNotSatisfied");
    await client.deleteEntity("p4", "r1", { etag: u.etag });
    await rejectsWith(() => client.getEntity("p4", "r1"), 404, "ResourceNotFound");
    await rejectsWith(() => client.deleteEntity("p4", "r1"), 404, "ResourceNotFound");

    await client.createEntity({ partitionKey: "p4", rowKey: "r2" });
    await client.deleteEntity("p4", "r2", { etag: "*" });
    await rejectsWith(() => client.getEntity("p4", "r2"), 404, "ResourceNotFound");
  });

  test("entity operations on a missing table", async () => {
    const missing = TableClient.fromConnectionString(connectionString, uniqueTableName("missing"), clientOptions);
    await rejectsWith(() => missing.createEntity({ partitionKey: "p", rowKey: "r" }), 404, "TableNotFound");
    await rejectsWith(() => collect(missing.listEntities()), 404, "TableNotFound");
  });
});

describe("EDM types", () => {
  let client;
  const guid = randomUUID();
  const bytes = new Uint8Array([0, 1, 2, 250, 255, 128, 64]);
  const date = new Date("2024-03-05T06:07:08.123Z");
  const big = 9007199254740993n; // 2^53 + 1: not representable as a JS number

  before(async () => {
    client = await newTable("edm");
    await client.createEntity({
      partitionKey: "types",
      rowKey: "1",
      str: "hello ünïcödé 'quoted'",
      strTyped: { value: "typed", type: "String" },
      int32: 42,
      int32Neg: -7,
      int32Typed: { value: "123", type: "Int32" },
      int64: { value: big.toString(), type: "Int64" },
      int64Big: big,
      int64Small: { value: "5", type: "Int64" },
      dbl: 3.25,
      dblIntegral: { value: "2", type: "Double" },
      dblTyped: { value: "1.5", type: "Double" },
      boolT: true,
      boolF: false,
      dt: date,
      dtTyped: { value: "2020-01-02T03:04:05.1234567Z", type: "DateTime" },
      guid: { value: guid, type: "Guid" },
      bin: bytes,
      binTyped: { value: Buffer.from("typed-binary").toString("base64"), type: "Binary" },
      empty: "",
    });
  });

  test("read back with type conversion", async () => {
    const e = await client.getEntity("types", "1");
    assert.equal(e.str, "hello ünïcödé 'quoted'");
    assert.equal(e.strTyped, "typed");
    assert.equal(e.empty, "");
    assert.equal(e.int32, 42);
    assert.equal(e.int32Neg, -7);
    assert.equal(e.int32Typed, 123);
    assert.equal(typeof e.int64, "bigint");
    assert.equal(e.int64, big);
    assert.equal(e.int64Big, big);
    assert.equal(e.int64Small, 5n);
    assert.equal(e.dbl, 3.25);
    assert.equal(e.dblIntegral, 2);
    assert.equal(e.dblTyped, 1.5);
    assert.equal(e.boolT, true);
    assert.equal(e.boolF, false);
    assert.ok(e.dt instanceof Date, "DateTime → Date");
    assert.equal(e.dt.toISOString(), date.toISOString());
    assert.ok(e.dtTyped instanceof Date, "DateTime → Date");
    assert.equal(e.dtTyped.toISOString(), "2020-01-02T03:04:05.123Z");
    assert.deepEqual(e.guid, { value: guid, type: "Guid" });
    assert.ok(e.bin instanceof Uint8Array, "Binary → Uint8Array");
    assert.deepEqual(Array.from(e.bin), Array.from(bytes));
    assert.equal(Buffer.from(e.binTyped).toString(), "typed-binary");
  });

  test("read back with disableTypeConversion: exact EDM types", async () => {
    const e = await client.getEntity("types", "1", { disableTypeConversion: true });
    assert.deepEqual(e.str, { value: "hello ünïcödé 'quoted'", type: "String" });
    assert.deepEqual(e.strTyped, { value: "typed", type: "String" });
    assert.deepEqual(e.empty, { value: "", type: "String" });
    assert.deepEqual(e.int32, { value: "42", type: "Int32" });
    assert.deepEqual(e.int32Neg, { value: "-7", type: "Int32" });
    assert.deepEqual(e.int32Typed, { value: "123", type: "Int32" });
    assert.deepEqual(e.int64, { value: big.toString(), type: "Int64" });
    assert.deepEqual(e.int64Big, { value: big.toString(), type: "Int64" });
    assert.deepEqual(e.int64Small, { value: "5", type: "Int64" });
    assert.deepEqual(e.dbl, { value: "3.25", type: "Double" });
    assert.equal(e.dblTyped.type, "Double");
    assert.equal(Number(e.dblTyped.value), 1.5);
    assert.deepEqual(e.boolT, { value: "true", type: "Boolean" });
    assert.deepEqual(e.boolF, { value: "false", type: "Boolean" });
    assert.equal(e.dt.type, "DateTime");
    assert.equal(new Date(e.dt.value).toISOString(), date.toISOString());
    assert.deepEqual(e.dtTyped, { value: "2020-01-02T03:04:05.1234567Z", type: "DateTime" });
    assert.deepEqual(e.guid, { value: guid, type: "Guid" });
    assert.deepEqual(e.bin, { value: Buffer.from(bytes).toString("base64"), type: "Binary" });
    assert.deepEqual(e.binTyped, { value: Buffer.from("typed-binary").toString("base64"), type: "Binary" });
    assert.equal(e.partitionKey, "types");
    assert.equal(e.rowKey, "1");
  });

  test("types survive listEntities too", async () => {
    const [e] = await collect(client.listEntities({ queryOptions: { filter: odata`RowKey eq ${"1"}` } }));
    assert.equal(e.int64, big);
    assert.deepEqual(e.guid, { value: guid, type: "Guid" });
    assert.ok(e.dt instanceof Date);
    assert.ok(e.bin instanceof Uint8Array);
    const [raw] = await collect(
      client.listEntities({ queryOptions: { filter: odata`RowKey eq ${"1"}` }, disableTypeConversion: true }),
    );
    assert.equal(raw.int64.type, "Int64");
  });

  test("integral Double is written with a decimal point on the wire", async () => {
    let body;
    await client.getEntity("types", "1", { onResponse: (r) => (body = r.bodyAsText) });
    assert.match(body, /"dblIntegral":2\.0[,}]/, `raw body: ${body}`);
    assert.doesNotMatch(body, /dblIntegral@odata\.type/, "finite Double is not annotated");
    assert.doesNotMatch(body, /int32@odata\.type|boolT@odata\.type|"str@odata\.type/, "Int32/Boolean/String not annotated");
  });

  test(
    "integral Double reads back as Double with disableTypeConversion",
    { todo: "SDK bug azure-sdk-for-js #19899: JSON.parse turns 2.0 into 2, inferred as Int32 (docs/protocol.md §4.2)" },
    async () => {
      const e = await client.getEntity("types", "1", { disableTypeConversion: true });
      assert.equal(e.dblIntegral.type, "Double");
      assert.equal(Number(e.dblIntegral.value), 2);
    },
  );

  test("special Double values", async () => {
    await client.createEntity({
      partitionKey: "types",
      rowKey: "special",
      nan: { value: "NaN", type: "Double" },
      inf: { value: "Infinity", type: "Double" },
      ninf: { value: "-Infinity", type: "Double" },
    });
    // The SDK passes Edm.Double string values through unconverted.
    const e = await client.getEntity("types", "special");
    assert.equal(e.nan, "NaN");
    assert.equal(e.inf, "Infinity");
    assert.equal(e.ninf, "-Infinity");
    const raw = await client.getEntity("types", "special", { disableTypeConversion: true });
    assert.deepEqual(raw.nan, { value: "NaN", type: "Double" });
    assert.deepEqual(raw.inf, { value: "Infinity", type: "Double" });
    assert.deepEqual(raw.ninf, { value: "-Infinity", type: "Double" });
  });
});

// Typed nulls (issue 10, item 5): the SDK turns an invalid Date into "x":null with
// "x@odata.type":"Edm.DateTime", a non-finite number into "x":null, and {value: NaN, type}
// or {value: null, type} into a null with its annotation (serialize, then JSON.stringify).
// The service stores no null property, typed or not: such a property is absent after an
// insert or a replace, and a merge leaves the stored value as it was.
describe("typed nulls", () => {
  let client;
  const nulls = {
    badDate: new Date("not a date"),
    nan: NaN,
    inf: Infinity,
    dblNaN: { value: NaN, type: "Double" },
    dateTyped: { value: new Date(NaN), type: "DateTime" },
    nullInt: { value: null, type: "Int32" },
    plainNull: null,
  };
  const nullNames = Object.keys(nulls);
  const seeded = { badDate: new Date("2024-05-01T10:00:00Z"), nan: 5, dblNaN: 1.5, nullInt: 7, keep: "k" };

  before(async () => {
    client = await newTable("nulls");
  });

  function assertNoNulls(e, what) {
    for (const name of nullNames) {
      assert.equal(e[name], undefined, `${what}: ${name} should be absent, is ${e[name]}`);
    }
  }

  test("createEntity stores none of them", async () => {
    await client.createEntity({ partitionKey: "n", rowKey: "create", ...nulls, v: "x" });
    const e = await client.getEntity("n", "create");
    assertNoNulls(e, "createEntity");
    assert.equal(e.v, "x");
  });

  test("updateEntity Replace drops them, Merge leaves the stored values", async () => {
    await client.createEntity({ partitionKey: "n", rowKey: "replace", ...seeded });
    await client.updateEntity({ partitionKey: "n", rowKey: "replace", ...nulls, v: "x" }, "Replace");
    const r = await client.getEntity("n", "replace");
    assertNoNulls(r, "Replace");
    assert.equal(r.keep, undefined);
    assert.equal(r.v, "x");

    await client.createEntity({ partitionKey: "n", rowKey: "merge", ...seeded });
    await client.updateEntity({ partitionKey: "n", rowKey: "merge", ...nulls, v: "x" }, "Merge");
    const m = await client.getEntity("n", "merge");
    assert.equal(m.badDate.toISOString(), "2024-05-01T10:00:00.000Z");
    assert.deepEqual([m.nan, m.dblNaN, m.nullInt, m.keep, m.v], [5, 1.5, 7, "k", "x"]);
  });

  test("upsertEntity Merge and Replace", async () => {
    await client.upsertEntity({ partitionKey: "n", rowKey: "upsertNew", ...nulls, v: "x" }, "Merge");
    assertNoNulls(await client.getEntity("n", "upsertNew"), "upsert Merge of a new entity");
    await client.createEntity({ partitionKey: "n", rowKey: "upsertMerge", ...seeded });
    await client.upsertEntity({ partitionKey: "n", rowKey: "upsertMerge", ...nulls }, "Merge");
    assert.equal((await client.getEntity("n", "upsertMerge")).nullInt, 7);
    await client.upsertEntity({ partitionKey: "n", rowKey: "upsertMerge", ...nulls }, "Replace");
    assertNoNulls(await client.getEntity("n", "upsertMerge"), "upsert Replace");
  });

  test("in a transaction", async () => {
    await client.createEntity({ partitionKey: "t", rowKey: "merge", ...seeded });
    const tx = new TableTransaction();
    tx.createEntity({ partitionKey: "t", rowKey: "create", ...nulls, v: "x" });
    tx.upsertEntity({ partitionKey: "t", rowKey: "upsert", ...nulls, v: "x" }, "Replace");
    tx.updateEntity({ partitionKey: "t", rowKey: "merge", ...nulls, v: "x" }, "Merge");
    const res = await client.submitTransaction(tx.actions);
    assert.equal(res.status, 202);
    for (const sr of res.subResponses) {
      assert.ok(sr.status >= 200 && sr.status < 300, `sub-response status ${sr.status}`);
    }
    assertNoNulls(await client.getEntity("t", "create"), "transaction create");
    assertNoNulls(await client.getEntity("t", "upsert"), "transaction upsert");
    const m = await client.getEntity("t", "merge");
    assert.deepEqual([m.nan, m.nullInt, m.keep, m.v], [5, 7, "k", "x"]);
  });
});

describe("queries", () => {
  let client;
  const g1 = randomUUID();
  const g2 = randomUUID();
  before(async () => {
    client = await newTable("qry");
    const rows = [
      { rowKey: "a", i64: 10n, dt: new Date("2021-01-01T00:00:00Z"), g: g1, bin: new Uint8Array([1, 2]), flag: true, d: 1.5, s: "it's" },
      { rowKey: "b", i64: 20n, dt: new Date("2022-01-01T00:00:00Z"), g: g2, bin: new Uint8Array([3, 4]), flag: false, d: 2.5, s: "plain" },
      { rowKey: "c", i64: 9007199254740993n, dt: new Date("2023-01-01T00:00:00Z"), g: g1, bin: new Uint8Array([255]), flag: true, d: 3.5, s: "x" },
    ];
    for (const r of rows) {
      await client.createEntity({
        partitionKey: "q",
        rowKey: r.rowKey,
        i64: r.i64,
        dt: r.dt,
        g: { value: r.g, type: "Guid" },
        bin: r.bin,
        flag: r.flag,
        d: r.d,
        s: r.s,
        n: r.rowKey.charCodeAt(0),
      });
    }
  });

  async function keys(filter, extra = {}) {
    const es = await collect(client.listEntities({ queryOptions: { filter, ...extra } }));
    return es.map((e) => e.rowKey);
  }

  test("Int64", async () => {
    assert.deepEqual(await keys(odata`i64 eq ${20n}L`), ["b"]);
    assert.deepEqual(await keys(odata`i64 gt ${15n}L`), ["b", "c"]);
    assert.deepEqual(await keys(odata`i64 eq ${9007199254740993n}L`), ["c"]);
  });

  test("DateTime", async () => {
    assert.deepEqual(await keys(odata`dt gt ${new Date("2021-06-01T00:00:00Z")}`), ["b", "c"]);
    assert.deepEqual(await keys(odata`dt eq ${new Date("2022-01-01T00:00:00Z")}`), ["b"]);
  });

  test("Guid", async () => {
    assert.deepEqual(await keys(odata`g eq guid${g1}`), ["a", "c"]);
    assert.deepEqual(await keys(odata`g eq guid${g2}`), ["b"]);
  });

  test("Binary", async () => {
    assert.deepEqual(await keys(odata`bin eq X${"0304"}`), ["b"]);
    assert.deepEqual(await keys(odata`bin eq binary${"ff"}`), ["c"]);
  });

  test("Boolean", async () => {
    assert.deepEqual(await keys(odata`flag eq ${true}`), ["a", "c"]);
    assert.deepEqual(await keys(odata`flag eq ${false}`), ["b"]);
  });

  test("Double and Int32", async () => {
    assert.deepEqual(await keys(odata`d ge ${2.5}`), ["b", "c"]);
    assert.deepEqual(await keys(odata`d lt 2.0`), ["a"]);
    assert.deepEqual(await keys(odata`n eq ${98}`), ["b"]);
  });

  test("String with quotes, and/or/not", async () => {
    assert.deepEqual(await keys(odata`s eq ${"it's"}`), ["a"]);
    assert.deepEqual(await keys(odata`s eq ${"plain"} or RowKey eq ${"c"}`), ["b", "c"]);
    assert.deepEqual(await keys(odata`PartitionKey eq ${"q"} and not (flag eq ${true})`), ["b"]);
    assert.deepEqual(await keys(odata`RowKey ge ${"b"}`), ["b", "c"]);
  });

  test("select", async () => {
    const es = await collect(client.listEntities({ queryOptions: { filter: odata`RowKey eq ${"a"}`, select: ["i64", "s"] } }));
    assert.equal(es.length, 1);
    const e = es[0];
    assert.equal(e.i64, 10n);
    assert.equal(e.s, "it's");
    assert.equal(e.d, undefined);
    assert.equal(e.flag, undefined);
    assert.ok(e.etag, "etag is present with select");
  });

  test("invalid filter is a 400", async () => {
    await rejectsWith(() => keys("i64 eq 1 and"), 400, "InvalidInput");
    await rejectsWith(() => keys("s eq 'unterminated"), 400, "InvalidInput");
  });
});

describe("paging", () => {
  let client;
  const total = 101;
  const expected = [];
  before(async () => {
    client = await newTable("page");
    // Two partitions so paging crosses a partition boundary; batches of up to 100.
    for (const pk of ["pa", "pb"]) {
      const tx = new TableTransaction();
      const n = pk === "pa" ? 60 : total - 60;
      for (let i = 0; i < n; i++) {
        const rk = String(i).padStart(4, "0");
        tx.createEntity({ partitionKey: pk, rowKey: rk, i });
        expected.push(`${pk}/${rk}`);
      }
      await client.submitTransaction(tx.actions);
    }
  });

  test("byPage({maxPageSize: 7}) returns every entity once, in order", async () => {
    const seen = [];
    let pages = 0;
    for await (const page of client.listEntities().byPage({ maxPageSize: 7 })) {
      pages++;
      assert.ok(page.length <= 7, `page ${pages} has ${page.length} > 7 entities`);
      seen.push(...page.map((e) => `${e.partitionKey}/${e.rowKey}`));
    }
    assert.equal(seen.length, total);
    assert.deepEqual(seen, expected);
    assert.ok(pages >= Math.ceil(total / 7), `expected at least ${Math.ceil(total / 7)} pages, got ${pages}`);
  });

  test("paging with a filter and select, resumed from a continuation token", async () => {
    const iter = client
      .listEntities({ queryOptions: { filter: odata`i ge ${10}`, select: ["PartitionKey", "RowKey", "i"] } })
      .byPage({ maxPageSize: 7 });
    const first = await iter.next();
    assert.equal(first.value.length, 7);
    const token = first.value.continuationToken;
    assert.ok(token, "first page has a continuation token");
    const rest = [];
    for await (const page of client
      .listEntities({ queryOptions: { filter: odata`i ge ${10}`, select: ["PartitionKey", "RowKey", "i"] } })
      .byPage({ maxPageSize: 7, continuationToken: token })) {
      rest.push(...page.map((e) => `${e.partitionKey}/${e.rowKey}`));
    }
    const all = [...first.value.map((e) => `${e.partitionKey}/${e.rowKey}`), ...rest];
    const want = expected.filter((k) => Number(k.split("/")[1]) >= 10);
    assert.deepEqual(all, want);
  });

  test("plain iteration (default page size) sees every entity", async () => {
    const all = await collect(client.listEntities());
    assert.equal(all.length, total);
  });
});

describe("transactions", () => {
  let client;
  before(async () => {
    client = await newTable("tx");
  });

  test("a successful transaction with every action kind", async () => {
    await client.createEntity({ partitionKey: "t", rowKey: "toUpdate", v: 1 });
    await client.createEntity({ partitionKey: "t", rowKey: "toMerge", v: 1, keep: "k" });
    await client.createEntity({ partitionKey: "t", rowKey: "toDelete", v: 1 });
    await client.createEntity({ partitionKey: "t", rowKey: "toUpsert", v: 1, keep: "k" });

    const tx = new TableTransaction();
    tx.createEntity({ partitionKey: "t", rowKey: "new1", v: 1 });
    tx.createEntity({ partitionKey: "t", rowKey: "new2", big: 7n });
    tx.updateEntity({ partitionKey: "t", rowKey: "toUpdate", v: 2 }, "Replace");
    tx.updateEntity({ partitionKey: "t", rowKey: "toMerge", v: 2 }, "Merge");
    tx.deleteEntity("t", "toDelete");
    tx.upsertEntity({ partitionKey: "t", rowKey: "toUpsert", v: 2 }, "Replace");
    tx.upsertEntity({ partitionKey: "t", rowKey: "upserted", v: 3 }, "Merge");
    const res = await client.submitTransaction(tx.actions);
    assert.equal(res.status, 202);
    assert.equal(res.subResponses.length, 7);
    for (const sr of res.subResponses) {
      assert.ok(sr.status >= 200 && sr.status < 300, `sub-response status ${sr.status}`);
    }
    const r1 = res.getResponseForEntity("new1");
    assert.ok(r1, "getResponseForEntity finds new1 (Location header with RowKey)");
    assert.equal(r1.status, 204);
    assert.ok(r1.etag, "insert sub-response has an ETag");

    assert.equal((await client.getEntity("t", "new1")).v, 1);
    assert.equal((await client.getEntity("t", "new2")).big, 7n);
    const up = await client.getEntity("t", "toUpdate");
    assert.equal(up.v, 2);
    const mg = await client.getEntity("t", "toMerge");
    assert.deepEqual([mg.v, mg.keep], [2, "k"]);
    await rejectsWith(() => client.getEntity("t", "toDelete"), 404, "ResourceNotFound");
    const us = await client.getEntity("t", "toUpsert");
    assert.deepEqual([us.v, us.keep], [2, undefined]);
    assert.equal((await client.getEntity("t", "upserted")).v, 3);
  });

  test("transaction with an etag condition", async () => {
    const c = await client.createEntity({ partitionKey: "e", rowKey: "r", v: 1 });
    const tx = new TableTransaction();
    tx.updateEntity({ partitionKey: "e", rowKey: "r", v: 2 }, "Merge", { etag: c.etag });
    await client.submitTransaction(tx.actions);
    assert.equal((await client.getEntity("e", "r")).v, 2);

    const stale = new TableTransaction();
    stale.createEntity({ partitionKey: "e", rowKey: "other" });
    stale.updateEntity({ partitionKey: "e", rowKey: "r", v: 3 }, "Merge", { etag: c.etag });
    const err = await rejectsWith(() => client.submitTransaction(stale.actions), 412, "UpdateConditionNotSatisfied");
    assert.match(err.message, /^1:/, "failing index 1 at the start of the message");
    await rejectsWith(() => client.getEntity("e", "other"), 404, "ResourceNotFound");
    assert.equal((await client.getEntity("e", "r")).v, 2);
  });

  test("a failing transaction reports the failing index and rolls back", async () => {
    await client.createEntity({ partitionKey: "f", rowKey: "exists", v: 1 });
    const tx = new TableTransaction();
    tx.createEntity({ partitionKey: "f", rowKey: "a" });
    tx.createEntity({ partitionKey: "f", rowKey: "b" });
    tx.createEntity({ partitionKey: "f", rowKey: "exists" }); // index 2 fails: 409
    tx.createEntity({ partitionKey: "f", rowKey: "c" });
    const err = await rejectsWith(() => client.submitTransaction(tx.actions), 409, "EntityAlreadyExists");
    // The SDK passes the service's message through: "<index>:<message>".
    assert.match(err.message, /^2:/, `message starts with the failing index: ${JSON.stringify(err.message)}`);
    for (const rk of ["a", "b", "c"]) {
      await rejectsWith(() => client.getEntity("f", rk), 404, "ResourceNotFound");
    }
    assert.equal((await client.getEntity("f", "exists")).v, 1);
  });

  test("a failing update of a missing entity (404) at index 1", async () => {
    const tx = new TableTransaction();
    tx.createEntity({ partitionKey: "g", rowKey: "a" });
    tx.updateEntity({ partitionKey: "g", rowKey: "missing", v: 1 }, "Replace");
    const err = await rejectsWith(() => client.submitTransaction(tx.actions), 404, "ResourceNotFound");
    assert.match(err.message, /^1:/, `message starts with the failing index: ${JSON.stringify(err.message)}`);
    await rejectsWith(() => client.getEntity("g", "a"), 404, "ResourceNotFound");
  });

  test("duplicate row in a transaction is rejected", async () => {
    const tx = new TableTransaction();
    tx.createEntity({ partitionKey: "d", rowKey: "x" });
    tx.upsertEntity({ partitionKey: "d", rowKey: "x" });
    const err = await rejectsWith(() => client.submitTransaction(tx.actions), 400, "InvalidDuplicateRow");
    assert.match(err.message, /^1:/, `message starts with the failing index: ${JSON.stringify(err.message)}`);
  });

  test("mixed partitions are rejected (SDK check before sending)", async () => {
    const tx = new TableTransaction();
    tx.createEntity({ partitionKey: "m1", rowKey: "x" });
    tx.createEntity({ partitionKey: "m2", rowKey: "x" });
    await assert.rejects(() => client.submitTransaction(tx.actions));
  });

  test("transaction on a missing table", async () => {
    const missing = TableClient.fromConnectionString(connectionString, uniqueTableName("txmissing"), clientOptions);
    const tx = new TableTransaction();
    tx.createEntity({ partitionKey: "p", rowKey: "r" });
    const err = await rejectsWith(() => missing.submitTransaction(tx.actions), 404, "TableNotFound");
    assert.match(err.message, /^0:/, `message starts with the failing index: ${JSON.stringify(err.message)}`);
  });
});

describe("SAS generated by the SDK", () => {
  let client;
  let tableName;
  before(async () => {
    client = await newTable("sas");
    tableName = client.tableName;
    await client.createEntity({ partitionKey: "s", rowKey: "1", v: 1 });
    await client.createEntity({ partitionKey: "s", rowKey: "2", v: 2 });
  });

  const expiresOn = () => new Date(Date.now() + 3600 * 1000);

  test("table SAS (query) via AzureSASCredential reads, and denies writes", async () => {
    const sas = generateTableSas(tableName, credential, { permissions: { query: true }, expiresOn: expiresOn() });
    const sc = new TableClient(endpoint, tableName, new AzureSASCredential(sas), clientOptions);
    const e = await sc.getEntity("s", "1");
    assert.equal(e.v, 1);
    const all = await collect(sc.listEntities());
    assert.deepEqual(
      all.map((x) => x.rowKey),
      ["1", "2"],
    );
    await rejectsWith(() => sc.createEntity({ partitionKey: "s", rowKey: "3" }), 403, "AuthorizationPermissionMismatch");
    await rejectsWith(() => sc.deleteEntity("s", "1"), 403, "AuthorizationPermissionMismatch");
    await rejectsWith(() => sc.updateEntity({ partitionKey: "s", rowKey: "1", v: 9 }), 403, "AuthorizationPermissionMismatch");
    assert.equal((await client.getEntity("s", "1")).v, 1);
  });

  test("table SAS in the URL (no credential object)", async () => {
    const sas = generateTableSas(tableName, credential, { permissions: { query: true }, expiresOn: expiresOn() });
    const token = sas.startsWith("?") ? sas.slice(1) : sas;
    const sc = new TableClient(`${endpoint}?${token}`, tableName, clientOptions);
    assert.equal((await sc.getEntity("s", "2")).v, 2);
    await rejectsWith(() => sc.upsertEntity({ partitionKey: "s", rowKey: "4" }), 403, "AuthorizationPermissionMismatch");
  });

  test("table SAS with add/update/delete permissions writes", async () => {
    const sas = generateTableSas(tableName, credential, {
      permissions: { query: true, add: true, update: true, delete: true },
      expiresOn: expiresOn(),
    });
    const sc = new TableClient(endpoint, tableName, new AzureSASCredential(sas), clientOptions);
    await sc.createEntity({ partitionKey: "s", rowKey: "w", v: 1 });
    await sc.updateEntity({ partitionKey: "s", rowKey: "w", v: 2 }, "Replace");
    assert.equal((await sc.getEntity("s", "w")).v, 2);
    const tx = new TableTransaction();
    tx.createEntity({ partitionKey: "s", rowKey: "wtx" });
    tx.deleteEntity("s", "w");
    await sc.submitTransaction(tx.actions);
    await rejectsWith(() => client.getEntity("s", "w"), 404, "ResourceNotFound");
    await sc.deleteEntity("s", "wtx");
  });

  test("table SAS with a partition range", async () => {
    await client.createEntity({ partitionKey: "t", rowKey: "1", v: 1 });
    const sas = generateTableSas(tableName, credential, {
      permissions: { query: true },
      expiresOn: expiresOn(),
      startPartitionKey: "s",
      endPartitionKey: "s",
    });
    const sc = new TableClient(endpoint, tableName, new AzureSASCredential(sas), clientOptions);
    const keys = (await collect(sc.listEntities())).map((x) => x.partitionKey);
    assert.ok(keys.length > 0 && keys.every((k) => k === "s"), `only partition s: ${keys}`);
    await rejectsWith(() => sc.getEntity("t", "1"), 403);
  });

  test("expired table SAS is rejected", async () => {
    const sas = generateTableSas(tableName, credential, {
      permissions: { query: true },
      startsOn: new Date(Date.now() - 7200 * 1000),
      expiresOn: new Date(Date.now() - 3600 * 1000),
    });
    const sc = new TableClient(endpoint, tableName, new AzureSASCredential(sas), clientOptions);
    await rejectsWith(() => sc.getEntity("s", "1"), 403, "AuthenticationFailed");
  });

  test("account SAS (default: read+list) lists tables and reads entities, denies writes", async () => {
    const sas = generateAccountSas(credential, { expiresOn: expiresOn() });
    const svc = new TableServiceClient(endpoint, new AzureSASCredential(sas), clientOptions);
    const names = (await collect(svc.listTables())).map((t) => t.name);
    assert.ok(names.includes(tableName), "account SAS lists tables");
    const sc = new TableClient(endpoint, tableName, new AzureSASCredential(sas), clientOptions);
    assert.equal((await sc.getEntity("s", "1")).v, 1);
    await rejectsWith(() => sc.createEntity({ partitionKey: "s", rowKey: "acct" }), 403, "AuthorizationPermissionMismatch");
    const newName = uniqueTableName("sasdenied");
    await rejectsWith(() => svc.createTable(newName), 403, "AuthorizationPermissionMismatch");
  });

  test("account SAS with write permissions creates tables and entities", async () => {
    const sas = generateAccountSas(credential, {
      expiresOn: expiresOn(),
      permissions: { query: true, list: true, read: true, write: true, add: true, update: true, delete: true },
      resourceTypes: "sco",
    });
    const svc = new TableServiceClient(endpoint, new AzureSASCredential(sas), clientOptions);
    const name = uniqueTableName("sasw");
    await svc.createTable(name);
    created.push(name);
    const sc = new TableClient(endpoint, name, new AzureSASCredential(sas), clientOptions);
    await sc.createEntity({ partitionKey: "a", rowKey: "b", v: 5 });
    assert.equal((await sc.getEntity("a", "b")).v, 5);
    await svc.deleteTable(name);
  });

  test("account SAS with object resource type only cannot list tables", async () => {
    const sas = generateAccountSas(credential, { expiresOn: expiresOn(), resourceTypes: "o" });
    const svc = new TableServiceClient(endpoint, new AzureSASCredential(sas), clientOptions);
    await rejectsWith(() => collect(svc.listTables()), 403, "AuthorizationResourceTypeMismatch");
  });
});

// Session tokens (docs/compatibility.md "Session tokens"): how a JavaScript client reads x-ms-session-token
// (onResponse on an operation, or a pipeline policy, which also sees transactions: this
// SDK's submitTransaction does not call onResponse) and sends it on a read
// (requestOptions.customHeaders, or the policy).
describe("session tokens", () => {
  let client;
  before(async () => {
    client = await newTable("session");
  });

  const position = (token) => BigInt(token.slice(token.lastIndexOf(":") + 1));
  const withToken = (token, header = "x-ms-session-token") => ({ requestOptions: { customHeaders: { [header]: token } } });

  test("every write answers a token, and tokens increase", async () => {
    let token;
    const onResponse = (response) => {
      token = response.headers.get("x-ms-session-token");
    };
    const e = { partitionKey: "p", rowKey: "r", v: 1 };
    const writes = [
      ["createEntity", () => client.createEntity(e, { onResponse })],
      ["upsertEntity Merge", () => client.upsertEntity(e, "Merge", { onResponse })],
      ["upsertEntity Replace", () => client.upsertEntity(e, "Replace", { onResponse })],
      ["updateEntity Merge", () => client.updateEntity(e, "Merge", { onResponse })],
      ["updateEntity Replace", () => client.updateEntity(e, "Replace", { etag: "*", onResponse })],
      ["deleteEntity", () => client.deleteEntity("p", "r", { onResponse })],
    ];
    let last = -1n;
    for (const [what, write] of writes) {
      token = undefined;
      await write();
      assert.match(token ?? "", /^1:[a-z0-9]+:\d+$/, `${what} answers a session token`);
      assert.ok(position(token) > last, `${what}: ${token} after position ${last}`);
      last = position(token);
    }
  });

  test("reads with a token, in either header, see the write", async () => {
    let token;
    await client.upsertEntity({ partitionKey: "q", rowKey: "r", v: 7 }, "Replace", {
      onResponse: (response) => {
        token = response.headers.get("x-ms-session-token");
      },
    });
    for (const header of ["x-ms-session-token", "MSCRM.SessionToken"]) {
      assert.equal((await client.getEntity("q", "r", withToken(token, header))).v, 7);
      const listed = await collect(client.listEntities({ queryOptions: { filter: "PartitionKey eq 'q'" }, ...withToken(token, header) }));
      assert.deepEqual(listed.map((x) => x.v), [7]);
    }
  });

  test("a malformed token is 400 InvalidHeaderValue; a future one 503 ServerBusy with Retry-After", async () => {
    await rejectsWith(() => client.getEntity("q", "r", withToken("not-a-token")), 400, "InvalidHeaderValue");
    await rejectsWith(() => collect(client.listEntities(withToken("1:x", "MSCRM.SessionToken"))), 400, "InvalidHeaderValue");
    let token;
    await client.upsertEntity({ partitionKey: "q", rowKey: "f" }, "Replace", {
      onResponse: (response) => {
        token = response.headers.get("x-ms-session-token");
      },
    });
    const future = token.slice(0, token.lastIndexOf(":") + 1) + (position(token) + 1000000000n).toString();
    const noRetry = TableClient.fromConnectionString(connectionString, client.tableName, { ...clientOptions, retryOptions: { maxRetries: 0 } });
    const err = await rejectsWith(() => noRetry.getEntity("q", "r", withToken(future)), 503, "ServerBusy");
    assert.ok(err.response.headers.get("retry-after"), "503 carries Retry-After");
  });

  test("a pipeline policy keeps a session: transactions included", async () => {
    const session = {};
    const c = TableClient.fromConnectionString(connectionString, client.tableName, clientOptions);
    const sent = [];
    c.pipeline.addPolicy({
      name: "sessionToken",
      async sendRequest(request, next) {
        if (request.method === "GET" && session.token) request.headers.set("x-ms-session-token", session.token);
        sent.push(request.headers.get("x-ms-session-token"));
        const response = await next(request);
        const token = response.headers.get("x-ms-session-token");
        if (token && (session.token === undefined || position(token) > session.position)) Object.assign(session, { token, position: position(token) });
        return response;
      },
    });
    await c.upsertEntity({ partitionKey: "s", rowKey: "1" }, "Replace");
    const afterUpsert = session.position;
    await c.submitTransaction([
      ["upsert", { partitionKey: "s", rowKey: "2", v: 2 }, "Replace"],
      ["create", { partitionKey: "s", rowKey: "3" }],
    ]);
    assert.ok(session.position > afterUpsert, "the transaction's token is newer");
    // The read's own answer may carry a newer token (the position it was read at, which
    // can pass the one sent: a read on PostgreSQL may write WAL, pruning a page), so the
    // token to compare is the one the session held before it.
    const before = session.token;
    assert.equal((await c.getEntity("s", "2")).v, 2);
    assert.equal(sent.at(-1), before, "the read sent the transaction's token");
    assert.ok(session.position >= position(before), "the session never goes back");
  });
});
