"""Tables that keep themselves healthy: the gateway compacts small fragments, brings indices
up to date and removes old versions by itself, under each table's policy. Driven with
pylance (and the gateway's own data routes) through the namespace, on the local warehouse
and on SeaweedFS: every row and every value survives, writers running meanwhile lose
nothing, two gateways compact each table once per state, and a gateway killed in the middle
of a compaction leaves a readable table that the next gateway finishes."""

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import uuid

import boto3
import lance
import lance_namespace as ln
import numpy as np
import pyarrow as pa
import pytest
from lance.namespace import RestNamespace

import seaweedfs
from conftest import client_storage_options, gateway_binary, s3_gateway_setup, start_gateway
from security import call, enc

# Looked at soon after a commit, every table swept every two seconds, leases lapsing fast.
QUICK = ["--maintenance-delay-secs", "1", "--maintenance-sweep-secs", "2", "--recovery-grace-secs", "4"]


class Warehouse:
    """One warehouse (a local folder, or a bucket of SeaweedFS in endpoint mode) and the
    gateways started over it."""

    def __init__(self, kind: str, sw=None):
        self.kind = kind
        self.gateways = []
        if kind == "local":
            self.root = tempfile.mkdtemp(prefix="lg-maint-")
            self.args, self.env, self.base, self.storage = ["--warehouse", self.root], {}, [], {}
        else:
            self.args, self.env = s3_gateway_setup(sw, "s3://")
            self.base = [f"lg-maint-{uuid.uuid4().hex[:8]}"]
            self.storage = client_storage_options(sw)
            self.sw = sw

    def start(self, *extra: str, env: dict | None = None, node: str | None = None):
        args = [*self.args, *QUICK, *extra]
        if node:
            args += ["--node-id", node]
        gw = start_gateway(args, {**self.env, **(env or {})})
        self.gateways.append(gw)
        if self.base:
            ln.connect("rest", {"uri": gw.uri}).create_namespace(
                ln.CreateNamespaceRequest(id=self.base, mode="exist_ok"))
        return gw

    def admin(self, *command: str) -> tuple[int, str]:
        out = subprocess.run([gateway_binary(), "admin", *command, *self.args],
                             capture_output=True, text=True, env={**os.environ, **self.env}, timeout=300)
        assert out.returncode in (0, 1), out.stderr
        return out.returncode, out.stdout

    def stop_all(self):
        for gw in self.gateways:
            if gw.proc.poll() is None:
                assert gw.stop() == 0, open(gw.log).read()[-3000:]
        self.gateways = []


@pytest.fixture(scope="module", params=["local", "seaweedfs"])
def wh(request):
    sw = request.getfixturevalue("seaweed") if request.param == "seaweedfs" else None
    w = Warehouse(request.param, sw)
    yield w
    w.stop_all()
    if request.param == "local":
        shutil.rmtree(w.root, ignore_errors=True)


def ns_client(gw) -> RestNamespace:
    return RestNamespace(uri=gw.uri)


def tid(wh: Warehouse, name: str) -> list[str]:
    return [*wh.base, f"{name}_{uuid.uuid4().hex[:8]}"]


def rows(start: int, n: int, dim: int = 0) -> pa.Table:
    cols = {
        "id": pa.array(range(start, start + n), pa.int64()),
        "name": pa.array([f"row-{i}" for i in range(start, start + n)]),
        "score": pa.array([i * 0.5 for i in range(start, start + n)], pa.float64()),
    }
    if dim:
        rng = np.random.default_rng(start)
        flat = rng.standard_normal((n, dim)).astype(np.float32).reshape(-1)
        cols["vector"] = pa.FixedSizeListArray.from_arrays(pa.array(flat), dim)
    return pa.table(cols)


def append(gw, table_id, data: pa.Table, mode="append"):
    lance.write_dataset(data, namespace_client=ns_client(gw), table_id=table_id, mode=mode)


