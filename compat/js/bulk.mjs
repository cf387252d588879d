// Bulk writes to a Cerulean elastic table (POST /{table}?comp=bulk) from @azure/data-tables.
//
// The SDK's transactions refuse, on the client, operations on more than one partition, so a
// bulk write goes around them: the request is sent through the TableClient's own pipeline,
// where the client's credential signs it (shared key or SAS) and its retry, logging and any
// policies you added apply, exactly as to the client's own requests.
//
//   import { TableClient } from "@azure/data-tables";
//   import { bulk } from "./bulk.mjs";
//   const client = TableClient.fromConnectionString(cs, "mytable", { allowInsecureConnection: true });
//   const res = await bulk(client, [
//     { op: "insert", entity: { partitionKey: "p1", rowKey: "1", price: 5 } },
//     { op: "upsert", entity: { partitionKey: "p2", rowKey: "1", n: { value: "9007199254740993", type: "Int64" } } },
//     { op: "delete", entity: { partitionKey: "p3", rowKey: "1" }, ifMatch: "*" },
//   ]);
//   for (const r of res.results) if (r.error) console.log(r.index, r.status, r.error.code);

import { RestError, createDefaultHttpClient, createHttpHeaders, createPipelineRequest } from "@azure/core-rest-pipeline";

const httpClient = createDefaultHttpClient();

const edmTypes = new Set(["Binary", "Boolean", "DateTime", "Double", "Guid", "Int32", "Int64", "String"]);

// toODataJSON turns an entity as the SDK takes it (partitionKey, rowKey, plain values,
// Date, Uint8Array, bigint, { value, type } for EDM types) into the OData JSON the SDK sends.
// etag and timestamp, as the SDK returns them from reads, are left out.
export function toODataJSON(entity) {
  const out = {};
  for (const [name, v] of Object.entries(entity)) {
    if (name === "etag" || name === "timestamp" || v === undefined) continue;
    const key = name === "partitionKey" ? "PartitionKey" : name === "rowKey" ? "RowKey" : name;
    if (v instanceof Date) {
      out[key] = v.toISOString();
      out[key + "@odata.type"] = "Edm.DateTime";
    } else if (v instanceof Uint8Array) {
      out[key] = Buffer.from(v).toString("base64");
      out[key + "@odata.type"] = "Edm.Binary";
    } else if (typeof v === "bigint") {
      out[key] = v.toString();
      out[key + "@odata.type"] = "Edm.Int64";
    } else if (v !== null && typeof v === "object" && edmTypes.has(v.type)) {
      out[key] = v.value;
      out[key + "@odata.type"] = "Edm." + v.type;
    } else {
      out[key] = v;
    }
  }
  return out;
}

/**
 * Sends one bulk request: operations [{ op, entity, ifMatch? }] with op one of insert,
 * update, merge, upsert, upsertMerge, delete. Resolves to the server's answer
 * { succeeded, failed, results: [{ index, status, etag?, error?: { code, message } }] }
 * plus sessionToken (x-ms-session-token); rejects with a RestError when the request as a
 * whole is refused (then nothing was written).
 * @param {import("@azure/data-tables").TableClient} client
 * @param {Array<{op: string, entity: object, ifMatch?: string}>} operations
 */
export async function bulk(client, operations) {
  const body = JSON.stringify({
    operations: operations.map(({ op, entity, ifMatch }) =>
      ifMatch === undefined ? { op, entity: toODataJSON(entity) } : { op, entity: toODataJSON(entity), ifMatch }),
  });
  const request = createPipelineRequest({
    url: `${client.url.replace(/\/$/, "")}/${encodeURIComponent(client.tableName)}?comp=bulk`,
    method: "POST",
    headers: createHttpHeaders({
      "Content-Type": "application/json",
      Accept: "application/json",
      "x-ms-version": "2019-02-02",
      DataServiceVersion: "3.0",
    }),
    body,
    // The client's own setting (clientOptions.allowInsecureConnection), as its requests get it.
    allowInsecureConnection: client.allowInsecureConnection,
  });
  const response = await client.pipeline.sendRequest(httpClient, request);
  const text = response.bodyAsText ?? "";
  if (response.status !== 200) {
    let message = text;
    try {
      message = JSON.parse(text)["odata.error"].message.value.split("\n")[0];
    } catch {
      // the XML endpoints' <Error><Message>, or the text as it is
      message = text.split("<Message>").pop().split("\n")[0].split("</Message>")[0];
    }
    const code = response.headers.get("x-ms-error-code");
    throw new RestError(`bulk: ${response.status} ${code ?? ""}: ${message}`, {
      code,
      statusCode: response.status,
      request,
      response,
    });
  }
  const answer = JSON.parse(text);
  answer.sessionToken = response.headers.get("x-ms-session-token");
  return answer;
}
