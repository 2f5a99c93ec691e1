"""Several gateway processes over one warehouse, random colliding requests, every answer
checked for linearizability, on a local warehouse and on SeaweedFS; then the same while a
gateway is killed with SIGKILL at random moments and restarted, many rounds.

Seeds are printed; `LANCE_GATEWAY_HISTORY_SEED=<seed>` replays a run (the interleaving of
threads is not replayed, the requests are). `LANCE_GATEWAY_HISTORY_ROUNDS` changes how many
crash rounds run (default 6 per warehouse)."""

import os
import random
import tempfile
import uuid

import pytest

import seaweedfs
from conftest import s3_gateway_setup
from history import Cluster, fsck_problems, local_warehouse, run_round, s3_warehouse, verify_round

GATEWAYS = 3
WORKERS = 5


def seed_of(label: str) -> int:
    seed = int(os.environ.get("LANCE_GATEWAY_HISTORY_SEED") or random.randrange(1, 10**6))
    print(f"{label}: seed {seed} (replay with LANCE_GATEWAY_HISTORY_SEED={seed})")
    return seed


@pytest.fixture(params=["local", "seaweedfs"])
def cluster_and_warehouse(request):
    if request.param == "local":
        root = tempfile.mkdtemp(prefix="lg-history-")
        wh = local_warehouse(root)
        cluster = Cluster(["--warehouse", root], {}, GATEWAYS)
    else:
        sw = request.getfixturevalue("seaweed")
        bucket = f"lg-hist-{uuid.uuid4().hex[:10]}"
        wh = s3_warehouse(sw.endpoint, seaweedfs.ADMIN_KEY, seaweedfs.ADMIN_SECRET, bucket, "wh")
        args, env = s3_gateway_setup(sw, f"s3://{bucket}/wh")
        cluster = Cluster(args, env, GATEWAYS)
    yield request.param, cluster, wh
    cluster.stop()


def run(kind, cluster, wh, rounds, seconds, kills):
    """Runs `rounds` rounds; returns how many requests were checked and the 5xx answers."""
    seed = seed_of(f"{kind} {'crash loop' if kills else 'history'}")
    failures, total_ops, conflicts, server_errors = [], 0, 0, []
    for i in range(rounds):
        r = run_round(cluster, wh, i, seed + i, seconds, WORKERS, kills)
        problems = verify_round(cluster, wh, r, seed + i)
        total_ops += len(r.ops)
        conflicts += r.conflicts
        server_errors += r.server_errors
        if problems:
            failures.append(f"round {i} (seed {seed + i}, {len(r.ops)} ops):\n" + "\n".join(problems))
            break
    print(f"{kind}: {rounds} rounds, {total_ops} checked requests, {conflicts} answered 409 code 14, "
          f"{len(server_errors)} answered 5xx, {cluster.kills} gateways killed")
    if failures:
        print(cluster.logs())
    assert not failures, "\n\n".join(failures)
    return total_ops, server_errors


def test_history_of_three_gateways_is_linearizable(cluster_and_warehouse):
    kind, cluster, wh = cluster_and_warehouse
    checked, server_errors = run(kind, cluster, wh, rounds=2, seconds=6, kills=False)
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
