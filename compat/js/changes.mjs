// A Cerulean table's change feed (GET /{table}?comp=changes, docs/change-feed.md) from
// @azure/data-tables.
//
// The SDK has no such request, so it is sent through the TableClient's own pipeline, where
// the client's credential signs it (shared key or SAS: a SAS needs r, and with a key range
// sees its range's records only) and its retry, logging and any policies you added apply,
// exactly as to the client's own requests. Each record's entity comes decoded as
// getEntity() and listEntities() decode one (Int64 as a bigint, DateTime as a Date, Binary
// as a Uint8Array, Guid as { value, type: "Guid" }; with disableTypeConversion, every
// value as { value, type }) and as the OData JSON the server sent (rawEntity: exact to the
// 100 ns tick and the last digit; it can be written back as it is once its
// "cerulean.expiry" annotation is removed).
//
//   import { TableClient } from "@azure/data-tables";
//   import { readChanges, followChanges } from "./changes.mjs";
//   const client = TableClient.fromConnectionString(cs, "orders", { allowInsecureConnection: true });
//   const page = await readChanges(client, { from: "beginning", limit: 100 });
//   for (const c of page.changes) console.log(c.seq, c.op, c.partitionKey, c.rowKey, c.entity);
//   // ... later, from where that page ended, waiting for new records as they commit:
//   const stop = new AbortController();
//   for await (const { changes, continuation } of followChanges(client, { from: page.continuation, signal: stop.signal })) {
//     for (const c of changes) handle(c);
//     save(continuation); // resume there: nothing missed, nothing twice
//   }

import { RestError, createDefaultHttpClient, createHttpHeaders, createPipelineRequest } from "@azure/core-rest-pipeline";

const httpClient = createDefaultHttpClient();

// Where a read starts, besides a continuation from an earlier page.
export const FROM_BEGINNING = "beginning"; // the oldest record the feed retains
export const FROM_NOW = "now"; // the feed's current end

/** The code of a read whose continuation fell out of the feed's retention (410). */
export const CHANGES_EXPIRED = "ChangeFeedContinuationExpired";

// What the SDK's deserializer (serialization.js, not exported by the package) does with
// each EDM type, and the system properties it renames.
const systemNames = new Map([
  ["PartitionKey", "partitionKey"],
  ["RowKey", "rowKey"],
  ["odata.etag", "etag"],
  ["Timestamp", "timestamp"],
]);

function typedValue(value, type, disableTypeConversion) {
  switch (type) {
    case "Edm.Boolean":
    case "Edm.Double":
    case "Edm.Int32":
    case "Edm.String":
      return disableTypeConversion ? { value, type: type.slice(4) } : value;
    case "Edm.DateTime":
      return disableTypeConversion ? { value, type: "DateTime" } : new Date(value);
    case "Edm.Int64":
      return disableTypeConversion ? { value, type: "Int64" } : BigInt(value);
    case "Edm.Guid":
      return { value, type: "Guid" };
    case "Edm.Binary":
      return disableTypeConversion ? { value, type: "Binary" } : Buffer.from(value, "base64");
    default:
      throw new Error(`Unknown EDM type ${type}`);
  }
}

/**
 * decodeEntity turns an entity's OData JSON (minimal metadata) into the object the SDK's
 * getEntity() returns: partitionKey, rowKey, etag, timestamp and the properties typed as
 * the SDK types them (disableTypeConversion as the SDK's option of that name).
 * Annotations other than odata.etag (cerulean.expiry) are left out.
 */
export function decodeEntity(odata, disableTypeConversion = false) {
  const out = {};
  for (const [key, value] of Object.entries(odata)) {
    if (key.includes("@")) continue;
    if (key.includes(".") && key !== "odata.etag") continue; // instance annotations
    const name = systemNames.get(key) ?? key;
    const type = odata[`${key}@odata.type`];
    if (type !== undefined) {
      out[name] = typedValue(value, type, disableTypeConversion);
    } else if (disableTypeConversion && !systemNames.has(key) && ["number", "string", "boolean"].includes(typeof value)) {
      // As the SDK infers the type of an untyped value with disableTypeConversion.
      out[name] =
        typeof value === "boolean" ? { value: String(value), type: "Boolean" }
        : typeof value === "string" ? { value, type: "String" }
        : { value: String(value), type: Number.isSafeInteger(value) ? "Int32" : "Double" };
    } else {
      out[name] = value;
    }
  }
  return out;
}

// decodeChange turns one record of a page into what readChanges returns.
function decodeChange(rec, disableTypeConversion) {
  const c = {
    seq: rec.seq,
    op: rec.op,
    at: new Date(rec.at),
    atText: rec.at,
    partitionKey: rec.PartitionKey ?? "",
    rowKey: rec.RowKey ?? "",
  };
  if (rec.entity) {
    c.entity = decodeEntity(rec.entity, disableTypeConversion);
    c.rawEntity = rec.entity;
    const expiry = rec.entity["cerulean.expiry"];
    if (expiry !== undefined) c.expiry = new Date(expiry);
  }
  return c;
}

