"""Compatibility suite: the Python SDK azure-data-tables against a running Cerulean server.

Run with Debian's interpreter (the SDK comes from the Debian package python3-azure):

    apt-get install -y python3-azure
    CERULEAN_CONNECTION_STRING='DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=...;TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;' \
        /usr/bin/python3 -m unittest -v compat/python/test_tables.py

The e2e test TestCompatPython (e2e/compat_python_test.go) starts a server and runs this file.
"""

import datetime
import os
import unittest
import uuid

from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import (
    AccountSasPermissions,
    EdmType,
    EntityProperty,
    ResourceTypes,
    TableClient,
    TableSasPermissions,
    TableServiceClient,
    TableTransactionError,
    UpdateMode,
    generate_account_sas,
    generate_table_sas,
)

CONN = os.environ.get("CERULEAN_CONNECTION_STRING", "")
RUN = uuid.uuid4().hex[:8]


def conn_parts():
    parts = {}
    for kv in CONN.split(";"):
        if "=" in kv:
            k, v = kv.split("=", 1)
            parts[k] = v
    return parts


_seq = [0]


def table_name(prefix):
    _seq[0] += 1
    return "py%s%s%d" % (prefix, RUN, _seq[0])


def utc(*args):
    return datetime.datetime(*args, tzinfo=datetime.timezone.utc)


@unittest.skipUnless(CONN, "CERULEAN_CONNECTION_STRING not set")
class Base(unittest.TestCase):
    def setUp(self):
        self.service = TableServiceClient.from_connection_string(CONN)
        self.name = table_name(type(self).__name__.lower()[:6])
        self.table = self.service.create_table(self.name)
        self.addCleanup(self._drop)

    def _drop(self):
        try:
            self.service.delete_table(self.name)
        except Exception:  # pylint: disable=broad-except
            pass


@unittest.skipUnless(CONN, "CERULEAN_CONNECTION_STRING not set")
class TestTables(unittest.TestCase):
    def test_create_list_delete(self):
        service = TableServiceClient.from_connection_string(CONN)
        names = [table_name("tbl") for _ in range(3)]
        for n in names:
            client = service.create_table(n)
            self.assertEqual(client.table_name, n)
        with self.assertRaises(ResourceExistsError):
            service.create_table(names[0])
        # create_table_if_not_exists must not raise on an existing table.
        service.create_table_if_not_exists(names[0])

        listed = [t.name for t in service.list_tables()]
        for n in names:
            self.assertIn(n, listed)
        # list_tables paging with a small page size.
        paged = []
        for page in service.list_tables(results_per_page=1).by_page():
            page = list(page)
            self.assertLessEqual(len(page), 1)
            paged.extend(t.name for t in page)
        self.assertEqual(sorted(paged), sorted(listed))
        # query_tables with a filter and parameters.
        got = [t.name for t in service.query_tables("TableName eq @n", parameters={"n": names[1]})]
        self.assertEqual(got, [names[1]])

        # TableClient.from_connection_string works as well.
        tc = TableClient.from_connection_string(CONN, table_name=names[2])
        tc.delete_table()
        service.delete_table(names[0])
        service.delete_table(names[1])
        listed = [t.name for t in service.list_tables()]
        for n in names:
            self.assertNotIn(n, listed)
        # Deleting a missing table is not an error in this SDK (it swallows 404).
        service.delete_table(names[0])


@unittest.skipUnless(CONN, "CERULEAN_CONNECTION_STRING not set")
class TestServiceStats(unittest.TestCase):
    def test_get_service_stats(self):
        # The SDK signs the primary URL, then sends the request to the secondary it derives
        # from the connection string: /<account>-secondary/<account>/?restype=service&comp=stats.
        service = TableServiceClient.from_connection_string(CONN)
        seen = []
        stats = service.get_service_stats(raw_request_hook=lambda req: seen.append(req.http_request.url))
        self.assertEqual(stats["geo_replication"]["status"], "live")
        last = stats["geo_replication"]["last_sync_time"]
        self.assertIsInstance(last, datetime.datetime)
        now = datetime.datetime.now(datetime.timezone.utc)
        self.assertLess(abs((now - last).total_seconds()), 300)
        account = conn_parts()["AccountName"]
        self.assertIn("/%s-secondary/%s/" % (account, account), seen[-1])


