"""How the gateway's costs grow with the warehouse: a local warehouse (`--fs-sync false`) of
N declared tables, 1 000 to a namespace, filled once through the API (8-way declares) and
copied, so this release and main's binary each get the same warehouse, in the same run.

For each size and binary:
- with maintenance off: the gateway's start-up time, declares and describes per second
  (8-way, over 2 000 requests), a full paged walk of ListAllTables (`GET /v1/table`, pages
  of 100) and of one namespace's ListTables, the slowest page of each walk, and peak RSS
  after the walks;
- restarted with maintenance on (a sweep every `--sweep-secs`): the first recovery sweep
  (time from start), the first maintenance sweep (every table looked at in full) and the
  second (every table unchanged): the time from the sweep's first table to its last look,
  the store requests per table in between (from the gateway's own metrics), and peak RSS
  and CPU seconds once both are done; a sweep not done within `--sweep-deadline` seconds is
  reported as not done, with how far it got;
- `admin fsck` and `admin maintain --dry-run`: time and peak RSS.

Timings vary with the machine's load: read the figures, never test them. Usage:
  python bench/scale.py --old BIN --new BIN [--sizes 1000,100000,1000000] [--ratios F]
"""

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))
sys.path.insert(0, HERE)

import metadata  # noqa: E402
import ratios  # noqa: E402

os.environ["RUST_LOG"] = "warn"
PER_NAMESPACE = 1000
# The store's flags beside `--warehouse` (SeaweedFS's endpoint with `--seaweedfs`).
STORE_FLAGS: list[str] = []


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


def walk(port: int, path: str) -> tuple[float, int, float]:
    """A paged walk of a listing: seconds, how many names it gave, and its slowest page's
    milliseconds."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    names, token, started, slowest = 0, None, time.perf_counter(), 0.0
    while True:
        query = "limit=100" + (f"&page_token={token}" if token else "")
        asked = time.perf_counter()
        status, body = metadata.call(conn, "GET", f"{path}?{query}")
        slowest = max(slowest, time.perf_counter() - asked)
        assert status == 200, body[:200]
        page = json.loads(body)
        names += len(page["tables"])
        token = page.get("page_token")
        if not token:
            return time.perf_counter() - started, names, slowest * 1000


def start(binary: str, wh: str, *extra: str) -> tuple[metadata.Server, float]:
    port = metadata.free_port()
    started = time.perf_counter()
    server = metadata.Server("gateway", [binary, "serve", "--listen", f"127.0.0.1:{port}", "--warehouse", wh,
                                         "--fs-sync", "false", *STORE_FLAGS,
                                         *(extra if "--maintenance" in extra else ("--maintenance", "false", *extra))],
                            port)
    return server, time.perf_counter() - started


def scrape(port: int) -> dict[str, float]:
    """The gateway's metrics, summed over labels: name -> value (looks by kind apart)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    out: dict[str, float] = {}
    for line in conn.getresponse().read().decode().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        base = name.split("{")[0]
        if base == "lance_gateway_maintenance_looks_total":
            base += "_quiet" if 'kind="quiet"' in name else "_full"
        if base == "lance_gateway_recovery_sweeps_total" and 'outcome="ok"' not in name:
            continue
        out[base] = out.get(base, 0.0) + float(value)
    return out


STORE = "lance_gateway_store_operations_total"
SWEPT = "lance_gateway_maintenance_swept_tables_total"


def looks(m: dict) -> float:
    return m.get("lance_gateway_maintenance_looks_total_quiet", 0) + m.get("lance_gateway_maintenance_looks_total_full", 0)


