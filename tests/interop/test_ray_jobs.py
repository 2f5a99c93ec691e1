"""Heavy maintenance on Ray (`--ray-address`): a gateway pointed at a Ray cluster (a head and
one worker started here as separate processes, `raycluster.py`) compacts tables past the
policy's `maintenance.ray.min_rows` as Ray jobs and smaller ones itself. The gateway decides
and holds the lease; the job (the package in jobs/lance_gateway_ray, uploaded by the gateway)
plans, rewrites each task on a Ray worker and commits once through the gateway: under
managed versioning with CreateTableVersion, as any writer. On the local warehouse and on
SeaweedFS in endpoint mode (the job reaches the store with what the gateway vends).

What a user sees is checked: the rows (every value, by id), the fragment count the policy
asks for, the job's transaction (DescribeTransaction names the executor and the Ray job,
whose status Ray's own API gives), and AlterTransaction to Canceled stopping the job before
it commits."""

import json
import os
import signal
import tempfile
import threading
import time
import urllib.parse
import uuid

import lance
import lance_namespace as ln
import numpy as np
import pyarrow as pa
import pytest

from conftest import free_port, s3_gateway_setup, start_gateway
from engines.harness import commits_through_gateway, moved, scrape
from faultproxy import FaultProxy
from raycluster import RayCluster
from security import call, enc
from test_maintenance import last_run, transaction, wait_for

UNMANAGED_COMMITS = "lance_gateway_unmanaged_commits_total"
# Looked at soon after a commit, every table swept every two seconds, a heartbeat a second.
QUICK = ["--maintenance-delay-secs", "1", "--maintenance-sweep-secs", "2", "--recovery-grace-secs", "4"]
ROWS = 1_000_000
FRAGMENTS = 300
TARGET = 250_000


@pytest.fixture(scope="module")
def cluster():
    c = RayCluster().start()
    yield c
    c.stop()


class Served:
    def __init__(self, gw, base, metrics_port):
        self.gw, self.base, self.metrics_port = gw, base, metrics_port


POLICY = f"compaction.target_rows_per_fragment={TARGET},compaction.min_fragments=16,ray.min_rows=100000"


def serve(request, kind: str, cluster: RayCluster, managed: bool, *extra: str, env: dict | None = None,
          warehouse: str | None = None, policy: str = POLICY) -> Served:
    metrics_port = free_port()
    args = [*QUICK, "--metrics-listen", f"127.0.0.1:{metrics_port}",
            "--managed-versioning", "true" if managed else "false",
            *cluster.gateway_args(), "--maintenance-policy", policy, *extra]
    if kind == "local":
        gw = start_gateway(["--warehouse", warehouse or tempfile.mkdtemp(prefix="lg-rayjobs-"), *args], env)
        base = []
    else:
        sw_args, sw_env = s3_gateway_setup(request.getfixturevalue("seaweed"), "s3://")
        gw = start_gateway([*sw_args, *args], {**sw_env, **(env or {})})
        base = [f"lg-ray-{uuid.uuid4().hex[:10]}"]
        ln.connect("rest", {"uri": gw.uri}).create_namespace(ln.CreateNamespaceRequest(id=base))
    request.addfinalizer(gw.stop)
    return Served(gw, base, metrics_port)


def namespace(s: Served):
    return ln.connect("rest", {"uri": s.gw.uri})


def table_of(n: int, start: int = 0) -> pa.Table:
    ids = range(start, start + n)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"row-{i}" for i in ids]),
        "score": pa.array([i * 0.25 for i in ids], pa.float64()),
    })


