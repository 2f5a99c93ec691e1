"""Two releases on one warehouse: the previous release (the commit `scripts/previous-release`
names, built by `scripts/build-previous-release`) and this one, as a rolling upgrade and a
rollback run them. Two gateways start as the previous release over a new warehouse; while a
randomized workload runs, they are SIGKILLed and restarted one at a time as this release,
then back as the previous one, then as this one again. The workload:

- metadata requests on colliding names (declares, registers, renames, drops, deregisters,
  namespace creates and drops, listings), every answer recorded and the whole history
  checked for linearizability (`history.py`, the checker of the crash suite);
- appends to managed tables through pylance (each commit a CreateTableVersion), batches
  over two tables through the repository's helper (BatchCommitTables, resent under its key
  to the other gateway when an answer is lost), BTREE index builds through the data plane,
  and the gateways' own maintenance (compaction every few fragments, cleanup).

Afterwards every acknowledged append and batch is there exactly once, nothing
unacknowledged is there in part (three rows of an append or none; a batch in both tables or
in neither), every acknowledged index is listed, maintenance ran, and `admin fsck` of both
releases finds nothing wrong. The warehouse is still at format 2 (nothing raised it); raised
with `admin upgrade --to 3` once the previous release is gone, a drop keeps its table.

Local directory and SeaweedFS (a prefix warehouse). `LANCE_GATEWAY_HISTORY_SEED` replays the
requests of a run."""

import json
import os
import random
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field

import lance
import lance_namespace as ln
import pyarrow.compute as pc
import pytest
from lance.namespace import RestNamespace
from lance_gateway import transaction

import seaweedfs
from conftest import gateway_binary, s3_gateway_setup, start_gateway
from history import RECOVERY, Cluster, fsck_problems, local_warehouse, run_round, s3_warehouse, verify_round
from security import call, enc
from test_lancedb_remote import data

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GATEWAYS = 2
ROUNDS = 3
SECONDS = 9.0
WORKERS = 3
# Maintenance soon after a change, sweeps every two seconds.
QUICK = ["--maintenance-delay-secs", "1", "--maintenance-sweep-secs", "2"]
# The data namespace's policy: compact every three fragments, keep two versions.
POLICY = {"maintenance.compaction.min_fragments": "3", "maintenance.cleanup.retention": "2s",
          "maintenance.cleanup.keep_versions": "2"}
DATA_TABLES = ["d0", "d1", "d2"]


def previous_release() -> str:
    """The previous release's binary: `LANCE_GATEWAY_PREVIOUS_BIN` (scripts/test-all builds it
    before this checkout), else built now (minutes, once per release)."""
    path = os.environ.get("LANCE_GATEWAY_PREVIOUS_BIN")
    if path:
        assert os.access(path, os.X_OK), f"LANCE_GATEWAY_PREVIOUS_BIN={path} is not a binary"
        return path
    out = subprocess.run([os.path.join(ROOT, "scripts", "build-previous-release")], capture_output=True, text=True,
                         timeout=3600)
    assert out.returncode == 0, f"building the previous release failed:\n{out.stderr[-4000:]}"
    return out.stdout.strip().splitlines()[-1]


