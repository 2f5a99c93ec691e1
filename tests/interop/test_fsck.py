"""`lance-gateway admin fsck`: warehouses broken on purpose, one kind of damage at a time.
fsck (with no server running) must find exactly that damage, change nothing without
`--repair`, and `--repair` must leave a clean warehouse where the damage is safe to repair
(data deleted only with `--delete-orphans`); damage that needs a person's decision is
reported and left. A warehouse made by real clients through the gateway is the starting
point; the damage is done to its files (or objects) directly, as a crash, a bad copy or
a careless operator would."""

import glob
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid

import boto3
import lance
import lance_namespace as ln
import pyarrow as pa
import pytest

import seaweedfs
from conftest import gateway_binary, s3_gateway_setup, start_gateway

CAT = ".lance-gateway"


def fsck(warehouse: str, *flags: str, env: dict | None = None, extra: tuple = ()) -> tuple[int, dict]:
    out = subprocess.run([gateway_binary(), "admin", "fsck", "--warehouse", warehouse, "--json", *extra, *flags],
                         capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, json.loads(out.stdout)


def found(report: dict, left_only: bool = False) -> list[tuple[str, str]]:
    return sorted((f["problem"], f["object"]) for f in report["report"]["findings"]
                  if not (left_only and f["repaired"]))


def snapshot(root: str) -> dict:
    out = {}
    for path in glob.glob(os.path.join(root, "**"), recursive=True):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def make_warehouse(root: str) -> str:
    """ml (a declared, b with data), ops (x declared), made through the gateway."""
    wh = os.path.join(root, "wh")
    gw = start_gateway(["--warehouse", wh])
    ns = ln.connect("rest", {"uri": gw.uri})
    for n in (["ml"], ["ops"]):
        ns.create_namespace(ln.CreateNamespaceRequest(id=n))
    ns.declare_table(ln.DeclareTableRequest(id=["ml", "a"]))
    ns.declare_table(ln.DeclareTableRequest(id=["ops", "x"]))
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=["ml", "b"], mode="create")
    assert gw.stop() == 0
    return wh


@pytest.fixture
def wh():
    root = os.path.realpath(tempfile.mkdtemp(prefix="lg-fsck-"))
    yield make_warehouse(root)
    shutil.rmtree(root, ignore_errors=True)


def cat(wh: str, *rel: str) -> str:
    return os.path.join(wh, CAT, *rel)


def read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def write_json(path: str, value: dict):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f)


def check(wh: str, expected: list[tuple[str, str]], repairable: bool = True, flags: tuple = (), env=None):
    """fsck finds exactly `expected` and changes nothing; repair fixes it (or leaves it)."""
    before = snapshot(wh)
    code, report = fsck(wh, env=env)
    assert (code, found(report)) == (1, sorted(expected)), report
    assert snapshot(wh) == before, "fsck without --repair changed the warehouse"
    code, report = fsck(wh, "--repair", *flags, env=env)
    assert found(report) == sorted(expected)
    if repairable:
        assert code == 0 and found(report, left_only=True) == [], report
        code, report = fsck(wh, env=env)
        assert (code, found(report)) == (0, []), report
    else:
        assert code == 1 and found(report, left_only=True) == sorted(expected), report


def serve_and_list(wh: str) -> dict:
    """What a gateway serves from the warehouse afterwards: namespaces and their tables."""
    gw = start_gateway(["--warehouse", wh])
    try:
        ns = ln.connect("rest", {"uri": gw.uri})
        out = {}
        for n in ns.list_namespaces(ln.ListNamespacesRequest(id=[])).namespaces:
            out[n] = sorted(ns.list_tables(ln.ListTablesRequest(id=[n], include_declared=True)).tables)
        return out
    finally:
        assert gw.stop() == 0


def test_a_healthy_warehouse_is_clean(wh):
    code, report = fsck(wh)
    assert (code, found(report)) == (0, [])
    r = report["report"]
    assert (r["namespaces"], r["tables"], r["claims"], r["datasets"]) == (2, 3, 3, 1)
    text = subprocess.run([gateway_binary(), "admin", "fsck", "--warehouse", wh], capture_output=True, text=True)
    assert text.returncode == 0 and text.stdout.strip().endswith("clean")


def test_missing_claim(wh):
    os.remove(cat(wh, "locations", "ml", "a%2Elance.json"))
    check(wh, [("missing-claim", "ml$a")])
    assert read_json(cat(wh, "locations", "ml", "a%2Elance.json"))["uid"] == read_json(cat(wh, "tables", "ml", "a.json"))["uid"]


