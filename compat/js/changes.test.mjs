// A table's change feed (changes.mjs) through @azure/data-tables against a running cerulean
// server: run by e2e/compatjs_test.go (TestCompatJSChanges).

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import {
  AzureNamedKeyCredential,
  AzureSASCredential,
  RestError,
  TableClient,
  TableTransaction,
  generateTableSas,
} from "@azure/data-tables";
import { createDefaultHttpClient, createHttpHeaders, createPipelineRequest } from "@azure/core-rest-pipeline";
import { CHANGES_EXPIRED, FROM_NOW, decodeEntity, followChanges, readChanges } from "./changes.mjs";

const connectionString = process.env.CERULEAN_CONNECTION_STRING;
if (!connectionString) {
  throw new Error("CERULEAN_CONNECTION_STRING is not set");
}
const cs = Object.fromEntries(connectionString.split(";").filter((p) => p.includes("=")).map((p) => [p.slice(0, p.indexOf("=")), p.slice(p.indexOf("=") + 1)]));
const endpoint = cs.TableEndpoint.replace(/\/$/, "");
const credential = new AzureNamedKeyCredential(cs.AccountName, cs.AccountKey);
const clientOptions = { allowInsecureConnection: true };
const run = randomBytes(3).toString("hex");
let tables = 0;

// newTable creates a table, with the change feed on (the settings endpoint, PUT
// ?comp=properties, sent through the client's pipeline) unless feed is false.
async function newTable(t, feed = true, options = clientOptions) {
  const client = TableClient.fromConnectionString(connectionString, `jschanges${run}${++tables}`, options);
  await client.createTable();
  t.after(() => client.deleteTable());
  if (feed) {
    const request = createPipelineRequest({
      url: `${client.url.replace(/\/$/, "")}/${client.tableName}?comp=properties`,
      method: "PUT",
      headers: createHttpHeaders({ "Content-Type": "application/json", "x-ms-version": "2019-02-02" }),
      body: JSON.stringify({ ChangeFeedRetention: 3600 }),
      allowInsecureConnection: true,
    });
    const res = await client.pipeline.sendRequest(createDefaultHttpClient(), request);
    assert.ok(res.status < 300, `settings: ${res.status} ${res.bodyAsText}`);
  }
  return client;
}

// readToEnd reads the feed from `from` in pages of limit until a page brings nothing new.
async function readToEnd(client, from, limit) {
  const all = [];
  for (;;) {
    const page = await readChanges(client, { from, limit });
    all.push(...page.changes);
    if (page.changes.length === 0 && page.continuation === from) return { all, end: from };
    from = page.continuation;
  }
}

// line is a record as the tests compare it: op, keys and the custom properties.
function line(c) {
  const s = `${c.op} ${c.partitionKey}/${c.rowKey}`;
  if (!c.entity) return s;
  const props = Object.entries(c.entity)
    .filter(([k]) => !["partitionKey", "rowKey", "etag", "timestamp"].includes(k))
    .map(([k, v]) => `${k}=${typeof v === "object" && !(v instanceof Date) && !(v instanceof Uint8Array) ? JSON.stringify(v) : v instanceof Uint8Array ? [...v].join(".") : v instanceof Date ? v.toISOString() : String(v)}`)
    .sort();
  return `${s} ${props.join(",")}`;
}

// withoutMetadata is an entity getEntity() returned, without the odata.metadata it keeps.
function withoutMetadata(e) {
  const { "odata.metadata": _, ...rest } = e;
  return rest;
}