class TestEntities(Base):
    def test_create_get_select(self):
        e = {"PartitionKey": "p1", "RowKey": "r1", "Name": "alice", "Age": 30, "Tall": True}
        meta = self.table.create_entity(e)
        self.assertTrue(meta.get("etag"))
        with self.assertRaises(ResourceExistsError):
            self.table.create_entity(e)

        got = self.table.get_entity("p1", "r1")
        self.assertEqual(got["Name"], "alice")
        self.assertEqual(got["Age"], 30)
        self.assertIs(got["Tall"], True)
        self.assertEqual(got.metadata["etag"], meta["etag"])
        self.assertIsInstance(got.metadata["timestamp"], datetime.datetime)

        sel = self.table.get_entity("p1", "r1", select=["Name"])
        self.assertEqual(sel["Name"], "alice")
        self.assertNotIn("Age", sel)
        self.assertNotIn("Tall", sel)

        with self.assertRaises(ResourceNotFoundError):
            self.table.get_entity("p1", "missing")

    def test_keys_with_special_characters(self):
        for pk, rk in [("a'b", "c d"), ("x''y", "(z)"), ("ü ñ", "é")]:
            self.table.create_entity({"PartitionKey": pk, "RowKey": rk, "V": 1})
            got = self.table.get_entity(pk, rk)
            self.assertEqual((got["PartitionKey"], got["RowKey"]), (pk, rk))
            self.table.update_entity({"PartitionKey": pk, "RowKey": rk, "V": 2}, mode=UpdateMode.MERGE)
            self.assertEqual(self.table.get_entity(pk, rk)["V"], 2)
            self.table.delete_entity(pk, rk)
            with self.assertRaises(ResourceNotFoundError):
                self.table.get_entity(pk, rk)

    def test_update_replace_and_merge(self):
        self.table.create_entity({"PartitionKey": "p", "RowKey": "r", "A": "a", "B": "b"})
        got = self.table.get_entity("p", "r")
        etag = got.metadata["etag"]

        # Replace with the current etag: B disappears.
        meta = self.table.update_entity(
            {"PartitionKey": "p", "RowKey": "r", "A": "a2"},
            mode=UpdateMode.REPLACE, etag=etag, match_condition=MatchConditions.IfNotModified)
        self.assertNotEqual(meta["etag"], etag)
        got = self.table.get_entity("p", "r")
        self.assertEqual(got["A"], "a2")
        self.assertNotIn("B", got)

        # Replace with the stale etag: 412 → ResourceModifiedError.
        with self.assertRaises(ResourceModifiedError):
            self.table.update_entity(
                {"PartitionKey": "p", "RowKey": "r", "A": "stale"},
                mode=UpdateMode.REPLACE, etag=etag, match_condition=MatchConditions.IfNotModified)
        # Merge with the stale etag as well.
        with self.assertRaises(ResourceModifiedError):
            self.table.update_entity(
                {"PartitionKey": "p", "RowKey": "r", "C": "stale"},
                mode=UpdateMode.MERGE, etag=etag, match_condition=MatchConditions.IfNotModified)

        # Merge with the current etag: A kept, C added.
        etag = meta["etag"]
        meta = self.table.update_entity(
            {"PartitionKey": "p", "RowKey": "r", "C": "c"},
            mode=UpdateMode.MERGE, etag=etag, match_condition=MatchConditions.IfNotModified)
        got = self.table.get_entity("p", "r")
        self.assertEqual((got["A"], got["C"]), ("a2", "c"))
        self.assertEqual(got.metadata["etag"], meta["etag"])

        # Unconditional merge and replace (If-Match: *).
        self.table.update_entity({"PartitionKey": "p", "RowKey": "r", "D": 4}, mode=UpdateMode.MERGE)
        got = self.table.get_entity("p", "r")
        self.assertEqual((got["A"], got["C"], got["D"]), ("a2", "c", 4))
        self.table.update_entity({"PartitionKey": "p", "RowKey": "r", "E": 5}, mode=UpdateMode.REPLACE)
        got = self.table.get_entity("p", "r")
        self.assertEqual(got["E"], 5)
        for k in ("A", "C", "D"):
            self.assertNotIn(k, got)

        # Update of a missing entity → 404.
        with self.assertRaises(ResourceNotFoundError):
            self.table.update_entity({"PartitionKey": "p", "RowKey": "nope", "X": 1})

    def test_upsert_both_modes(self):
        # Upsert inserts when missing (both modes).
        self.table.upsert_entity({"PartitionKey": "p", "RowKey": "m", "A": "a"}, mode=UpdateMode.MERGE)
        self.table.upsert_entity({"PartitionKey": "p", "RowKey": "r", "A": "a"}, mode=UpdateMode.REPLACE)
        self.assertEqual(self.table.get_entity("p", "m")["A"], "a")
        self.assertEqual(self.table.get_entity("p", "r")["A"], "a")
        # Merge keeps existing properties, replace drops them.
        self.table.upsert_entity({"PartitionKey": "p", "RowKey": "m", "B": "b"}, mode=UpdateMode.MERGE)
        self.table.upsert_entity({"PartitionKey": "p", "RowKey": "r", "B": "b"}, mode=UpdateMode.REPLACE)
        m = self.table.get_entity("p", "m")
        r = self.table.get_entity("p", "r")
        self.assertEqual((m["A"], m["B"]), ("a", "b"))
        self.assertEqual(r["B"], "b")
        self.assertNotIn("A", r)

    def test_delete(self):
        self.table.create_entity({"PartitionKey": "p", "RowKey": "r", "A": 1})
        etag = self.table.get_entity("p", "r").metadata["etag"]
        self.table.update_entity({"PartitionKey": "p", "RowKey": "r", "A": 2})
        # Conditional delete with a stale etag → 412.
        with self.assertRaises(ResourceModifiedError):
            self.table.delete_entity("p", "r", etag=etag, match_condition=MatchConditions.IfNotModified)
        etag = self.table.get_entity("p", "r").metadata["etag"]
        self.table.delete_entity("p", "r", etag=etag, match_condition=MatchConditions.IfNotModified)
        with self.assertRaises(ResourceNotFoundError):
            self.table.get_entity("p", "r")
        # Unconditional delete of a missing entity: the SDK swallows the 404.
        self.table.delete_entity("p", "r")
        # Delete by entity dict.
        self.table.create_entity({"PartitionKey": "p", "RowKey": "r2"})
        self.table.delete_entity({"PartitionKey": "p", "RowKey": "r2"})
        self.assertEqual(list(self.table.list_entities()), [])