def create(s: Served, name: str, data: pa.Table, fragments: int) -> list[str]:
    table_id = [*s.base, f"{name}_{uuid.uuid4().hex[:8]}"]
    per = -(-data.num_rows // fragments)
    lance.write_dataset(data, namespace_client=namespace(s), table_id=table_id, mode="create",
                        max_rows_per_file=per, max_rows_per_group=min(per, 1024))
    ds = open_table(s, table_id)
    assert len(ds.get_fragments()) == fragments
    return table_id


def open_table(s: Served, table_id, **kw) -> lance.LanceDataset:
    return lance.dataset(namespace_client=namespace(s), table_id=table_id, **kw)


def job_running(gw, table_id, cluster: RayCluster) -> tuple[str, str]:
    """Waits for the table's compaction to run on Ray: (its transaction id, Ray's submission
    id). The transaction is found in the table's list, which reads records as they are and
    settles none."""
    def running():
        status, body, _ = call(gw.uri, "GET", f"/v1/table/{enc(table_id)}/transaction/list", None)
        assert status == 200, body
        return next((t for t in body.get("transactions", []) if t.get("status") == "Running"), None)

    tx_id = wait_for("the compaction job to start", running, timeout=120)["id"]
    job_id = f"lance-gateway-{tx_id}"
    wait_for("Ray to run the job", lambda: (cluster.job(job_id) or {}).get("status") == "RUNNING", timeout=120)
    return tx_id, job_id


def rewrites(ds: lance.LanceDataset) -> int:
    return sum(1 for t in ds.get_transactions(len(ds.versions()))
               if t is not None and type(t.operation).__name__ == "Rewrite")


@pytest.fixture(scope="module")
def lance_compacts_to():
    """The rows of each fragment Lance's own compaction (pylance, in this process) makes of
    the same table under the same policy: what the job on Ray must make too."""
    path = os.path.join(tempfile.mkdtemp(prefix="lg-rayjobs-ref-"), "t.lance")
    per = -(-ROWS // FRAGMENTS)
    lance.write_dataset(table_of(ROWS), path, max_rows_per_file=per, max_rows_per_group=min(per, 1024))
    ds = lance.dataset(path)
    ds.optimize.compact_files(target_rows_per_fragment=TARGET, materialize_deletions_threshold=0.1)
    return sorted(f.count_rows() for f in lance.dataset(path).get_fragments())


@pytest.mark.parametrize("managed", [False, True], ids=["unmanaged", "managed"])
@pytest.mark.parametrize("kind", ["local", "seaweedfs"])
def test_a_million_rows_in_300_fragments_compact_on_ray_and_a_small_table_in_the_gateway(
        request, cluster, lance_compacts_to, kind, managed):
    s = serve(request, kind, cluster, managed)
    before = scrape(s.metrics_port)
    data = table_of(ROWS)
    big = create(s, "big", data, FRAGMENTS)
    small = create(s, "small", table_of(3_000), FRAGMENTS)

    runs = {}
    for name, t in (("big", big), ("small", small)):
        runs[name] = wait_for(f"the {name} table's compaction", lambda t=t: last_run(s.gw, t, "compaction"), timeout=300)
        assert runs[name]["outcome"] == "succeeded", runs[name]

    # The big table went to Ray: its transaction names the executor and the job, and Ray
    # ran that job to success.
    tx = transaction(s.gw, runs["big"]["transaction_id"])
    props = tx["properties"]
    assert tx["status"] == "Succeeded", tx
    assert props["lance_gateway.executor"] == "ray", props
    job_id = props["lance_gateway.ray_job"]
    assert job_id == f"lance-gateway-{runs['big']['transaction_id']}"
    job = cluster.job(job_id)
    assert job is not None and job["status"] == "SUCCEEDED", job
    assert int(props["lance_gateway.fragments_removed"]) == FRAGMENTS
    assert int(props["lance_gateway.ray_tasks"]) >= 2  # spread over the cluster's workers

    # Bit-equal rows, in the fragments the policy asks for (as Lance compacts them itself).
    ds = open_table(s, big)
    assert sorted(f.count_rows() for f in ds.get_fragments()) == lance_compacts_to
    assert ds.to_table().sort_by("id").equals(data)
    assert rewrites(ds) == 1

    # The small table stayed in the gateway (no executor named), and compacted as well.
    small_props = transaction(s.gw, runs["small"]["transaction_id"])["properties"]
    assert "lance_gateway.executor" not in small_props, small_props
    assert len(open_table(s, small).get_fragments()) == 1
    assert open_table(s, small).to_table().sort_by("id").equals(table_of(3_000))

    after = scrape(s.metrics_port)
    if managed:
        # Every version was made through the gateway, the job's included: none behind its back.
        assert moved(before, after, UNMANAGED_COMMITS) == 0
        assert commits_through_gateway(before, after) >= 4  # two creates, two compactions


def test_canceled_stops_the_ray_job_before_it_commits(request, cluster):
    # The job pauses before it commits (the gateway's fault injection, passed on to it).
    s = serve(request, "local", cluster, True, env={"LANCE_GATEWAY_FAULT_PAUSE_BEFORE_COMMIT_MS": "20000"})
    data = table_of(200_000)
    table_id = create(s, "cancel", data, 40)
    version = open_table(s, table_id).version

    tx_id, job_id = job_running(s.gw, table_id, cluster)
    status, body, _ = call(s.gw.uri, "POST", f"/v1/transaction/{urllib.parse.quote(tx_id, safe='')}/alter",
                           {"actions": [{"setStatusAction": {"status": "Canceled"}}]})
    assert status == 200, body

    # Ray stops the job, the transaction stays Canceled, and nothing was committed.
    job = wait_for("Ray to stop the job",
                   lambda: (j := cluster.job(job_id)) and j["status"] in ("STOPPED", "FAILED", "SUCCEEDED") and j,
                   timeout=60)
    assert job["status"] in ("STOPPED", "FAILED"), job
    assert transaction(s.gw, tx_id)["status"] == "Canceled"
    time.sleep(2)
    ds = open_table(s, table_id)
    assert rewrites(ds) == 0
    assert ds.version == version
    assert len(ds.get_fragments()) == 40
    assert ds.to_table().sort_by("id").equals(data)


def test_a_gateway_killed_mid_job_leaves_it_to_the_next_which_adopts_it_and_it_commits_once(request, cluster):
    # Both gateways give Ray jobs one address, a proxy in front of whichever is alive (as a
    # service address in front of replicas would be); the job pauses before it commits.
    warehouse = tempfile.mkdtemp(prefix="lg-rayjobs-adopt-")
    port_a, port_b = free_port(), free_port()
    proxy = FaultProxy("127.0.0.1", port_a, seed=7)
    request.addfinalizer(proxy.stop)
    env = {"LANCE_GATEWAY_FAULT_PAUSE_BEFORE_COMMIT_MS": "20000"}
    common = ["--warehouse", warehouse, *QUICK, "--managed-versioning", "false", *cluster.gateway_args(),
              "--ray-gateway-uri", proxy.endpoint, "--maintenance-policy",
              f"compaction.target_rows_per_fragment={TARGET},compaction.min_fragments=16,ray.min_rows=100000"]
    a = start_gateway([*common, "--node-id", "gw-a"], env, port=port_a)
    request.addfinalizer(lambda: a.proc.poll() is None and a.proc.kill())
    s_a = Served(a, [], None)
    data = table_of(200_000)
    table_id = create(s_a, "adopt", data, 40)

    tx_id, job_id = job_running(a, table_id, cluster)

    # Gateway A dies while the job runs; B starts on the same warehouse and the proxy now
    # leads to it. B takes the lapsed lease and adopts the job instead of starting another.
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    b = start_gateway([*common, "--node-id", "gw-b"], env, port=port_b)
    request.addfinalizer(b.stop)
    proxy.upstream = ("127.0.0.1", port_b)
    s_b = Served(b, [], None)

    run = wait_for("B to record the adopted run", lambda: (r := last_run(b, table_id, "compaction")) and r.get("transaction_id") == tx_id and r,
                   timeout=180)
    assert run["outcome"] == "succeeded", run
    tx = transaction(b, tx_id)
    assert tx["status"] == "Succeeded", tx
    assert tx["properties"]["lance_gateway.ray_job"] == job_id
    assert cluster.job(job_id)["status"] == "SUCCEEDED"
    # One job for the table, one compaction in its history, and every row.
    ours = [j for j in cluster.jobs() if (j.get("metadata") or {}).get("lance_gateway.table") == "$".join(table_id)]
    assert [j["submission_id"] for j in ours] == [job_id], ours
    ds = open_table(s_b, table_id)
    assert rewrites(ds) == 1
    assert len(ds.get_fragments()) == 1
    assert ds.to_table().sort_by("id").equals(data)


@pytest.mark.parametrize("managed", [False, True], ids=["unmanaged", "managed"])
def test_a_client_appending_throughout_a_ray_compaction_loses_nothing(request, cluster, managed):
    # The job pauses before it commits, so appends land between its plan and its commit.
    s = serve(request, "local", cluster, managed, env={"LANCE_GATEWAY_FAULT_PAUSE_BEFORE_COMMIT_MS": "4000"})
    data = table_of(200_000)
    table_id = create(s, "appended", data, 40)
    appended, errors, stop = [], [], threading.Event()

    def appender():
        i = 0
        while not stop.is_set() and i < 200:
            batch = table_of(100, start=1_000_000 + i * 100)
            try:
                lance.write_dataset(batch, namespace_client=namespace(s), table_id=table_id, mode="append")
                appended.append(batch)
            except Exception as e:  # noqa: BLE001 (every failure is reported below)
                errors.append(repr(e))
            i += 1
            time.sleep(0.05)

    writer = threading.Thread(target=appender)
    writer.start()
    try:
        run = wait_for("the compaction", lambda: last_run(s.gw, table_id, "compaction"), timeout=300)
        time.sleep(1)  # a few appends after the commit too
    finally:
        stop.set()
        writer.join()
    assert run["outcome"] == "succeeded", run
    assert transaction(s.gw, run["transaction_id"])["properties"]["lance_gateway.executor"] == "ray"
    assert not errors, errors[:3]
    ds = open_table(s, table_id)
    # Appends committed while the job ran: between the version its plan read and its commit.
    newest_first = sorted((v["version"] for v in ds.versions()), reverse=True)
    history = list(zip(newest_first, ds.get_transactions(len(newest_first))))
    rewrite_at, rewrite = next((v, t) for v, t in reversed(history)
                               if t is not None and type(t.operation).__name__ == "Rewrite")
    during = [type(t.operation).__name__ for v, t in history
              if t is not None and rewrite.read_version < v < rewrite_at]
    assert "Append" in during, (rewrite.read_version, rewrite_at, during)
    # Every appended row is there once, with the compacted ones.
    want = pa.concat_tables([data, *appended]).sort_by("id")
    assert len(appended) >= 10
    assert ds.to_table().sort_by("id").equals(want)


WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi "
         "rho sigma tau upsilon").split()
DIM = 8


def documents(n: int, start: int = 0) -> pa.Table:
    """Rows with an id, a text of five words and an 8-dimensional vector, the same for the
    same `start` and `n`."""
    rng = np.random.default_rng(start)
    vectors = rng.random(n * DIM, dtype=np.float32)  # first, so a shorter run is a prefix
    words = rng.integers(0, len(WORDS), (n, 5))
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "text": pa.array([" ".join(WORDS[w] for w in row) for row in words]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors), DIM),
    })