def release_of(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@dataclass
class DataLog:
    """What the data workload was told: markers acknowledged, markers whose outcome is unknown
    (an error, a gateway killed under it), per table; batches (marker, tables); indices."""

    acked: dict = field(default_factory=lambda: {t: set() for t in DATA_TABLES})
    unknown: dict = field(default_factory=lambda: {t: set() for t in DATA_TABLES})
    batches: list = field(default_factory=list)
    indexed: set = field(default_factory=set)
    # Tables declared in batches ("x<marker>"), and those deregistered in later ones: names
    # acknowledged, and names whose batch's outcome is unknown.
    declared: set = field(default_factory=set)
    declared_unknown: set = field(default_factory=set)
    deregistered: set = field(default_factory=set)
    deregistered_unknown: set = field(default_factory=set)
    # Acknowledged declares no batch has taken for a deregister yet.
    free: list = field(default_factory=list)
    index_failures: int = 0
    counts: dict = field(default_factory=lambda: {"append": 0, "batch": 0, "index": 0, "failed": 0})
    lock: threading.Lock = field(default_factory=threading.Lock)


class Markers:
    """Unique markers for the data workload's writes, from any thread (rows marker*10 + 0..2)."""

    def __init__(self):
        self.lock, self.last = threading.Lock(), 0

    def __next__(self) -> int:
        with self.lock:
            self.last += 1
            return self.last


def data_worker(cluster: Cluster, ns: list[str], log: DataLog, seed: int, markers: Markers, until: float):
    rng = random.Random(seed)
    while time.monotonic() < until:
        kind = rng.choices(["append", "batch", "index"], weights=[6, 3, 1])[0]
        up = [i for i, g in enumerate(cluster.gateways) if g is not None]
        if not up:
            time.sleep(0.05)
            continue
        gw = rng.choice(up)
        uri = f"http://127.0.0.1:{cluster.ports[gw]}"
        if kind == "append":
            t = rng.choice(DATA_TABLES)
            marker = next(markers)
            try:
                lance.write_dataset(data(3, start=marker * 10), namespace_client=RestNamespace(uri=uri),
                                    table_id=ns + [t], mode="append")
                with log.lock:
                    log.acked[t].add(marker)
                    log.counts["append"] += 1
            except Exception:  # noqa: BLE001 - a gateway killed under it: the outcome is unknown
                with log.lock:
                    log.unknown[t].add(marker)
                    log.counts["failed"] += 1
        elif kind == "batch":
            pair = rng.sample(DATA_TABLES, 2)
            marker = next(markers)
            other = f"http://127.0.0.1:{cluster.ports[1 - gw]}"
            # Beside the appends, now and then a table declared and one an earlier batch
            # declared deregistered, in the same batch.
            declare = f"x{marker}" if rng.random() < 0.5 else None
            with log.lock:
                log.batches.append((marker, tuple(pair)))
                deregister = log.free.pop(rng.randrange(len(log.free))) if log.free and rng.random() < 0.5 else None
            try:
                with transaction([uri, other], retry_for=30, timeout=20) as tx:
                    for t in pair:
                        lance.write_dataset(data(3, start=marker * 10), namespace_client=tx.namespace,
                                            table_id=ns + [t], mode="append")
                    if declare:
                        tx.declare(ns + [declare])
                    if deregister:
                        tx.deregister(ns + [deregister])
                with log.lock:
                    for t in pair:
                        log.acked[t].add(marker)
                    if declare:
                        log.declared.add(declare)
                        log.free.append(declare)
                    if deregister:
                        log.deregistered.add(deregister)
                    log.counts["batch"] += 1
            except Exception:  # noqa: BLE001 - unknown: every part of it or none
                with log.lock:
                    for t in pair:
                        log.unknown[t].add(marker)
                    if declare:
                        log.declared_unknown.add(declare)
                    if deregister:
                        log.deregistered_unknown.add(deregister)
                    log.counts["failed"] += 1
        else:
            t = rng.choice(DATA_TABLES)
            try:
                status, body, _ = call(uri, "POST", f"/v1/table/{enc(ns + [t])}/create_index",
                                       {"id": ns + [t], "column": "id", "index_type": "BTREE"})
            except OSError:
                status, body = None, {}
            with log.lock:
                if status == 200:
                    log.indexed.add(t)
                    log.counts["index"] += 1
                else:
                    log.index_failures += 1


def roller(cluster: Cluster, steps: list, seconds: float, until: float):
    """Takes this round's steps (gateway, binary), spread over its time: each a SIGKILL and a
    restart as the given release."""
    start = time.monotonic()
    for k, (i, binary) in enumerate(steps):
        at = start + seconds * (k + 1) / (len(steps) + 1)
        time.sleep(max(0.0, min(at, until) - time.monotonic()))
        cluster.kill_and_restart(i, random.uniform(0.0, 0.3), binary)


def check_data(uri: str, ns: list[str], log: DataLog) -> list[str]:
    problems = []
    present = {}
    client = RestNamespace(uri=uri)
    for t in DATA_TABLES:
        ids = lance.dataset(namespace_client=client, table_id=ns + [t]).to_table(columns=["id"]).column("id")
        counts = pc.value_counts(pc.divide(ids, 10)).to_pylist()
        by_marker = {c["values"]: c["counts"] for c in counts}
        present[t] = {m for m in by_marker if m > 0}
        for m, n in by_marker.items():
            if n != 3 and m > 0:
                problems.append(f"{t}: marker {m} has {n} rows (3 or none)")
        missing = log.acked[t] - present[t]
        if missing:
            problems.append(f"{t}: acknowledged and missing: {sorted(missing)}")
        stray = present[t] - log.acked[t] - log.unknown[t]
        if stray:
            problems.append(f"{t}: present and never sent: {sorted(stray)}")
    for marker, pair in log.batches:
        where = [marker in present[t] for t in pair]
        if any(where) and not all(where):
            problems.append(f"batch {marker} over {pair} is in part: {where}")
    listed, token = set(), None
    while True:
        query = "?limit=100" + (f"&page_token={token}" if token else "")
        status, body, _ = call(uri, "GET", f"/v1/namespace/{enc(ns)}/table/list{query}")
        assert status == 200, body
        listed |= set(body["tables"])
        token = body.get("page_token")
        if not token:
            break
    declared = {t for t in listed if t.startswith("x")}
    must = log.declared - log.deregistered - log.deregistered_unknown
    may = must | log.declared_unknown | log.deregistered_unknown
    if must - declared:
        problems.append(f"declared by acknowledged batches and missing: {sorted(must - declared)}")
    if declared - may:
        problems.append(f"listed and never declared, or deregistered: {sorted(declared - may)}")
    for marker, _ in log.batches:
        # A batch is whole: its declare is there exactly when its appends are.
        name = f"x{marker}"
        if name in log.declared_unknown and name not in log.deregistered | log.deregistered_unknown:
            appended = any(marker in present[t] for t in DATA_TABLES)
            if appended != (name in declared):
                problems.append(f"batch {marker}: appends {'in' if appended else 'out'}, its declare not")
    for t in log.indexed:
        status, body, _ = call(uri, "POST", f"/v1/table/{enc(ns + [t])}/index/list", {"id": ns + [t]})
        if status != 200 or not body.get("indexes"):
            problems.append(f"{t}: an acknowledged index build is not listed ({status} {body})")
    return problems


def admin(binary: str, args: list[str], env: dict, *command: str) -> dict:
    out = subprocess.run([binary, "admin", *command, "--json", *args], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


@pytest.fixture(params=["local", "seaweedfs"])
def warehouse_setup(request):
    if request.param == "local":
        root = tempfile.mkdtemp(prefix="lg-releases-")
        return request.param, ["--warehouse", root], {}, local_warehouse(root)
    sw = request.getfixturevalue("seaweed")
    bucket = f"lg-rel-{uuid.uuid4().hex[:10]}"
    wh = s3_warehouse(sw.endpoint, seaweedfs.ADMIN_KEY, seaweedfs.ADMIN_SECRET, bucket, "wh")
    args, env = s3_gateway_setup(sw, f"s3://{bucket}/wh")
    return request.param, args, env, wh


def test_a_rolling_upgrade_and_a_rollback_lose_nothing(warehouse_setup):
    kind, args, env, wh = warehouse_setup
    old, new = previous_release(), gateway_binary()
    assert release_of(old) != release_of(new), "the previous release is this one: scripts/previous-release"
    seed = int(os.environ.get("LANCE_GATEWAY_HISTORY_SEED") or random.randrange(1, 10**6))
    print(f"{kind} two releases: seed {seed} (replay with LANCE_GATEWAY_HISTORY_SEED={seed}); "
          f"previous: {release_of(old)}")
    random.seed(seed)
    base_args = [*args, "--managed-versioning", "true", *QUICK]
    # The previous release makes the warehouse, as it would have in production.
    cluster = Cluster(base_args, env, GATEWAYS, RECOVERY, binaries=[old] * GATEWAYS)
    stopped = False
    try:
        uri0 = f"http://127.0.0.1:{cluster.ports[0]}"
        ns = [f"data{seed % 10000}"]
        client = RestNamespace(uri=uri0)
        client.create_namespace(ln.CreateNamespaceRequest(id=ns, properties=POLICY))
        for t in DATA_TABLES:
            lance.write_dataset(data(3, start=0), namespace_client=client, table_id=ns + [t], mode="create")
        log = DataLog()
        shared = Markers()
        # Up, down, up: every gateway to this release, back to the previous one, to this one.
        plan = [(i, b) for b in (new, old, new) for i in range(GATEWAYS)]
        per_round = [plan[2 * k:2 * k + 2] for k in range(ROUNDS)]
        failures, checked = [], 0
        for k in range(ROUNDS):
            beside = [lambda until, k=k: roller(cluster, per_round[k], SECONDS, until)]
            beside += [lambda until, p=p: data_worker(cluster, ns, log, seed * 10 + p, shared, until) for p in range(2)]
            r = run_round(cluster, wh, k, seed + k, SECONDS, WORKERS, kills=False, beside=beside)
            checked += len(r.ops)
            problems = verify_round(cluster, wh, r, seed + k)
            if problems:
                failures.append(f"round {k} (seed {seed + k}):\n" + "\n".join(problems))
                break
        assert not failures, "\n\n".join(failures) + "\n" + cluster.logs()
        assert cluster.binaries == [new] * GATEWAYS and cluster.kills == len(plan)
        print(f"{kind}: {checked} checked requests; data {log.counts}, {log.index_failures} index builds refused "
              f"or cut; {cluster.kills} restarts across releases")
        assert checked > 100 and log.counts["append"] > 10 and log.counts["batch"] > 3, log.counts
        assert log.declared and log.deregistered, "the batches declared and deregistered nothing"

        problems = check_data(uri0, ns, log)
        assert not problems, "\n".join(problems) + "\n" + cluster.logs()
        # The gateways' maintenance ran on the data tables, whichever release ran it.
        deadline = time.monotonic() + 60
        while True:
            runs = [call(uri0, "POST", f"/v1/table/{enc(ns + [t])}/describe?load_detailed_metadata=true",
                         {"id": ns + [t]})[1]
                    .get("maintenance", {}).get("compaction", {}).get("last_run") for t in DATA_TABLES]
            if any(runs) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert any(runs), f"no compaction ran: {runs}"
        assert check_data(uri0, ns, log) == [], "compaction changed what the tables hold"

        assert all(code == 0 for code in cluster.stop())
        stopped = True
        # Both releases find nothing wrong with the warehouse.
        assert fsck_problems(cluster) == []
        assert fsck_problems(cluster, binary=old) == []
        # Nothing raised the warehouse format: the previous release could still come back.
        seen = admin(new, args, env, "upgrade")
        assert [c["warehouse_format"] for c in seen["cells"]] == [2], seen
        up = admin(new, args, env, "upgrade", "--to", "3")
        assert [c["warehouse_format"] for c in up["cells"]] == [3], up
        # Now a drop keeps its table for undrop.
        gw = start_gateway([*base_args, *RECOVERY], env, binary=new)
        try:
            status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(ns + ['d0'])}/drop", {"id": ns + ["d0"]})
            assert status == 200, body
            status, body, _ = call(gw.uri, "GET", f"/v1/namespace/{enc(ns)}/dropped_tables")
            assert status == 200 and [d["id"] for d in body["dropped"]] == [ns + ["d0"]], body
            status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(ns + ['d0'])}/undrop", {})
            assert status == 200, body
            assert check_data(gw.uri, ns, log) == []
        finally:
            assert gw.stop() == 0
        assert fsck_problems(cluster) == []
    finally:
        if not stopped:
            cluster.stop()
