"""Several gateway processes over one warehouse, random colliding requests, every answer
checked for linearizability, on a local warehouse and on SeaweedFS; then the same while a
gateway is killed with SIGKILL at random moments and restarted, many rounds.

Then paged listings: walkers page through one namespace with small limits, following every
page token, while renames (within it, into and out of it), declares and drops race on its
few names and its namespace is dropped and created, with rivals waiting the full two
seconds; every page is checked over its own request. And walks over names whose records'
keys sort apart from the names ("t-1.json" before "t.json"), with and without a table
arriving (a committed rename not yet published): one order, every name once, every walk
ends.

Seeds are printed; `LANCE_GATEWAY_HISTORY_SEED=<seed>` replays a run (the interleaving of
threads is not replayed, the requests are). `LANCE_GATEWAY_HISTORY_ROUNDS` changes how many
crash rounds run (default 6 per warehouse); `LANCE_GATEWAY_PAGED_ROUNDS` and
`LANCE_GATEWAY_PAGED_SECONDS` how many paged rounds run and how long each (default 2 of 8 s
per warehouse)."""

import json
import os
import random
import tempfile
import time
import uuid

import pytest

import seaweedfs
from conftest import s3_gateway_setup, start_gateway
from faultproxy import FaultProxy
from history import (
    RECOVERY,
    key_segment,
    RECOVERY_FULL_WAIT,
    Cluster,
    Round,
    call,
    dump,
    enc,
    fsck_problems,
    local_warehouse,
    perform,
    run_round,
    s3_warehouse,
    verify_round,
    walk,
)
from linearizability import Op, State, around, check

GATEWAYS = 3
WORKERS = 5
# The paged pattern: mutators and walkers.
PAGED_WORKERS = 6
PAGED_WALKERS = 3


def seed_of(label: str) -> int:
    seed = int(os.environ.get("LANCE_GATEWAY_HISTORY_SEED") or random.randrange(1, 10**6))
    print(f"{label}: seed {seed} (replay with LANCE_GATEWAY_HISTORY_SEED={seed})")
    return seed


def make_cluster(request, recovery):
    if request.param == "local":
        root = tempfile.mkdtemp(prefix="lg-history-")
        wh = local_warehouse(root)
        cluster = Cluster(["--warehouse", root], {}, GATEWAYS, recovery)
    else:
        sw = request.getfixturevalue("seaweed")
        bucket = f"lg-hist-{uuid.uuid4().hex[:10]}"
        wh = s3_warehouse(sw.endpoint, seaweedfs.ADMIN_KEY, seaweedfs.ADMIN_SECRET, bucket, "wh")
        args, env = s3_gateway_setup(sw, f"s3://{bucket}/wh")
        cluster = Cluster(args, env, GATEWAYS, recovery)
    return cluster, wh


@pytest.fixture(params=["local", "seaweedfs"])
def cluster_and_warehouse(request):
    cluster, wh = make_cluster(request, RECOVERY)
    yield request.param, cluster, wh
    cluster.stop()


@pytest.fixture(params=["local", "seaweedfs"])
def full_wait_cluster(request):
    """Gateways whose grace period lets a rival wait the full two seconds."""
    cluster, wh = make_cluster(request, RECOVERY_FULL_WAIT)
    yield request.param, cluster, wh
    cluster.stop()