def build_index(s: Served, table_id, route: str, body: dict) -> dict:
    """Builds an index through the spec's route and waits for its transaction to succeed:
    the transaction."""
    status, answer, _ = call(s.gw.uri, "POST", f"/v1/table/{enc(table_id)}/{route}", {"id": table_id, **body})
    assert status == 200, answer
    tx_id = answer["transaction_id"]
    tx = wait_for(f"the {body['index_type']} build", lambda: (t := transaction(s.gw, tx_id))["status"] != "Running" and t,
                  timeout=300)
    assert tx["status"] == "Succeeded", tx
    return tx


def indices(s: Served, table_id) -> dict:
    status, body, _ = call(s.gw.uri, "POST", f"/v1/table/{enc(table_id)}/index/list", {"id": table_id})
    assert status == 200, body
    return {i["index_name"]: i for i in body["indexes"]}


def on_ray(s: Served, cluster: RayCluster, tx: dict) -> dict:
    """The job that ran transaction `tx` on Ray, which Ray ran to success."""
    props = tx["properties"]
    assert props.get("lance_gateway.executor") == "ray", props
    job = cluster.job(props["lance_gateway.ray_job"])
    assert job is not None and job["status"] == "SUCCEEDED", job
    return props


FTS_QUERIES = ["alpha", "beta gamma", "sigma tau upsilon", "omicron"]
FILTERS = ["id = 12345", "id >= 1000 AND id < 1300", "id IN (5, 99999, 150000, 199999)", "id > 199990"]


