"""Describe and declares as cores are added (issue 36, item 5), against the bare server.

For each core count k in `--cores`, the gateway runs pinned to cores 0..k-1 (`taskset`; its
runtimes size themselves to the cores they may use) and wrk pinned to the cores left (at
most 8), then the bare axum server (`bench/bare.rs`) the same way, each on a fresh local
warehouse (`--fs-sync false`):
  - describe of one table under `wrk -c{--connections}`;
  - declares under `wrk -c{--writers}`, each request a new table name (a Lua script numbers
    them per wrk thread), so the rate is the catalog's and not a Python client's.
On a machine of 2 cores only k = 1 is possible (the server on one core, wrk on the other);
the figures the issue asks for need 16. Needs only Python's standard library, wrk, taskset,
the gateway and the bare server, so it runs on a lent machine from the stripped binaries.

Timings vary with the machine's load: read the figures, never test them. Usage:
  python bench/cores.py --gateway BIN [--bare BIN] [--cores 1,2,4,8] [--seconds 5]
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import metadata  # noqa: E402
import ratios  # noqa: E402

DECLARES = """
-- tid is a global of each thread's own state, set by setup() from the main state.
local counter = 0
tid = 0
local threads = 0
function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end
request = function()
  counter = counter + 1
  local name = string.format("w%d_%d", tid, counter)
  return wrk.format("POST", "/v1/table/bench%24" .. name .. "/declare",
                    {["Content-Type"] = "application/json"},
                    '{"id": ["bench", "' .. name .. '"]}')
end
"""

DESCRIBE = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"id": ["bench", "t0"]}'
"""


def wrk_run(wrk, cpus, connections, seconds, script, url):
    threads = max(1, min(len(cpus), connections))
    out = subprocess.run(["taskset", "-c", ",".join(map(str, cpus)), wrk, f"-t{threads}", f"-c{connections}",
                          f"-d{seconds}s", "--latency", "-s", script, url],
                         capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{errors.group(1)} failed requests: {out[-800:]}")
    return (float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            metadata.parse_latency(out, "50%"), metadata.parse_latency(out, "99%"))


def measure(argv, k, ncpu, a, scripts):
    root = tempfile.mkdtemp(prefix="bench-cores-")
    port = metadata.free_port()
    argv = ["taskset", "-c", f"0-{k - 1}", *[s.replace("{root}", root).replace("{port}", str(port)) for s in argv]]
    metadata.cache_whole_file(argv[3])
    server = metadata.Server("server", argv, port)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        status, body = metadata.call(conn, "POST", "/v1/namespace/bench/create", {"id": ["bench"]})
        assert status == 200, body
        status, body = metadata.call(conn, "POST", "/v1/table/bench%24t0/declare", {"id": ["bench", "t0"]})
        assert status == 200, body
        conn.close()
        load = list(range(k, min(ncpu, k + 8)))
        base = f"http://127.0.0.1:{port}"
        describe = wrk_run(a.wrk, load, a.connections, a.seconds, scripts["describe"],
                           f"{base}/v1/table/bench%24t0/describe")
        declare = wrk_run(a.wrk, load, a.writers, a.seconds, scripts["declares"], f"{base}/v1/table/declare")
        return describe, declare
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def main():
    ncpu = len(os.sched_getaffinity(0))
    default = ",".join(str(c) for c in (1, 2, 4, 8) if c <= ncpu // 2) or "1"
    ap = argparse.ArgumentParser()
    ap.add_argument("--gateway", default=os.environ.get("LANCE_GATEWAY_BIN"), required="LANCE_GATEWAY_BIN" not in os.environ)
    ap.add_argument("--bare", help="bench/bare.rs, built (default: the release build's examples/bare)")
    ap.add_argument("--cores", default=default, help=f"server core counts (default here: {default})")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=32, help="describe's connections")
    ap.add_argument("--writers", type=int, default=16, help="declares' connections")
    ap.add_argument("--ratios", help="append the ratios to this file")
    a = ap.parse_args()
    a.wrk = shutil.which("wrk") or sys.exit("wrk not found")
    bare = a.bare or os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lance-gateway/target")),
                                  "release", "examples", "bare")
    os.environ["RUST_LOG"] = "warn"
    tmp = tempfile.mkdtemp(prefix="bench-cores-lua-")
    scripts = {}
    for name, text in (("describe", DESCRIBE), ("declares", DECLARES)):
        scripts[name] = os.path.join(tmp, f"{name}.lua")
        with open(scripts[name], "w") as f:
            f.write(text)
    servers = {"gateway": [a.gateway, "serve", "--listen", "127.0.0.1:{port}", "--warehouse", "{root}",
                           "--fs-sync", "false"],
               "bare": [bare, "--listen", "127.0.0.1:{port}"]}
    rows = []
    for k in (int(c) for c in a.cores.split(",")):
        if k >= ncpu:
            print(f"({k} cores: this machine has {ncpu}, and wrk needs one)", file=sys.stderr)
            continue
        got = {name: measure(argv, k, ncpu, a, scripts) for name, argv in servers.items()}
        rows.append((k, got))
        g, b = got["gateway"], got["bare"]
        print(f"{k} core(s): describe {g[0][0]:,.0f} req/s (bare {b[0][0]:,.0f}, {g[0][0] / b[0][0]:.2f}x), "
              f"p50/p99 {g[0][1]:.2f}/{g[0][2]:.2f} ms; declares {g[1][0]:,.0f}/s (bare {b[1][0]:,.0f}), "
              f"p50/p99 {g[1][1]:.2f}/{g[1][2]:.2f} ms", flush=True)
        ratios.record(a.ratios, f"cores, {k}", "describe (req/s)", g[0][0], b[0][0], "bare axum server")
        ratios.record(a.ratios, f"cores, {k}", f"declares, {a.writers}-way (ops/s)", g[1][0], b[1][0],
                      "bare axum server")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nserver pinned to k cores, wrk to the next (at most 8) of this machine's {ncpu}; local warehouse, "
          f"--fs-sync false; describe wrk -c{a.connections}, declares wrk -c{a.writers}, {a.seconds} s each")
    print("| cores | describe req/s | bare req/s | share | describe p99 (ms) | declares/s | bare declares/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for k, got in rows:
        g, b = got["gateway"], got["bare"]
        print(f"| {k} | {g[0][0]:,.0f} | {b[0][0]:,.0f} | {g[0][0] / b[0][0]:.2f} | {g[0][2]:.2f} | "
              f"{g[1][0]:,.0f} | {b[1][0]:,.0f} |")


if __name__ == "__main__":
    main()