def open_table(gw, table_id, **kw) -> lance.LanceDataset:
    return lance.dataset(namespace_client=ns_client(gw), table_id=table_id, **kw)


def describe(gw, table_id) -> dict:
    status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(table_id)}/describe?load_detailed_metadata=true",
                           {"id": table_id})
    assert status == 200, body
    return body


def transaction(gw, tx_id: str) -> dict:
    status, body, _ = call(gw.uri, "POST", f"/v1/transaction/{urllib.parse.quote(tx_id, safe='')}/describe", {})
    assert status == 200, body
    return body


def wait_for(what, check, timeout=120, every=0.5):
    deadline = time.time() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


def last_run(gw, table_id, task: str):
    return describe(gw, table_id).get("maintenance", {}).get(task, {}).get("last_run")


def compactions(ds: lance.LanceDataset) -> list[str]:
    """The gateway transactions of the table's compaction commits, oldest first."""
    out = []
    for t in reversed(ds.get_transactions(len(ds.versions()))):
        if t is not None and type(t.operation).__name__ == "Rewrite":
            out.append((t.transaction_properties or {}).get("lance_gateway.transaction_id", "?"))
    return out


def assert_rows(ds: lance.LanceDataset, n: int, dim: int = 0):
    got = ds.to_table().sort_by("id")
    expected = rows(0, n)
    assert got.num_rows == n
    assert got.column("id").to_pylist() == expected.column("id").to_pylist()
    assert got.column("name").to_pylist() == expected.column("name").to_pylist()
    assert got.column("score").to_pylist() == expected.column("score").to_pylist()


# ------------------------------------------------------------------------------ compaction


@pytest.mark.parametrize("managed", [False, True], ids=["unmanaged", "managed"])
def test_three_hundred_small_appends_are_compacted_with_every_row_intact(wh, managed):
    gw = wh.start("--managed-versioning", str(managed).lower(),
                  "--maintenance-policy", "compaction.min_fragments=4")
    try:
        table_id = tid(wh, "small")
        for i in range(300):
            append(gw, table_id, rows(i * 5, 5), mode="create" if i == 0 else "append")
        ds = open_table(gw, table_id)
        # The sweep (or, managed, the commits themselves) brings maintenance round; it may
        # have compacted while the appends went on, and compacts what is left.
        run = wait_for("a compaction", lambda: last_run(gw, table_id, "compaction"))
        assert run["outcome"] == "succeeded", run
        # Fewer small fragments than the policy's threshold are left as they are.
        wait_for("few fragments", lambda: len(open_table(gw, table_id).get_fragments()) <= 4, timeout=60)
        ds = open_table(gw, table_id)
        assert_rows(ds, 1500)
        tx = transaction(gw, run["transaction_id"])
        assert tx["status"] == "Succeeded"
        props = tx["properties"]
        assert props["lance_gateway.operation"] == "compact"
        assert int(props["lance_gateway.fragments_before"]) > int(props["lance_gateway.fragments_after"])
        assert props["lance_gateway.table"] == "$".join(table_id)
        # Detailed describe shows when it ran.
        m = describe(gw, table_id)["maintenance"]
        assert m["enabled"] and m["compaction"]["last_run_at"].endswith("Z")
    finally:
        wh.stop_all()


def _appender(uri, table_id, worker, batches, per):
    ns = RestNamespace(uri=uri)
    for b in range(batches):
        start = 100_000 * (worker + 1) + b * per
        data = pa.table({
            "id": pa.array(range(start, start + per), pa.int64()),
            "name": pa.array([f"row-{i}" for i in range(start, start + per)]),
            "score": pa.array([i * 0.5 for i in range(start, start + per)], pa.float64()),
        })
        for attempt in range(20):
            try:
                lance.write_dataset(data, namespace_client=ns, table_id=table_id, mode="append")
                break
            except OSError as e:  # a commit conflict that outlived Lance's own retries
                if "onflict" not in str(e) or attempt == 19:
                    raise
                time.sleep(0.1)


