"""A table's change feed (compat/python/changes.py) through azure-data-tables against a running Cerulean server.

    CERULEAN_CONNECTION_STRING='...' /usr/bin/python3 -m unittest -v compat/python/test_changes.py

The e2e test TestCompatPythonChanges (e2e/compat_python_test.go) starts a server and runs this file.
"""

import datetime
import os
import sys
import threading
import time
import unittest
import uuid

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import HttpResponseError
from azure.core.pipeline.transport import RequestsTransport
from azure.core.rest import HttpRequest
from azure.data.tables import (
    EdmType,
    EntityProperty,
    TableClient,
    TableSasPermissions,
    UpdateMode,
    generate_table_sas,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from changes import FROM_NOW, follow_changes, read_changes  # noqa: E402

CONN = os.environ.get("CERULEAN_CONNECTION_STRING", "")
RUN = uuid.uuid4().hex[:8]


def conn_parts():
    return dict(p.split("=", 1) for p in CONN.split(";") if "=" in p)


class BusyChanges(RequestsTransport):
    """A transport whose first n answers to a feed read are turned into 503 ServerBusy."""

    def __init__(self, n):
        super().__init__()
        self.busy = n

    def send(self, request, **kwargs):  # pylint: disable=arguments-differ
        response = super().send(request, **kwargs)
        if "comp=changes" in request.url and self.busy > 0:
            self.busy -= 1
            response.status_code = 503
            response.headers["x-ms-error-code"] = "ServerBusy"
        return response


def line(c):
    """A record as the tests compare it: op, keys and the custom properties."""
    s = "%s %s/%s" % (c["op"], c["PartitionKey"], c["RowKey"])
    if c["entity"] is None:
        return s
    props = sorted("%s=%s" % (k, getattr(v, "value", v)) for k, v in c["entity"].items() if k not in ("PartitionKey", "RowKey"))
    return s + " " + ",".join(props)


def read_to_end(client, from_, limit):
    """Read the feed from from_ in pages of limit until a page brings nothing new."""
    out = []
    while True:
        page = read_changes(client, from_=from_, limit=limit)
        out.extend(page["changes"])
        if not page["changes"] and page["continuation"] == from_:
            return out, from_
        from_ = page["continuation"]


class ChangesTest(unittest.TestCase):
    tables = 0

    def setUp(self):
        if not CONN:
            self.skipTest("CERULEAN_CONNECTION_STRING is not set")

    def new_table(self, feed=True, **kwargs):
        """Create a table, with the change feed on (the settings endpoint) unless feed is False."""
        ChangesTest.tables += 1
        client = TableClient.from_connection_string(CONN, "pychanges%s%d" % (RUN, ChangesTest.tables), **kwargs)
        client.create_table()
        self.addCleanup(client.delete_table)
        if feed:
            request = HttpRequest(
                "PUT",
                "%s/%s" % (client.url.rstrip("/"), client.table_name),
                params={"comp": "properties"},
                json={"ChangeFeedRetention": 3600},
                headers={"x-ms-version": "2019-02-02"},
            )
            response = client._client.send_request(request)  # pylint: disable=protected-access
            self.assertLess(response.status_code, 300, response.text())
        return client

    def test_records(self):
        client = self.new_table()
        when = datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=datetime.timezone.utc)
        gid = uuid.UUID("c9da6455-213d-42c9-9a79-3e9149a57833")
        client.create_entity({"PartitionKey": "p1", "RowKey": "a", "big": EntityProperty(2**53 + 1, EdmType.INT64),
                              "when": when, "bytes": b"\x01\x02\x03", "gid": gid, "ratio": 0.5, "n": 7, "s": "x"})
        inserted = client.get_entity("p1", "a")
        client.update_entity({"PartitionKey": "p1", "RowKey": "a", "w": "merged"}, mode=UpdateMode.MERGE)
        merged = client.get_entity("p1", "a")
        client.upsert_entity({"PartitionKey": "p2", "RowKey": "b", "v": 1}, mode=UpdateMode.REPLACE)
        client.update_entity({"PartitionKey": "p2", "RowKey": "b", "v": 2}, mode=UpdateMode.REPLACE)
        client.submit_transaction([
            ("create", {"PartitionKey": "p3", "RowKey": "c", "v": 3}),
            ("upsert", {"PartitionKey": "p3", "RowKey": "d", "v": 4}, {"mode": UpdateMode.MERGE}),
        ])
        client.delete_entity("p2", "b")
        # A transaction that fails writes nothing and records nothing.
        with self.assertRaises(Exception):
            client.submit_transaction([
                ("create", {"PartitionKey": "p3", "RowKey": "e", "v": 5}),
                ("create", {"PartitionKey": "p3", "RowKey": "c", "v": 6}),
            ])

        # Pages of 2: each continuation reads on without repeating or skipping a record.
        changes, end = read_to_end(client, None, 2)
        first = "big=9007199254740993,bytes=b'\\x01\\x02\\x03',gid=c9da6455-213d-42c9-9a79-3e9149a57833,n=7,ratio=0.5,s=x,when=2024-05-06 07:08:09.123000+00:00"
        self.assertEqual([line(c) for c in changes], [
            "insert p1/a " + first,
            "merge p1/a " + first.replace("s=x,", "s=x,w=merged,"),
            "upsert p2/b v=1",
            "update p2/b v=2",
            "insert p3/c v=3",
            "upsertMerge p3/d v=4",
            "delete p2/b",
        ])
        for a, b in zip(changes, changes[1:]):
            self.assertLess(a["seq"], b["seq"])
            self.assertLessEqual(a["at"], b["at"])
        # The state in a record is what get_entity answered then: values, types, metadata.
        for c, e in ((changes[0], inserted), (changes[1], merged)):
            self.assertEqual(dict(c["entity"]), dict(e))
            self.assertEqual(c["entity"].metadata, e.metadata)
        self.assertEqual(changes[0]["entity"]["big"].edm_type, EdmType.INT64)
        self.assertEqual(changes[0]["raw_entity"]["big"], "9007199254740993")
        self.assertEqual(changes[0]["at"].tables_service_value, changes[0]["raw_entity"]["Timestamp"])
        self.assertIsNone(changes[6]["entity"])

        # Nothing after the end, nor from "now"; both read on to the next writes.
        now = read_changes(client, from_=FROM_NOW)
        self.assertEqual(now["changes"], [])
        self.assertEqual(read_changes(client, from_=end)["changes"], [])
        # A record's entity is written back as an entity get_entity returned is.
        client.upsert_entity(changes[0]["entity"], mode=UpdateMode.REPLACE)
        client.create_entity({"PartitionKey": "p4", "RowKey": "z", "v": 7})
        for from_ in (end, now["continuation"]):
            more, _ = read_to_end(client, from_, 10)
            self.assertEqual(["%s %s/%s" % (c["op"], c["PartitionKey"], c["RowKey"]) for c in more], ["upsert p1/a", "insert p4/z"])
            self.assertEqual(more[0]["entity"]["big"].value, 2**53 + 1)
            self.assertNotIn("w", more[0]["entity"])

        # Two consumers with disjoint PartitionKey ranges split the feed.
        low = read_changes(client, end_pk="p2")["changes"]
        high = read_changes(client, start_pk="p2")["changes"]
        self.assertEqual([c["PartitionKey"] for c in low], ["p1", "p1", "p1"])
        self.assertEqual([c["PartitionKey"] for c in high], ["p2", "p2", "p3", "p3", "p2", "p4"])

    def test_long_poll(self):
        client = self.new_table()
        cont = read_changes(client, from_=FROM_NOW)["continuation"]
        writer = threading.Timer(0.3, lambda: client.create_entity({"PartitionKey": "p", "RowKey": "r", "v": 1}))
        start = time.monotonic()
        writer.start()
        page = read_changes(client, from_=cont, wait=20)
        took = time.monotonic() - start
        writer.join()
        self.assertEqual([line(c) for c in page["changes"]], ["insert p/r v=1"])
        self.assertLess(took, 10, "the long poll answered after %.1f s, not woken by the insert" % took)
        # An idle wait answers an empty page, still resumable.
        idle = read_changes(client, from_=page["continuation"], wait=1)
        self.assertEqual((idle["changes"], idle["continuation"]), ([], page["continuation"]))

    def test_follow(self):
        # The pipeline's own retries off, and the first two feed reads answered 503
        # ServerBusy: follow_changes tries again itself.
        transport = BusyChanges(2)
        client = self.new_table(transport=transport, retry_total=0)
        stop = threading.Event()
        seen, saved = [], []

        def follow():
            for page in follow_changes(client, from_="beginning", wait=5, stop=stop):
                seen.extend("%s %s" % (c["op"], c["RowKey"]) for c in page["changes"])
                saved.append(page["continuation"])
                if len(seen) >= 5:
                    stop.set()

        follower = threading.Thread(target=follow)
        follower.start()
        for i in range(5):
            client.upsert_entity({"PartitionKey": "p", "RowKey": str(i), "v": i}, mode=UpdateMode.MERGE)
            time.sleep(0.05)
        follower.join(30)
        self.assertFalse(follower.is_alive(), "the follower did not stop")
        self.assertEqual(transport.busy, 0, "the injected 503s were not met")
        self.assertEqual(seen, ["upsertMerge %d" % i for i in range(5)])

        # Resuming from the saved continuation sees only what came after.
        client.delete_entity("p", "0")
        rest = []
        for page in follow_changes(client, from_=saved[-1], wait=2):
            rest.extend("%s %s" % (c["op"], c["RowKey"]) for c in page["changes"])
            break
        self.assertEqual(rest, ["delete 0"])

        # The feed ends when the table is deleted: the last page says so.
        client.create_entity({"PartitionKey": "p", "RowKey": "last"})
        deleter = threading.Timer(0.3, client.delete_table)
        deleter.start()
        ops, ended = [], False
        for page in follow_changes(client, from_=saved[-1], wait=5):
            ops.extend(c["op"] for c in page["changes"])
            ended = page["ended"]
        deleter.join()
        self.assertTrue(ended)
        self.assertEqual(ops, ["delete", "insert", "tableDeleted"])

    def test_without_feed(self):
        client = self.new_table(feed=False)
        with self.assertRaises(HttpResponseError) as cm:
            read_changes(client)
        self.assertEqual(cm.exception.status_code, 400)
        self.assertEqual(cm.exception.error_code, "InvalidQueryParameterValue")
        self.assertIn("change feed", str(cm.exception))
        # follow_changes does not retry a refusal.
        with self.assertRaises(HttpResponseError) as cm:
            next(follow_changes(client))
        self.assertEqual(cm.exception.error_code, "InvalidQueryParameterValue")
        # Nor a continuation it cannot read.
        feed = self.new_table()
        with self.assertRaises(HttpResponseError) as cm:
            read_changes(feed, from_="AQID")
        self.assertEqual(cm.exception.status_code, 400)
        self.assertIn("'from'", str(cm.exception))

    def test_sas(self):
        client = self.new_table()
        for pk in ("a", "m", "z"):
            client.create_entity({"PartitionKey": pk, "RowKey": "1"})
        parts = conn_parts()
        cred = AzureNamedKeyCredential(parts["AccountName"], parts["AccountKey"])
        expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)

        def sas_client(**kwargs):
            sas = generate_table_sas(cred, client.table_name, expiry=expiry, **kwargs)
            return TableClient(parts["TableEndpoint"], client.table_name, credential=AzureSasCredential(sas))

        changes, _ = read_to_end(sas_client(permission=TableSasPermissions(read=True)), None, 10)
        self.assertEqual([c["PartitionKey"] for c in changes], ["a", "m", "z"])
        ranged = sas_client(permission=TableSasPermissions(read=True), start_pk="b", end_pk="n")
        self.assertEqual([c["PartitionKey"] for c in read_changes(ranged)["changes"]], ["m"])
        with self.assertRaises(HttpResponseError) as cm:
            read_changes(sas_client(permission=TableSasPermissions(add=True)))
        self.assertEqual(cm.exception.status_code, 403)
        self.assertEqual(cm.exception.error_code, "AuthorizationPermissionMismatch")


if __name__ == "__main__":
    unittest.main()