def run(kind, cluster, wh, rounds, seconds, kills, pattern="mixed", workers=WORKERS, walkers=0):
    """Runs `rounds` rounds; returns how many requests were checked, the 5xx answers, how
    many paged walks ran to the end, and how many of those took more than one page."""
    label = "crash loop" if kills else ("paged listings" if pattern == "paged" else "history")
    seed = seed_of(f"{kind} {label}")
    failures, total_ops, conflicts, server_errors, walks, pages, long_walks = [], 0, 0, [], 0, 0, 0
    for i in range(rounds):
        r = run_round(cluster, wh, i, seed + i, seconds, workers, kills, pattern=pattern, walkers=walkers)
        problems = verify_round(cluster, wh, r, seed + i)
        total_ops += len(r.ops)
        conflicts += r.conflicts
        server_errors += r.server_errors
        walks += r.walks
        pages += r.pages
        long_walks += r.long_walks
        if problems:
            failures.append(f"round {i} (seed {seed + i}, {len(r.ops)} ops):\n" + "\n".join(problems))
            break
    print(f"{kind}: {rounds} rounds, {total_ops} checked requests, {conflicts} answered 409 code 14, "
          f"{len(server_errors)} answered 5xx, {cluster.kills} gateways killed, {walks} paged walks of {pages} pages ({long_walks} of more than one)")
    if failures:
        print(cluster.logs())
    assert not failures, "\n\n".join(failures)
    return total_ops, server_errors, walks, long_walks


def test_history_of_three_gateways_is_linearizable(cluster_and_warehouse):
    kind, cluster, wh = cluster_and_warehouse
    checked, server_errors, _, _ = run(kind, cluster, wh, rounds=2, seconds=6, kills=False)
    assert checked > 200
    # Contention alone (no gateway killed, the store up) is never a server error.
    assert server_errors == [], server_errors


def test_crash_loop_keeps_every_promise(cluster_and_warehouse):
    kind, cluster, wh = cluster_and_warehouse
    rounds = int(os.environ.get("LANCE_GATEWAY_HISTORY_ROUNDS", "6"))
    run(kind, cluster, wh, rounds=rounds, seconds=5, kills=True)
    assert cluster.kills >= rounds, "the crash loop killed too few gateways to mean anything"
    # Once the gateways are stopped, the warehouse checks clean: every killed operation was
    # settled, no claim or dataset is left without its table.
    assert all(code == 0 for code in cluster.stop())
    assert fsck_problems(cluster) == []


def test_paged_listings_under_racing_renames(full_wait_cluster):
    """A page lists every name that existed throughout its request, whatever moves around
    it: walkers follow page tokens with limits of 1 to 3 while renames move tables within
    the namespace, behind and ahead of the walk, and into and out of it, and declares and
    drops race for the same few names, rivals waiting each other out."""
    kind, cluster, wh = full_wait_cluster
    rounds = int(os.environ.get("LANCE_GATEWAY_PAGED_ROUNDS", "2"))
    seconds = float(os.environ.get("LANCE_GATEWAY_PAGED_SECONDS", "8"))
    checked, server_errors, walks, long_walks = run(kind, cluster, wh, rounds=rounds, seconds=seconds, kills=False,
                                                    pattern="paged", workers=PAGED_WORKERS, walkers=PAGED_WALKERS)
    assert checked > 200
    # The walks were walks: many went on past their first page.
    assert walks >= 20 and long_walks >= 10, (walks, long_walks)
    assert server_errors == [], server_errors


# Names whose records' keys sort apart from the names: "t-1.json" and "t%2Ex.json" (t.x)
# sort before "t.json", since "-" and the "%" of an escape come before ".".
ODD_NAMES = ["t", "t-1", "t-2", "t.x", "t0", "t_1", "u"]


def test_pages_keep_one_order_whatever_the_names(full_wait_cluster):
    """A walk lists every table once, each page within its range (after its token, in the
    order the store lists keys in), whatever the limit and whichever gateway serves each
    page, also for names that a longer name continues with "-" or an escaped character."""
    kind, cluster, wh = full_wait_cluster
    prefix = f"odd{uuid.uuid4().hex[:6]}"
    ns = f"{prefix}a"
    r = Round(prefix, [ns], list(ODD_NAMES), [])
    status, body = call(cluster.ports[0], "POST", f"/v1/namespace/{enc([ns])}/create", {})
    assert status == 200, body
    r.clock0 = time.monotonic()
    for t in ODD_NAMES:
        op = perform(cluster, r, 0, 0, "declare", (ns, t))
        assert op is not None and op.status == 200, op
    walks = []
    for limit in (1, 2, 3, None):
        for gw in range(len(cluster.ports)):
            first = len(r.ops)
            walk(cluster, r, 0, gw, "list_tables", (ns, None, limit, None))
            walks.append((limit, [n for op in r.ops[first:] for n in op.body.get("tables", [])]))
    result = check(r.ops, State(frozenset(r.namespaces), ()))
    assert result.ok, f"{result.explanation}\n{around(r.ops, None)}\nwhole history: {dump(r)}"
    for limit, listed in walks:
        assert sorted(listed) == sorted(ODD_NAMES), (limit, listed)


