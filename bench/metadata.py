"""Side-by-side metadata benchmark: lance-gateway vs pylance's reference RestAdapter("dir").

Both serve a local-directory warehouse on this machine, in separate processes, in one run:
  1. declares one after another (one keep-alive connection)
  2. declares 8-way parallel
  3. describe under load from wrk (a separate load generator): requests/s and latency
  4. a paginated walk of the table list (limit 100)
  5. the server's peak RSS (VmHWM), and lance-gateway's with --rss-tables tables

Each server runs twice, the rounds in opposite orders, on a fresh warehouse each time; the
table shows the means and the ratios (gateway / reference). Timings vary with the machine's load:
this is a script to read, not a test to pass. Usage:
  python bench/metadata.py [--tables 1000] [--rss-tables 10000] [--seconds 10]
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ratios  # noqa: E402
REFERENCE_SERVER = """
import sys, time, lance.namespace as lns
adapter = lns.RestAdapter("dir", {"root": sys.argv[1]}, host="127.0.0.1", port=int(sys.argv[2]))
adapter.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cache_whole_file(path):
    """Drop a server's executable from the page cache and read it back whole before it starts.

    The kernel maps in the already-cached file pages around each page a process faults on
    ("fault-around", in blocks as large as the cache's own), so how the page cache happens to
    hold a binary (one just built is held whole, in the blocks it was written in; one not run
    for a while hardly at all) moves its file-backed RSS by several MiB. Evicting and reading
    back each one measures every binary from the same state. A binary just built or copied is
    written to disk first: the kernel does not drop pages that are dirty or being written.
    """
    with open(shutil.which(path) or path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        while f.read(1 << 24):
            pass


class Server:
    def __init__(self, name, argv, port):
        self.name, self.port = name, port
        cache_whole_file(argv[0])
        # Its output goes to a file: a pipe nobody reads fills up, and a gateway writing its
        # log into a full pipe stops answering (far.py's runs hung on it).
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{name.split()[0]}-", suffix=".log", delete=False).name
        self.proc = subprocess.Popen(argv, stdout=open(self.log, "w"), stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/v1/namespace/%24/list")
                c.getresponse().read()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{name} did not start")

    def peak_rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            kb = int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1))
        return kb / 1024

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def call(conn, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"content-type": "application/json"} if data is not None else {}
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    payload = resp.read()
    return resp.status, payload


def enc(parts):
    return urllib.parse.quote("$".join(parts), safe="")


def declare_many(port, names, ns):
    ns = [ns] if isinstance(ns, str) else list(ns)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for n in names:
        status, body = call(conn, "POST", f"/v1/table/{enc(ns + [n])}/declare", {"id": ns + [n]})
        if status != 200:
            raise RuntimeError(f"declare {n}: {status} {body[:200]}")


