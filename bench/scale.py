"""How the gateway's costs grow with the warehouse: a local warehouse (`--fs-sync false`) of
N declared tables, 1 000 to a namespace, filled once through the API (8-way declares) and
copied, so this release and main's binary each get the same warehouse, in the same run.

For each size and binary: declares and describes per second (8-way, over 2 000 requests),
a full paged walk of ListAllTables (`GET /v1/table`, pages of 100) and of one namespace's
ListTables, the gateway's start-up time and peak RSS after the walks, `admin fsck`, and
`admin maintain --dry-run`.

Timings vary with the machine's load: read the figures, never test them. Usage:
  python bench/scale.py --old BIN --new BIN [--sizes 1000,30000] [--ratios F]
"""

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import metadata  # noqa: E402
import ratios  # noqa: E402

os.environ["RUST_LOG"] = "warn"
PER_NAMESPACE = 1000


def post(conn: http.client.HTTPConnection, path: str) -> int:
    status, _ = metadata.call(conn, "POST", path, {})
    return status


def eight_way(port: int, paths: list[str]) -> float:
    """POSTs every path, 8 connections at once; requests per second (all must be 200)."""
    chunks = [paths[i::8] for i in range(8)]

    def run(chunk):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        return [post(conn, p) for p in chunk]

    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        codes = [c for part in pool.map(run, chunks) for c in part]
    took = time.perf_counter() - started
    bad = [c for c in codes if c != 200]
    assert not bad, f"{len(bad)} answers were not 200 ({bad[:5]})"
    return len(paths) / took


def walk(port: int, path: str) -> tuple[float, int]:
    """A paged walk of a listing: seconds, and how many names it gave."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    names, token, started = 0, None, time.perf_counter()
    while True:
        query = "limit=100" + (f"&page_token={token}" if token else "")
        status, body = metadata.call(conn, "GET", f"{path}?{query}")
        assert status == 200, body[:200]
        page = json.loads(body)
        names += len(page["tables"])
        token = page.get("page_token")
        if not token:
            return time.perf_counter() - started, names


def start(binary: str, wh: str) -> tuple[metadata.Server, float]:
    port = metadata.free_port()
    started = time.perf_counter()
    server = metadata.Server("gateway", [binary, "serve", "--listen", f"127.0.0.1:{port}", "--warehouse", wh,
                                         "--fs-sync", "false", "--maintenance", "false"], port)
    return server, time.perf_counter() - started


def fill(binary: str, n: int) -> str:
    wh = tempfile.mkdtemp(prefix=f"bench-scale-{n}-")
    gw, _ = start(binary, wh)
    try:
        spaces = max(1, n // PER_NAMESPACE)
        eight_way(gw.port, [f"/v1/namespace/n{s}/create" for s in range(spaces)])
        eight_way(gw.port, [f"/v1/table/n{i % spaces}%24t{i}/declare" for i in range(n)])
    finally:
        gw.stop()
    return wh


def admin(binary: str, wh: str, *command: str) -> float:
    started = time.perf_counter()
    subprocess.run([binary, "admin", *command, "--warehouse", wh], check=True, capture_output=True)
    return time.perf_counter() - started


def measure(binary: str, wh: str, n: int) -> dict:
    out = {}
    gw, out["start_s"] = start(binary, wh)
    try:
        assert post(http.client.HTTPConnection("127.0.0.1", gw.port), "/v1/namespace/fresh/create") == 200
        out["declares_per_s"] = eight_way(gw.port, [f"/v1/table/fresh%24d{i}/declare" for i in range(2000)])
        out["describes_per_s"] = eight_way(gw.port, [f"/v1/table/n0%24t{i * max(1, n // PER_NAMESPACE)}/describe"
                                                     for i in range(min(n, PER_NAMESPACE))] * (2000 // min(n, PER_NAMESPACE) or 1))
        out["list_all_s"], listed = walk(gw.port, "/v1/table")
        assert listed == n + 2000, (listed, n)
        out["list_namespace_s"], listed = walk(gw.port, "/v1/namespace/n0/table/list")
        assert listed == min(n, PER_NAMESPACE), listed
        out["peak_rss_mib"] = gw.peak_rss_mib()
    finally:
        gw.stop()
    out["fsck_s"] = admin(binary, wh, "fsck")
    out["maintain_dry_run_s"] = admin(binary, wh, "maintain", "--dry-run")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--sizes", default="1000,30000")
    ap.add_argument("--ratios", help="append compared figures here (bench/guard)")
    a = ap.parse_args()
    for n in (int(s) for s in a.sizes.split(",")):
        # Each binary gets the warehouse as filled, at the same path (locations are absolute).
        wh = fill(a.new, n)
        pristine = wh + ".filled"
        shutil.copytree(wh, pristine)
        got = {}
        for label, binary in (("main", a.old), ("this", a.new)):
            shutil.rmtree(wh)
            shutil.copytree(pristine, wh)
            figures = got[label] = measure(binary, wh, n)
            print(f"{n} tables, {label}: " + ", ".join(
                f"{k} {v:,.0f}" if v >= 100 else f"{k} {v:.2f}" for k, v in figures.items()), flush=True)
        for metric in ("list_all_s", "fsck_s", "maintain_dry_run_s", "declares_per_s", "peak_rss_mib"):
            ratios.record(a.ratios, f"scale, local, {n} tables", metric, got["this"][metric],
                          got["main"][metric], "main")
        shutil.rmtree(wh, ignore_errors=True)
        shutil.rmtree(pristine, ignore_errors=True)


if __name__ == "__main__":
    main()