def sweeps(binary: str, wh: str, tables: int, sweep_secs: int, deadline: float) -> dict:
    """Starts the gateway with maintenance on and follows its first recovery sweep and its
    first two maintenance sweeps through its metrics (polled every 0.2 s)."""
    mport = metadata.free_port()
    started = time.perf_counter()
    gw, _ = start(binary, wh, "--maintenance", "true", "--maintenance-sweep-secs", str(sweep_secs),
                  "--maintenance-concurrency", "4", "--metrics-listen", f"127.0.0.1:{mport}")
    out: dict = {}
    try:
        last = [scrape(mport), time.perf_counter()]

        def until(what, done):
            """The last scrape before `done` held and the first where it did (None: the
            deadline passed)."""
            limit = time.perf_counter() + deadline
            while time.perf_counter() < limit:
                before = last[:]
                last[:] = [scrape(mport), time.perf_counter()]
                if done(last[0]):
                    return before, last[:]
                time.sleep(0.1)
            return None, None

        _, done = until("recovery sweep", lambda m: m.get("lance_gateway_recovery_sweeps_total", 0) >= 1)
        out["recovery_sweep_s"] = (done[1] - started) if done else None
        for k, name in ((1, "first"), (2, "unchanged")):
            began, _ = until(f"sweep {k} starts", lambda m: m.get(SWEPT, 0) > (k - 1) * tables)
            if began is None:
                out[f"sweep_{name}_s"] = None
                break
            _, done = until(f"sweep {k} ends", lambda m: looks(m) >= k * tables and m.get(SWEPT, 0) >= k * tables)
            if done is None:
                out[f"sweep_{name}_s"] = None
                out[f"sweep_{name}_looked"] = looks(scrape(mport)) - (k - 1) * tables
                break
            out[f"sweep_{name}_s"] = done[1] - began[1]
            out[f"sweep_{name}_requests_per_table"] = (done[0].get(STORE, 0) - began[0].get(STORE, 0)) / tables
        out["idle_peak_rss_mib"] = gw.peak_rss_mib()
        with open(f"/proc/{gw.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    finally:
        gw.stop()
    return out


def fill(binary: str, n: int, wh: str | None = None) -> str:
    wh = wh or tempfile.mkdtemp(prefix=f"bench-scale-{n}-")
    gw, _ = start(binary, wh)
    try:
        spaces = max(1, n // PER_NAMESPACE)
        eight_way(gw.port, [f"/v1/namespace/n{s}/create" for s in range(spaces)])
        eight_way(gw.port, [f"/v1/table/n{i % spaces}%24t{i}/declare" for i in range(n)])
    finally:
        gw.stop()
    return wh


def admin(binary: str, wh: str, *command: str) -> tuple[float, float]:
    """Runs an admin command to its end: seconds, and its peak RSS in MiB (VmHWM, read every
    20 ms while it runs: a fork's rusage would count the Python process it was forked from)."""
    started = time.perf_counter()
    proc = subprocess.Popen([binary, "admin", *command, "--warehouse", wh, *STORE_FLAGS],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                found = re.search(r"VmHWM:\s+(\d+) kB", f.read())
            peak = max(peak, int(found.group(1))) if found else peak
        except OSError:
            pass
        time.sleep(0.02)
    took = time.perf_counter() - started
    assert proc.returncode == 0, (command, proc.stderr.read()[-2000:])
    return took, peak / 1024


def measure(binary: str, wh: str, n: int, sweep_secs: int, deadline: float, fresh: str = "fresh",
            before: int = 0) -> dict:
    """`n` filled tables and `before` declared by earlier runs on the same warehouse; this
    run declares 2 000 more in namespace `fresh`."""
    out = {}
    n_listed = n + before + 2000
    gw, out["start_s"] = start(binary, wh)
    try:
        assert post(http.client.HTTPConnection("127.0.0.1", gw.port), f"/v1/namespace/{fresh}/create") == 200
        out["declares_per_s"] = eight_way(gw.port, [f"/v1/table/{fresh}%24d{i}/declare" for i in range(2000)])
        out["describes_per_s"] = eight_way(gw.port, [f"/v1/table/n0%24t{i * max(1, n // PER_NAMESPACE)}/describe"
                                                     for i in range(min(n, PER_NAMESPACE))] * (2000 // min(n, PER_NAMESPACE) or 1))
        out["list_all_s"], listed, out["list_all_slowest_page_ms"] = walk(gw.port, "/v1/table")
        assert listed == n_listed, (listed, n_listed)
        out["list_namespace_s"], listed, out["list_namespace_slowest_page_ms"] = walk(
            gw.port, "/v1/namespace/n0/table/list")
        assert listed == min(n, PER_NAMESPACE), listed
        out["peak_rss_mib"] = gw.peak_rss_mib()
    finally:
        gw.stop()
    out.update(sweeps(binary, wh, n_listed, sweep_secs, deadline))
    out["fsck_s"], out["fsck_peak_rss_mib"] = admin(binary, wh, "fsck")
    out["maintain_dry_run_s"], out["maintain_dry_run_peak_rss_mib"] = admin(binary, wh, "maintain", "--dry-run")
    return out


def show(v) -> str:
    if v is None:
        return "not done"
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--sizes", default="1000,100000,1000000", help="local warehouse sizes (empty: none)")
    ap.add_argument("--sweep-secs", type=int, default=10, help="the maintenance sweep's interval")
    ap.add_argument("--sweep-deadline", type=float, default=300,
                    help="seconds a recovery or maintenance sweep may take before it is reported as not done")
    ap.add_argument("--main-sweep-deadline", type=float,
                    help="the same for main's binary (default: --sweep-deadline); its sweeps of a large "
                         "warehouse may not end, and waiting for them only lengthens the run")
    ap.add_argument("--one-namespace", type=int, default=100000,
                    help="also walk ListTables of one namespace of this many tables (0: not)")
    ap.add_argument("--seaweedfs", type=int, default=0,
                    help="also fill a SeaweedFS warehouse (started here) with this many tables and measure both binaries on it")
    ap.add_argument("--ratios", help="append compared figures here (bench/guard)")
    a = ap.parse_args()
    a.deadlines = {"main": a.main_sweep_deadline or a.sweep_deadline, "this": a.sweep_deadline}
    if a.one_namespace:
        one_namespace(a)
    if a.seaweedfs:
        on_seaweedfs(a)
    for n in (int(s) for s in a.sizes.split(",") if s):
        # Each binary gets the warehouse as filled, at the same path (locations are absolute).
        wh = fill(a.new, n)
        pristine = wh + ".filled"
        shutil.copytree(wh, pristine)
        got = {}
        for label, binary in (("main", a.old), ("this", a.new)):
            shutil.rmtree(wh)
            shutil.copytree(pristine, wh)
            figures = got[label] = measure(binary, wh, n, a.sweep_secs, a.deadlines[label])
            print(f"{n} tables, {label}: " + ", ".join(f"{k} {show(v)}" for k, v in figures.items()), flush=True)
        for metric in ("list_all_s", "fsck_s", "maintain_dry_run_s", "declares_per_s", "describes_per_s",
                       "peak_rss_mib", "idle_peak_rss_mib", "sweep_first_s", "sweep_unchanged_s",
                       "sweep_unchanged_requests_per_table"):
            if got["this"].get(metric) is not None and got["main"].get(metric) is not None:
                ratios.record(a.ratios, f"scale, local, {n} tables", metric, got["this"][metric],
                              got["main"][metric], "main")
        shutil.rmtree(wh, ignore_errors=True)
        shutil.rmtree(pristine, ignore_errors=True)


def one_namespace(a):
    """A namespace of `--one-namespace` tables, its ListTables walked in pages of 100 by
    each binary, twice (the second walk finds the folder as the first left it)."""
    n = a.one_namespace
    wh = tempfile.mkdtemp(prefix=f"bench-scale-ns-{n}-")
    gw, _ = start(a.new, wh)
    try:
        assert post(http.client.HTTPConnection("127.0.0.1", gw.port), "/v1/namespace/big/create") == 200
        eight_way(gw.port, [f"/v1/table/big%24t{i}/declare" for i in range(n)])
    finally:
        gw.stop()
    time.sleep(3)
    got = {}
    for label, binary in (("main", a.old), ("this", a.new)):
        gw, _ = start(binary, wh)
        try:
            figures = got[label] = {}
            for walk_no in (1, 2):
                took, listed, slowest = walk(gw.port, "/v1/namespace/big/table/list")
                assert listed == n, (listed, n)
                figures[f"walk_{walk_no}_s"], figures[f"walk_{walk_no}_slowest_page_ms"] = took, slowest
        finally:
            gw.stop()
        print(f"one namespace of {n} tables, {label}: " + ", ".join(f"{k} {show(v)}" for k, v in figures.items()),
              flush=True)
    for metric in ("walk_2_s", "walk_2_slowest_page_ms"):
        ratios.record(a.ratios, f"scale, local, one namespace of {n} tables", metric, got["this"][metric],
                      got["main"][metric], "main")
    shutil.rmtree(wh, ignore_errors=True)


def on_seaweedfs(a):
    """The same on a SeaweedFS bucket on this machine: filled once, then main's binary and
    this one, one after the other, each declaring its own 2 000 (so each walk lists those of
    the runs before it too)."""
    import boto3
    import seaweedfs

    sw = seaweedfs.start(os.path.join(tempfile.mkdtemp(), "weed.log"))
    try:
        os.environ.update({"AWS_ACCESS_KEY_ID": seaweedfs.ADMIN_KEY, "AWS_SECRET_ACCESS_KEY": seaweedfs.ADMIN_SECRET,
                           "AWS_REGION": "us-east-1"})
        boto3.client("s3", endpoint_url=sw.endpoint, region_name="us-east-1").create_bucket(Bucket="scale")
        STORE_FLAGS[:] = ["--s3-endpoint", sw.endpoint, "--s3-region", "us-east-1"]
        n, wh = a.seaweedfs, "s3://scale/wh"
        started = time.perf_counter()
        fill(a.new, n, wh)
        print(f"SeaweedFS, {n} tables filled in {time.perf_counter() - started:.0f} s", flush=True)
        got = {}
        for i, (label, binary) in enumerate((("main", a.old), ("this", a.new))):
            figures = got[label] = measure(binary, wh, n, a.sweep_secs, a.deadlines[label], f"fresh{label}",
                                             2000 * i)
            print(f"SeaweedFS, {n} tables, {label}: " + ", ".join(f"{k} {show(v)}" for k, v in figures.items()),
                  flush=True)
        for metric in ("list_all_s", "fsck_s", "declares_per_s", "describes_per_s", "idle_peak_rss_mib",
                       "sweep_first_s", "sweep_unchanged_s", "sweep_unchanged_requests_per_table"):
            if got["this"].get(metric) is not None and got["main"].get(metric) is not None:
                ratios.record(a.ratios, f"scale, SeaweedFS, {n} tables", metric, got["this"][metric],
                              got["main"][metric], "main")
    finally:
        STORE_FLAGS.clear()
        sw.stop()


if __name__ == "__main__":
    main()
