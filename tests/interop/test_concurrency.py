"""Concurrency through the real binary: racing declares, two gateways racing creates and
drops over one S3 warehouse, and four pylance processes appending to one table."""

import json
import random
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import lance_namespace as ln

from conftest import s3_gateway_setup, start_gateway, unique


def post(uri: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(f"{uri}{path}", data=json.dumps(body or {}).encode(), method="POST")
    req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text else {})
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def get(uri: str, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"{uri}{path}", timeout=60) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def enc(parts: list[str]) -> str:
    return urllib.parse.quote("$".join(parts), safe="")


def test_32_concurrent_declares_one_winner(warehouse):
    top = warehouse.id(unique("race"))
    assert post(warehouse.uri, f"/v1/namespace/{enc(top)}/create")[0] == 200
    path = f"/v1/table/{enc(top + ['t'])}/declare"
    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(lambda _: post(warehouse.uri, path), range(32)))
    ok = [r for r in results if r[0] == 200]
    conflicts = [r for r in results if r[0] == 409 and r[1].get("code") == 5]
    assert len(ok) == 1, results
    assert len(conflicts) == 31, results


def test_two_gateways_race_creates_and_drops(seaweed):
    bucket = f"lg-two-{uuid.uuid4().hex[:10]}"
    args, env = s3_gateway_setup(seaweed, f"s3://{bucket}/shared")
    # the bucket must exist for a bucket-prefix warehouse
    first = start_gateway(["--warehouse", "s3://"] + args[2:], env)
    ln.connect("rest", {"uri": first.uri}).create_namespace(ln.CreateNamespaceRequest(id=[bucket]))
    first.stop()
    gateways = [start_gateway(args, env), start_gateway(args, env)]
    uris = [g.uri for g in gateways]
    namespaces = [f"n{i}" for i in range(4)]
    for n in namespaces:
        assert post(uris[0], f"/v1/namespace/{n}/create")[0] == 200
    declared, rng = [], random.Random(7)

    def declarer(i: int):
        n = rng.choice(namespaces)
        status, body = post(uris[i % 2], f"/v1/table/{enc([n, f't{i}'])}/declare")
        if status == 200:
            declared.append([n, f"t{i}"])
        else:
            assert body["code"] in (1, 14), body

    def dropper(i: int):
        n = namespaces[i % len(namespaces)]
        status, body = post(uris[(i + 1) % 2], f"/v1/namespace/{n}/drop")
        if status == 200:
            post(uris[i % 2], f"/v1/namespace/{n}/create", {"mode": "exist_ok"})
        else:
            assert body["code"] in (1, 3, 14), body

    with ThreadPoolExecutor(16) as pool:
        jobs = [pool.submit(declarer, i) for i in range(120)] + [pool.submit(dropper, i) for i in range(40)]
        for j in jobs:
            j.result()

    client = ln.connect("rest", {"uri": uris[1]})
    listed = client.list_all_tables(ln.ListTablesRequest()).tables
    for full in listed:
        parts = full.split("$")
        client.namespace_exists(ln.NamespaceExistsRequest(id=parts[:-1]))  # raises if missing
    # Restrict drops never remove tables: every declare that succeeded is still there.
    assert sorted("$".join(t) for t in declared) == sorted(listed)
    for g in gateways:
        assert g.stop() == 0


def test_a_declare_is_whole_from_its_answer(seaweed):
    """On S3 a declare answers at its commit and publishes the table's record after the
    answer. With that publish held back (fault injection), another gateway over the same
    warehouse already sees the table whole: described at the declared location, listed,
    its name taken; a deregister waits for the record and the table stays gone after."""
    bucket = f"lg-early-{uuid.uuid4().hex[:10]}"
    args, env = s3_gateway_setup(seaweed, "s3://")
    slow = start_gateway(args, {**env, "LANCE_GATEWAY_FAULT_AFTER_ANSWER_DELAY_MS": "700"})
    other = start_gateway(args, env)
    assert post(slow.uri, f"/v1/namespace/{bucket}/create")[0] == 200
    assert post(slow.uri, f"/v1/namespace/{enc([bucket, 'ml'])}/create")[0] == 200
    t = enc([bucket, "ml", "t"])
    status, declared = post(slow.uri, f"/v1/table/{t}/declare")
    assert status == 200, declared
    # Within the 700 ms the record is held back:
    status, described = post(other.uri, f"/v1/table/{t}/describe")
    assert status == 200 and described["location"] == declared["location"], described
    assert post(other.uri, f"/v1/table/{t}/exists")[0] == 200
    status, listed = get(other.uri, f"/v1/namespace/{enc([bucket, 'ml'])}/table/list")
    assert status == 200 and listed["tables"] == ["t"], listed
    status, body = post(other.uri, f"/v1/table/{t}/declare")
    assert (status, body.get("code")) == (409, 5), body
    status, body = post(other.uri, f"/v1/namespace/{enc([bucket, 'ml'])}/drop")
    assert (status, body.get("code")) == (409, 3), body
    status, body = post(other.uri, f"/v1/table/{t}/deregister")
    assert status == 200 and body["location"] == declared["location"], body
    # Past the held-back publish and the removal of the declare's entry: still gone.
    time.sleep(1.5)
    for g in (slow, other):
        status, body = post(g.uri, f"/v1/table/{t}/describe")
        assert (status, body.get("code")) == (404, 4), body
        status, listed = get(g.uri, f"/v1/namespace/{enc([bucket, 'ml'])}/table/list")
        assert status == 200 and listed["tables"] == [], listed
    assert slow.stop() == 0 and other.stop() == 0


APPENDER = textwrap.dedent(
    """
    import sys, lance, lance_namespace as ln, pyarrow as pa
    uri, table_id, worker, batches, opts = sys.argv[1], sys.argv[2].split("$"), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    ns = ln.connect("rest", {"uri": uri})
    for b in range(batches):
        rows = pa.table({"worker": pa.array([worker] * 50, pa.int64()), "batch": pa.array([b] * 50, pa.int64())})
        lance.write_dataset(rows, namespace_client=ns, table_id=table_id, mode="append")
    """
)


def test_four_pylance_processes_append_without_loss(warehouse):
    ns = ln.connect("rest", {"uri": warehouse.uri})
    top = warehouse.id(unique("app"))
    ns.create_namespace(ln.CreateNamespaceRequest(id=top))
    table_id = top + ["log"]
    import lance
    import pyarrow as pa

    lance.write_dataset(
        pa.table({"worker": pa.array([-1], pa.int64()), "batch": pa.array([-1], pa.int64())}),
        namespace_client=ns,
        table_id=table_id,
        mode="create",
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", APPENDER, warehouse.uri, "$".join(table_id), str(w), "5", "-"])
        for w in range(4)
    ]
    for p in procs:
        assert p.wait(timeout=600) == 0
    ds = lance.dataset(namespace_client=ns, table_id=table_id)
    assert ds.count_rows() == 1 + 4 * 5 * 50
    per_worker = ds.to_table().group_by("worker").aggregate([("batch", "count")]).to_pydict()
    assert dict(zip(per_worker["worker"], per_worker["batch_count"])) == {-1: 1, 0: 250, 1: 250, 2: 250, 3: 250}