BIG = 2 ** 53 + 1
DT = utc(2024, 5, 1, 10, 20, 30, 123456)
GUID = uuid.UUID("c9da6455-213d-42c9-9a79-3e9149a57833")
BLOB = b"\x00\x01\xfe\xffhello"


class TestTypes(Base):
    def setUp(self):
        super().setUp()
        self.entity = {
            "PartitionKey": "types",
            "RowKey": "1",
            "Str": "héllo 'quoted'",
            "Int32": 42,
            "NegInt32": -7,
            # Python ints beyond Int32 must be wrapped: this SDK version raises TypeError otherwise.
            "Int64Big": EntityProperty(BIG, EdmType.INT64),
            "Int64Small": EntityProperty(5, EdmType.INT64),
            "Double": 3.25,
            "DoubleIntegral": 2.0,
            "DoubleTyped": EntityProperty(7.5, EdmType.DOUBLE),
            "DoubleNaN": float("nan"),
            "DoubleInf": float("inf"),
            "Bool": True,
            "BoolFalse": False,
            "DateTime": DT,
            "DateTimeTyped": EntityProperty(DT, EdmType.DATETIME),
            "Guid": GUID,
            "GuidTyped": EntityProperty(str(GUID), EdmType.GUID),
            "Binary": BLOB,
            "BinaryTyped": EntityProperty(BLOB, EdmType.BINARY),
            "EmptyStr": "",
        }
        self.table.create_entity(self.entity)

    def test_round_trip_types(self):
        got = self.table.get_entity("types", "1")
        self.assertEqual(got["Str"], "héllo 'quoted'")
        self.assertIs(type(got["Str"]), str)
        self.assertEqual(got["Int32"], 42)
        self.assertIs(type(got["Int32"]), int)
        self.assertEqual(got["NegInt32"], -7)

        # Int64 reads back as EntityProperty(value, EdmType.INT64).
        for key, want in (("Int64Big", BIG), ("Int64Small", 5)):
            self.assertIsInstance(got[key], EntityProperty, key)
            self.assertEqual(got[key].edm_type, EdmType.INT64, key)
            self.assertEqual(got[key].value, want, key)

        self.assertIs(type(got["Double"]), float)
        self.assertEqual(got["Double"], 3.25)
        # An integral double must come back as a float (annotated Edm.Double on the wire), not an int.
        self.assertIs(type(got["DoubleIntegral"]), float, repr(got["DoubleIntegral"]))
        self.assertEqual(got["DoubleIntegral"], 2.0)
        self.assertIs(type(got["DoubleTyped"]), float)
        self.assertEqual(got["DoubleTyped"], 7.5)
        self.assertIs(type(got["DoubleNaN"]), float)
        self.assertNotEqual(got["DoubleNaN"], got["DoubleNaN"])
        self.assertEqual(got["DoubleInf"], float("inf"))

        self.assertIs(got["Bool"], True)
        self.assertIs(got["BoolFalse"], False)

        for key in ("DateTime", "DateTimeTyped"):
            self.assertIsInstance(got[key], datetime.datetime, key)
            self.assertEqual(got[key], DT, key)
            self.assertIsNotNone(got[key].tzinfo, key)

        for key in ("Guid", "GuidTyped"):
            self.assertIsInstance(got[key], uuid.UUID, key)
            self.assertEqual(got[key], GUID, key)

        for key in ("Binary", "BinaryTyped"):
            self.assertIs(type(got[key]), bytes, key)
            self.assertEqual(got[key], BLOB, key)

        self.assertEqual(got["EmptyStr"], "")

    def test_types_in_query_results(self):
        got = list(self.table.query_entities("PartitionKey eq 'types'"))
        self.assertEqual(len(got), 1)
        e = got[0]
        self.assertEqual(e["Int64Big"].value, BIG)
        self.assertEqual(e["Int64Big"].edm_type, EdmType.INT64)
        self.assertIsInstance(e["Guid"], uuid.UUID)
        self.assertIs(type(e["Binary"]), bytes)
        self.assertEqual(e["DateTime"], DT)
        self.assertIs(type(e["DoubleIntegral"]), float)

    def test_typed_filters_with_parameters(self):
        t = self.table
        other = {"PartitionKey": "types", "RowKey": "2", "Str": "x", "Int32": 11,
                 "Int64Big": EntityProperty(3, EdmType.INT64),
                 "Double": 1.5, "DoubleIntegral": 1.0, "Bool": False, "DateTime": utc(2001, 1, 1),
                 "Guid": uuid.uuid4(), "Binary": b"zz"}
        t.create_entity(other)

        def rows(flt, **params):
            return [e["RowKey"] for e in t.query_entities(flt, parameters=params)]

        self.assertEqual(rows("Int64Big eq @v", v=BIG), ["1"])  # serialized as 9007199254740993L
        self.assertEqual(rows("Int64Big gt @v", v=BIG - 1), ["1"])
        # Int32 literal `10` against an Int64 property: widened to Int64 (docs/protocol.md §5.2).
        self.assertEqual(rows("Int64Big lt @v", v=10), ["2"])
        self.assertEqual(rows("Int32 eq @v", v=42), ["1"])
        self.assertEqual(rows("DateTime eq @v", v=DT), ["1"])
        self.assertEqual(rows("DateTime lt @v", v=utc(2010, 1, 1)), ["2"])
        self.assertEqual(rows("Guid eq @v", v=GUID), ["1"])
        self.assertEqual(rows("Binary eq @v", v=BLOB), ["1"])
        self.assertEqual(rows("Bool eq @v", v=True), ["1"])
        self.assertEqual(rows("Bool eq @v", v=False), ["2"])
        self.assertEqual(rows("Double eq @v", v=3.25), ["1"])
        self.assertEqual(rows("Double gt @v and Double lt @w", v=1.0, w=2.0), ["2"])
        self.assertEqual(rows("Str eq @v", v="héllo 'quoted'"), ["1"])
        # SDK quirk: an int parameter equal to 0 or 1 is serialized as false/true (`val in [True, False]`),
        # so the int parameter here avoids 0 and 1.
        self.assertEqual(rows("Str eq @v and Int32 eq @n", v="x", n=11), ["2"])
        self.assertEqual(rows("PartitionKey eq @p and RowKey ge @r", p="types", r="2"), ["2"])
        self.assertEqual(rows("Str eq @v", v="nope"), [])

    def test_select(self):
        got = list(self.table.query_entities("RowKey eq '1'", select=["Str", "Int64Big", "Missing"]))
        self.assertEqual(len(got), 1)
        e = got[0]
        self.assertEqual(e["Str"], "héllo 'quoted'")
        self.assertEqual(e["Int64Big"].value, BIG)
        self.assertNotIn("Int32", e)
        self.assertNotIn("Guid", e)
        # list_entities with select.
        got = list(self.table.list_entities(select=["Bool"]))
        self.assertEqual(len(got), 1)
        self.assertIs(got[0]["Bool"], True)
        self.assertNotIn("Str", got[0])


