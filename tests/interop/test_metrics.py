"""Metrics (`--metrics-listen`): scraped while real clients work, the right series move by
the right amounts. Requests by route template (never by raw id), store operations with
refused conditional writes counted apart, recovery sweeps, authentication and grant
decisions, vended credentials."""

import json
import os
import re
import tempfile
import threading
import time
import urllib.request

import lance_namespace as ln
import lancedb
import pyarrow as pa
import pytest

import seaweedfs
from conftest import free_port, s3_gateway_setup, start_gateway
from security import call, enc, grants_toml, make_key, write

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(port: int) -> dict:
    """{(name, frozenset(labels)): value} of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.headers["content-type"].startswith("text/plain")
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not Prometheus text: {line!r}"
        labels = frozenset(LABEL.findall(m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def value(samples: dict, name: str, **labels) -> float:
    """The sum over the series of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def moved(before: dict, after: dict, name: str, **labels) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@pytest.fixture
def metered():
    """A local-warehouse gateway with API keys, grants and metrics."""
    keys = {who: make_key(who) for who in ("admin", "reader")}
    work = tempfile.mkdtemp(prefix="lg-metrics-")
    keys_file, grants_file = os.path.join(work, "keys"), os.path.join(work, "grants.toml")
    write(keys_file, "\n".join(line for _, line in keys.values()) + "\n")
    write(grants_file, grants_toml([("principal", "admin", [], "admin"), ("principal", "reader", ["ml"], "read")]))
    mport = free_port()
    gw = start_gateway(["--warehouse", os.path.join(work, "wh"), "--api-keys", keys_file, "--grants", grants_file,
                        "--metrics-listen", f"127.0.0.1:{mport}"])
    yield gw, mport, {k: v[0] for k, v in keys.items()}
    assert gw.stop() == 0


def test_series_move_with_what_clients_do(metered):
    gw, mport, keys = metered
    # A sweep runs at start, beside the first requests (it is not waited for): it is
    # counted before any client asks anything.
    deadline = time.time() + 10
    before = scrape(mport)
    while value(before, "lance_gateway_recovery_sweeps_total", outcome="ok") < 1 and time.time() < deadline:
        time.sleep(0.1)
        before = scrape(mport)
    assert value(before, "lance_gateway_recovery_sweeps_total", outcome="ok") >= 1

    admin = ln.connect("rest", {"uri": gw.uri, "headers.x-api-key": keys["admin"]})
    admin.create_namespace(ln.CreateNamespaceRequest(id=["ml"]))
    db = lancedb.connect_namespace("rest", {"uri": gw.uri, "headers.x-api-key": keys["admin"]})
    db.create_table("emb", data=pa.table({"id": [1, 2, 3]}), namespace_path=["ml"])
    for i in range(5):
        admin.declare_table(ln.DeclareTableRequest(id=["ml", f"t{i}"]))
    reader = ln.connect("rest", {"uri": gw.uri, "headers.x-api-key": keys["reader"]})
    for i in range(7):
        reader.describe_table(ln.DescribeTableRequest(id=["ml", f"t{i % 5}"]))
    # refused by the grants: a reader may not drop
    with pytest.raises(Exception):
        reader.drop_table(ln.DropTableRequest(id=["ml", "t0"]))
    # refused by authentication
    assert call(gw.uri, "POST", f"/v1/table/{enc(['ml', 't0'])}/describe", {}, {"x-api-key": "lgk_0_bad"})[0] == 401
    assert call(gw.uri, "POST", "/v1/namespace/ml/create", {}, {"x-api-key": keys["admin"]})[0] == 409
    after = scrape(mport)

    describe = dict(route="/v1/table/{id}/describe", method="POST")
    assert moved(before, after, "lance_gateway_requests_total", status="200", **describe) >= 7
    assert moved(before, after, "lance_gateway_requests_total", status="401", **describe) == 1
    assert moved(before, after, "lance_gateway_requests_total", route="/v1/table/{id}/declare", status="200") >= 5
    assert moved(before, after, "lance_gateway_requests_total", route="/v1/table/{id}/drop", status="403") == 1
    assert moved(before, after, "lance_gateway_requests_total", route="/v1/namespace/{id}/create", status="409") == 1
    # routes are templates: no series names a table
    assert not any("t3" in dict(ls).get("route", "") for (_, ls) in after)
    # the latency histogram counts the same requests
    assert moved(before, after, "lance_gateway_request_duration_seconds_count", **describe) == \
        moved(before, after, "lance_gateway_requests_total", **describe)
    assert value(after, "lance_gateway_request_duration_seconds_bucket", le="+Inf", **describe) > 0
    assert value(after, "lance_gateway_requests_in_flight") == 0

    assert moved(before, after, "lance_gateway_store_operations_total", op="get", outcome="ok") > 0
    assert moved(before, after, "lance_gateway_store_operation_duration_seconds_count", op="get") > 0
    assert moved(before, after, "lance_gateway_authentications_total", scheme="api-key", decision="allow") >= 14
    assert moved(before, after, "lance_gateway_authentications_total", decision="deny") == 1
    assert moved(before, after, "lance_gateway_authorization_denials_total", needed="admin") == 1