@pytest.mark.parametrize("kind", ["local", "seaweedfs"])
def test_fts_and_btree_indices_built_on_ray_answer_as_ones_built_in_the_gateway(request, cluster, kind):
    s = serve(request, kind, cluster, True)
    ns = namespace(s)
    # The same rows in two tables: one past `ray.min_rows` (100 000 for the gateway), one in a
    # namespace whose policy keeps its tables' work in the gateway.
    in_gateway = [*s.base, f"gw_{uuid.uuid4().hex[:6]}"]
    ns.create_namespace(ln.CreateNamespaceRequest(id=in_gateway, properties={"maintenance.ray.min_rows": "1000000000"}))
    data = documents(200_000)
    on_ray_table = create(s, "indexed", data, 8)
    here = [*in_gateway, "indexed"]
    lance.write_dataset(data, namespace_client=ns, table_id=here, mode="create", max_rows_per_file=25_000)

    for route, body in (("create_index", {"column": "id", "index_type": "BTREE"}),
                        ("create_scalar_index", {"column": "text", "index_type": "FTS", "with_position": False})):
        ray_tx = build_index(s, on_ray_table, route, body)
        props = on_ray(s, cluster, ray_tx)
        assert int(props["lance_gateway.segments"]) == 2, props  # one per CPU of the cluster
        gw_tx = build_index(s, here, route, body)
        assert "lance_gateway.executor" not in gw_tx["properties"], gw_tx

    # Both tables list the same indices, every row indexed; the Ray-built ones in segments.
    ray_indices, gw_indices = indices(s, on_ray_table), indices(s, here)
    assert sorted(ray_indices) == sorted(gw_indices) == ["id_idx", "text_idx"]
    for name in ray_indices:
        assert ray_indices[name]["num_unindexed_rows"] == 0, ray_indices[name]
        assert ray_indices[name]["num_indexed_rows"] == 200_000, ray_indices[name]
        assert ray_indices[name]["index_type"] == gw_indices[name]["index_type"]
        assert ray_indices[name]["num_segments"] == 2

    ray_ds, gw_ds = open_table(s, on_ray_table), open_table(s, here)
    # Full-text search: the same rows with the same BM25 scores (the segments score as one).
    for q in FTS_QUERIES:
        a = ray_ds.to_table(full_text_query=q, columns=["id"]).sort_by("id")
        b = gw_ds.to_table(full_text_query=q, columns=["id"]).sort_by("id")
        assert a.num_rows > 0 and a.equals(b), q
    # Filters through the BTREE answer what a scan without it answers.
    for f in FILTERS:
        assert "ScalarIndexQuery" in ray_ds.scanner(filter=f, columns=["id"]).explain_plan(), f
        a = ray_ds.to_table(filter=f, columns=["id", "text"]).sort_by("id")
        b = gw_ds.to_table(filter=f, columns=["id", "text"], use_scalar_index=False).sort_by("id")
        assert a.num_rows > 0 and a.equals(b), f