def published(wh, key: str) -> dict:
    """A declared table's record, read from the store once it is there: on S3 a declare
    answers at its commit and publishes the record just after."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return wh.read_json(key)
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_pages_keep_one_order_with_tables_arriving(full_wait_cluster):
    """The same while a table is arriving: a rename whose gateway died after its deciding
    step (the source is gone) and before it published the table under its new name, which
    readers and listings already see through the committed intent (built here by hand, as
    tests/crash_states.rs does). With "t-1" arriving beside "t", "t-2" and "t0", a walk of
    limit 1 used to go round t-1, t-2, t for ever, and never reach t0."""
    kind, cluster, wh = full_wait_cluster
    prefix = f"arr{uuid.uuid4().hex[:6]}"
    ns = f"{prefix}a"
    r = Round(prefix, [ns], ["t", "t-1", "t-2", "t0", "src"], [])
    status, body = call(cluster.ports[0], "POST", f"/v1/namespace/{enc([ns])}/create", {})
    assert status == 200, body
    r.clock0 = time.monotonic()
    for t in ["t", "t-2", "t0", "src"]:
        op = perform(cluster, r, 0, 0, "declare", (ns, t))
        assert op is not None and op.status == 200, op
    source = f".lance-gateway/tables/{key_segment(ns)}/src.json"
    record = dict(published(wh, source), id=[ns, "t-1"], rev=uuid.uuid4().hex)
    record.pop("mark", None)
    intent = {"format_version": 2, "op_id": uuid.uuid4().hex, "owner": "a-gateway-that-died:1",
              "started_at_ms": int(time.time() * 1000), "state": "committed", "op": "rename_table",
              "from": [ns, "src"], "record": record}
    # The rename, as far as the history knows: sent, never answered.
    r.record(Op(0, 9, "rename", (ns, "src", ns, "t-1"), time.monotonic() - r.clock0, None))
    wh.write(f".lance-gateway/pending/{key_segment(ns)}/{key_segment('t-1')}.table.json", json.dumps(intent).encode())
    wh.delete(source)
    walks = []
    for limit in (1, 2, 3, None):
        for gw in range(len(cluster.ports)):
            first = len(r.ops)
            op = perform(cluster, r, 1, gw, "list_tables", (ns, None, limit, None))
            while op is not None and op.status == 200 and op.body.get("page_token") and len(r.ops) - first < 20:
                op = perform(cluster, r, 1, gw, "list_tables", (ns, op.body["page_token"], limit, None))
            ended = op is not None and op.status == 200 and not op.body.get("page_token")
            assert ended, f"the walk of limit {limit} did not end: {[o.body.get('tables') for o in r.ops[first:]]}"
            walks.append((limit, [n for o in r.ops[first:] for n in o.body.get("tables", [])]))
    for limit, listed in walks:
        assert sorted(listed) == ["t", "t-1", "t-2", "t0"], (limit, listed)
    result = check(r.ops, State(frozenset(r.namespaces), ()))
    assert result.ok, f"{result.explanation}\n{around(r.ops, None)}\nwhole history: {dump(r)}"


# Answers from memory (`--read-cache`): the same histories, with every gateway caching, on a
# local warehouse and on SeaweedFS behind a proxy that delays each store request by 20 ms
# (the far store the cache is for).
CACHE = ["--read-cache", "true", "--read-cache-lease-secs", "2"]


def answering_from_memory(cluster: Cluster, timeout: float = 60.0):
    """Waits until every gateway of the cluster says it answers from memory."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        logs = [open(gw.log).read() for gw in cluster.gateways if gw is not None]
        if len(logs) == len(cluster.gateways) and all("read cache: answering from memory" in t for t in logs):
            return
        time.sleep(0.2)
    raise AssertionError("the gateways did not start answering from memory; " + cluster.logs())


