"""Bulk writes to a Cerulean elastic table (POST /{table}?comp=bulk) from azure-data-tables.

The SDK's submit_transaction refuses, on the client, operations on more than one partition,
so a bulk write goes around it: the request is sent through the TableClient's own pipeline
(its generated client's send_request), where the client's credential signs it and its retry
and logging policies apply, exactly as to the client's own requests. Entities are
serialized by the SDK's own serializer, so they take every form create_entity takes
(datetime, bytes, UUID, large ints, EntityProperty, (value, EdmType) tuples).

    from azure.data.tables import TableClient
    from bulk import bulk

    client = TableClient.from_connection_string(cs, "mytable")
    res = bulk(client, [
        {"op": "insert", "entity": {"PartitionKey": "p1", "RowKey": "1", "Price": 5}},
        {"op": "upsert", "entity": {"PartitionKey": "p2", "RowKey": "1"}},
        {"op": "delete", "entity": {"PartitionKey": "p3", "RowKey": "1"}, "ifMatch": "*"},
    ])
    for r in res["results"]:
        if "error" in r:
            print(r["index"], r["status"], r["error"]["code"])
"""

from urllib.parse import quote

from azure.core.exceptions import HttpResponseError
from azure.core.rest import HttpRequest
from azure.data.tables._serialize import _add_entity_properties

__all__ = ["bulk"]


def bulk(table_client, operations):
    """Send one bulk request.

    operations: a list of {"op": ..., "entity": ..., "ifMatch": optional ETag or "*"} with op
    one of insert, update, merge, upsert, upsertMerge, delete.

    Returns the server's answer, {"succeeded", "failed", "results": [{"index", "status",
    "etag"?, "error"?: {"code", "message"}}]}, plus "sessionToken" (x-ms-session-token).
    Raises HttpResponseError (error_code set) when the request as a whole is refused; then
    nothing was written.
    """
    ops = []
    for o in operations:
        op = {"op": o["op"], "entity": _add_entity_properties(o["entity"])}
        if o.get("ifMatch") is not None:
            op["ifMatch"] = o["ifMatch"]
        ops.append(op)
    request = HttpRequest(
        "POST",
        "%s/%s" % (table_client.url.rstrip("/"), quote(table_client.table_name)),
        params={"comp": "bulk"},
        json={"operations": ops},
        headers={"Accept": "application/json", "x-ms-version": "2019-02-02", "DataServiceVersion": "3.0"},
    )
    response = table_client._client.send_request(request)  # pylint: disable=protected-access
    if response.status_code != 200:
        code = response.headers.get("x-ms-error-code")
        try:
            message = response.json()["odata.error"]["message"]["value"].split("\n")[0]
        except (ValueError, KeyError, TypeError):
            text = response.text()  # the XML endpoints' <Error><Message>
            message = text.split("<Message>", 1)[-1].split("\n")[0].split("</Message>")[0]
        err = HttpResponseError(message="bulk: %d %s: %s" % (response.status_code, code, message), response=response)
        err.error_code = code
        raise err
    answer = response.json()
    answer["sessionToken"] = response.headers.get("x-ms-session-token")
    return answer
