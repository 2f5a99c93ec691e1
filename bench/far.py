"""The catalog against a far store: SeaweedFS behind a proxy that adds a fixed delay to every
store request (tests/interop/faultproxy.py, its `delay`), at 0, 5 and 20 ms, for this
checkout's gateway (as it starts by default, and with `--read-cache`, answering describe,
exists and listings from memory), main's (`--against`) and pylance's reference
DirectoryNamespace behind its RestAdapter, each on its own folder of one bucket, all through
the same proxy.

For each catalog operation it reports p50 and p99 over one keep-alive client, in
milliseconds and in store latencies (the time divided by the delay: how many store round
trips the client waited on in turn), and describe's throughput at 32 connections (wrk). For the gateways (not the cached run) it
then declares `--fsck-tables` more tables and times `admin fsck` over the folder through the
same proxy: how a check of the whole warehouse pays the store's latency.
The proxy is Python: at 0 ms it adds its own overhead (a fraction of a millisecond per
request), the same for every server.

    python bench/far.py [--delays 0,5,20] [--rounds 40] [--against BIN] [--ratios FILE]
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))
sys.path.insert(0, HERE)

import metadata  # noqa: E402
import ratios  # noqa: E402
import seaweedfs  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402

REFERENCE_SERVER = """
import json, sys, time, lance.namespace as lns
adapter = lns.RestAdapter("dir", json.loads(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]))
adapter.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
"""

KEYS = {"AWS_ACCESS_KEY_ID": seaweedfs.ADMIN_KEY, "AWS_SECRET_ACCESS_KEY": seaweedfs.ADMIN_SECRET,
        "AWS_REGION": "us-east-1"}


def timed(conn, method, path, body=None):
    t0 = time.perf_counter()
    status, payload = metadata.call(conn, method, path, body)
    took = (time.perf_counter() - t0) * 1000
    if status >= 300:
        raise RuntimeError(f"{method} {path}: {status} {payload[:200]}")
    return took


def operations(port, rounds, tag):
    """Each catalog operation `rounds` times over one connection: {op: [ms]}."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    enc = metadata.enc
    out = {k: [] for k in ("create namespace", "declare", "describe just after its declare", "describe",
                           "table exists", "list tables (page of 100)", "describe again (unchanged)",
                           "rename", "drop table")}
    root = [f"far{tag}"]
    timed(conn, "POST", f"/v1/namespace/{enc(root)}/create", {"id": root})
    for i in range(rounds):
        ns = root + [f"n{i}"]
        out["create namespace"].append(timed(conn, "POST", f"/v1/namespace/{enc(ns)}/create", {"id": ns}))
        t = root + [f"t{i}"]
        out["declare"].append(timed(conn, "POST", f"/v1/table/{enc(t)}/declare", {"id": t}))
        # The gateway answers a declare once its entry is written and publishes the record
        # after: a describe at once finds the entry (one more round).
        out["describe just after its declare"].append(
            timed(conn, "POST", f"/v1/table/{enc(t)}/describe", {"id": t}))
    time.sleep(1)
    for i in range(rounds):
        t = root + [f"t{i}"]
        out["describe"].append(timed(conn, "POST", f"/v1/table/{enc(t)}/describe", {"id": t}))
        out["table exists"].append(timed(conn, "POST", f"/v1/table/{enc(t)}/exists", {"id": t}))
        out["list tables (page of 100)"].append(
            timed(conn, "GET", f"/v1/namespace/{enc(root)}/table/list?limit=100"))
    # Tables this gateway has read before and nobody changed since: what --read-cache
    # answers from memory (the first describe above may follow the declare's publish).
    for i in range(rounds):
        t = root + [f"t{i}"]
        out["describe again (unchanged)"].append(timed(conn, "POST", f"/v1/table/{enc(t)}/describe", {"id": t}))
    for i in range(rounds):
        t, moved = root + [f"t{i}"], root + [f"m{i}"]
        try:
            out["rename"].append(timed(conn, "POST", f"/v1/table/{enc(t)}/rename",
                                       {"id": t, "new_namespace_id": root, "new_table_name": f"m{i}"}))
        except RuntimeError:
            out.pop("rename", None)  # the reference serves no rename
            moved = t
        out["drop table"].append(timed(conn, "POST", f"/v1/table/{enc(moved)}/drop", {"id": moved}))
        if "rename" not in out:
            break
    return {k: v for k, v in out.items() if v}


