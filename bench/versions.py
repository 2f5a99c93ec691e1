"""Side-by-side managed-versioning benchmark: lance-gateway (`--managed-versioning true`) vs
pylance's reference RestAdapter("dir") with `table_version_tracking_enabled=true`.

Both serve a local-directory warehouse on this machine, in separate processes, in one run:
  1. commits: pylance appends (100 rows each) to a table through the server, so each one is a
     `version/create` (with the `version/list` Lance makes first): commits per second
  2. the read hot path under load from wrk: `POST version/list?limit=1&descending=true`, which
     Lance and LanceDB call before every commit and, with `read_consistency_interval=0`, before
     every read: requests/s and latency

Each server runs twice, the rounds in opposite orders, on a fresh warehouse each time; the table
shows the means and the ratios (gateway / reference). Timings vary with the machine's load: this
is a script to read, not a test to pass. Usage:
  python bench/versions.py [--commits 100] [--seconds 10]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import lance
import numpy as np
import pyarrow as pa
from lance.namespace import RestNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from metadata import alternate, enc, parse_latency, tools  # noqa: E402

REFERENCE_SERVER = """
import sys, time, lance.namespace as lns
adapter = lns.RestAdapter("dir", {"root": sys.argv[1], "table_version_tracking_enabled": "true"},
                          host="127.0.0.1", port=int(sys.argv[2]))
adapter.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


def rows(n: int, start: int) -> pa.Table:
    rng = np.random.default_rng(start)
    return pa.table({
        "id": pa.array(np.arange(start, start + n), pa.int64()),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 16, dtype=np.float32)), 16),
    })


def bench_server(server, commits, seconds, wrk):
    ns = RestNamespace(uri=f"http://127.0.0.1:{server.port}")
    tid = ["vt"]
    lance.write_dataset(rows(100, 0), namespace_client=ns, table_id=tid, mode="create")
    batches = [rows(100, 100 * (i + 1)) for i in range(commits)]
    t0 = time.perf_counter()
    for b in batches:
        lance.write_dataset(b, namespace_client=ns, table_id=tid, mode="append")
    results = {"commits (ops/s)": commits / (time.perf_counter() - t0)}
    ds = lance.dataset(namespace_client=ns, table_id=tid)
    if ds.version != commits + 1 or ds.count_rows() != 100 * (commits + 1):
        raise RuntimeError(f"{server.name}: version {ds.version}, {ds.count_rows()} rows after {commits} commits")

    lua = os.path.join(tempfile.mkdtemp(), "latest.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\n')
    out = subprocess.run(
        [wrk, "-t2", "-c16", f"-d{seconds}s", "--latency", "-s", lua,
         f"http://127.0.0.1:{server.port}/v1/table/{enc(tid)}/version/list?limit=1&descending=true"],
        capture_output=True, text=True, check=True,
    ).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{server.name}: {errors.group(1)} failed version lists under load")
    results["latest version (req/s)"] = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    results["latest version p50 (ms)"] = parse_latency(out, "50%")
    results["latest version p99 (ms)"] = parse_latency(out, "99%")
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--gateway", default=os.environ.get("LANCE_GATEWAY_BIN"))
    args = ap.parse_args()
    wrk, gateway_bin = tools(args)
    names = ["lance-gateway", "reference RestAdapter(dir)"]

    def argv_of(name, root, port):
        if name == "lance-gateway":
            os.environ["RUST_LOG"] = "warn"
            return [gateway_bin, "serve", "--listen", f"127.0.0.1:{port}", "--warehouse", root,
                    "--managed-versioning", "true"]
        return [sys.executable, "-c", REFERENCE_SERVER, root, str(port)]

    roots = []
    try:
        means = alternate(names, roots, "bench-versions-", argv_of,
                          lambda server: bench_server(server, args.commits, args.seconds, wrk))
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
    gw, ref = means[names[0]], means[names[1]]
    print(f"\nManaged versioning, local-directory warehouse, {args.commits} pylance appends, "
          f"wrk -t2 -c16 -d{args.seconds}s, mean of two rounds")
    print(f"{'metric':28} {'gateway':>10} {'reference':>10} {'ratio':>7}")
    for metric in gw:
        ratio = gw[metric] / ref[metric] if ref[metric] else float("inf")
        print(f"{metric:28} {gw[metric]:10.2f} {ref[metric]:10.2f} {ratio:6.1f}x")


if __name__ == "__main__":
    main()
