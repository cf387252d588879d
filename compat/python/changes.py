"""A Cerulean table's change feed (GET /{table}?comp=changes, docs/change-feed.md) from azure-data-tables.

The SDK has no such request, so it is sent through the TableClient's own pipeline (its
generated client's send_request), where the client's credential signs it (shared key or
SAS: a SAS needs r, and with a key range sees its range's records only) and its retry and
logging policies apply, exactly as to the client's own requests. Each record's entity is
decoded by the SDK's own deserializer, so it is the TableEntity get_entity returns (int64
as EntityProperty, datetime, bytes, UUID, metadata with etag and timestamp); the OData
JSON the server sent is kept beside it, exact to the 100 ns tick. Refusals are the
exceptions the SDK raises (HttpResponseError and its subclasses, error_code set).

    from azure.data.tables import TableClient
    from changes import read_changes, follow_changes

    client = TableClient.from_connection_string(cs, "orders")
    page = read_changes(client, from_="beginning", limit=100)
    for c in page["changes"]:
        print(c["seq"], c["op"], c["PartitionKey"], c["RowKey"], c["entity"])
    # ... later, from where that page ended, waiting for new records as they commit:
    for page in follow_changes(client, from_=page["continuation"]):
        for c in page["changes"]:
            handle(c)
        save(page["continuation"])  # resume there: nothing missed, nothing twice
"""

import time
from urllib.parse import quote

from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError
from azure.core.rest import HttpRequest
from azure.data.tables._deserialize import _convert_to_entity, _from_entity_datetime
from azure.data.tables._error import _decode_error

__all__ = ["read_changes", "follow_changes", "FROM_BEGINNING", "FROM_NOW", "CHANGES_EXPIRED"]

FROM_BEGINNING = "beginning"  # the oldest record the feed retains
FROM_NOW = "now"  # the feed's current end

# The error_code of a read whose continuation fell out of the feed's retention (410).
CHANGES_EXPIRED = "ChangeFeedContinuationExpired"

_EXPIRY = "cerulean.expiry"


def _decode_change(rec):
    c = {
        "seq": rec["seq"],
        "op": rec["op"],
        "at": _from_entity_datetime(rec["at"]),
        "PartitionKey": rec.get("PartitionKey", ""),
        "RowKey": rec.get("RowKey", ""),
        "entity": None,
        "raw_entity": None,
    }
    raw = rec.get("entity")
    if raw is not None:
        c["raw_entity"] = raw
        if _EXPIRY in raw:
            c["expiry"] = _from_entity_datetime(raw[_EXPIRY])
        c["entity"] = _convert_to_entity({k: v for k, v in raw.items() if k != _EXPIRY})
    return c


def read_changes(table_client, from_=None, limit=None, wait=None, start_pk=None, end_pk=None, **kwargs):
    """Read one page of the table's change feed.

    from_: "beginning" (the default), "now", or a page's "continuation". limit: 1 to 1000
    records (the server's default 1000). wait: seconds, 0 to 60: when no record follows
    from_, wait that long for one before answering an empty page (long polling).
    start_pk, end_pk: only records of PartitionKeys in [start_pk, end_pk), so that
    consumers can split a table. Other keyword arguments go to the pipeline (e.g.
    connection_timeout, headers).

    Returns {"changes": [...], "continuation": str, "ended": bool}: the records in feed
    order, each {"seq", "op", "at" (datetime), "PartitionKey", "RowKey", "entity"
    (the TableEntity after a write, as get_entity returns it; None otherwise),
    "raw_entity" (its OData JSON), and "expiry" (datetime) when the entity has one}; op is
    insert, update, merge, upsert, upsertMerge, delete, expire, tableDeleted or feedOff.
    Read on from "continuation"; "ended" says the table was deleted.

    Raises what the SDK raises (error_code set): HttpResponseError 400
    InvalidQueryParameterValue for a table without the feed (as the service answers a
    request it does not know), ResourceNotFoundError (TableNotFound), HttpResponseError
    403 for a SAS without r, and 410 ChangeFeedContinuationExpired (CHANGES_EXPIRED) for a
    continuation whose records retention removed.
    """
    params = {"comp": "changes"}
    if from_:
        params["from"] = from_
    if limit is not None:
        params["limit"] = str(limit)
    if wait:
        params["wait"] = str(int(-(-wait // 1)))  # whole seconds, rounded up
    if start_pk is not None:
        params["startpk"] = start_pk
    if end_pk is not None:
        params["endpk"] = end_pk
    headers = {"Accept": "application/json", "x-ms-version": "2019-02-02", "DataServiceVersion": "3.0"}
    headers.update(kwargs.pop("headers", {}) or {})
    request = HttpRequest(
        "GET",
        "%s/%s" % (table_client.url.rstrip("/"), quote(table_client.table_name)),
        params=params,
        headers=headers,
    )
    response = table_client._client.send_request(request, **kwargs)  # pylint: disable=protected-access
    if response.status_code != 200:
        response.read()
        err = _decode_error(response, response.reason or "")
        if err.error_code == "InvalidQueryParameterValue" and not any(
            "'%s'" % p in response.text() for p in ("from", "limit", "wait")
        ):
            # The XML answer of a comp the service does not know.
            err.message = "The table's change feed is off, or the service has none (docs/change-feed.md). " + err.message
            err.args = (err.message,)
        raise err
    page = response.json()
    if not page.get("continuation"):
        raise ValueError("changes: the answer has no continuation: the server does not serve change feeds")
    return {
        "changes": [_decode_change(rec) for rec in page["changes"]],
        "continuation": page["continuation"],
        "ended": bool(page.get("ended")),
    }


def _transient(err):
    """Whether following should try again: no answer, or an answer the SDKs retry (408,
    429, 5xx but 501 and 505), still failing after the pipeline's own retries."""
    if isinstance(err, (ServiceRequestError, ServiceResponseError)):
        return True
    if isinstance(err, HttpResponseError):
        s = err.status_code
        return s is None or s in (408, 429) or (s >= 500 and s not in (501, 505))
    return False


def follow_changes(table_client, from_=FROM_BEGINNING, wait=30, stop=None, **kwargs):
    """Follow the table's change feed from from_, long polling (wait seconds) for new records.

    A generator of the pages (read_changes' dicts) that have records or move the
    continuation on: save a page's "continuation" once its changes are handled to resume
    there later. It ends when stop (a threading.Event, optional) is set — checked between
    reads, so within wait seconds — or when the feed ends (the table deleted: the last page
    has "ended" True); or break out of the loop. A failure the SDKs retry (503 ServerBusy,
    500, no answer) is tried again after a pause (0.1 s doubling to 5 s, after the
    pipeline's own retries); an expired continuation or any other refusal is raised.
    Other keyword arguments (limit, start_pk, end_pk, ...) are read_changes'.
    """
    pause = 0.1
    while stop is None or not stop.is_set():
        try:
            page = read_changes(table_client, from_=from_, wait=wait, **kwargs)
        except Exception as err:  # pylint: disable=broad-except
            if not _transient(err):
                raise
            if stop is not None:
                stop.wait(pause)
            else:
                time.sleep(pause)
            pause = min(2 * pause, 5.0)
            continue
        pause = 0.1
        if page["changes"] or page["continuation"] != from_ or page["ended"]:
            yield page
        if page["ended"]:
            return
        from_ = page["continuation"]