def test_orphan_claim(wh):
    key = f"{CAT}/locations/ml/ghost%2Elance.json"
    write_json(os.path.join(wh, key), {"format_version": 2, "uid": uuid.uuid4().hex, "table": ["ml", "ghost"]})
    check(wh, [("orphan-claim", key)])
    assert not os.path.exists(os.path.join(wh, key))


def test_orphan_data_is_deleted_only_when_asked(wh):
    """Data no table points to (a deregistered table's is kept on purpose) is a note: it
    does not fail the check, and only --delete-orphans deletes it."""
    stray = os.path.join(wh, "ml", "stray.lance")
    lance.write_dataset(pa.table({"id": [1]}), stray)
    expected = [("orphan-data", f"file://{wh}/ml/stray.lance")]
    before = snapshot(wh)
    code, report = fsck(wh)
    assert (code, found(report)) == (0, expected) and report["report"]["findings"][0]["severity"] == "note"
    code, report = fsck(wh, "--repair")
    assert (code, found(report)) == (0, expected) and snapshot(wh) == before
    assert os.path.isdir(stray), "repair deleted data without --delete-orphans"
    code, report = fsck(wh, "--repair", "--delete-orphans")
    assert code == 0 and found(report) == expected
    assert not os.path.exists(os.path.join(stray, "_versions"))
    assert found(fsck(wh)[1]) == []
    assert serve_and_list(wh) == {"ml": ["a", "b"], "ops": ["x"]}


def test_deregistered_data_is_kept_and_noted(wh):
    gw = start_gateway(["--warehouse", wh])
    try:
        ns = ln.connect("rest", {"uri": gw.uri})
        ns.deregister_table(ln.DeregisterTableRequest(id=["ml", "b"]))
    finally:
        assert gw.stop() == 0
    code, report = fsck(wh, "--repair")
    assert (code, found(report)) == (0, [("orphan-data", f"file://{wh}/ml/b.lance")])
    assert os.path.isdir(os.path.join(wh, "ml", "b.lance", "_versions"))


def test_table_without_namespace(wh):
    os.remove(cat(wh, "ns", "ops.json"))
    check(wh, [("table-without-namespace", "ops$x")])
    assert serve_and_list(wh) == {"ml": ["a", "b"], "ops": ["x"]}


def test_namespace_without_parent(wh):
    write_json(cat(wh, "ns", "ml", "deep", "er.json"), {
        "format_version": 2, "id": ["ml", "deep", "er"], "uid": uuid.uuid4().hex, "created_at_ms": 1,
        "properties": {}, "rev": "r"})
    check(wh, [("namespace-without-parent", "ml$deep$er")])
    assert os.path.exists(cat(wh, "ns", "ml", "deep.json"))


def staged_create(wh: str, name: str, started_ms: int, owner: str) -> str:
    """A create of ml$<name> cut off after staging its record and claiming its folder."""
    record = read_json(cat(wh, "tables", "ml", "a.json"))
    record.update(id=["ml", name], uid=uuid.uuid4().hex, data_key=f"ml/{name}.lance",
                  location=f"file://{wh}/ml/{name}.lance", created_at_ms=started_ms, created_by=owner)
    key = f"{CAT}/pending/ml/{name}.table.json"
    write_json(os.path.join(wh, key), record)
    write_json(cat(wh, "locations", "ml", f"{name}%2Elance.json"),
               {"format_version": 2, "uid": record["uid"], "table": ["ml", name]})
    return key


def test_unfinished_create_of_a_crashed_gateway(wh):
    key = staged_create(wh, "ghost", started_ms=int(time.time() * 1000) - 3600_000, owner="gone:1")
    # its claim belongs to the operation: not an orphan
    check(wh, [("unfinished-operation", key)])
    assert not os.path.exists(cat(wh, "locations", "ml", "ghost%2Elance.json"))
    assert serve_and_list(wh) == {"ml": ["a", "b"], "ops": ["x"]}


def test_a_young_operation_is_left_unless_its_own_node_repairs(wh):
    key = staged_create(wh, "young", started_ms=int(time.time() * 1000), owner="gw-7:2333")
    code, report = fsck(wh, "--repair")
    assert (code, found(report, left_only=True)) == (1, [("unfinished-operation", key)])
    assert "within the grace period" in report["report"]["findings"][0]["detail"]
    # The same rule as recovery: the node that wrote it, restarted, settles it at once...
    check(wh, [("unfinished-operation", key)], env={"LANCE_GATEWAY_NODE_ID": "gw-7:2333"})
    # ...but the admin never takes a gateway's default node id (<host>:<port>) for its own:
    # run beside a live gateway, it would settle that gateway's live operations.
    import socket
    key = staged_create(wh, "live", started_ms=int(time.time() * 1000), owner=f"{socket.gethostname()}:2333")
    code, report = fsck(wh, "--repair", env={"LANCE_GATEWAY_LISTEN": "127.0.0.1:2333"})
    assert (code, found(report, left_only=True)) == (1, [("unfinished-operation", key)])