def test_four_processes_append_while_maintenance_runs_and_no_row_is_lost(wh):
    gw = wh.start("--maintenance-policy", "compaction.min_fragments=4")
    try:
        table_id = tid(wh, "busy")
        append(gw, table_id, rows(0, 10), mode="create")
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=_appender, args=(gw.uri, table_id, w, 30, 7)) for w in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=600)
            assert p.exitcode == 0
        ds = open_table(gw, table_id)
        ids = ds.to_table(columns=["id"]).column("id").to_pylist()
        expected = set(range(10))
        for w in range(4):
            for b in range(30):
                s = 100_000 * (w + 1) + b * 7
                expected |= set(range(s, s + 7))
        assert len(ids) == len(expected) and set(ids) == expected
        # Maintenance ran while they appended, and ran again after.
        wait_for("a compaction after the appends", lambda: len(open_table(gw, table_id).get_fragments()) <= 3)
        ds = open_table(gw, table_id)
        assert sorted(ds.to_table(columns=["id"]).column("id").to_pylist()) == sorted(expected)
        assert compactions(ds), "no compaction committed"
    finally:
        wh.stop_all()


# ------------------------------------------------------------------------------ indices


def test_rows_appended_after_an_ivf_pq_build_become_indexed(wh):
    gw = wh.start()
    try:
        dim = 16
        table_id = tid(wh, "vec")
        append(gw, table_id, rows(0, 2000, dim), mode="create")
        status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(table_id)}/create_index",
                               {"id": table_id, "column": "vector", "index_type": "IVF_PQ",
                                "num_partitions": 4, "num_sub_vectors": 4, "distance_type": "l2"})
        assert status == 200, body
        append(gw, table_id, rows(2000, 600, dim))

        def unindexed():
            status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(table_id)}/index/list", {"id": table_id})
            assert status == 200, body
            return body["indexes"][0]["num_unindexed_rows"]

        # (Unless a sweep came between the append and this look.)
        assert unindexed() == 600 or last_run(gw, table_id, "index")
        wait_for("the index to take the new rows", lambda: unindexed() == 0)
        # The run is recorded right after its commit: a look in between finds the new index
        # and no record yet.
        run = wait_for("the index run to be recorded", lambda: last_run(gw, table_id, "index"))
        assert run["outcome"] == "succeeded", run
        ds = open_table(gw, table_id)
        queries = rows(5000, 5, dim).column("vector").to_pylist()
        for q in queries:
            q = np.array(q, dtype=np.float32)
            indexed = ds.to_table(nearest={"column": "vector", "q": q, "k": 10, "nprobes": 4, "refine_factor": 50})
            exact = ds.to_table(nearest={"column": "vector", "q": q, "k": 10, "use_index": False})
            assert indexed.column("id").to_pylist() == exact.column("id").to_pylist()
            np.testing.assert_allclose(indexed.column("_distance").to_numpy(),
                                       exact.column("_distance").to_numpy(), rtol=1e-4)
        # The new rows are searched through the index: a search limited to indexed rows finds them.
        plan = ds.scanner(nearest={"column": "vector", "q": np.array(queries[0], dtype=np.float32), "k": 10},
                          fast_search=True).to_table()
        assert plan.num_rows == 10
    finally:
        wh.stop_all()


# ------------------------------------------------------------------------------ cleanup


