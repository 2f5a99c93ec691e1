"""Faults of the store, shown by tests: two gateways over SeaweedFS through a proxy that
delays requests, answers 500 and 503 SlowDown, drops connections before and after the
store acts, and cuts answers half-way, during a random colliding workload. Afterwards every
answer is explained by one order of the requests (no acknowledged change lost, none made up),
recovery leaves no intent, and fsck finds the warehouse clean. While the store is down the
gateways answer 503 code 17, never wrong data, and they recover on their own when it is back.

Seeds are printed; LANCE_GATEWAY_FAULT_SEED replays the proxy's choices and the requests."""

import os
import random
import time
import uuid

import pytest

import seaweedfs
from conftest import s3_gateway_setup
from faultproxy import FaultProxy, Faults
from history import Cluster, call, enc, fsck_problems, run_round, s3_warehouse, verify_round

SERVICE_UNAVAILABLE = 17


@pytest.fixture
def faulty(seaweed):
    seed = int(os.environ.get("LANCE_GATEWAY_FAULT_SEED") or random.randrange(1, 10**6))
    print(f"fault seed {seed} (replay with LANCE_GATEWAY_FAULT_SEED={seed})")
    proxy = FaultProxy("127.0.0.1", seaweed.s3_port, seed)
    bucket = f"lg-fault-{uuid.uuid4().hex[:8]}"
    wh = s3_warehouse(seaweed.endpoint, seaweedfs.ADMIN_KEY, seaweedfs.ADMIN_SECRET, bucket, "wh")
    args, env = s3_gateway_setup(seaweed, f"s3://{bucket}/wh")
    args[args.index("--s3-endpoint") + 1] = proxy.endpoint
    # clients still reach the store directly; only the gateways' own traffic goes through faults
    args += ["--client-endpoint", seaweed.endpoint, "--request-timeout-secs", "15"]
    cluster = Cluster(args, env, 2)
    yield proxy, cluster, wh, seed, (bucket, seaweed, env)
    cluster.stop()
    proxy.stop()


def test_a_misbehaving_store_loses_nothing(faulty):
    proxy, cluster, wh, seed, (bucket, seaweed, env) = faulty
    total, errors = 0, []
    for i in range(3):
        def faults_on():
            proxy.faults = Faults(latency=0.2, max_delay=0.2, error=0.04, drop_before=0.02, drop_after=0.03, cut=0.03)

        r = run_round(cluster, wh, i, seed + i, seconds=6, workers=4, kills=False, on_start=faults_on)
        proxy.faults = Faults()
        problems = verify_round(cluster, wh, r, seed + i)
        assert not problems, f"round {i} (seed {seed + i}):\n" + "\n".join(problems) + "\n" + cluster.logs()
        total += len(r.ops)
        errors += r.server_errors
    print(f"{total} checked requests; proxy: {dict(proxy.done)}; 5xx answers: {len(errors)}")
    assert proxy.done["error"] + proxy.done["drop_after"] + proxy.done["cut"] > 20, proxy.done
    # A store failure is the store's: 503 code 17 (or a timeout's 503), never a 500.
    assert all(status == 503 for status, *_ in errors), errors
    assert all(gw.proc.poll() is None for gw in cluster.gateways), "a gateway died"
    cluster.stop()
    # fsck reads the store directly (not through the faults)
    cluster.args[cluster.args.index("--s3-endpoint") + 1] = seaweed.endpoint
    assert fsck_problems(cluster) == []


def test_a_store_that_is_down_gets_503_and_recovery_is_automatic(faulty):
    proxy, cluster, wh, seed, _ = faulty
    port = cluster.ports[0]
    assert call(port, "POST", "/v1/namespace/ml/create", {})[0] == 200
    status, declared = call(port, "POST", f"/v1/table/{enc(['ml', 't'])}/declare", {})
    assert status == 200
    proxy.down = True
    for gw_port in cluster.ports:
        for method, path, body in [
            ("POST", f"/v1/table/{enc(['ml', 't'])}/describe", {}),
            ("GET", "/v1/namespace/ml/table/list", None),
            ("POST", f"/v1/table/{enc(['ml', 'u'])}/declare", {}),
            ("POST", "/v1/namespace/ml/describe", {}),
        ]:
            status, answer = call(gw_port, method, path, body)
            assert (status, answer.get("code")) == (503, SERVICE_UNAVAILABLE), (path, status, answer)
        status, _ = call(gw_port, "GET", "/readyz")
        assert status == 503
    proxy.down = False
    deadline = time.monotonic() + 30
    while call(port, "GET", "/readyz")[0] != 200:
        assert time.monotonic() < deadline, "the gateway did not see the store come back"
        time.sleep(0.2)
    for gw_port in cluster.ports:
        status, answer = call(gw_port, "POST", f"/v1/table/{enc(['ml', 't'])}/describe", {})
        assert (status, answer["location"]) == (200, declared["location"])
    # the declare sent while the store was down either happened or did not: never half
    status, listing = call(port, "GET", "/v1/namespace/ml/table/list?include_declared=true")
    assert status == 200 and set(listing["tables"]) <= {"t", "u"} and "t" in listing["tables"]