def test_a_copied_warehouse_points_at_its_own_folders(wh):
    """Records name their data folder's URI; a warehouse copied elsewhere still names the
    original's. fsck finds each, repair points them at the copy, whose data then opens."""
    copy = os.path.join(os.path.realpath(tempfile.mkdtemp(prefix="lg-fsck-copy-")), "wh")
    shutil.copytree(wh, copy)
    shutil.rmtree(wh)
    expected = [("location-mismatch", t) for t in ("ml$a", "ml$b", "ops$x")]
    # The same folder may be mounted at two paths (a host's and a container's): plain
    # --repair only reports; --relocate rewrites.
    code, report = fsck(copy, "--repair")
    assert (code, found(report, left_only=True)) == (1, expected)
    check(copy, expected, flags=("--relocate",))
    gw = start_gateway(["--warehouse", copy])
    try:
        ns = ln.connect("rest", {"uri": gw.uri})
        assert lance.dataset(namespace_client=ns, table_id=["ml", "b"]).count_rows() == 3
    finally:
        assert gw.stop() == 0


def test_void_mark(wh):
    path = cat(wh, "tables", "ml", "a.json")
    record = read_json(path)
    record["mark"] = {"op_id": "op-1", "intent": f"{CAT}/drops/op-1.json"}
    write_json(path, record)
    # Every reader treats it as no mark: a note, not a failure; repair clears it.
    code, report = fsck(wh)
    assert (code, found(report)) == (0, [("void-mark", "ml$a")])
    assert report["report"]["findings"][0]["severity"] == "note"
    code, report = fsck(wh, "--repair")
    assert code == 0 and report["report"]["findings"][0]["repaired"]
    assert "mark" not in read_json(path)
    assert fsck(wh)[1]["report"]["findings"] == []


def test_unreadable_dataset_is_reported_and_left(wh):
    for manifest in glob.glob(os.path.join(wh, "ml", "b.lance", "_versions", "*")):
        with open(manifest, "wb") as f:
            f.write(b"not a manifest")
    check(wh, [("unreadable-dataset", "ml$b")], repairable=False)


def test_two_tables_on_one_folder_are_reported_and_left(wh):
    record = read_json(cat(wh, "tables", "ml", "a.json"))
    record["id"] = ["ml", "a2"]
    write_json(cat(wh, "tables", "ml", "a2.json"), record)
    check(wh, [("shared-folder", "ml$a2")], repairable=False)


def test_a_lost_claim_over_two_tables_goes_back_to_the_first_walked(wh):
    """Two tables (two uids) on one folder whose claim is gone: repair gives the claim back
    to the first table walked, as a check of one table after another would, and reports the
    other as holding a folder claimed by it; the shared folder is left for a person."""
    record = read_json(cat(wh, "tables", "ml", "a.json"))
    record["id"], record["uid"] = ["ml", "a2"], "f" * 32
    write_json(cat(wh, "tables", "ml", "a2.json"), record)
    os.remove(cat(wh, "locations", "ml", "a%2Elance.json"))
    before = snapshot(wh)
    code, report = fsck(wh)
    assert (code, found(report)) == (1, [("missing-claim", "ml$a"), ("missing-claim", "ml$a2"),
                                         ("shared-folder", "ml$a2")]), report
    assert snapshot(wh) == before, "fsck without --repair changed the warehouse"
    code, report = fsck(wh, "--repair")
    assert code == 1 and found(report) == [("claim-of-another", "ml$a2"), ("missing-claim", "ml$a"),
                                           ("shared-folder", "ml$a2")], report
    assert found(report, left_only=True) == [("claim-of-another", "ml$a2"), ("shared-folder", "ml$a2")]
    assert read_json(cat(wh, "locations", "ml", "a%2Elance.json"))["table"] == ["ml", "a"]
    code, report = fsck(wh)
    assert (code, found(report)) == (1, [("claim-of-another", "ml$a2"), ("shared-folder", "ml$a2")]), report