def test_old_versions_go_with_their_files_tagged_and_recent_ones_stay(wh):
    gw = wh.start("--maintenance", "false")  # admin maintain runs it, once
    try:
        table_id = tid(wh, "hist")
        # The policy on the table itself: versions older than 4 s go, whatever their number.
        ns = ns_client(gw)
        ns.declare_table(ln.DeclareTableRequest(id=table_id, properties={
            "maintenance.cleanup.retention": "4s", "maintenance.cleanup.keep_versions": "1",
            "maintenance.compaction.enabled": "false"}))
        append(gw, table_id, rows(0, 10))                          # v1 (the table was declared)
        append(gw, table_id, rows(10, 10))                         # v2
        ds = open_table(gw, table_id)
        ds.tags.create("keep", 2)
        append(gw, table_id, rows(0, 20), mode="overwrite")        # v3: v1/v2 data unreferenced
        old_files = {f.path for v in (1,) for f in open_table(gw, table_id, version=v).get_fragments()[0].data_files()}
        time.sleep(5)
        append(gw, table_id, rows(20, 5))                          # v4, inside retention
        append(gw, table_id, rows(25, 5))                          # v5, inside retention
        code, out = wh.admin("maintain", "$".join(table_id), "--task", "cleanup", "--json")
        assert code == 0, out
        runs = json.loads(out)["tables"][0]["runs"]
        assert runs and runs[0]["outcome"] == "succeeded", runs
        assert int(runs[0]["figures"]["versions_removed"]) == 2, runs
        assert int(runs[0]["figures"]["bytes_reclaimed"]) > 0
        ds = open_table(gw, table_id)
        versions = [v["version"] for v in ds.versions()]
        assert 1 not in versions and 3 not in versions, versions
        assert {2, 4, 5} <= set(versions), versions
        assert open_table(gw, table_id, version=2).count_rows() == 20          # tagged: kept
        assert open_table(gw, table_id, version=4).count_rows() == 25          # inside retention
        assert open_table(gw, table_id, version="keep").count_rows() == 20
        # The data only version 1 referenced is gone (version 2, tagged, keeps its own).
        v1_only = old_files - {f.path for f in open_table(gw, table_id, version=2).get_fragments()[0].data_files()}
        location = describe(gw, table_id)["location"]
        for name in v1_only:
            assert not exists(wh, location, f"data/{os.path.basename(name)}"), name
    finally:
        wh.stop_all()


def test_receipts_go_with_the_versions_cleanup_removes(wh):
    """Under managed versioning every commit leaves a receipt in the catalog; a cleanup
    that removes versions removes their receipts, so a table appended to for ever does not
    gather catalog objects for ever."""
    gw = wh.start("--maintenance", "false", "--managed-versioning", "true")
    try:
        table_id = tid(wh, "receipts")
        ns_client(gw).declare_table(ln.DeclareTableRequest(id=table_id, properties={
            "maintenance.cleanup.retention": "1s", "maintenance.cleanup.keep_versions": "2",
            "maintenance.compaction.enabled": "false"}))
        for i in range(6):
            append(gw, table_id, rows(i * 10, 10))
        folder = describe(gw, table_id)["location"].rstrip("/").rsplit("/", 1)[-1]
        before = receipts(wh, folder)
        assert set(range(2, 7)) <= before, before
        time.sleep(2)
        code, out = wh.admin("maintain", "$".join(table_id), "--task", "cleanup", "--json")
        assert code == 0, out
        run = json.loads(out)["tables"][0]["runs"][0]
        assert run["outcome"] == "succeeded", run
        kept = {v["version"] for v in open_table(gw, table_id).versions()}
        assert kept == {5, 6}, kept
        assert receipts(wh, folder) == kept
        assert int(run["figures"]["receipts_removed"]) == len(before - kept), run
        assert open_table(gw, table_id).count_rows() == 60
        append(gw, table_id, rows(60, 10))  # the log goes on from its head
        assert receipts(wh, folder) == kept | {7}
    finally:
        wh.stop_all()