// refusal makes the RestError of an answer other than 200, shaped as the SDK's own:
// statusCode, code (x-ms-error-code), the service's message.
function refusal(request, response) {
  const text = response.bodyAsText ?? "";
  let message;
  try {
    message = JSON.parse(text)["odata.error"].message.value;
  } catch {
    const m = /<Message>([\s\S]*?)<\/Message>/.exec(text); // the XML answer of an unknown comp
    message = m ? m[1] : text;
  }
  message = message.split("\n").filter((l) => l.trim() && !/^(RequestId|Time):/.test(l)).join(" ");
  const code = response.headers.get("x-ms-error-code") ?? undefined;
  const hint = code === "InvalidQueryParameterValue" && !/'(from|limit|wait)'/.test(message)
    ? " (the table's change feed is off, or the service has none: docs/change-feed.md)" : "";
  return new RestError(`changes: ${response.status} ${code ?? ""}: ${message}${hint}`, {
    code,
    statusCode: response.status,
    request,
    response,
  });
}

/**
 * Reads one page of the table's change feed.
 *
 * options: from ("beginning", the default; "now"; or a page's continuation), limit (1 to
 * 1000 records; the server's default 1000), wait (seconds, 0 to 60: when no record
 * follows from, wait that long for one before answering an empty page), startPK and endPK
 * (only records of PartitionKeys in [startPK, endPK): consumers can split a table),
 * abortSignal, disableTypeConversion (as listEntities' option).
 *
 * Resolves to { changes, continuation, ended }: changes in feed order, each
 * { seq, op, at (Date), atText (the exact text), partitionKey, rowKey } and, after a
 * write, entity (decoded as getEntity decodes one), rawEntity (the OData JSON) and expiry
 * (a Date, when the entity has one); continuation is where to read on from; ended says the
 * table was deleted. op is insert, update, merge, upsert, upsertMerge, delete, expire,
 * tableDeleted or feedOff.
 *
 * Rejects with a RestError as the SDK's: 400 InvalidQueryParameterValue for a table
 * without the feed (as the service answers a request it does not know), 404 TableNotFound,
 * 403 for a SAS without r, 410 ChangeFeedContinuationExpired (CHANGES_EXPIRED) for a
 * continuation whose records retention removed.
 * @param {import("@azure/data-tables").TableClient} client
 */
export async function readChanges(client, options = {}) {
  const { from, limit, wait, startPK, endPK, abortSignal, disableTypeConversion = false } = options;
  const q = new URLSearchParams({ comp: "changes" });
  if (from) q.set("from", from);
  if (limit !== undefined) q.set("limit", String(limit));
  if (wait) q.set("wait", String(Math.ceil(wait)));
  if (startPK !== undefined) q.set("startpk", startPK);
  if (endPK !== undefined) q.set("endpk", endPK);
  const request = createPipelineRequest({
    url: `${client.url.replace(/\/$/, "")}/${encodeURIComponent(client.tableName)}?${q.toString().replace(/\+/g, "%20")}`,
    method: "GET",
    headers: createHttpHeaders({ Accept: "application/json", "x-ms-version": "2019-02-02", DataServiceVersion: "3.0" }),
    abortSignal,
    // The client's own setting (clientOptions.allowInsecureConnection), as its requests get it.
    allowInsecureConnection: client.allowInsecureConnection,
  });
  const response = await client.pipeline.sendRequest(httpClient, request);
  if (response.status !== 200) throw refusal(request, response);
  const page = JSON.parse(response.bodyAsText ?? "");
  if (typeof page.continuation !== "string" || page.continuation === "") {
    throw new Error("changes: the answer has no continuation: the server does not serve change feeds");
  }
  return {
    changes: page.changes.map((rec) => decodeChange(rec, disableTypeConversion)),
    continuation: page.continuation,
    ended: page.ended === true,
  };
}

// transient tells whether following should try again after err: no answer, or an answer
// the SDKs retry (408, 429, 5xx but 501 and 505) still failing after the pipeline's retries.
function transient(err) {
  if (!(err instanceof RestError)) return false;
  const s = err.statusCode;
  if (s === undefined) return true;
  return s === 408 || s === 429 || (s >= 500 && s !== 501 && s !== 505);
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => { clearTimeout(timer); signal?.removeEventListener("abort", done); resolve(); };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * Follows the table's change feed from options.from (as readChanges takes it), long
 * polling (options.wait seconds, 30 by default) for new records: an async iterator of the
 * pages { changes, continuation, ended } that have records or move the continuation on.
 * Save a page's continuation once its changes are handled to resume there later. It ends
 * when options.signal aborts (quietly) or the feed ends (the table deleted: the last page
 * has ended true). A failure the SDKs retry (503 ServerBusy, 500, no answer) is tried again
 * after a pause (0.1 s doubling to 5 s, after the pipeline's own retries); an expired
 * continuation or any other refusal is thrown. Other options (limit, startPK, endPK,
 * disableTypeConversion) are readChanges'.
 * @param {import("@azure/data-tables").TableClient} client
 */
export async function* followChanges(client, options = {}) {
  const { signal, wait = 30, ...rest } = options;
  let from = rest.from ?? FROM_BEGINNING;
  let pause = 100;
  while (!signal?.aborted) {
    let page;
    try {
      page = await readChanges(client, { ...rest, from, wait, abortSignal: signal });
    } catch (err) {
      if (signal?.aborted) return;
      if (!transient(err)) throw err;
      await sleep(pause, signal);
      pause = Math.min(2 * pause, 5000);
      continue;
    }
    pause = 100;
    if (page.changes.length > 0 || page.continuation !== from || page.ended) yield page;
    if (page.ended) return;
    from = page.continuation;
  }
}