def test_index_upkeep_on_ray_after_appends_leaves_no_unindexed_rows(request, cluster):
    # No compaction (the appends stay as their own fragments): upkeep alone.
    s = serve(request, "local", cluster, True, policy="ray.min_rows=100000,compaction.enabled=false")
    data = documents(200_000)
    table_id = create(s, "upkept", data, 8)
    build_index(s, table_id, "create_index", {"column": "id", "index_type": "BTREE"})
    build_index(s, table_id, "create_scalar_index", {"column": "text", "index_type": "FTS", "with_position": False})
    vec_tx = build_index(s, table_id, "create_index",
                         {"column": "vec", "index_type": "IVF_FLAT", "num_partitions": 4, "distance_type": "l2"})
    # A vector index too is built in a segment per CPU, on one model trained first.
    assert int(on_ray(s, cluster, vec_tx)["lance_gateway.segments"]) == 2
    added = [documents(10_000, start=1_000_000 + i * 10_000) for i in range(3)]
    for batch in added:
        lance.write_dataset(batch, namespace_client=namespace(s), table_id=table_id, mode="append")

    # 30 000 rows unindexed, past the policy's 10 000: the sweep keeps every index up on Ray.
    run = wait_for("index upkeep", lambda: (r := last_run(s.gw, table_id, "index")) and r, timeout=300)
    assert run["outcome"] == "succeeded", run
    on_ray(s, cluster, transaction(s.gw, run["transaction_id"]))
    listed = indices(s, table_id)
    assert sorted(listed) == ["id_idx", "text_idx", "vec_idx"]
    for name, index in listed.items():
        assert index["num_unindexed_rows"] == 0 and index["num_indexed_rows"] == 230_000, index

    ds = open_table(s, table_id)
    assert ds.count_rows() == 230_000
    # Vector search through the index (its segments and the upkeep's delta) at full probes
    # is exact search; the appended rows are found through it.
    queries = documents(6, start=1_000_000)["vec"].to_pylist() + documents(4, start=7)["vec"].to_pylist()
    for q in queries:
        nearest = {"column": "vec", "q": q, "k": 10, "nprobes": 4}
        a = ds.to_table(nearest=nearest, columns=["id"])
        b = ds.to_table(nearest={**nearest, "use_index": False}, columns=["id"])
        assert "ANNSubIndex" in ds.scanner(nearest=nearest, columns=["id"]).explain_plan()
        assert a["id"].to_pylist() == b["id"].to_pylist()
    assert ds.to_table(nearest={"column": "vec", "q": queries[0], "k": 1, "nprobes": 4})["id"][0].as_py() == 1_000_000
    for f in ["id = 1015000", "id >= 1029990", "id < 50"]:
        a = ds.to_table(filter=f, columns=["id"]).sort_by("id")
        assert a.equals(ds.to_table(filter=f, columns=["id"], use_scalar_index=False).sort_by("id")) and a.num_rows > 0
    everything = pa.concat_tables([data, *added])
    assert ds.to_table(full_text_query="upsilon", columns=["id"]).num_rows == sum(
        1 for t in everything["text"].to_pylist() if "upsilon" in t.split())