def receipts(wh: Warehouse, folder: str) -> set[int]:
    """The versions whose receipts the catalog holds for the table in data folder `folder`
    (main branch)."""
    if wh.kind == "local":
        keys = [os.path.relpath(os.path.join(d, f), wh.root)
                for d, _, files in os.walk(os.path.join(wh.root, ".lance-gateway", "commits")) for f in files]
    else:
        s3 = boto3.client("s3", endpoint_url=wh.storage["aws_endpoint"], region_name="us-east-1",
                          aws_access_key_id=seaweedfs.ADMIN_KEY, aws_secret_access_key=seaweedfs.ADMIN_SECRET)
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=wh.base[0], Prefix=".lance-gateway/commits/")
        keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    segment = folder.replace(".", "%2E")  # as the catalog's keys write a name
    return {int(k.rsplit("/", 1)[1][:-5]) for k in keys
            if f"/{segment}/main/" in k and k.rsplit("/", 1)[1][:-5].isdigit()}


def exists(wh: Warehouse, location: str, rel: str) -> bool:
    if location.startswith("s3://"):
        parsed = urllib.parse.urlparse(location)
        s3 = boto3.client("s3", endpoint_url=wh.storage["aws_endpoint"], region_name="us-east-1",
                          aws_access_key_id=seaweedfs.ADMIN_KEY, aws_secret_access_key=seaweedfs.ADMIN_SECRET)
        key = parsed.path.lstrip("/").rstrip("/") + "/" + rel
        return s3.list_objects_v2(Bucket=parsed.netloc, Prefix=key).get("KeyCount", 0) > 0
    return os.path.exists(os.path.join(urllib.parse.urlparse(location).path, rel))


# ------------------------------------------------------------------------------ many gateways


def test_two_gateways_compact_each_table_once_per_state(wh):
    a = wh.start(node="gw-a")
    b = wh.start(node="gw-b")
    try:
        tables = [tid(wh, f"pair{i}") for i in range(3)]
        for t in tables:
            for i in range(20):
                append(a if i % 2 else b, t, rows(i * 3, 3), mode="create" if i == 0 else "append")
        for t in tables:
            wait_for("a compaction", lambda: last_run(a, t, "compaction"))
        time.sleep(6)  # several more sweeps by both: none may compact a compacted table again
        for t in tables:
            ds = open_table(a, t)
            assert_rows(ds, 60)
            assert len(compactions(ds)) == 1, compactions(ds)
    finally:
        wh.stop_all()


def test_a_gateway_killed_mid_compaction_leaves_the_table_readable_and_the_next_finishes(wh):
    pausing = wh.start(env={"LANCE_GATEWAY_FAULT_PAUSE_BEFORE_COMMIT_MS": "600000"}, node="doomed")
    table_id = tid(wh, "crash")
    for i in range(20):
        append(pausing, table_id, rows(i * 3, 3), mode="create" if i == 0 else "append")
    wait_for("the rewrite to reach its commit",
             lambda: "pausing before a maintenance commit" in open(pausing.log).read(), timeout=60)
    held = describe(pausing, table_id)["maintenance"]
    assert held.get("running_on") == "doomed", held
    pausing.proc.send_signal(signal.SIGKILL)
    pausing.proc.wait()
    wh.gateways.remove(pausing)
    # Readable, at its last committed version, every row there.
    survivor = wh.start(node="survivor")
    ds = open_table(survivor, table_id)
    assert len(ds.get_fragments()) == 20
    assert_rows(ds, 60)
    code, out = wh.admin("fsck")
    assert code == 0, out
    # The next gateway takes the lapsed lease and compacts.
    wait_for("the survivor's compaction", lambda: (last_run(survivor, table_id, "compaction") or {}).get("outcome") == "succeeded")
    ds = open_table(survivor, table_id)
    assert len(ds.get_fragments()) < 20
    assert_rows(ds, 60)
    assert len(compactions(ds)) == 1
    wh.stop_all()


# ------------------------------------------------------------------------------ policy