def make_cached_cluster(request, recovery, delay: float):
    if request.param == "local":
        root = tempfile.mkdtemp(prefix="lg-cached-")
        return Cluster(["--warehouse", root, *CACHE], {}, GATEWAYS, recovery), local_warehouse(root), None
    sw = request.getfixturevalue("seaweed")
    proxy = FaultProxy("127.0.0.1", sw.s3_port, 1)
    proxy.delay = delay
    bucket = f"lg-cached-{uuid.uuid4().hex[:10]}"
    wh = s3_warehouse(sw.endpoint, seaweedfs.ADMIN_KEY, seaweedfs.ADMIN_SECRET, bucket, "wh")
    args, env = s3_gateway_setup(sw, f"s3://{bucket}/wh")
    args[args.index("--s3-endpoint") + 1] = proxy.endpoint
    # Clients (the registers' folders, the checks) reach the store directly.
    args += ["--client-endpoint", sw.endpoint, *CACHE]
    return Cluster(args, env, GATEWAYS, recovery), wh, proxy


@pytest.fixture(params=["local", "seaweedfs"])
def cached_cluster(request):
    cluster, wh, proxy = make_cached_cluster(request, RECOVERY, 0.02)
    try:
        answering_from_memory(cluster)
        yield request.param, cluster, wh, proxy
    finally:
        cluster.stop()
        if proxy is not None:
            proxy.stop()


def test_answers_from_memory_keep_histories_linearizable(cached_cluster):
    """Three gateways answering describe, exists and listings from memory: the racing
    declares, renames, drops and namespace drops of the history suite stay linearizable,
    and so do they while gateways are killed at random and restarted (each kill revokes the
    dead gateway's cache, and its successor starts with an empty one)."""
    kind, cluster, wh, proxy = cached_cluster
    checked, server_errors, _, _ = run(kind, cluster, wh, rounds=2, seconds=6, kills=False)
    assert checked > 100
    assert server_errors == [], server_errors
    if proxy is not None:
        # The reads were answered from memory: far fewer record reads reached the store
        # than the describes, exists and listings answered.
        with proxy.lock:
            record_gets = sum(1 for method, target in proxy.log
                              if method == "GET" and "/.lance-gateway/tables/" in target and "list-type" not in target)
        print(f"{kind}: {record_gets} table record reads reached the store for {checked} requests")
    rounds = int(os.environ.get("LANCE_GATEWAY_HISTORY_ROUNDS", "3"))
    run(kind, cluster, wh, rounds=rounds, seconds=5, kills=True)
    assert cluster.kills >= rounds
    assert all(code == 0 for code in cluster.stop())
    assert fsck_problems(cluster) == []