@pytest.mark.parametrize("managed", [False, True], ids=["unmanaged", "managed"])
def test_cleanup_on_ray_removes_old_versions_and_keeps_every_row(request, cluster, managed):
    s = serve(request, "local", cluster, managed,
              policy="ray.min_rows=100000,compaction.enabled=false,index.enabled=false,"
                     "cleanup.retention=1s,cleanup.keep_versions=2")
    data = table_of(200_000)
    table_id = create(s, "cleaned", data, 8)
    added = [table_of(10, start=1_000_000 + i * 10) for i in range(4)]
    for batch in added:
        lance.write_dataset(batch, namespace_client=namespace(s), table_id=table_id, mode="append")

    run = wait_for("cleanup", lambda: (r := last_run(s.gw, table_id, "cleanup")) and r, timeout=300)
    assert run["outcome"] == "succeeded", run
    props = on_ray(s, cluster, transaction(s.gw, run["transaction_id"]))
    assert int(props["lance_gateway.versions_removed"]) >= 3, props
    ds = open_table(s, table_id)
    assert len(ds.versions()) == 2, ds.versions()
    assert ds.to_table().sort_by("id").equals(pa.concat_tables([data, *added]))


def test_a_gateway_killed_mid_build_on_ray_leaves_it_to_another_which_adopts_it_and_it_commits_once(
        request, cluster):
    # As for maintenance above, but a client's index build holds no lease: the gateway that
    # describes the abandoned build (the client polling it, or the job asking before it
    # commits) adopts it. The request waits 3 s, the job pauses 15 s before committing.
    # Under managed versioning the job's commit is a CreateTableVersion through the proxy,
    # on a connection it opened to A: it is cut, and the job finds from B that its index
    # was not made and commits it there.
    warehouse = tempfile.mkdtemp(prefix="lg-rayjobs-adopt-build-")
    port_a, port_b = free_port(), free_port()
    proxy = FaultProxy("127.0.0.1", port_a, seed=11)
    request.addfinalizer(proxy.stop)
    env = {"LANCE_GATEWAY_FAULT_PAUSE_BEFORE_COMMIT_MS": "15000"}
    common = ["--warehouse", warehouse, *QUICK, "--request-timeout-secs", "4", "--managed-versioning", "true",
              *cluster.gateway_args(), "--ray-gateway-uri", proxy.endpoint, "--maintenance-policy", POLICY]
    a = start_gateway([*common, "--node-id", "gw-a"], env, port=port_a)
    request.addfinalizer(lambda: a.proc.poll() is None and a.proc.kill())
    table_id = create(Served(a, [], None), "build", documents(200_000), 8)
    status, answer, _ = call(a.uri, "POST", f"/v1/table/{enc(table_id)}/create_scalar_index",
                             {"id": table_id, "column": "text", "index_type": "FTS", "with_position": False})
    assert status == 200, answer
    tx_id = answer["transaction_id"]
    job_id = f"lance-gateway-{tx_id}"
    assert transaction(a, tx_id)["status"] == "Running"
    wait_for("Ray to run the build", lambda: (cluster.job(job_id) or {}).get("status") == "RUNNING", timeout=120)

    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    b = start_gateway([*common, "--node-id", "gw-b"], env, port=port_b)
    request.addfinalizer(b.stop)
    proxy.upstream = ("127.0.0.1", port_b)

    tx = wait_for("the build to end", lambda: (t := transaction(b, tx_id))["status"] != "Running" and t, timeout=180)
    assert tx["status"] == "Succeeded", tx
    assert tx["properties"]["lance_gateway.node"] == "gw-b", tx
    assert tx["properties"]["lance_gateway.ray_job"] == job_id, tx
    assert cluster.job(job_id)["status"] == "SUCCEEDED"
    ours = [j for j in cluster.jobs() if (j.get("metadata") or {}).get("lance_gateway.table") == "$".join(table_id)]
    assert [j["submission_id"] for j in ours] == [job_id], ours
    built = indices(Served(b, [], None), table_id)["text_idx"]
    assert built["num_indexed_rows"] == 200_000 and built["num_segments"] == 2, built


