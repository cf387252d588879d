// Bulk writes (bulk.mjs) through @azure/data-tables against a running cerulean server:
// run by e2e/compatjs_test.go (TestCompatJS) with the rest of this directory.

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { TableClient, RestError } from "@azure/data-tables";
import { createDefaultHttpClient, createHttpHeaders, createPipelineRequest } from "@azure/core-rest-pipeline";
import { bulk } from "./bulk.mjs";

const connectionString = process.env.CERULEAN_CONNECTION_STRING;
if (!connectionString) {
  throw new Error("CERULEAN_CONNECTION_STRING is not set");
}
const clientOptions = { allowInsecureConnection: true };
const run = randomBytes(3).toString("hex");

// makeElastic turns a table elastic with the settings endpoint (PUT ?comp=properties),
// sent through the client's pipeline like bulk().
async function makeElastic(client) {
  const request = createPipelineRequest({
    url: `${client.url.replace(/\/$/, "")}/${client.tableName}?comp=properties`,
    method: "PUT",
    headers: createHttpHeaders({ "Content-Type": "application/json", "x-ms-version": "2019-02-02" }),
    body: JSON.stringify({ Elastic: true }),
    allowInsecureConnection: true,
  });
  const res = await client.pipeline.sendRequest(createDefaultHttpClient(), request);
  assert.ok(res.status < 300, `settings: ${res.status} ${res.bodyAsText}`);
}

test("bulk: many partitions, per-item outcomes, SDK-typed entities", async () => {
  const client = TableClient.fromConnectionString(connectionString, `jsbulk${run}`, clientOptions);
  await client.createTable();
  try {
    await makeElastic(client);
    await client.createEntity({ partitionKey: "p1", rowKey: "003", v: "old" });
    await client.createEntity({ partitionKey: "p2", rowKey: "m", a: 1 });
    const m = await client.getEntity("p2", "m");

    const ops = [];
    for (let p = 0; p < 5; p++) {
      for (let r = 0; r < 60; r++) {
        ops.push({
          op: "insert",
          entity: {
            partitionKey: `p${p}`,
            rowKey: String(r).padStart(3, "0"),
            v: "new",
            big: { value: "9007199254740993", type: "Int64" },
            when: new Date("2024-05-06T07:08:09.123Z"),
            bytes: new Uint8Array([1, 2, 3]),
            ratio: 0.5,
          },
        });
      }
    }
    ops.push({ op: "merge", entity: { partitionKey: "p2", rowKey: "m", b: 2, etag: "ignored" }, ifMatch: m.etag });
    ops.push({ op: "update", entity: { partitionKey: "p2", rowKey: "m", c: 3 }, ifMatch: m.etag }); // duplicate
    ops.push({ op: "delete", entity: { partitionKey: "p9", rowKey: "none" } });

    const res = await bulk(client, ops);
    assert.equal(res.results.length, ops.length);
    assert.equal(res.succeeded, 300);
    assert.equal(res.failed, 3);
    assert.match(res.sessionToken, /^1:/);
    res.results.forEach((r, i) => assert.equal(r.index, i));
    assert.equal(res.results[63].status, 409); // p1/003 was there
    assert.equal(res.results[63].error.code, "EntityAlreadyExists");
    assert.equal(res.results[0].status, 201);
    assert.equal(res.results[300].status, 204);
    assert.equal(res.results[301].error.code, "InvalidDuplicateRow");
    assert.equal(res.results[302].status, 404);

    const e = await client.getEntity("p4", "059");
    assert.equal(e.etag, res.results[299].etag);
    assert.equal(e.v, "new");
    assert.equal(e.ratio, 0.5);
    assert.equal(e.big, 9007199254740993n); // the SDK reads Int64 as a bigint
    assert.equal(e.when.toISOString(), "2024-05-06T07:08:09.123Z");
    assert.deepEqual([...e.bytes], [1, 2, 3]);
    assert.equal((await client.getEntity("p1", "003")).v, "old");
    const merged = await client.getEntity("p2", "m");
    assert.equal(merged.a, 1);
    assert.equal(merged.b, 2);
    assert.equal(merged.c, undefined);
    let n = 0;
    for await (const _ of client.listEntities()) n++;
    assert.equal(n, 301);

    // Entities read back can be written back as they are.
    const again = await bulk(client, [{ op: "update", entity: e, ifMatch: e.etag }]);
    assert.equal(again.results[0].status, 204, JSON.stringify(again));
    assert.equal((await client.getEntity("p4", "059")).big, 9007199254740993n);
  } finally {
    await client.deleteTable();
  }
});

test("bulk: refused whole on a standard table", async () => {
  const client = TableClient.fromConnectionString(connectionString, `jsbulkstd${run}`, clientOptions);
  await client.createTable();
  try {
    await assert.rejects(bulk(client, [{ op: "insert", entity: { partitionKey: "p", rowKey: "r" } }]), (err) => {
      assert.ok(err instanceof RestError);
      assert.equal(err.statusCode, 400);
      assert.equal(err.code, "InvalidQueryParameterValue");
      return true;
    });
    let n = 0;
    for await (const _ of client.listEntities()) n++;
    assert.equal(n, 0);
  } finally {
    await client.deleteTable();
  }
});
