"""Sign-in with an identity through the Python SDK (issue 47, docs/identity.md).

A credential whose get_token returns azure.core.credentials.AccessToken hands
azure-data-tables the bearer tokens the Go test obtained, one per principal:

    CERULEAN_ENDPOINT        https://127.0.0.1:PORT/devstoreaccount1 (trusted through REQUESTS_CA_BUNDLE)
    CERULEAN_TOKEN_CONTRIBUTOR, CERULEAN_TOKEN_READER, CERULEAN_TOKEN_SCOPED
                             a Storage Table Data Contributor's, a Reader's, and a
                             Contributor's on CERULEAN_SCOPED_TABLE only
    CERULEAN_TABLE, CERULEAN_SCOPED_TABLE   the tables to use (neither exists yet)

The Contributor does every entity operation, the Reader only reads (each write 403
AuthorizationPermissionMismatch), the table-scoped one reaches only its table. Run by
e2e/identity_sdks_test.go (TestBearerPython, TestDevIssuerPython) with Debian's
/usr/bin/python3; exits non-zero on a failure.
"""

import os
import sys
import time

from azure.core.credentials import AccessToken
from azure.core.exceptions import HttpResponseError
from azure.data.tables import TableClient, TableServiceClient, UpdateMode

DENIED = "AuthorizationPermissionMismatch"


def env(name):
    v = os.environ.get(name)
    if not v:
        sys.exit(f"{name} is not set (see the docstring of this file)")
    return v


class StaticTokenCredential:
    """The smallest token credential: returns the token it was given."""

    def __init__(self, token):
        self.token = token

    def get_token(self, *scopes, **kwargs):
        assert scopes == ("https://storage.azure.com/.default",), scopes
        return AccessToken(self.token, int(time.time()) + 3600)


ENDPOINT = env("CERULEAN_ENDPOINT")
TABLE = env("CERULEAN_TABLE")
SCOPED = env("CERULEAN_SCOPED_TABLE")


def clients(token_var):
    cred = StaticTokenCredential(env(token_var))
    service = TableServiceClient(ENDPOINT, credential=cred, retry_total=0)
    return service, lambda name: TableClient(ENDPOINT, name, credential=cred, retry_total=0)


def ok(what, fn):
    r = fn()
    print(f"ok   {what}", flush=True)
    return r


def denied(what, fn):
    try:
        fn()
    except HttpResponseError as e:
        code = getattr(e, "error_code", None)
        if e.status_code == 403 and (code == DENIED or DENIED in str(e)):
            print(f"ok   {what}: 403 {DENIED}", flush=True)
            return
        raise AssertionError(f"{what}: {e.status_code} {code}; want 403 {DENIED}") from e
    raise AssertionError(f"{what} succeeded; want 403 {DENIED}")


def ent(rk, n):
    return {"PartitionKey": "p", "RowKey": rk, "N": n}


contrib, contrib_table = clients("CERULEAN_TOKEN_CONTRIBUTOR")
reader, reader_table = clients("CERULEAN_TOKEN_READER")
scoped, scoped_table = clients("CERULEAN_TOKEN_SCOPED")

# The Contributor: tables and every entity operation.
ok("Contributor create_table", lambda: contrib.create_table(TABLE))
ok("Contributor create_table (scoped)", lambda: contrib.create_table(SCOPED))
c = contrib_table(TABLE)
ok("Contributor create_entity", lambda: c.create_entity(ent("a", 1)))
assert ok("Contributor get_entity", lambda: c.get_entity("p", "a"))["N"] == 1
ok("Contributor update_entity (replace)", lambda: c.update_entity(ent("a", 2), mode=UpdateMode.REPLACE))
ok("Contributor update_entity (merge)", lambda: c.update_entity(ent("a", 3), mode=UpdateMode.MERGE))
ok("Contributor upsert_entity (merge)", lambda: c.upsert_entity(ent("b", 1), mode=UpdateMode.MERGE))
ok("Contributor upsert_entity (replace)", lambda: c.upsert_entity(ent("c", 1), mode=UpdateMode.REPLACE))
rows = ok("Contributor list_entities", lambda: [e["RowKey"] for e in c.list_entities()])
assert rows == ["a", "b", "c"], rows
ok("Contributor submit_transaction", lambda: c.submit_transaction([("create", ent("d", 1)), ("delete", ent("c", 1))]))
ok("Contributor delete_entity", lambda: c.delete_entity("p", "b"))
assert ok("Contributor list_tables", lambda: list(contrib.list_tables()))

# The Reader reads; every write is 403 and writes nothing.
r = reader_table(TABLE)
assert ok("Reader get_entity", lambda: r.get_entity("p", "a"))["N"] == 3
assert ok("Reader list_entities", lambda: list(r.list_entities()))
assert ok("Reader list_tables", lambda: list(reader.list_tables()))
denied("Reader create_entity", lambda: r.create_entity(ent("r", 1)))
denied("Reader upsert_entity", lambda: r.upsert_entity(ent("a", 9)))
denied("Reader update_entity", lambda: r.update_entity(ent("a", 9), mode=UpdateMode.REPLACE))
denied("Reader delete_entity", lambda: r.delete_entity("p", "a"))
denied("Reader create_table", lambda: reader.create_table(TABLE + "r"))
denied("Reader submit_transaction", lambda: r.submit_transaction([("create", ent("r", 1))]))
assert c.get_entity("p", "a")["N"] == 3, "the Reader's writes changed something"

# A table-scoped role reaches its table only.
ok("scoped create_entity on its table", lambda: scoped_table(SCOPED).create_entity(ent("s", 1)))
ok("scoped get_entity on its table", lambda: scoped_table(SCOPED).get_entity("p", "s"))
denied("scoped get_entity on another table", lambda: scoped_table(TABLE).get_entity("p", "a"))
denied("scoped create_entity on another table", lambda: scoped_table(TABLE).create_entity(ent("s", 1)))
denied("scoped list_tables", lambda: list(scoped.list_tables()))

print("identity.py: all passed")