def test_a_job_on_ray_reaches_its_own_table_with_what_it_is_vended_and_no_other_table(request, cluster, seaweed):
    # SeaweedFS's STS: the gateway vends each table's client keys scoped to its folder; a job
    # gets its table's as any client does. The suite's probe has the job read its own table
    # and table ml.b with the options vended for its own.
    from test_sts import sts_gateway_at

    gw, g = sts_gateway_at(seaweed, *QUICK, "--maintenance-policy", POLICY, ray_args=cluster.gateway_args(),
                           env={"LANCE_GATEWAY_FAULT_READ_ELSEWHERE": json.dumps(["ml", "b"])})
    request.addfinalizer(gw.stop)
    key = g["keys"]["admin"]
    admin = ln.connect("rest", {"uri": gw.uri, "headers.x-api-key": key})
    admin.create_namespace(ln.CreateNamespaceRequest(id=["ml"]))
    other = table_of(1_000, start=5_000_000)
    lance.write_dataset(other, namespace_client=admin, table_id=["ml", "b"], mode="create")
    data = table_of(200_000)
    per = 200_000 // 40
    lance.write_dataset(data, namespace_client=admin, table_id=["ml", "a"], mode="create",
                        max_rows_per_file=per, max_rows_per_group=1024)

    def compaction():
        status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(['ml', 'a'])}/describe?load_detailed_metadata=true",
                               {"id": ["ml", "a"]}, {"x-api-key": key})
        assert status == 200, body
        return body.get("maintenance", {}).get("compaction", {}).get("last_run")

    run = wait_for("the compaction on Ray", compaction, timeout=300)
    assert run["outcome"] == "succeeded", run
    job_id = f"lance-gateway-{run['transaction_id']}"
    assert cluster.job(job_id)["status"] == "SUCCEEDED"
    logs = cluster.get(f"/api/jobs/{job_id}/logs")["logs"]
    probe = [line for line in logs.splitlines() if line.startswith("fault injection:")]
    # Scoped keys (a session token), which read the job's own table and are refused the other.
    assert "'aws_session_token'" in probe[0], probe
    assert any("reading its own table" in line and "read 200000 rows" in line for line in probe), probe
    elsewhere = [line for line in probe if "reading elsewhere" in line]
    assert len(elsewhere) == 1 and "refused" in elsewhere[0] and "403 Forbidden" in elsewhere[0], probe
    assert f"({admin.describe_table(ln.DescribeTableRequest(id=['ml', 'b'])).location})" in elsewhere[0], elsewhere
    # And the job compacted its own table through those keys.
    ds = lance.dataset(namespace_client=admin, table_id=["ml", "a"])
    assert len(ds.get_fragments()) == 1
    assert ds.to_table().sort_by("id").equals(data)


