"""Bulk writes (compat/python/bulk.py) through azure-data-tables against a running Cerulean server.

    CERULEAN_CONNECTION_STRING='...' /usr/bin/python3 -m unittest -v compat/python/test_bulk.py

The e2e test TestCompatPythonBulk (e2e/bulk_compat_test.go) starts a server and runs this file.
"""

import datetime
import os
import sys
import unittest
import uuid

from azure.core.exceptions import HttpResponseError
from azure.core.rest import HttpRequest
from azure.data.tables import EdmType, EntityProperty, TableClient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bulk import bulk  # noqa: E402

CONN = os.environ.get("CERULEAN_CONNECTION_STRING", "")
RUN = uuid.uuid4().hex[:8]


def make_elastic(client):
    """Turn a table elastic with the settings endpoint (PUT ?comp=properties)."""
    request = HttpRequest(
        "PUT",
        "%s/%s" % (client.url.rstrip("/"), client.table_name),
        params={"comp": "properties"},
        json={"Elastic": True},
        headers={"x-ms-version": "2019-02-02"},
    )
    response = client._client.send_request(request)  # pylint: disable=protected-access
    assert response.status_code < 300, (response.status_code, response.text())


class BulkTest(unittest.TestCase):
    def setUp(self):
        if not CONN:
            self.skipTest("CERULEAN_CONNECTION_STRING is not set")

    def test_bulk_many_partitions(self):
        client = TableClient.from_connection_string(CONN, "pybulk" + RUN)
        client.create_table()
        try:
            make_elastic(client)
            client.create_entity({"PartitionKey": "p1", "RowKey": "003", "v": "old"})
            client.create_entity({"PartitionKey": "p2", "RowKey": "m", "a": 1})
            m = client.get_entity("p2", "m")
            when = datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=datetime.timezone.utc)
            gid = uuid.UUID("c9da6455-213d-42c9-9a79-3e9149a57833")
            ops = []
            for p in range(5):
                for r in range(60):
                    ops.append({"op": "insert", "entity": {
                        "PartitionKey": "p%d" % p, "RowKey": "%03d" % r, "v": "new",
                        "big": EntityProperty(2**53 + 1, EdmType.INT64), "when": when, "bytes": b"\x01\x02\x03", "gid": gid,
                        "n32": EntityProperty(7, EdmType.INT32), "ratio": 0.5,
                    }})
            ops.append({"op": "merge", "entity": {"PartitionKey": "p2", "RowKey": "m", "b": 2}, "ifMatch": m.metadata["etag"]})
            ops.append({"op": "update", "entity": {"PartitionKey": "p2", "RowKey": "m", "c": 3}})  # a duplicate
            ops.append({"op": "delete", "entity": {"PartitionKey": "p9", "RowKey": "none"}})

            res = bulk(client, ops)
            self.assertEqual(len(res["results"]), len(ops))
            self.assertEqual((res["succeeded"], res["failed"]), (300, 3))
            self.assertTrue(res["sessionToken"].startswith("1:"))
            self.assertEqual([r["index"] for r in res["results"]], list(range(len(ops))))
            self.assertEqual(res["results"][63]["status"], 409)
            self.assertEqual(res["results"][63]["error"]["code"], "EntityAlreadyExists")
            self.assertEqual(res["results"][0]["status"], 201)
            self.assertEqual(res["results"][300]["status"], 204)
            self.assertEqual(res["results"][301]["error"]["code"], "InvalidDuplicateRow")
            self.assertEqual(res["results"][302]["status"], 404)

            e = client.get_entity("p4", "059")
            self.assertEqual(e.metadata["etag"], res["results"][299]["etag"])
            self.assertEqual(e["v"], "new")
            self.assertEqual(getattr(e["big"], "value", e["big"]), 2**53 + 1)
            self.assertEqual(e["when"], when)
            self.assertEqual(e["bytes"], b"\x01\x02\x03")
            self.assertEqual(e["gid"], gid)
            self.assertEqual(e["n32"], 7)
            self.assertEqual(e["ratio"], 0.5)
            self.assertEqual(client.get_entity("p1", "003")["v"], "old")
            merged = client.get_entity("p2", "m")
            self.assertEqual((merged["a"], merged["b"], merged.get("c")), (1, 2, None))
            self.assertEqual(len(list(client.list_entities())), 301)

            # Entities read back can be written back as they are.
            again = bulk(client, [{"op": "update", "entity": e, "ifMatch": e.metadata["etag"]}])
            self.assertEqual(again["results"][0]["status"], 204, again)
        finally:
            client.delete_table()

    def test_bulk_on_standard_table(self):
        client = TableClient.from_connection_string(CONN, "pybulkstd" + RUN)
        client.create_table()
        try:
            with self.assertRaises(HttpResponseError) as cm:
                bulk(client, [{"op": "insert", "entity": {"PartitionKey": "p", "RowKey": "r"}}])
            self.assertEqual(cm.exception.status_code, 400)
            self.assertEqual(cm.exception.error_code, "InvalidQueryParameterValue")
            self.assertEqual(len(list(client.list_entities())), 0)
        finally:
            client.delete_table()


if __name__ == "__main__":
    unittest.main()