def test_everything_at_once_then_one_repair(wh):
    os.remove(cat(wh, "locations", "ml", "a%2Elance.json"))
    os.remove(cat(wh, "ns", "ops.json"))
    key = staged_create(wh, "ghost", started_ms=1000, owner="gone:1")
    orphan = f"{CAT}/locations/ml/old%2Elance.json"
    write_json(os.path.join(wh, orphan), {"format_version": 2, "uid": "0" * 32, "table": ["ml", "old"]})
    check(wh, [("missing-claim", "ml$a"), ("table-without-namespace", "ops$x"),
               ("unfinished-operation", key), ("orphan-claim", orphan)])
    assert serve_and_list(wh) == {"ml": ["a", "b"], "ops": ["x"]}


def test_admin_lists_and_describes_without_a_server(wh):
    def admin(*args):
        out = subprocess.run([gateway_binary(), "admin", *args, "--warehouse", wh, "--json"],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)
    assert admin("namespaces") == {"namespaces": ["ml", "ops"]}
    assert admin("tables", "ml") == {"tables": ["a", "b"]}
    b = admin("describe", "ml$b")
    assert (b["has_data"], b["version"], b["location"]) == (True, 1, f"file://{os.path.realpath(wh)}/ml/b.lance")
    assert admin("describe", "ml$a")["has_data"] is False
    missing = subprocess.run([gateway_binary(), "admin", "describe", "ml$zz", "--warehouse", wh],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "zz" in missing.stderr


def test_fsck_that_cannot_run_exits_2():
    nowhere = os.path.join(tempfile.mkdtemp(), "nothing")
    out = subprocess.run([gateway_binary(), "admin", "fsck", "--warehouse", nowhere], capture_output=True, text=True)
    assert out.returncode == 2 and "no such folder" in out.stderr
    assert not os.path.exists(nowhere)
    empty = tempfile.mkdtemp()
    out = subprocess.run([gateway_binary(), "admin", "fsck", "--warehouse", empty], capture_output=True, text=True)
    assert out.returncode == 2 and "no lance-gateway catalog" in out.stderr
    assert os.listdir(empty) == []


def test_on_seaweedfs(seaweed):
    """The same code over S3: a missing claim and a dataset no record points to.

    The gateway is stopped right after a declare's answer, with the work left after answers
    (removing the declare's staged entry) delayed by fault injection: a graceful stop waits
    for it, so fsck finds nothing before the damage is made by hand."""
    bucket = f"lg-fsck-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3", endpoint_url=seaweed.endpoint, region_name="us-east-1",
                      aws_access_key_id=seaweedfs.ADMIN_KEY, aws_secret_access_key=seaweedfs.ADMIN_SECRET)
    s3.create_bucket(Bucket=bucket)
    warehouse = f"s3://{bucket}/wh"
    args, env = s3_gateway_setup(seaweed, warehouse)
    gw = start_gateway(args, {**env, "LANCE_GATEWAY_FAULT_AFTER_ANSWER_DELAY_MS": "1500"})
    ns = ln.connect("rest", {"uri": gw.uri})
    ns.create_namespace(ln.CreateNamespaceRequest(id=["ml"]))
    lance.write_dataset(pa.table({"id": [1, 2]}), namespace_client=ns, table_id=["ml", "t"], mode="create")
    ns.declare_table(ln.DeclareTableRequest(id=["ml", "u"]))
    assert gw.stop() == 0
    admin_env = {**env, "LANCE_GATEWAY_S3_ENDPOINT": seaweed.endpoint, "LANCE_GATEWAY_S3_REGION": "us-east-1"}
    code, report = fsck(warehouse, env=admin_env)
    assert code == 0, found(report)
    s3.delete_object(Bucket=bucket, Key=f"wh/{CAT}/locations/ml/u%2Elance.json")
    opts = {"aws_endpoint": seaweed.endpoint, "aws_region": "us-east-1", "allow_http": "true",
            "aws_access_key_id": seaweedfs.ADMIN_KEY, "aws_secret_access_key": seaweedfs.ADMIN_SECRET}
    lance.write_dataset(pa.table({"id": [1]}), f"s3://{bucket}/wh/ml/stray.lance", storage_options=opts)
    expected = [("missing-claim", "ml$u"), ("orphan-data", f"s3://{bucket}/wh/ml/stray.lance")]
    code, report = fsck(warehouse, env=admin_env)
    assert (code, found(report)) == (1, expected)
    code, report = fsck(warehouse, "--repair", "--delete-orphans", env=admin_env)
    assert code == 0 and found(report) == expected
    assert fsck(warehouse, env=admin_env) == (0, fsck(warehouse, env=admin_env)[1])
    assert found(fsck(warehouse, env=admin_env)[1]) == []
    assert s3.list_objects_v2(Bucket=bucket, Prefix="wh/ml/stray.lance/").get("KeyCount", 0) == 0
