"""The catalog on each store it serves, in one run: SeaweedFS (S3), fake-gcs-server (GCS) and
Azurite (Azure), all on loopback, for this checkout's gateway and pylance's reference
DirectoryNamespace behind its RestAdapter, each on a folder of its own.

For each catalog operation it reports p50 and p99 over one keep-alive client (bench/far.py's
workload), describe's throughput at 32 connections (wrk), and, for the gateway, the store
requests one declare and one describe make, read from its own counter
(`lance_gateway_store_operations_total`) around 20 of each: the same on every store, or the
store takes more requests than S3 for the same work.

The emulators are not the clouds: they answer on loopback in well under a millisecond, so
these figures compare what each store's client and emulator cost, not GCS or Azure. The
reference reaches GCS through the suites' XML PUT pass-through (tests/interop/emulators.py),
as every Lance client must on fake-gcs-server; the gateway speaks the JSON API to
fake-gcs-server directly.

    python bench/clouds.py [--rounds 40] [--seconds 5] [--gateway BIN]
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))
sys.path.insert(0, HERE)

import emulators  # noqa: E402
import far  # noqa: E402
import metadata  # noqa: E402
import seaweedfs  # noqa: E402


def store_requests(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("lance_gateway_store_operations_total{"))


def requests_per(port: int, metrics_port: int, tag: str, n: int = 20) -> dict:
    """Store requests per declare and per describe, each the mean of `n`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    enc, root = metadata.enc, [f"count{tag}"]
    far.timed(conn, "POST", f"/v1/namespace/{enc(root)}/create", {"id": root})
    out = {}
    time.sleep(1)
    before = store_requests(metrics_port)
    for i in range(n):
        t = root + [f"t{i}"]
        far.timed(conn, "POST", f"/v1/table/{enc(t)}/declare", {"id": t})
    time.sleep(1)  # what a declare leaves for after its answer (the record's publish)
    out["declare"] = (store_requests(metrics_port) - before) / n
    before = store_requests(metrics_port)
    for i in range(n):
        t = root + [f"t{i}"]
        far.timed(conn, "POST", f"/v1/table/{enc(t)}/describe", {"id": t})
    out["describe"] = (store_requests(metrics_port) - before) / n
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--gateway", default=os.environ.get("LANCE_GATEWAY_BIN"))
    args = ap.parse_args()
    wrk, gateway_bin = metadata.tools(args)
    work = tempfile.mkdtemp(prefix="lg-clouds-")
    sw = seaweedfs.start(os.path.join(work, "weed.log"))
    gcs = emulators.start_gcs(os.path.join(work, "fake-gcs.log"))
    azurite = emulators.start_azurite(os.path.join(work, "azurite.log"))
    import boto3
    bucket = f"clouds-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=sw.endpoint, region_name="us-east-1", aws_access_key_id=seaweedfs.ADMIN_KEY,
                 aws_secret_access_key=seaweedfs.ADMIN_SECRET).create_bucket(Bucket=bucket)
    gcs_bucket = gcs.create_bucket()
    container = azurite.create_container()
    key_file = os.path.join(work, "service-account.json")
    emulators.service_account_key(key_file)
    direct_gcs = f"http://127.0.0.1:{gcs.port}"
    stores = {
        "SeaweedFS (S3)": (
            ["--warehouse", f"s3://{bucket}/gw", "--s3-endpoint", sw.endpoint, "--s3-region", "us-east-1"],
            {"AWS_ACCESS_KEY_ID": seaweedfs.ADMIN_KEY, "AWS_SECRET_ACCESS_KEY": seaweedfs.ADMIN_SECRET},
            {"root": f"s3://{bucket}/ref", "storage.aws_endpoint": sw.endpoint, "storage.aws_region": "us-east-1",
             "storage.allow_http": "true", "storage.aws_access_key_id": seaweedfs.ADMIN_KEY,
             "storage.aws_secret_access_key": seaweedfs.ADMIN_SECRET,
             "storage.aws_virtual_hosted_style_request": "false"}),
        "fake-gcs-server (GCS)": (
            ["--warehouse", f"gs://{gcs_bucket}/gw", "--gcs-endpoint", direct_gcs, "--gcs-service-account-key",
             key_file],
            {},
            {"root": f"gs://{gcs_bucket}/ref", **{f"storage.{k}": v for k, v in gcs.storage_options().items()}}),
        "Azurite (Azure)": (
            ["--warehouse", f"az://{container}/gw", "--azure-account", emulators.AZURE_ACCOUNT,
             "--azure-endpoint", azurite.endpoint],
            {"LANCE_GATEWAY_AZURE_ACCESS_KEY": emulators.AZURE_KEY},
            {"root": f"az://{container}/ref", **{f"storage.{k}": v for k, v in azurite.storage_options().items()}}),
    }
    rows, counts, failed = {}, {}, {}
    try:
        for store, (gw_args, env, ref_props) in stores.items():
            for name in ("lance-gateway", "reference"):
                port = metadata.free_port()
                tag = f"{name[:3]}{uuid.uuid4().hex[:6]}"
                if name == "lance-gateway":
                    metrics_port = metadata.free_port()
                    argv = [gateway_bin, "serve", "--listen", f"127.0.0.1:{port}", "--maintenance", "false",
                            "--metrics-listen", f"127.0.0.1:{metrics_port}", *gw_args]
                    os.environ.update(env)
                else:
                    argv = [sys.executable, "-c", far.REFERENCE_SERVER, json.dumps(ref_props), str(port)]
                server = metadata.Server(name, argv, port)
                try:
                    ops = far.operations(port, args.rounds, tag)
                    rate = far.describe_throughput(port, wrk, args.seconds, tag)
                    if name == "lance-gateway":
                        counts[store] = requests_per(port, metrics_port, tag)
                except RuntimeError as e:
                    # A server that fails on a store is reported as such, and the run goes on.
                    failed[(store, name)] = str(e)[:300]
                    print(f"{store}: {name} failed: {e}", flush=True)
                    continue
                finally:
                    server.stop()
                for op, ms in ops.items():
                    rows[(op, store, name)] = (statistics.median(ms), far.pct(ms, 99))
                rows[("describe, 32 connections (req/s)", store, name)] = (rate, None)
                print(f"{store}: {name} done", flush=True)
    finally:
        for emu in (gcs, azurite, sw):
            emu.stop()
    columns = [(s, n) for s in stores for n in ("lance-gateway", "reference")]
    print()
    print("| operation | " + " | ".join(f"{s}: {n}" for s, n in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for op in dict.fromkeys(o for o, _, _ in rows):
        cells = []
        for s, n in columns:
            v = rows.get((op, s, n))
            if v is None:
                cells.append("failed" if (s, n) in failed else "not served")
            elif v[1] is None:
                cells.append(f"{v[0]:.0f}")
            else:
                cells.append(f"{v[0]:.2f} / {v[1]:.2f}")
        print(f"| {op} | " + " | ".join(cells) + " |")
    for (s, n), why in failed.items():
        print(f"\n{s}, {n} failed: {why}")
    print()
    print("| store | store requests per declare | per describe |")
    print("|---|---:|---:|")
    for s, c in counts.items():
        print(f"| {s} | {c['declare']:.1f} | {c['describe']:.1f} |")


if __name__ == "__main__":
    main()