def bench_server(server, tables, seconds, wrk, base=()):
    """The workload against one server; `base` prefixes every id (a bucket, for catalogs
    whose first level is a bucket)."""
    port, results, base = server.port, {}, list(base)
    ns = base + ["bench"]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    status, body = call(conn, "POST", f"/v1/namespace/{enc(ns)}/create", {"id": ns})
    assert status == 200, body

    n_seq = min(300, tables)
    t0 = time.perf_counter()
    declare_many(port, [f"s{i:05d}" for i in range(n_seq)], ns)
    results["declare sequential (ops/s)"] = n_seq / (time.perf_counter() - t0)

    remaining = tables - n_seq
    chunks = [[f"p{w}_{i:05d}" for i in range(w, remaining, 8)] for w in range(8)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda names: declare_many(port, names, ns), chunks))
    results["declare 8-way parallel (ops/s)"] = remaining / (time.perf_counter() - t0)

    # describe under load: wrk, 2 threads, 16 connections, POST with a JSON body
    lua = os.path.join(tempfile.mkdtemp(), "describe.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                f"wrk.body = '{json.dumps({'id': ns + ['s00001']})}'\n")
    out = subprocess.run(
        [wrk, "-t2", "-c16", f"-d{seconds}s", "--latency", "-s", lua,
         f"http://127.0.0.1:{port}/v1/table/{enc(ns + ['s00001'])}/describe"],
        capture_output=True, text=True, check=True,
    ).stdout
    results["describe (req/s)"] = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    results["describe p50 (ms)"] = parse_latency(out, "50%")
    results["describe p99 (ms)"] = parse_latency(out, "99%")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{server.name}: {errors.group(1)} failed describes under load")

    # A new connection: the first sat idle through the load, longer than a server may keep
    # an idle connection open (the gateway closes one after --header-timeout-secs).
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.perf_counter()
    seen, token = 0, None
    while True:
        q = "limit=100" + (f"&page_token={urllib.parse.quote(token)}" if token else "")
        status, body = call(conn, "GET", f"/v1/namespace/{enc(ns)}/table/list?{q}")
        page = json.loads(body)
        seen += len(page["tables"])
        token = page.get("page_token")
        if not token:
            break
    results["list walk, limit 100 (s)"] = time.perf_counter() - t0
    if seen != tables:
        raise RuntimeError(f"{server.name}: the walk returned {seen} of {tables} tables")
    if server.proc is not None:
        results["peak RSS (MiB)"] = server.peak_rss_mib()
    return results


def parse_latency(out, pct):
    m = re.search(rf"{re.escape(pct)}\s+([\d.]+)(us|ms|s)", out)
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


def tools(args) -> tuple[str, str]:
    """wrk and the gateway binary (`--gateway`, else the release build); exits without wrk."""
    wrk = shutil.which("wrk")
    if not wrk:
        sys.exit("wrk not found: run bench/run (it installs wrk)")
    return wrk, args.gateway or os.path.expanduser("~/.cache/lance-gateway/target/release/lance-gateway")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", type=int, default=1000)
    ap.add_argument("--rss-tables", type=int, default=10000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--gateway", default=os.environ.get("LANCE_GATEWAY_BIN"))
    ap.add_argument("--ratios", help="append the ratios to this file, as JSON lines (bench/guard)")
    args = ap.parse_args()
    wrk, gateway_bin = tools(args)

    rows = {}
    # Warehouses are removed only at the end: deleting thousands of files just before the
    # next server runs slows that server's file creation (ext4 skips recently freed inodes).
    roots = []
    try:
        run_all(args, gateway_bin, wrk, rows, roots)
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)


def alternate(names, roots, prefix, argv_of, bench):
    """Runs `bench(server)` on each named server twice, the rounds in opposite orders, each
    on a fresh warehouse (added to `roots`); answers each server's mean figures. A drift in
    the machine's state during the run (other load, the file system settling) then weighs on
    every server alike. `argv_of(name, root, port)` is the server's command line."""
    runs = {name: [] for name in names}
    for round_names in (names, names[::-1]):
        for name in round_names:
            root = tempfile.mkdtemp(prefix=prefix)
            roots.append(root)
            port = free_port()
            server = Server(name, argv_of(name, root, port), port)
            try:
                print(f"running {name} ...", file=sys.stderr, flush=True)
                runs[name].append(bench(server))
            finally:
                server.stop()
    return {name: {m: sum(r[m] for r in results) / len(results) for m in results[0]}
            for name, results in runs.items()}


def run_all(args, gateway_bin, wrk, rows, roots):
    names = ["lance-gateway", "lance-gateway (fs_sync off)", "reference RestAdapter(dir)"]

    def argv_of(name, root, port):
        if name.startswith("lance-gateway"):
            sync = "false" if "off" in name else "true"
            os.environ["RUST_LOG"] = "warn"
            return [gateway_bin, "serve", "--listen", f"127.0.0.1:{port}", "--warehouse", root, "--fs-sync", sync]
        return [sys.executable, "-c", REFERENCE_SERVER, root, str(port)]

    rows.update(alternate(names, roots, "bench-wh-", argv_of,
                          lambda server: bench_server(server, args.tables, args.seconds, wrk)))

    # lance-gateway alone at the RSS target's size
    root = tempfile.mkdtemp(prefix="bench-rss-")
    roots.append(root)
    port = free_port()
    server = Server("lance-gateway", [gateway_bin, "serve", "--listen", f"127.0.0.1:{port}", "--warehouse", root], port)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        call(conn, "POST", "/v1/namespace/bench/create", {})
        names = [f"r{i:05d}" for i in range(args.rss_tables)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda w: declare_many(port, names[w::8], "bench"), range(8)))
        # A fresh connection: the first one sat idle through the declares, past the gateway's
        # keep-alive timeout, and the gateway has closed it.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        seen, token = 0, None
        while True:
            q = "limit=1000" + (f"&page_token={token}" if token else "")
            page = json.loads(call(conn, "GET", f"/v1/namespace/bench/table/list?{q}")[1])
            seen += len(page["tables"])
            token = page.get("page_token")
            if not token:
                break
        assert seen == args.rss_tables
        rss_big = server.peak_rss_mib()
    finally:
        server.stop()

    gw, nosync, ref = rows["lance-gateway"], rows["lance-gateway (fs_sync off)"], rows["reference RestAdapter(dir)"]
    print(f"\nMetadata benchmark, local-directory warehouse, {args.tables} tables, wrk -t2 -c16 -d{args.seconds}s,"
          " mean of two rounds")
    print(f"{'metric':34} {'gateway':>10} {'reference':>10} {'ratio':>7}   {'gw no-sync':>10} {'ratio':>7}")
    for metric in gw:
        r1 = gw[metric] / ref[metric] if ref[metric] else float("inf")
        r2 = nosync[metric] / ref[metric] if ref[metric] else float("inf")
        print(f"{metric:34} {gw[metric]:10.2f} {ref[metric]:10.2f} {r1:6.1f}x   {nosync[metric]:10.2f} {r2:6.1f}x")
        ratios.record(args.ratios, "metadata, local", metric, gw[metric], ref[metric], "reference")
        ratios.record(args.ratios, "metadata, local, fs-sync off", metric, nosync[metric], ref[metric], "reference")
    print(f"{'lance-gateway peak RSS, ' + str(args.rss_tables) + ' tables (MiB)':34} {rss_big:14.1f}")


if __name__ == "__main__":
    main()
