#!/usr/bin/env bash
# Compatibility suite: the Azure CLI (`az storage table|entity`) against a running Cerulean server.
#
#   apt-get install -y azure-cli
#   CERULEAN_CONNECTION_STRING='DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=...;TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;' \
#       bash compat/cli/test_cli.sh
#
# JSON output is checked with Debian's /usr/bin/python3 (present wherever the azure-cli package is).
# The e2e test TestCompatCLI (e2e/compat_cli_test.go) starts a server and runs this script.
set -euo pipefail

: "${CERULEAN_CONNECTION_STRING:?CERULEAN_CONNECTION_STRING must be set}"
PY=${PYTHON:-/usr/bin/python3}

AZURE_CONFIG_DIR=$(mktemp -d)
export AZURE_CONFIG_DIR
export AZURE_CORE_COLLECT_TELEMETRY=no AZURE_CORE_NO_COLOR=1 AZURE_CORE_ONLY_SHOW_ERRORS=1
unset AZURE_STORAGE_CONNECTION_STRING AZURE_STORAGE_ACCOUNT AZURE_STORAGE_KEY AZURE_STORAGE_SAS_TOKEN \
  AZURE_STORAGE_AUTH_MODE AZURE_STORAGE_SERVICE_ENDPOINT
trap 'rm -rf "$AZURE_CONFIG_DIR"' EXIT

SUFFIX=$(printf '%s' "$$$RANDOM" | tr -cd '0-9' | tail -c 8)
T1="cli${SUFFIX}a"
T2="cli${SUFFIX}b"
STEP=""

step() { STEP="$*"; echo "--- $STEP"; }
fail() { echo "FAIL [$STEP]: $*" >&2; exit 1; }

# az_ runs an az storage command against the server and prints its JSON output.
az_() { az "$@" --connection-string "$CERULEAN_CONNECTION_STRING" --only-show-errors -o json; }

# check JSON EXPR: evaluates the Python expression EXPR with `d` bound to the parsed JSON.
check() {
  local json=$1 expr=$2
  if ! "$PY" -c '
import json, sys
d = json.loads(sys.argv[1]) if sys.argv[1].strip() else None
ok = eval(sys.argv[2])
if not ok:
    sys.stderr.write("assertion failed: %s\ngot: %s\n" % (sys.argv[2], json.dumps(d, indent=1, sort_keys=True)))
    sys.exit(1)
' "$json" "$expr"; then
    fail "check failed"
  fi
}