class TestPaging(Base):
    N = 100

    def setUp(self):
        super().setUp()
        # Two partitions so that pages cross a partition boundary.
        self.keys = []
        for i in range(self.N):
            pk = "a" if i < 55 else "b"
            rk = "%04d" % i
            self.keys.append((pk, rk))
        for pk in ("a", "b"):
            ops = [("create", {"PartitionKey": p, "RowKey": r, "I": int(r)}) for p, r in self.keys if p == pk]
            while ops:
                self.table.submit_transaction(ops[:100])
                ops = ops[100:]

    def test_by_page(self):
        pages = []
        for page in self.table.list_entities(results_per_page=7).by_page():
            pages.append([(e["PartitionKey"], e["RowKey"]) for e in page])
        for p in pages[:-1]:
            self.assertEqual(len(p), 7)
        self.assertGreaterEqual(len(pages), (self.N + 6) // 7)
        flat = [k for p in pages for k in p]
        self.assertEqual(flat, self.keys)

    def test_query_by_page_with_filter_and_continuation(self):
        q = self.table.query_entities("I ge @lo", parameters={"lo": 10}, results_per_page=7, select=["I"])
        pager = q.by_page()
        first = list(next(pager))
        self.assertEqual(len(first), 7)
        token = pager.continuation_token
        self.assertIsNotNone(token)
        # Resume from the continuation token with a fresh pager.
        rest = []
        for page in self.table.query_entities(
                "I ge @lo", parameters={"lo": 10}, results_per_page=7, select=["I"]).by_page(
                    continuation_token=token):
            rest.extend(e["I"] for e in page)
        got = [e["I"] for e in first] + rest
        self.assertEqual(got, list(range(10, self.N)))


class TestTransactions(Base):
    def test_success(self):
        self.table.create_entity({"PartitionKey": "p", "RowKey": "upd", "A": "old"})
        self.table.create_entity({"PartitionKey": "p", "RowKey": "del", "A": 1})
        self.table.create_entity({"PartitionKey": "p", "RowKey": "mrg", "A": 1})
        ops = [
            ("create", {"PartitionKey": "p", "RowKey": "new", "V": EntityProperty(2 ** 40, EdmType.INT64)}),
            ("update", {"PartitionKey": "p", "RowKey": "upd", "B": "new"}, {"mode": "replace"}),
            ("update", {"PartitionKey": "p", "RowKey": "mrg", "B": 2}, {"mode": "merge"}),
            ("upsert", {"PartitionKey": "p", "RowKey": "ups", "A": 9}, {"mode": "merge"}),
            ("upsert", {"PartitionKey": "p", "RowKey": "ups2", "A": 9}, {"mode": "replace"}),
            ("delete", {"PartitionKey": "p", "RowKey": "del"}),
        ]
        result = self.table.submit_transaction(ops)
        self.assertEqual(len(result), len(ops))
        for r in result[:-1]:
            self.assertTrue(r.get("etag"), r)
        got = {e["RowKey"]: e for e in self.table.list_entities()}
        self.assertEqual(sorted(got), ["mrg", "new", "upd", "ups", "ups2"])
        self.assertEqual(got["new"]["V"].value, 2 ** 40)
        self.assertNotIn("A", got["upd"])
        self.assertEqual(got["upd"]["B"], "new")
        self.assertEqual((got["mrg"]["A"], got["mrg"]["B"]), (1, 2))

    def test_failing_index(self):
        self.table.create_entity({"PartitionKey": "p", "RowKey": "exists"})
        ops = [
            ("create", {"PartitionKey": "p", "RowKey": "a"}),
            ("create", {"PartitionKey": "p", "RowKey": "b"}),
            ("create", {"PartitionKey": "p", "RowKey": "exists"}),  # index 2 fails: 409
            ("create", {"PartitionKey": "p", "RowKey": "c"}),
        ]
        with self.assertRaises(TableTransactionError) as cm:
            self.table.submit_transaction(ops)
        err = cm.exception
        self.assertEqual(err.index, 2, "index from message %r" % (err.message,))
        self.assertEqual(err.error_code, "EntityAlreadyExists")
        # Atomic: nothing from the batch was written.
        self.assertEqual([e["RowKey"] for e in self.table.list_entities()], ["exists"])

    def test_failing_index_update_missing(self):
        ops = [
            ("upsert", {"PartitionKey": "p", "RowKey": "a"}),
            ("update", {"PartitionKey": "p", "RowKey": "missing", "X": 1}),  # index 1 fails: 404
        ]
        with self.assertRaises(TableTransactionError) as cm:
            self.table.submit_transaction(ops)
        self.assertEqual(cm.exception.index, 1, cm.exception.message)
        self.assertEqual(cm.exception.error_code, "ResourceNotFound")
        self.assertEqual(list(self.table.list_entities()), [])

    def test_failing_etag(self):
        self.table.create_entity({"PartitionKey": "p", "RowKey": "r", "A": 1})
        etag = self.table.get_entity("p", "r").metadata["etag"]
        self.table.update_entity({"PartitionKey": "p", "RowKey": "r", "A": 2})
        ops = [
            ("create", {"PartitionKey": "p", "RowKey": "n"}),
            ("update", {"PartitionKey": "p", "RowKey": "r", "A": 3},
             {"mode": "merge", "etag": etag, "match_condition": MatchConditions.IfNotModified}),
        ]
        with self.assertRaises(TableTransactionError) as cm:
            self.table.submit_transaction(ops)
        self.assertEqual(cm.exception.index, 1, cm.exception.message)
        self.assertEqual(cm.exception.error_code, "UpdateConditionNotSatisfied")
        self.assertEqual(self.table.get_entity("p", "r")["A"], 2)


class TestSas(Base):
    def setUp(self):
        super().setUp()
        parts = conn_parts()
        self.endpoint = parts["TableEndpoint"].rstrip("/")
        self.cred = AzureNamedKeyCredential(parts["AccountName"], parts["AccountKey"])
        self.table.create_entity({"PartitionKey": "p", "RowKey": "r", "A": "x"})
        self.expiry = datetime.datetime.utcnow() + datetime.timedelta(hours=1)

    def test_table_sas_read_only(self):
        sas = generate_table_sas(self.cred, self.name, permission=TableSasPermissions(read=True),
                                 expiry=self.expiry)
        client = TableClient(self.endpoint, self.name, credential=AzureSasCredential(sas))
        self.assertEqual(client.get_entity("p", "r")["A"], "x")
        self.assertEqual([e["RowKey"] for e in client.query_entities("A eq @a", parameters={"a": "x"})], ["r"])
        with self.assertRaises(HttpResponseError) as cm:
            client.create_entity({"PartitionKey": "p", "RowKey": "w"})
        self.assertEqual(cm.exception.status_code, 403)
        with self.assertRaises(HttpResponseError) as cm:
            client.delete_entity("p", "r")
        self.assertEqual(cm.exception.status_code, 403)
        self.assertEqual(self.table.get_entity("p", "r")["A"], "x")

    def test_table_sas_read_add(self):
        sas = generate_table_sas(self.cred, self.name, permission=TableSasPermissions(read=True, add=True),
                                 expiry=self.expiry)
        client = TableClient(self.endpoint, self.name, credential=AzureSasCredential(sas))
        client.create_entity({"PartitionKey": "p", "RowKey": "w", "A": "y"})
        self.assertEqual(client.get_entity("p", "w")["A"], "y")
        # Update needs 'u'.
        with self.assertRaises(HttpResponseError) as cm:
            client.update_entity({"PartitionKey": "p", "RowKey": "w", "A": "z"})
        self.assertEqual(cm.exception.status_code, 403)

    def test_table_sas_expired(self):
        sas = generate_table_sas(self.cred, self.name, permission=TableSasPermissions(read=True),
                                 expiry=datetime.datetime.utcnow() - datetime.timedelta(minutes=5))
        client = TableClient(self.endpoint, self.name, credential=AzureSasCredential(sas))
        with self.assertRaises((ClientAuthenticationError, HttpResponseError)) as cm:
            client.get_entity("p", "r")
        self.assertEqual(cm.exception.status_code, 403)

    def test_account_sas(self):
        # This SDK's ResourceTypes has only service/object keywords (no container; passing
        # container=True is silently ignored), yet Query Tables needs srt=c (docs/protocol.md §8.5).
        # from_string is the only way to get "c" into the SAS.
        so = generate_account_sas(
            self.cred,
            resource_types=ResourceTypes(service=True, container=True, object=True),
            permission=AccountSasPermissions(read=True, list=True),
            expiry=self.expiry,
        )
        self.assertIn("srt=so&", so + "&")
        with self.assertRaises(HttpResponseError) as cm:
            list(TableServiceClient(self.endpoint, credential=AzureSasCredential(so)).list_tables())
        self.assertEqual(cm.exception.status_code, 403)
        self.assertEqual(cm.exception.error_code, "AuthorizationResourceTypeMismatch")

        sas = generate_account_sas(
            self.cred,
            resource_types=ResourceTypes.from_string("sco"),
            permission=AccountSasPermissions(read=True, list=True),
            expiry=self.expiry,
        )
        service = TableServiceClient(self.endpoint, credential=AzureSasCredential(sas))
        self.assertIn(self.name, [t.name for t in service.list_tables()])
        client = service.get_table_client(self.name)
        self.assertEqual(client.get_entity("p", "r")["A"], "x")
        self.assertEqual(len(list(client.list_entities())), 1)
        with self.assertRaises(HttpResponseError) as cm:
            client.upsert_entity({"PartitionKey": "p", "RowKey": "w"})
        self.assertEqual(cm.exception.status_code, 403)
        with self.assertRaises(HttpResponseError) as cm:
            service.create_table(table_name("sasdenied"))
        self.assertEqual(cm.exception.status_code, 403)

    def test_account_sas_write(self):
        sas = generate_account_sas(
            self.cred,
            resource_types=ResourceTypes(object=True),
            permission=AccountSasPermissions(read=True, write=True, add=True, update=True),
            expiry=self.expiry,
        )
        client = TableClient(self.endpoint, self.name, credential=AzureSasCredential(sas))
        client.upsert_entity({"PartitionKey": "p", "RowKey": "w", "A": "w"})
        self.assertEqual(self.table.get_entity("p", "w")["A"], "w")


class TestSessionTokens(Base):
    """Session tokens (docs/compatibility.md "Session tokens"): raw_response_hook reads x-ms-session-token,
    headers= sends it on a read; client-wide hooks keep a session."""

    @staticmethod
    def position(token):
        return int(token.rsplit(":", 1)[1])

    def test_every_write_answers_a_token(self):
        seen = []

        def hook(response):
            seen.append(response.http_response.headers.get("x-ms-session-token"))

        e = {"PartitionKey": "p", "RowKey": "r", "V": 1}
        writes = [
            ("create_entity", lambda: self.table.create_entity(e, raw_response_hook=hook)),
            ("upsert merge", lambda: self.table.upsert_entity(e, mode=UpdateMode.MERGE, raw_response_hook=hook)),
            ("upsert replace", lambda: self.table.upsert_entity(e, mode=UpdateMode.REPLACE, raw_response_hook=hook)),
            ("update merge", lambda: self.table.update_entity(e, mode=UpdateMode.MERGE, raw_response_hook=hook)),
            ("update replace", lambda: self.table.update_entity(e, mode=UpdateMode.REPLACE, raw_response_hook=hook)),
            ("delete", lambda: self.table.delete_entity("p", "r", raw_response_hook=hook)),
            ("transaction", lambda: self.table.submit_transaction(
                [("upsert", {"PartitionKey": "p", "RowKey": "t"}), ("create", {"PartitionKey": "p", "RowKey": "u"})],
                raw_response_hook=hook)),
        ]
        last = -1
        for what, write in writes:
            del seen[:]
            write()
            self.assertEqual(len(seen), 1, what)
            self.assertRegex(seen[0] or "", r"^1:[a-z0-9]+:\d+$", what)
            self.assertGreater(self.position(seen[0]), last, what)
            last = self.position(seen[0])

    def test_reads_with_a_token(self):
        seen = {}
        self.table.upsert_entity({"PartitionKey": "q", "RowKey": "r", "V": 7},
                                 raw_response_hook=lambda r: seen.update(t=r.http_response.headers["x-ms-session-token"]))
        for header in ("x-ms-session-token", "MSCRM.SessionToken"):
            self.assertEqual(self.table.get_entity("q", "r", headers={header: seen["t"]})["V"], 7)
            got = list(self.table.query_entities("PartitionKey eq 'q'", headers={header: seen["t"]}))
            self.assertEqual([e["V"] for e in got], [7])

    def test_malformed_and_future_tokens(self):
        for header in ("x-ms-session-token", "MSCRM.SessionToken"):
            with self.assertRaises(HttpResponseError) as cm:
                self.table.get_entity("q", "r", headers={header: "not-a-token"})
            self.assertEqual(cm.exception.status_code, 400)
            self.assertEqual(cm.exception.response.headers["x-ms-error-code"], "InvalidHeaderValue")
        seen = {}
        self.table.upsert_entity({"PartitionKey": "q", "RowKey": "f"},
                                 raw_response_hook=lambda r: seen.update(t=r.http_response.headers["x-ms-session-token"]))
        prefix, pos = seen["t"].rsplit(":", 1)
        future = "%s:%d" % (prefix, int(pos) + 10 ** 9)
        client = TableClient.from_connection_string(CONN, self.name, retry_total=0)
        with self.assertRaises(HttpResponseError) as cm:
            client.get_entity("q", "f", headers={"x-ms-session-token": future})
        self.assertEqual(cm.exception.status_code, 503)
        self.assertEqual(cm.exception.response.headers["x-ms-error-code"], "ServerBusy")
        self.assertTrue(cm.exception.response.headers.get("Retry-After"))

    def test_client_wide_session(self):
        session = {"token": None, "position": -1, "sent": []}

        def on_request(request):
            if session["token"] and request.http_request.method == "GET":
                request.http_request.headers["x-ms-session-token"] = session["token"]
            session["sent"].append(request.http_request.headers.get("x-ms-session-token"))

        def on_response(response):
            token = response.http_response.headers.get("x-ms-session-token")
            if token and self.position(token) > session["position"]:
                session["token"], session["position"] = token, self.position(token)

        client = TableClient.from_connection_string(CONN, self.name, raw_request_hook=on_request,
                                                    raw_response_hook=on_response)
        client.upsert_entity({"PartitionKey": "s", "RowKey": "1"})
        first = session["position"]
        client.submit_transaction([("upsert", {"PartitionKey": "s", "RowKey": "2", "V": 2})])
        self.assertGreater(session["position"], first)
        # The read's own answer may carry a newer token (the position it was read at, which
        # can pass the one sent: a read on PostgreSQL may write WAL, pruning a page), so the
        # token to compare is the one the session held before it.
        before = session["token"]
        self.assertEqual(client.get_entity("s", "2")["V"], 2)
        self.assertEqual(session["sent"][-1], before)
        self.assertGreaterEqual(session["position"], self.position(before))


if __name__ == "__main__":
    unittest.main(verbosity=2)