def test_a_worker_lost_mid_job_leaves_its_tasks_to_the_nodes_left_and_the_table_compacts_once(
        request, cluster, lance_compacts_to):
    # Each rewrite task waits 8 s before it works, so the worker dies with a task on it
    # (three tasks, one CPU a node: one of the first two runs on the worker).
    s = serve(request, "local", cluster, False, env={"LANCE_GATEWAY_FAULT_PAUSE_IN_REWRITE_MS": "8000"})
    request.addfinalizer(cluster.add_worker)
    data = table_of(ROWS)
    table_id = create(s, "lost", data, FRAGMENTS)

    tx_id, job_id = job_running(s.gw, table_id, cluster)
    time.sleep(3)
    cluster.kill_worker()

    # Ray runs the lost task again on the head; the job commits once and succeeds.
    run = wait_for("the compaction", lambda: last_run(s.gw, table_id, "compaction"), timeout=300)
    assert run["outcome"] == "succeeded", run
    assert run["transaction_id"] == tx_id
    assert cluster.job(job_id)["status"] == "SUCCEEDED"
    # Ray's own record: a rewrite task was run again after the worker went.
    attempts = [t.get("attempt_number", 0) for t in cluster.tasks(cluster.job(job_id)["job_id"])
                if t.get("name", "").endswith("rewrite")]
    assert max(attempts) >= 1, attempts
    ds = open_table(s, table_id)
    assert rewrites(ds) == 1
    assert sorted(f.count_rows() for f in ds.get_fragments()) == lance_compacts_to
    assert ds.to_table().sort_by("id").equals(data)