test("changes: every write through the SDK, in order, with its entity as getEntity decodes it", async (t) => {
  const client = await newTable(t);
  const when = new Date("2024-05-06T07:08:09.123Z");
  await client.createEntity({
    partitionKey: "p1", rowKey: "a", big: { value: "9007199254740993", type: "Int64" }, when,
    bytes: new Uint8Array([1, 2, 3]), id: { value: "c9da6455-213d-42c9-9a79-3e9149a57833", type: "Guid" }, ratio: 0.5, n: 7, s: "x",
  });
  const inserted = withoutMetadata(await client.getEntity("p1", "a"));
  await client.updateEntity({ partitionKey: "p1", rowKey: "a", w: "merged" }, "Merge");
  const merged = withoutMetadata(await client.getEntity("p1", "a"));
  await client.upsertEntity({ partitionKey: "p2", rowKey: "b", v: 1 }, "Replace");
  await client.updateEntity({ partitionKey: "p2", rowKey: "b", v: 2 }, "Replace");
  const tx = new TableTransaction();
  tx.createEntity({ partitionKey: "p3", rowKey: "c", v: 3 });
  tx.upsertEntity({ partitionKey: "p3", rowKey: "d", v: 4 }, "Merge");
  await client.submitTransaction(tx.actions);
  await client.deleteEntity("p2", "b");
  // A transaction that fails writes nothing and records nothing.
  const bad = new TableTransaction();
  bad.createEntity({ partitionKey: "p3", rowKey: "e", v: 5 });
  bad.createEntity({ partitionKey: "p3", rowKey: "c", v: 6 });
  await assert.rejects(client.submitTransaction(bad.actions));

  // Pages of 2: each continuation reads on without repeating or skipping a record.
  const { all, end } = await readToEnd(client, undefined, 2);
  assert.deepEqual(all.map(line), [
    "insert p1/a big=9007199254740993,bytes=1.2.3,id={\"value\":\"c9da6455-213d-42c9-9a79-3e9149a57833\",\"type\":\"Guid\"},n=7,ratio=0.5,s=x,when=2024-05-06T07:08:09.123Z",
    "merge p1/a big=9007199254740993,bytes=1.2.3,id={\"value\":\"c9da6455-213d-42c9-9a79-3e9149a57833\",\"type\":\"Guid\"},n=7,ratio=0.5,s=x,w=merged,when=2024-05-06T07:08:09.123Z",
    "upsert p2/b v=1",
    "update p2/b v=2",
    "insert p3/c v=3",
    "upsertMerge p3/d v=4",
    "delete p2/b",
  ]);
  for (let i = 1; i < all.length; i++) {
    assert.ok(all[i].seq > all[i - 1].seq, `seq ${all[i - 1].seq} then ${all[i].seq}`);
    assert.ok(all[i].at >= all[i - 1].at);
  }
  // The state in a record is what a read answered then: same types, ETag and Timestamp.
  assert.deepEqual(all[0].entity, inserted);
  assert.deepEqual(all[1].entity, merged);
  assert.equal(typeof all[0].entity.big, "bigint");
  assert.equal(all[0].rawEntity["big@odata.type"], "Edm.Int64");
  assert.equal(all[0].rawEntity.big, "9007199254740993");
  assert.equal(all[0].atText, all[0].rawEntity.Timestamp);
  assert.equal(all[6].entity, undefined);
  // With disableTypeConversion, as listEntities with that option.
  const listed = [];
  for await (const e of client.listEntities({ disableTypeConversion: true, queryOptions: { filter: "PartitionKey eq 'p1'" } })) listed.push(e);
  assert.deepEqual(decodeEntity(all[1].rawEntity, true), listed[0]);
  // Nothing after the end, nor from "now"; both read on to the next writes.
  const now = await readChanges(client, { from: FROM_NOW });
  assert.deepEqual(now.changes, []);
  assert.deepEqual((await readChanges(client, { from: end })).changes, []);
  // A record's entity is written back as an entity getEntity() returned is.
  await client.upsertEntity(all[0].entity, "Replace");
  await client.createEntity({ partitionKey: "p4", rowKey: "z", v: 7 });
  for (const from of [end, now.continuation]) {
    const more = await readToEnd(client, from, 10);
    assert.deepEqual(more.all.map((c) => `${c.op} ${c.partitionKey}/${c.rowKey}`), ["upsert p1/a", "insert p4/z"]);
    assert.deepEqual(more.all[0].entity.big, 9007199254740993n);
    assert.equal(more.all[0].entity.w, undefined);
  }

  // Two consumers with disjoint PartitionKey ranges split the feed.
  const low = await readChanges(client, { endPK: "p2" });
  const high = await readChanges(client, { startPK: "p2" });
  assert.deepEqual(low.changes.map((c) => c.partitionKey), ["p1", "p1", "p1"]);
  assert.deepEqual(high.changes.map((c) => c.partitionKey), ["p2", "p2", "p3", "p3", "p2", "p4"]);
});

test("changes: a long poll answers as soon as a write commits", async (t) => {
  const client = await newTable(t);
  const { continuation } = await readChanges(client, { from: FROM_NOW });
  const start = Date.now();
  const poll = readChanges(client, { from: continuation, wait: 20 });
  await new Promise((r) => setTimeout(r, 300));
  await client.createEntity({ partitionKey: "p", rowKey: "r", v: 1 });
  const page = await poll;
  const took = Date.now() - start;
  assert.deepEqual(page.changes.map(line), ["insert p/r v=1"]);
  assert.ok(took < 10000, `the long poll answered after ${took} ms, not woken by the insert`);
  // An idle wait answers an empty page, still resumable.
  const idle = await readChanges(client, { from: page.continuation, wait: 1 });
  assert.deepEqual(idle.changes, []);
  assert.equal(idle.continuation, page.continuation);
});