# jget JSON EXPR: prints the Python expression EXPR evaluated with `d` bound to the parsed JSON.
jget() { "$PY" -c 'import json, sys; d = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"; }

# expect_fail PATTERN CMD...: the command must fail and its stderr must match PATTERN.
expect_fail() {
  local pattern=$1; shift
  local err
  if err=$("$@" 2>&1 >/dev/null); then
    fail "expected failure matching '$pattern', command succeeded: $*"
  fi
  if ! grep -Eq "$pattern" <<<"$err"; then
    fail "expected error matching '$pattern', got: $err"
  fi
}

cleanup_tables() {
  for t in "$T1" "$T2"; do
    az storage table delete -n "$t" --connection-string "$CERULEAN_CONNECTION_STRING" --only-show-errors -o none \
      >/dev/null 2>&1 || true
  done
  rm -rf "$AZURE_CONFIG_DIR"
}
trap cleanup_tables EXIT

echo "az: $(az version --query '"azure-cli"' -o tsv 2>/dev/null || echo unknown)"

# ---------------------------------------------------------------- tables
step "table create"
out=$(az_ storage table create -n "$T1"); check "$out" 'd["created"] is True'
out=$(az_ storage table create -n "$T2"); check "$out" 'd["created"] is True'
step "table create existing (no --fail-on-exist)"
# azure-cli 2.45 calls create_table_if_not_exists and always reports {"created": true} (CLI quirk);
# what matters is that the 409 TableAlreadyExists is not surfaced as an error.
out=$(az_ storage table create -n "$T1"); check "$out" '"created" in d'
step "table create existing --fail-on-exist"
expect_fail 'TableAlreadyExists|already exists' az_ storage table create -n "$T1" --fail-on-exist

step "table exists"
out=$(az_ storage table exists -n "$T1"); check "$out" 'd["exists"] is True'
out=$(az_ storage table exists -n "nosuch${SUFFIX}"); check "$out" 'd["exists"] is False'

step "table list"
out=$(az_ storage table list)
check "$out" "{'$T1', '$T2'} <= {t['name'] for t in d}"
step "table list --num-results 1 (paged)"
out=$(az_ storage table list --num-results 1 --show-next-marker)
check "$out" 'len([t for t in d if "name" in t]) == 1'
check "$out" 'any("nextMarker" in t for t in d)'
marker=$(jget "$out" '[t["nextMarker"] for t in d if "nextMarker" in t][0]')
out=$(az_ storage table list --num-results 1 --marker "$marker")
check "$out" 'len([t for t in d if "name" in t]) == 1'

step "table stats (secondary endpoint derived from the connection string)"
# azure-data-tables signs the primary URL and sends /<account>-secondary/<account>/?comp=stats.
out=$(az_ storage table stats)
check "$out" 'd["geoReplication"]["status"] == "live"'
check "$out" 'bool(d["geoReplication"]["lastSyncTime"])'

# ---------------------------------------------------------------- entities
step "entity insert (typed values)"
out=$(az_ storage entity insert -t "$T1" --entity PartitionKey=p RowKey=r Count=5 Count@odata.type=Edm.Int64 \
  Big=9007199254740993 Big@odata.type=Edm.Int64 Small=7 Small@odata.type=Edm.Int32 \
  Ratio=2.5 Ratio@odata.type=Edm.Double Whole=3 Whole@odata.type=Edm.Double \
  Flag=true Flag@odata.type=Edm.Boolean \
  When=2024-05-01T10:20:30.1234567Z When@odata.type=Edm.DateTime \
  Id=c9da6455-213d-42c9-9a79-3e9149a57833 Id@odata.type=Edm.Guid \
  Blob=AAH+/2hlbGxv Blob@odata.type=Edm.Binary \
  Name="it's me" Empty=)
check "$out" 'd["etag"].startswith("W/\"datetime'"'"'")'

step "entity insert duplicate"
expect_fail 'EntityAlreadyExists|already exists' az_ storage entity insert -t "$T1" --entity PartitionKey=p RowKey=r

step "entity show (types)"
out=$(az_ storage entity show -t "$T1" --partition-key p --row-key r)
check "$out" 'd["Count"] == {"edm_type": "Edm.Int64", "value": 5}'
check "$out" 'd["Big"] == {"edm_type": "Edm.Int64", "value": 9007199254740993}'
check "$out" 'd["Small"] == 7 and type(d["Small"]) is int'
check "$out" 'd["Ratio"] == 2.5'
check "$out" 'd["Whole"] == 3.0 and type(d["Whole"]) is float'
check "$out" 'd["Flag"] is True'
check "$out" 'd["When"].startswith("2024-05-01T10:20:30.123456")'
check "$out" 'd["Id"] == "c9da6455-213d-42c9-9a79-3e9149a57833"'
# CLI quirk: a value typed Edm.Binary is taken as text, its UTF-8 bytes are stored (the SDK base64-encodes
# them on the wire), and bytes are printed base64-encoded — so the output is base64 of the input text.
check "$out" 'd["Blob"] == __import__("base64").b64encode(b"AAH+/2hlbGxv").decode()'
check "$out" 'd["Name"] == "it'"'"'s me" and d["Empty"] == ""'
check "$out" 'd["PartitionKey"] == "p" and d["RowKey"] == "r" and "Timestamp" in d'
etag=$(jget "$out" 'd["etag"]')

step "entity show --select"
out=$(az_ storage entity show -t "$T1" --partition-key p --row-key r --select Name Count)
check "$out" 'd["Name"] == "it'"'"'s me" and d["Count"]["value"] == 5'
check "$out" '"Ratio" not in d and "Flag" not in d'

step "entity show missing"
expect_fail 'ResourceNotFound|not exist|Not ?Found' az_ storage entity show -t "$T1" --partition-key p --row-key nope

step "entity merge with current etag"
out=$(az_ storage entity merge -t "$T1" --entity PartitionKey=p RowKey=r Extra=x --if-match "$etag")
etag2=$(jget "$out" 'd["etag"]')
[[ "$etag2" != "$etag" ]] || fail "etag did not change on merge"
out=$(az_ storage entity show -t "$T1" --partition-key p --row-key r)
check "$out" 'd["Extra"] == "x" and d["Count"]["value"] == 5'

step "entity merge with stale etag (If-Match conflict)"
expect_fail 'UpdateConditionNotSatisfied|ConditionNotMet|condition specified' \
  az_ storage entity merge -t "$T1" --entity PartitionKey=p RowKey=r Extra=y --if-match "$etag"

step "entity replace with stale etag (If-Match conflict)"
expect_fail 'UpdateConditionNotSatisfied|ConditionNotMet|condition specified' \
  az_ storage entity replace -t "$T1" --entity PartitionKey=p RowKey=r Only=1 --if-match "$etag"

step "entity replace with current etag"
out=$(az_ storage entity replace -t "$T1" --entity PartitionKey=p RowKey=r Only=1 Only@odata.type=Edm.Int64 \
  --if-match "$etag2")
out=$(az_ storage entity show -t "$T1" --partition-key p --row-key r)
check "$out" 'd["Only"]["value"] == 1 and "Count" not in d and "Extra" not in d'

step "entity replace unconditional (If-Match *)"
az_ storage entity replace -t "$T1" --entity PartitionKey=p RowKey=r Again=a >/dev/null
out=$(az_ storage entity show -t "$T1" --partition-key p --row-key r)
check "$out" 'd["Again"] == "a" and "Only" not in d'

step "entity merge unconditional"
az_ storage entity merge -t "$T1" --entity PartitionKey=p RowKey=r More=m >/dev/null
out=$(az_ storage entity show -t "$T1" --partition-key p --row-key r)
check "$out" 'd["Again"] == "a" and d["More"] == "m"'

step "entity merge missing entity"
expect_fail 'ResourceNotFound|not exist|Not ?Found' az_ storage entity merge -t "$T1" --entity PartitionKey=p RowKey=missing X=1

step "entity insert --if-exists merge / replace (upserts)"
az_ storage entity insert -t "$T1" --if-exists merge --entity PartitionKey=p RowKey=r Up=1 >/dev/null
out=$(az_ storage entity show -t "$T1" --partition-key p --row-key r)
check "$out" 'd["Up"] == 1 and d["Again"] == "a"'
az_ storage entity insert -t "$T1" --if-exists replace --entity PartitionKey=p RowKey=r Up=2 >/dev/null
out=$(az_ storage entity show -t "$T1" --partition-key p --row-key r)
check "$out" 'd["Up"] == 2 and "Again" not in d'
az_ storage entity insert -t "$T1" --if-exists replace --entity PartitionKey=p RowKey=new Up=3 >/dev/null
out=$(az_ storage entity show -t "$T1" --partition-key p --row-key new)
check "$out" 'd["Up"] == 3'

step "entity delete with stale etag"
expect_fail 'UpdateConditionNotSatisfied|ConditionNotMet|condition specified' \
  az_ storage entity delete -t "$T1" --partition-key p --row-key r --if-match "$etag"
step "entity delete"
out=$(az_ storage entity delete -t "$T1" --partition-key p --row-key r)
out=$(az_ storage entity delete -t "$T1" --partition-key p --row-key new)
expect_fail 'ResourceNotFound|not exist|Not ?Found' az_ storage entity show -t "$T1" --partition-key p --row-key r

# ---------------------------------------------------------------- queries and paging
N=8
step "insert $N entities for queries"
for i in $(seq 1 "$N"); do
  pk=q$(( i <= 5 ? 1 : 2 ))
  az_ storage entity insert -t "$T2" --entity PartitionKey="$pk" RowKey="r$i" N="$i" \
    L="$(( i * 10000000000 ))" L@odata.type=Edm.Int64 Tag="t'$(( i % 2 ))" >/dev/null
done

step "entity query with typed filter"
out=$(az_ storage entity query -t "$T2" --filter "L ge 30000000000L and N le 6")
check "$out" '[e["RowKey"] for e in d["items"]] == ["r3", "r4", "r5", "r6"]'
check "$out" 'all(e["L"]["edm_type"] == "Edm.Int64" for e in d["items"])'
out=$(az_ storage entity query -t "$T2" --filter "Tag eq 't''1' and PartitionKey eq 'q1'")
check "$out" '[e["RowKey"] for e in d["items"]] == ["r1", "r3", "r5"]'

step "entity query --select"
out=$(az_ storage entity query -t "$T2" --filter "PartitionKey eq 'q2'" --select N)
check "$out" '[e["N"] for e in d["items"]] == [6, 7, 8]'
check "$out" 'all("Tag" not in e and "L" not in e for e in d["items"])'

step "entity query paging --num-results 3 with --marker"
seen=()
marker=""
pages=0
while :; do
  if [[ -z "$marker" ]]; then
    out=$(az_ storage entity query -t "$T2" --num-results 3)
  else
    # shellcheck disable=SC2086
    out=$(az_ storage entity query -t "$T2" --num-results 3 --marker $marker)
  fi
  pages=$((pages + 1))
  check "$out" 'len(d["items"]) <= 3'
  while read -r rk; do seen+=("$rk"); done < <(jget "$out" '"\n".join(e["PartitionKey"] + "/" + e["RowKey"] for e in d["items"])')
  marker=$(jget "$out" '" ".join("%s=%s" % kv for kv in sorted((d.get("nextMarker") or {}).items()))')
  [[ -n "$marker" ]] || break
  [[ $pages -lt 10 ]] || fail "too many pages"
done
got="${seen[*]}"
want="q1/r1 q1/r2 q1/r3 q1/r4 q1/r5 q2/r6 q2/r7 q2/r8"
[[ "$got" == "$want" ]] || fail "paging: got '$got', want '$want'"
[[ $pages -ge 3 ]] || fail "paging: expected at least 3 pages, got $pages"

# ---------------------------------------------------------------- table delete
step "table delete"
out=$(az_ storage table delete -n "$T1"); check "$out" 'd["deleted"] is True'
out=$(az_ storage table exists -n "$T1"); check "$out" 'd["exists"] is False'
out=$(az_ storage table delete -n "$T2"); check "$out" 'd["deleted"] is True'
out=$(az_ storage table list); check "$out" "not ({'$T1', '$T2'} & {t['name'] for t in d})"

echo "PASS: all Azure CLI checks passed"