def test_contention_is_counted_apart(metered):
    """Creates racing for one name: the losers' conditional writes are refused, and those
    refusals are what the conflict series counts (rounds of racing creates until one loses
    at the store rather than at a read; it nearly always happens in the first)."""
    gw, mport, keys = metered
    before = scrape(mport)
    statuses = []
    for round_ in range(20):
        name = f"race{round_}"
        barrier = threading.Barrier(8)

        def create():
            barrier.wait()
            statuses.append(call(gw.uri, "POST", f"/v1/namespace/{name}/create", {},
                                 {"x-api-key": keys["admin"]})[0])

        threads = [threading.Thread(target=create) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if moved(before, scrape(mport), "lance_gateway_store_operations_total", outcome="conflict") > 0:
            break
    after = scrape(mport)
    assert moved(before, after, "lance_gateway_store_operations_total", outcome="conflict") > 0
    assert set(statuses) <= {200, 409}, statuses
    assert moved(before, after, "lance_gateway_requests_total", route="/v1/namespace/{id}/create", status="200") \
        == round_ + 1


def test_requests_in_flight_are_seen_while_they_run(metered):
    """A scrape made while a client holds requests open shows them in flight."""
    gw, mport, keys = metered
    port = int(gw.uri.rsplit(":", 1)[1])
    import socket
    # Requests whose bodies are still arriving are being served: they count in flight.
    socks = []
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"POST /v1/namespace/x/create HTTP/1.1\r\nHost: x\r\nx-api-key: {keys['admin']}\r\n"
                  "content-type: application/json\r\ncontent-length: 100\r\n\r\n{".encode())
        socks.append(s)
    seen = 0
    for _ in range(50):
        seen = value(scrape(mport), "lance_gateway_requests_in_flight")
        if seen >= 3:
            break
        threading.Event().wait(0.1)
    for s in socks:
        s.close()
    assert seen >= 3
    for _ in range(50):
        if value(scrape(mport), "lance_gateway_requests_in_flight") == 0:
            break
        threading.Event().wait(0.1)
    assert value(scrape(mport), "lance_gateway_requests_in_flight") == 0


def test_vended_credentials_are_counted(seaweed):
    args, env = s3_gateway_setup(seaweed, f"s3://lg-metrics-{os.getpid()}/wh")
    import boto3
    boto3.client("s3", endpoint_url=seaweed.endpoint, region_name="us-east-1",
                 aws_access_key_id=seaweedfs.ADMIN_KEY,
                 aws_secret_access_key=seaweedfs.ADMIN_SECRET).create_bucket(Bucket=f"lg-metrics-{os.getpid()}")
    mport = free_port()
    gw = start_gateway([*args, "--metrics-listen", f"127.0.0.1:{mport}"], env)
    try:
        ns = ln.connect("rest", {"uri": gw.uri})
        ns.create_namespace(ln.CreateNamespaceRequest(id=["ml"]))
        ns.declare_table(ln.DeclareTableRequest(id=["ml", "t"]))
        before = scrape(mport)
        for _ in range(4):
            ns.describe_table(ln.DescribeTableRequest(id=["ml", "t"]))
        after = scrape(mport)
        assert moved(before, after, "lance_gateway_credentials_vended_total", policy="static") == 4
        assert moved(before, after, "lance_gateway_store_operations_total", op="get", outcome="ok") >= 4
    finally:
        assert gw.stop() == 0


def test_a_metrics_address_that_cannot_be_bound_stops_the_start():
    with tempfile.TemporaryDirectory() as work:
        with pytest.raises(RuntimeError, match="metrics-listen"):
            start_gateway(["--warehouse", os.path.join(work, "wh"), "--metrics-listen", "not-an-address"])


def test_the_dashboard_asks_for_series_the_gateway_exports():
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "docker", "grafana-dashboard.json")) as f:
        exprs = [t["expr"] for p in json.load(f)["panels"] for t in p["targets"]]
    with open(os.path.join(root, "src", "telemetry.rs")) as f:
        exported = set(re.findall(r'"(lance_gateway_[a-z_]+)"', f.read()))
    asked = {re.sub(r"_bucket$", "", n) for e in exprs for n in re.findall(r"lance_gateway_[a-z_]+", e)}
    assert asked and asked <= exported, asked - exported
    assert exported <= asked, f"series no panel shows: {exported - asked}"