def describe_throughput(port, wrk, seconds, tag):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t = [f"far{tag}", "hot"]
    metadata.call(conn, "POST", f"/v1/table/{metadata.enc(t)}/declare", {"id": t})
    lua = os.path.join(tempfile.mkdtemp(), "describe.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                f"wrk.body = '{json.dumps({'id': t})}'\n")
    out = subprocess.run([wrk, "-t2", "-c32", f"-d{seconds}s", "--latency", "-s", lua,
                          f"http://127.0.0.1:{port}/v1/table/{metadata.enc(t)}/describe"],
                         capture_output=True, text=True, check=True).stdout
    import re
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def answering_from_memory(port, metrics_port, tag, timeout=60):
    """Waits until a describe is answered from memory (the gateway's read-cache hits move)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    ns = [f"warm{tag}"]
    metadata.call(conn, "POST", f"/v1/namespace/{metadata.enc(ns)}/create", {"id": ns})
    deadline = time.time() + timeout
    while time.time() < deadline:
        metadata.call(conn, "POST", f"/v1/namespace/{metadata.enc(ns)}/describe", {"id": ns})
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        if 'lance_gateway_read_cache_total{op="get",result="hit"}' in text:
            return
        time.sleep(0.5)
    raise RuntimeError("the gateway did not start answering from memory")


def declare_many(port, n, tag, clients=8):
    """`n` tables declared by `clients` connections at once, in namespace `fsck<tag>`."""
    enc, root = metadata.enc, [f"fsck{tag}"]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    timed(conn, "POST", f"/v1/namespace/{enc(root)}/create", {"id": root})

    def some(k):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for i in range(k, n, clients):
            t = root + [f"t{i}"]
            timed(c, "POST", f"/v1/table/{enc(t)}/declare", {"id": t})
    threads = [threading.Thread(target=some, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def fsck_seconds(binary, warehouse, endpoint):
    """`admin fsck` over `warehouse` through `endpoint`, to its end: seconds."""
    started = time.perf_counter()
    out = subprocess.run([binary, "admin", "fsck", "--warehouse", warehouse, "--s3-endpoint", endpoint,
                          "--s3-region", "us-east-1", "--json"], capture_output=True, text=True,
                         env={**os.environ, **KEYS})
    took = time.perf_counter() - started
    assert out.returncode in (0, 1), out.stderr[-2000:]
    report = json.loads(out.stdout)["report"]
    assert report["tables"] >= 1, report
    return took


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--delays", default="0,5,20")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--gateway", default=os.environ.get("LANCE_GATEWAY_BIN"))
    ap.add_argument("--against", help="main's binary, through the same proxy in the same run")
    ap.add_argument("--ratios", help="append the ratios to this file, as JSON lines (bench/guard)")
    ap.add_argument("--fsck-tables", type=int, default=200,
                    help="tables declared before `admin fsck` is timed (0: no fsck)")
    args = ap.parse_args()
    wrk, gateway_bin = metadata.tools(args)
    sw = seaweedfs.start(os.path.join(tempfile.mkdtemp(), "weed.log"))
    proxy = FaultProxy("127.0.0.1", sw.s3_port, 1)
    bucket = f"far-{uuid.uuid4().hex[:8]}"
    import boto3
    boto3.client("s3", endpoint_url=sw.endpoint, region_name="us-east-1",
                 aws_access_key_id=seaweedfs.ADMIN_KEY,
                 aws_secret_access_key=seaweedfs.ADMIN_SECRET).create_bucket(Bucket=bucket)
    servers = [("lance-gateway", gateway_bin), ("lance-gateway --read-cache", gateway_bin)]
    if args.against:
        servers.append(("main", args.against))
    servers.append(("reference", None))
    rows = {}
    try:
        for delay_ms in [float(d) for d in args.delays.split(",")]:
            proxy.delay = delay_ms / 1000
            for name, binary in servers:
                port = metadata.free_port()
                folder = f"{name}-{int(delay_ms)}"
                if binary:
                    argv = [binary, "serve", "--listen", f"127.0.0.1:{port}", "--warehouse", f"s3://{bucket}/{folder}",
                            "--s3-endpoint", proxy.endpoint, "--s3-region", "us-east-1",
                            "--maintenance", "false"]
                    cached = name.endswith("--read-cache")
                    if cached:
                        # A grace period of 10 s: it answers from memory 7.5 s after its start.
                        metrics_port = metadata.free_port()
                        argv += ["--read-cache", "true", "--recovery-grace-secs", "10",
                                 "--metrics-listen", f"127.0.0.1:{metrics_port}"]
                    env_extra = KEYS
                else:
                    props = {"root": f"s3://{bucket}/{folder}", "storage.aws_endpoint": proxy.endpoint,
                             "storage.aws_region": "us-east-1", "storage.allow_http": "true",
                             "storage.aws_access_key_id": seaweedfs.ADMIN_KEY,
                             "storage.aws_secret_access_key": seaweedfs.ADMIN_SECRET,
                             "storage.aws_virtual_hosted_style_request": "false"}
                    argv = [sys.executable, "-c", REFERENCE_SERVER, json.dumps(props), str(port)]
                    env_extra = {}
                    cached = False
                os.environ.update(env_extra)
                server = metadata.Server(name, argv, port)
                if cached:
                    answering_from_memory(port, metrics_port, folder.replace("-", ""))
                fsck = binary and not cached and args.fsck_tables
                try:
                    ops = operations(port, args.rounds, folder.replace("-", ""))
                    if fsck:
                        declare_many(port, args.fsck_tables, folder.replace("-", ""))
                    rate = describe_throughput(port, wrk, args.seconds, folder.replace("-", ""))
                finally:
                    server.stop()
                if fsck:
                    took = fsck_seconds(binary, f"s3://{bucket}/{folder}", proxy.endpoint)
                    rows[(delay_ms, f"admin fsck, {args.fsck_tables} tables and more (s)", name)] = (took, None)
                for op, ms in ops.items():
                    rows[(delay_ms, op, name)] = (statistics.median(ms), pct(ms, 99))
                rows[(delay_ms, "describe, 32 connections (req/s)", name)] = (rate, None)
                print(f"[{delay_ms:g} ms] {name}: done", flush=True)
    finally:
        proxy.stop()
        sw.stop() if hasattr(sw, "stop") else sw.proc.terminate()
    names = [n for n, _ in servers]
    print()
    print(f"| store delay | operation | " + " | ".join(f"{n} p50 / p99 ms (latencies)" for n in names) + " |")
    print("|---|---|" + "---|" * len(names))
    for (delay_ms, op) in dict.fromkeys((d, o) for d, o, _ in rows):
        cells = []
        for n in names:
            v = rows.get((delay_ms, op, n))
            if v is None:
                cells.append("not served")
            elif v[1] is None:
                cells.append(f"{v[0]:.1f}" if op.endswith("(s)") else f"{v[0]:.0f}")
            elif delay_ms:
                cells.append(f"{v[0]:.1f} / {v[1]:.1f} ({v[0] / delay_ms:.1f} / {v[1] / delay_ms:.1f})")
            else:
                cells.append(f"{v[0]:.2f} / {v[1]:.2f}")
        print(f"| {delay_ms:g} ms | {op} | " + " | ".join(cells) + " |")
        if args.ratios:
            gw = rows.get((delay_ms, op, "lance-gateway"))
            for other in ("main", "reference"):
                o = rows.get((delay_ms, op, other))
                if gw and o:
                    ratios.record(args.ratios, f"far store, {delay_ms:g} ms", op, gw[0], o[0], other)
            gc, o = rows.get((delay_ms, op, "lance-gateway --read-cache")), rows.get((delay_ms, op, "main"))
            if gc and o:
                ratios.record(args.ratios, f"far store with --read-cache, {delay_ms:g} ms", op, gc[0], o[0], "main")


if __name__ == "__main__":
    main()
