"""Two lance-gateway binaries side by side, and a bare server beside them, in one run.

For each of `--rounds` rounds the servers run one after another, old and new changing
places every round (old, new, bare, then new, old, bare, ...: whatever a place in the round
costs, each gateway pays it as often; when the order was turned around instead, new always
ran in the middle, and the same binary on both sides measured 0.48x on declares), each on
a fresh local warehouse with
`--fs-sync false`, through the metadata workload of bench/metadata.py: declares one after
another and 8-way, describe under wrk (`-t2 -c32` by default), a paged list walk. Then each
gateway alone declares `--rss-tables` tables and lists them, and its peak RSS (VmHWM) is
read. The bare server (`bench/bare.rs`: the same routes answered by axum from memory, with
nothing else) shows what this machine gives an HTTP server that does no work.

Timings vary with the machine's load: read the figures, never test them. Usage:
  python bench/ab.py --old BIN --new BIN [--bare BIN] [--rounds 2] [--tables 1000]
                     [--seconds 10] [--connections 32] [--rss-tables 10000] [--describe-only]
                     [--extra-args '--metrics-listen 127.0.0.1:0'] [--old-args ...] [--new-args ...]
"""

import argparse
import http.client
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import metadata  # noqa: E402
import ratios  # noqa: E402


def cpu_seconds(pid):
    """(user, system) CPU seconds the process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def describe_load(port, ns, wrk, seconds, connections, pid=None):
    """wrk against one describe: (req/s, p50 ms, p99 ms, server user µs per request, server
    system µs per request)."""
    import re
    lua = os.path.join(tempfile.mkdtemp(), "describe.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                f"wrk.body = '{json.dumps({'id': ns + ['s00001']})}'\n")
    before = cpu_seconds(pid) if pid else (0, 0)
    out = subprocess.run(
        [wrk, "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", lua,
         f"http://127.0.0.1:{port}/v1/table/{metadata.enc(ns + ['s00001'])}/describe"],
        capture_output=True, text=True, check=True).stdout
    after = cpu_seconds(pid) if pid else (0, 0)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{errors.group(1)} failed describes under load")
    total = int(re.search(r"(\d+) requests in", out).group(1))
    return (float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            metadata.parse_latency(out, "50%"), metadata.parse_latency(out, "99%"),
            (after[0] - before[0]) / total * 1e6, (after[1] - before[1]) / total * 1e6)


def workload(server, args, wrk):
    port, ns = server.port, ["bench"]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    status, body = metadata.call(conn, "POST", f"/v1/namespace/{metadata.enc(ns)}/create", {"id": ns})
    assert status == 200, body
    results = {}
    if args.describe_only:
        metadata.declare_many(port, ["s00001"], ns)
    else:
        import time
        n_seq = min(300, args.tables)
        t0 = time.perf_counter()
        metadata.declare_many(port, [f"s{i:05d}" for i in range(n_seq)], ns)
        results["declare sequential (ops/s)"] = n_seq / (time.perf_counter() - t0)
        rest = args.tables - n_seq
        chunks = [[f"p{w}_{i:05d}" for i in range(w, rest, 8)] for w in range(8)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda names: metadata.declare_many(port, names, ns), chunks))
        results["declare 8-way (ops/s)"] = rest / (time.perf_counter() - t0)
    rps, p50, p99, user, system = describe_load(port, ns, wrk, args.seconds, args.connections,
                                                server.proc.pid)
    results["describe (req/s)"] = rps
    results["describe p50 (ms)"] = p50
    results["describe p99 (ms)"] = p99
    results["describe CPU, user (µs/req)"] = user
    results["describe CPU, kernel (µs/req)"] = system
    if not args.describe_only:
        import time
        # A new connection: the first sat idle through the load, which may outlast the
        # gateway's idle-connection timeout (--header-timeout-secs, 10 s).
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        t0 = time.perf_counter()
        seen, token = 0, None
        while True:
            q = "limit=100" + (f"&page_token={token}" if token else "")
            page = json.loads(metadata.call(conn, "GET", f"/v1/namespace/bench/table/list?{q}")[1])
            seen += len(page["tables"])
            token = page.get("page_token")
            if not token:
                break
        results["list walk, limit 100 (s)"] = time.perf_counter() - t0
        if seen != args.tables:
            raise RuntimeError(f"{server.name}: the walk saw {seen} of {args.tables} tables")
    return results


def rss_with_tables(binary, args, roots):
    """Peak RSS of a gateway that declared and listed `--rss-tables` tables."""
    root = tempfile.mkdtemp(prefix="ab-rss-")
    roots.append(root)
    port = metadata.free_port()
    server = metadata.Server("rss", [binary, "serve", "--listen", f"127.0.0.1:{port}", "--warehouse", root,
                                     "--fs-sync", "false", *shlex.split(args.extra_args)], port)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        metadata.call(conn, "POST", "/v1/namespace/bench/create", {})
        names = [f"r{i:05d}" for i in range(args.rss_tables)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda w: metadata.declare_many(port, names[w::8], "bench"), range(8)))
        # A fresh connection: the first one sat idle through the declares, past the gateway's
        # keep-alive timeout, and the gateway has closed it.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        token = None
        while True:
            q = "limit=1000" + (f"&page_token={token}" if token else "")
            token = json.loads(metadata.call(conn, "GET", f"/v1/namespace/bench/table/list?{q}")[1]).get("page_token")
            if not token:
                break
        return server.peak_rss_mib()
    finally:
        server.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True, help="the binary to compare against (main's)")
    ap.add_argument("--new", required=True, help="the binary under test")
    ap.add_argument("--bare", help="bench/bare.rs, built (default: the release build's examples/bare)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tables", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--rss-tables", type=int, default=10000)
    ap.add_argument("--describe-only", action="store_true", help="describe under load alone (no declares, walk or RSS)")
    ap.add_argument("--extra-args", default="", help="more `serve` flags for both gateways")
    ap.add_argument("--old-args", default="", help="`serve` flags for the old gateway alone (with --old and "
                    "--new the same binary, this measures a setting: '--console false')")
    ap.add_argument("--new-args", default="", help="`serve` flags for the new gateway alone")
    ap.add_argument("--ratios", help="append the ratios to this file, as JSON lines (bench/guard)")
    args = ap.parse_args()
    wrk = shutil.which("wrk") or sys.exit("wrk not found: run bench/run (it installs wrk)")
    bare = args.bare or os.path.join(args_target(), "examples", "bare")
    servers = {"old": args.old, "new": args.new}
    if os.path.exists(bare):
        servers["bare"] = bare
    else:
        print(f"(no bare server at {bare}: build it with cargo build --release --all-targets)", file=sys.stderr)
    os.environ["RUST_LOG"] = "warn"

    def argv_of(name, root, port):
        if name == "bare":
            return [servers[name], "--listen", f"127.0.0.1:{port}"]
        own = args.old_args if name == "old" else args.new_args
        return [servers[name], "serve", "--listen", f"127.0.0.1:{port}", "--warehouse", root, "--fs-sync", "false",
                *shlex.split(args.extra_args), *shlex.split(own)]

    roots = []
    try:
        names = list(servers)
        runs = {name: [] for name in names}
        for r in range(args.rounds):
            gateways = ["old", "new"] if r % 2 == 0 else ["new", "old"]
            order = gateways + [n for n in names if n not in gateways]
            for name in order:
                root = tempfile.mkdtemp(prefix="ab-wh-")
                roots.append(root)
                port = metadata.free_port()
                server = metadata.Server(name, argv_of(name, root, port), port)
                try:
                    print(f"round {r + 1}: {name} ...", file=sys.stderr, flush=True)
                    runs[name].append(workload(server, args, wrk))
                finally:
                    server.stop()
        rss = {}
        if not args.describe_only:
            for name in ("old", "new"):
                rss[name] = rss_with_tables(servers[name], args, roots)
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)

    print(f"\nlance-gateway, old against new, {args.rounds} rounds alternated, wrk -t2 -c{args.connections} "
          f"-d{args.seconds}s, --fs-sync false; each round's figure, then the mean")
    print(f"  old: {args.old}\n  new: {args.new}" + (f"\n  bare: {servers['bare']}" if "bare" in servers else ""))
    metrics = list(runs["old"][0])
    header = f"{'metric':30} {'old':>22} {'new':>22} {'new/old':>8}"
    if "bare" in servers:
        header += f" {'bare':>22} {'new/bare':>9}"
    print(header)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    for m in metrics:
        cells = []
        for name in names:
            if m not in runs[name][0]:
                cells.append("")
                continue
            each = " / ".join(f"{run[m]:.2f}" for run in runs[name])
            cells.append(f"{each} ({mean([run[m] for run in runs[name]]):.2f})")
        old, new = mean([r[m] for r in runs["old"]]), mean([r[m] for r in runs["new"]])
        line = f"{m:30} {cells[0]:>22} {cells[1]:>22} {new / old if old else float('inf'):7.2f}x"
        if "bare" in servers and m in runs["bare"][0]:
            bare_mean = mean([r[m] for r in runs["bare"]])
            line += f" {cells[2]:>22} {new / bare_mean if bare_mean else float('inf'):8.2f}x"
            ratios.record(args.ratios, "metadata, local, fs-sync off", m, new, bare_mean, "bare axum server")
        ratios.record(args.ratios, "metadata, local, fs-sync off", m, new, old, "main")
        print(line)
    for name, value in rss.items():
        print(f"peak RSS, {args.rss_tables} tables, {name}: {value:.1f} MiB")
    if rss:
        ratios.record(args.ratios, "metadata, local, fs-sync off", f"peak RSS, {args.rss_tables} tables (MiB)",
                      rss["new"], rss["old"], "main")


def args_target() -> str:
    return os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lance-gateway/target")),
                        "release")


if __name__ == "__main__":
    main()