test("changes: followChanges follows writes, resumes from a saved continuation, retries 503", async (t) => {
  // The pipeline's own retries off, and the first two feed reads failed with 503
  // ServerBusy: followChanges tries again itself.
  let busy = 2;
  const options = {
    ...clientOptions,
    retryOptions: { maxRetries: 0 },
    additionalPolicies: [{
      position: "perCall",
      policy: {
        name: "busyChanges",
        sendRequest: async (request, next) => {
          if (request.url.includes("comp=changes") && busy > 0) {
            busy--;
            return { request, status: 503, headers: createHttpHeaders({ "x-ms-error-code": "ServerBusy" }), bodyAsText: "" };
          }
          return next(request);
        },
      },
    }],
  };
  const client = await newTable(t, true, options);
  const stop = new AbortController();
  const seen = [];
  let saved;
  const follower = (async () => {
    for await (const page of followChanges(client, { from: "beginning", wait: 5, signal: stop.signal })) {
      seen.push(...page.changes.map((c) => `${c.op} ${c.rowKey}`));
      saved = page.continuation;
      if (seen.length >= 5) stop.abort();
    }
  })();
  for (let i = 0; i < 5; i++) {
    await client.upsertEntity({ partitionKey: "p", rowKey: String(i), v: i }, "Merge");
    await new Promise((r) => setTimeout(r, 50));
  }
  await follower; // ends quietly when aborted
  assert.equal(busy, 0, "the injected 503s were not met");
  assert.deepEqual(seen, ["upsertMerge 0", "upsertMerge 1", "upsertMerge 2", "upsertMerge 3", "upsertMerge 4"]);

  // Resuming from the saved continuation sees only what came after.
  await client.deleteEntity("p", "0");
  const again = new AbortController();
  const rest = [];
  for await (const page of followChanges(client, { from: saved, wait: 2, signal: again.signal })) {
    rest.push(...page.changes.map((c) => `${c.op} ${c.rowKey}`));
    again.abort();
  }
  assert.deepEqual(rest, ["delete 0"]);

  // The feed ends when the table is deleted: the last page says so.
  await client.createEntity({ partitionKey: "p", rowKey: "last" });
  const ops = [];
  let ended = false;
  const deleter = new Promise((r) => setTimeout(r, 300)).then(() => client.deleteTable());
  for await (const page of followChanges(client, { from: saved, wait: 5 })) {
    ops.push(...page.changes.map((c) => c.op));
    ended = page.ended;
  }
  await deleter;
  assert.ok(ended);
  assert.deepEqual(ops, ["delete", "insert", "tableDeleted"]);
});

test("changes: a table without the feed refuses as the service refuses an unknown comp", async (t) => {
  const client = await newTable(t, false);
  await assert.rejects(readChanges(client), (err) => {
    assert.ok(err instanceof RestError);
    assert.equal(err.statusCode, 400);
    assert.equal(err.code, "InvalidQueryParameterValue");
    assert.match(err.message, /change feed/);
    return true;
  });
  // followChanges does not retry a refusal.
  await assert.rejects(followChanges(client).next(), (err) => err.code === "InvalidQueryParameterValue");
  // Nor a continuation from another table's feed (or anything else it cannot read).
  const feed = await newTable(t);
  await assert.rejects(readChanges(feed, { from: "AQID" }), (err) => err.statusCode === 400 && /'from'/.test(err.message));
  assert.equal(CHANGES_EXPIRED, "ChangeFeedContinuationExpired");
});

test("changes: through a SAS (AzureSASCredential): r reads, its key range only; without r, 403", async (t) => {
  const client = await newTable(t);
  for (const pk of ["a", "m", "z"]) await client.createEntity({ partitionKey: pk, rowKey: "1" });
  const expiresOn = new Date(Date.now() + 3600e3);
  const sasClient = (o) => new TableClient(endpoint, client.tableName, new AzureSASCredential(generateTableSas(client.tableName, credential, { expiresOn, ...o })), clientOptions);

  const reader = sasClient({ permissions: { query: true } });
  const { all } = await readToEnd(reader, undefined, 10);
  assert.deepEqual(all.map((c) => c.partitionKey), ["a", "m", "z"]);
  const ranged = sasClient({ permissions: { query: true }, startPartitionKey: "b", endPartitionKey: "n" });
  assert.deepEqual((await readChanges(ranged)).changes.map((c) => c.partitionKey), ["m"]);
  await assert.rejects(readChanges(sasClient({ permissions: { add: true } })), (err) => {
    assert.equal(err.statusCode, 403);
    assert.equal(err.code, "AuthorizationPermissionMismatch");
    return true;
  });
});
