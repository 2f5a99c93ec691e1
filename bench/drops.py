"""Drops, undrops and a catalog backup, timed: this release against main's binary in the
same run, on a fresh local warehouse each (`--fs-sync false`), and on SeaweedFS when
`--s3-endpoint` is given (a prefix warehouse in a bucket of its own, admin credentials in
the environment).

For each binary: `--tables` tables declared through the API (8-way), then dropped 8-way
(drops per second; this release keeps each for undrop, main deletes at once), then this
release undrops them 8-way, each naming its drop (undrops per second). Then, for this release, `admin backup` of a
warehouse of `--backup-tables` declared tables, `admin restore` of it into an empty
warehouse, and `admin verify` of the copy.

Timings vary with the machine's load: read the figures, never test them. Usage:
  python bench/drops.py --old BIN --new BIN [--tables 2000] [--backup-tables 10000]
                        [--s3-endpoint URL] [--ratios F]
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import metadata  # noqa: E402
import ratios  # noqa: E402

# The gateways log to a pipe nobody reads: only what matters.
os.environ["RUST_LOG"] = "warn"


def post(port: int, path: str, body: dict) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def each(port: int, names: list[str], route: str, ns: str = "b", bodies: dict | None = None) -> float:
    """Sends `route` for every table of `names`, 8-way; answers per second (all must be 200)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda n: post(port, f"/v1/table/{ns}%24{n}/{route}", (bodies or {}).get(n, {})),
                              names))
    took = time.perf_counter() - started
    bad = [c for c in codes if c != 200]
    assert not bad, f"{route}: {len(bad)} answers were not 200 ({bad[:5]})"
    return len(names) / took


def warehouse_args(kind: str, endpoint: str | None) -> list[str]:
    if kind == "local":
        return ["--warehouse", tempfile.mkdtemp(prefix="bench-drops-"), "--fs-sync", "false"]
    bucket = f"bench-drops-{uuid.uuid4().hex[:8]}"
    subprocess.run([sys.executable, "-c", f"import boto3; boto3.client('s3', endpoint_url='{endpoint}', "
                    f"region_name='us-east-1').create_bucket(Bucket='{bucket}')"], check=True)
    return ["--warehouse", f"s3://{bucket}/wh", "--s3-endpoint", endpoint, "--s3-region", "us-east-1"]


def declare_all(port: int, n: int, ns: str = "b") -> list[str]:
    assert post(port, f"/v1/namespace/{ns}/create", {}) == 200
    names = [f"t{i}" for i in range(n)]
    each(port, names, "declare", ns)
    return names


def start(binary: str, args: list[str]) -> metadata.Server:
    port = metadata.free_port()
    return metadata.Server("gateway", [binary, "serve", "--listen", f"127.0.0.1:{port}", "--maintenance", "false",
                                       *args], port)


def drop_rates(binary: str, args: list[str], n: int, undrop: bool) -> dict:
    gw = start(binary, args)
    try:
        names = declare_all(gw.port, n)
        out = {"drops_per_s": each(gw.port, names, "drop")}
        if undrop:
            # Each undrop names its drop, as the console and `admin dropped` give it.
            conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
            conn.request("GET", "/v1/namespace/b/dropped_tables")
            listed = json.loads(conn.getresponse().read())["dropped"]
            conn.close()
            ids = {d["id"][-1]: {"drop_id": d["drop_id"]} for d in listed}
            out["undrops_per_s"] = each(gw.port, names, "undrop", bodies=ids)
        return out
    finally:
        gw.stop()


def admin(binary: str, args: list[str], *command: str) -> float:
    started = time.perf_counter()
    subprocess.run([binary, "admin", *command, *args], check=True, capture_output=True)
    return time.perf_counter() - started


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--tables", type=int, default=2000)
    ap.add_argument("--backup-tables", type=int, default=10000)
    ap.add_argument("--s3-endpoint")
    ap.add_argument("--ratios", help="append compared figures here (bench/guard)")
    a = ap.parse_args()
    kinds = ["local"] + (["seaweedfs"] if a.s3_endpoint else [])
    for kind in kinds:
        got = {}
        for label, binary in (("main", a.old), ("this", a.new)):
            rates = got[label] = drop_rates(binary, warehouse_args(kind, a.s3_endpoint), a.tables,
                                            undrop=label == "this")
            print(f"{kind} {label}: " + ", ".join(f"{k} {v:,.0f}" for k, v in rates.items()), flush=True)
        ratios.record(a.ratios, f"drops, {kind}", "drops/s (kept for undrop here, deleted by main)",
                      got["this"]["drops_per_s"], got["main"]["drops_per_s"], "main")
        args = warehouse_args(kind, a.s3_endpoint)
        gw = start(a.new, args)
        try:
            declare_all(gw.port, a.backup_tables)
        finally:
            gw.stop()
        copy = os.path.join(tempfile.mkdtemp(prefix="bench-backup-"), "catalog.backup")
        backup = admin(a.new, args, "backup", "--to", copy)
        target = warehouse_args(kind, a.s3_endpoint)
        restore = admin(a.new, target, "restore", "--from", copy)
        verify = admin(a.new, target, "verify", "--from", copy)
        size = os.path.getsize(copy)
        print(f"{kind} {a.backup_tables} tables: backup {backup:.2f} s ({size / 1e6:.1f} MB), "
              f"restore {restore:.2f} s, verify {verify:.2f} s", flush=True)


if __name__ == "__main__":
    main()