def test_namespace_properties_apply_to_its_tables_and_a_tables_own_win(wh):
    gw = wh.start("--maintenance", "false")  # nothing by itself: admin maintain looks
    try:
        ns = ns_client(gw)
        parent = [*wh.base, f"team_{uuid.uuid4().hex[:6]}"]
        ns.create_namespace(ln.CreateNamespaceRequest(id=parent, properties={
            "maintenance.compaction.min_fragments": "3"}))
        quiet = [*parent, "quiet"]
        ns.create_namespace(ln.CreateNamespaceRequest(id=quiet, properties={"maintenance.enabled": "false"}))
        inherits, own, off = [*parent, "inherits"], [*parent, "own"], [*quiet, "off"]
        ns.declare_table(ln.DeclareTableRequest(id=own, properties={"maintenance.compaction.min_fragments": "10"}))
        for t in (inherits, own, off):
            for i in range(4):
                append(gw, t, rows(i * 2, 2), mode="create" if i == 0 and t != own else "append")

        def look(t):
            code, out = wh.admin("maintain", "$".join(t), "--dry-run", "--json")
            assert code == 0, out
            return json.loads(out)["tables"][0]

        assert look(inherits)["due"] == ["compaction"]          # 4 small fragments >= 3
        assert look(own)["due"] == []                           # its own 10 wins
        assert look(off)["skipped"] == "maintenance is off for this table"
        # A dry run changed nothing; a real one compacts only what is due.
        assert len(open_table(gw, inherits).get_fragments()) == 4
        code, out = wh.admin("maintain", "$".join(parent), "--json")
        assert code == 0, out
        assert len(open_table(gw, inherits).get_fragments()) == 1
        assert len(open_table(gw, own).get_fragments()) == 4
        assert len(open_table(gw, off).get_fragments()) == 4
        # A value that does not parse is refused when the table is made, naming it.
        status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc([*parent, 'bad'])}/declare",
                               {"id": [*parent, "bad"], "properties": {"maintenance.cleanup.retention": "soon"}})
        assert status == 400 and body["code"] == 13 and "maintenance.cleanup.retention" in body["error"], body
    finally:
        wh.stop_all()


def test_fsck_notes_tables_long_overdue(wh):
    gw = wh.start("--maintenance", "false")
    try:
        table_id = tid(wh, "overdue")
        for i in range(17):
            append(gw, table_id, rows(i, 1), mode="create" if i == 0 else "append")
    finally:
        wh.stop_all()
    code, out = wh.admin("fsck", "--json", "--overdue-hours", "0")
    assert code == 0, out  # a note, not a problem
    notes = [f for f in json.loads(out)["report"]["findings"] if f["problem"] == "maintenance-overdue"]
    assert any(f["object"] == "$".join(table_id) and "compaction" in f["detail"] for f in notes), notes
    code, out = wh.admin("fsck", "--json")
    assert not [f for f in json.loads(out)["report"]["findings"] if f["problem"] == "maintenance-overdue"
                and f["object"] == "$".join(table_id)]


# ------------------------------------------------------------------------------ sweep cost