def test_describes_from_memory_reach_no_store_and_miss_no_change(seaweed):
    """On SeaweedFS: once each gateway has read a table, its describes and exists reach the
    store no more (counted on the proxy's request log); a drop, a declare and a rename made
    through one gateway are seen by the others' very next request; a gateway killed without
    warning is revoked by the next write (which waits out its lease) and its successor
    answers the truth."""
    class Param:
        param = "seaweedfs"

        @staticmethod
        def getfixturevalue(name):
            return seaweed

    cluster, wh, proxy = make_cached_cluster(Param, RECOVERY, 0.0)
    try:
        answering_from_memory(cluster)
        p = cluster.ports
        assert call(p[0], "POST", "/v1/namespace/m/create", {})[0] == 200
        assert call(p[0], "POST", f"/v1/table/{enc(['m', 't'])}/declare", {})[0] == 200
        # Read once everywhere, after the declare's record is published (after its answer).
        time.sleep(1)
        for port in p:
            assert call(port, "POST", f"/v1/table/{enc(['m', 't'])}/describe", {})[0] == 200
            assert call(port, "POST", "/v1/namespace/m/describe", {})[0] == 200
        with proxy.lock:
            proxy.log.clear()
        for port in p:
            for _ in range(20):
                assert call(port, "POST", f"/v1/table/{enc(['m', 't'])}/describe", {})[0] == 200
                assert call(port, "POST", f"/v1/table/{enc(['m', 't'])}/exists", {})[0] == 200
                assert call(port, "POST", "/v1/namespace/m/describe", {})[0] == 200
        with proxy.lock:
            # The background beats (the gateways' heartbeats, the housekeeping lease) are
            # not the requests' reads.
            catalog_reads = [t for m, t in proxy.log if m == "GET" and "/.lance-gateway/" in t
                             and "/gateways/" not in t and "/.lance-gateway/catalog.json" not in t
                             and "/.lance-gateway/housekeeping.json" not in t]
        assert catalog_reads == [], catalog_reads[:10]

        # Every change is seen by the other gateways' next request.
        assert call(p[1], "POST", f"/v1/table/{enc(['m', 't'])}/drop", {})[0] == 200
        for port in (p[0], p[2]):
            assert call(port, "POST", f"/v1/table/{enc(['m', 't'])}/describe", {})[0] == 404
            assert call(port, "POST", f"/v1/table/{enc(['m', 't'])}/exists", {})[0] == 404
        assert call(p[2], "POST", f"/v1/table/{enc(['m', 't'])}/declare", {})[0] == 200
        for port in (p[0], p[1]):
            assert call(port, "POST", f"/v1/table/{enc(['m', 't'])}/describe", {})[0] == 200
            status, listed = call(port, "GET", "/v1/namespace/m/table/list")
            assert status == 200 and listed["tables"] == ["t"], listed
        assert call(p[0], "POST", f"/v1/table/{enc(['m', 't'])}/rename",
                    {"new_table_name": "u", "new_namespace_id": ["m"]})[0] == 200
        for port in (p[1], p[2]):
            assert call(port, "POST", f"/v1/table/{enc(['m', 't'])}/describe", {})[0] == 404
            assert call(port, "POST", f"/v1/table/{enc(['m', 'u'])}/describe", {})[0] == 200
            status, listed = call(port, "GET", "/v1/namespace/m/table/list")
            assert status == 200 and listed["tables"] == ["u"], listed

        # A gateway killed without leaving: the next write revokes it, waits out its lease
        # (2 s), and goes through; the registry says who revoked it.
        victim = cluster.gateways[2]
        victim.proc.kill()
        victim.proc.wait()
        cluster.gateways[2] = None
        started = time.monotonic()
        assert call(p[0], "POST", f"/v1/table/{enc(['m', 'v'])}/declare", {})[0] == 200
        waited = time.monotonic() - started
        entries = [wh.read_json(k) for k in wh.keys(".lance-gateway/gateways/")]
        revoked = [e["node"] for e in entries if e.get("revoked_by")]
        assert len(revoked) == 1 and revoked[0].endswith(f":{p[2]}"), entries
        print(f"the write that met the killed gateway took {waited:.2f} s")
        assert call(p[1], "POST", f"/v1/table/{enc(['m', 'v'])}/describe", {})[0] == 200
        # Its successor (same node id) starts empty and answers the truth.
        cluster.gateways[2] = start_gateway(cluster.args, cluster.env, port=p[2])
        answering_from_memory(cluster, timeout=60)
        assert call(p[1], "POST", f"/v1/table/{enc(['m', 'u'])}/drop", {})[0] == 200
        assert call(p[2], "POST", f"/v1/table/{enc(['m', 'u'])}/describe", {})[0] == 404
        assert call(p[2], "POST", f"/v1/table/{enc(['m', 'v'])}/describe", {})[0] == 200
    finally:
        cluster.stop()
        proxy.stop()