def test_three_gateways_sweep_each_table_once_and_an_unchanged_table_costs_one_request(seaweed):
    """Three gateways over one SeaweedFS bucket, every store request of theirs through a
    proxy that logs it. Once every table has had a full look, each further sweep is taken by
    one gateway at a time (the sweep lease), and its look at an unchanged table is one store
    request: a listing under the table's `_versions/` folder, no manifest read, no dataset
    opened. Then a table that commits is looked at in full again, and compacted."""
    from faultproxy import FaultProxy
    from test_metrics import moved, scrape, value
    from conftest import free_port

    proxy = FaultProxy("127.0.0.1", seaweed.s3_port, 1)
    bucket = f"lg-sweep-{uuid.uuid4().hex[:8]}"
    args, env = s3_gateway_setup(seaweed, f"s3://{bucket}/wh")
    args[args.index("--s3-endpoint") + 1] = proxy.endpoint
    args += ["--client-endpoint", seaweed.endpoint]
    sweep_secs = 2
    gateways, ports = [], []
    try:
        for i in range(3):
            port = free_port()
            ports.append(port)
            gateways.append(start_gateway(
                [*args, "--maintenance-delay-secs", "1", "--maintenance-sweep-secs", str(sweep_secs),
                 "--metrics-listen", f"127.0.0.1:{port}", "--node-id", f"sweeper-{i}"], env))
        client = ln.connect("rest", {"uri": gateways[0].uri})
        client.create_namespace(ln.CreateNamespaceRequest(id=["s"]))
        with_data = [["s", f"t{i}"] for i in range(4)]
        for t in with_data:
            append(gateways[0], t, rows(0, 10), mode="create")
        empty = [["s", f"e{i}"] for i in range(2)]
        for t in empty:
            client.declare_table(ln.DeclareTableRequest(id=t))
        tables = with_data + empty
        # Each table's data folder, as the store's keys name it.
        folders = {tuple(t): urllib.parse.urlparse(describe(gateways[0], t)["location"]).path.strip("/") + "/"
                   for t in tables}

        def looks(kind):
            return sum(value(scrape(p), "lance_gateway_maintenance_looks_total", kind=kind) for p in ports)

        def swept():
            return sum(value(scrape(p), "lance_gateway_maintenance_swept_tables_total") for p in ports)

        # Two sweeps since the last commit: every table had a full look after it.
        start = swept()
        wait_for("two sweeps", lambda: swept() >= start + 2 * len(tables), timeout=60)
        wait_for("quiet looks", lambda: looks("quiet") >= len(tables), timeout=60)
        before = [scrape(p) for p in ports]
        began, mark = time.time(), len(proxy.log)
        time.sleep(4 * sweep_secs)
        after = [scrape(p) for p in ports]
        window = time.time() - began
        log = proxy.log[mark:]

        full = sum(moved(b, a, "lance_gateway_maintenance_looks_total", kind="full") for b, a in zip(before, after))
        quiet = sum(moved(b, a, "lance_gateway_maintenance_looks_total", kind="quiet") for b, a in zip(before, after))
        queued = sum(moved(b, a, "lance_gateway_maintenance_swept_tables_total") for b, a in zip(before, after))
        assert full == 0, f"unchanged tables were opened: {full} full looks"
        assert quiet >= len(tables), quiet
        # One gateway per sweep: the lease spaces sweeps by 0.9 of the interval whoever runs
        # them, so three gateways queue no more than one gateway would (not three times it).
        sweeps = queued / len(tables)
        assert queued % len(tables) == 0 and sweeps <= window / (0.9 * sweep_secs) + 1, (queued, window)
        # Each look at an unchanged table: one listing below its folder, nothing read.
        for t in tables:
            folder = folders[tuple(t)]
            mine = [(m, target) for m, target in log if folder in urllib.parse.unquote(target)]
            assert all(m == "GET" and "list-type=2" in target for m, target in mine), mine
            assert len(mine) <= sweeps + 1, (t, mine, sweeps)
        assert sum(1 for m, target in log if any(f in urllib.parse.unquote(target) for f in folders.values())) \
            == pytest.approx(quiet, abs=len(tables)), (quiet, log[:20])

        # A commit: the next look at that table is a full one, and the rest stay quiet.
        before = [scrape(p) for p in ports]
        append(gateways[1], with_data[0], rows(10, 10))
        wait_for("a full look after the commit",
                 lambda: sum(value(scrape(p), "lance_gateway_maintenance_looks_total", kind="full")
                             for p in ports) > sum(value(b, "lance_gateway_maintenance_looks_total", kind="full")
                                                    for b in before), timeout=60)
        assert open_table(gateways[0], with_data[0]).count_rows() == 20
    finally:
        for gw in gateways:
            gw.stop()
        proxy.stop()
