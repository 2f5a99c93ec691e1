"""Maintenance: what it gives a table built by many small appends, and what it costs the
requests served meanwhile. In one run, on a local warehouse (`--fs-sync false`):

  1. table A is built by `--appends` small pylance appends through the namespace (an IVF_PQ
     index built half-way, so half its rows are unindexed); table B holds the same rows,
     written in one go and indexed at the end;
  2. filter scans and vector searches (pylance, in process, reading the tables directly as
     clients do) per second on A before maintenance, and on B;
  3. describe p50/p99 under wrk while the gateway is idle, then while it maintains A;
  4. the same scans and searches on A after maintenance (compaction, index upkeep);
  5. maintenance time per million rows.

Timings vary with the machine's load: read the figures, never test them. Usage:
  python bench/maintenance.py [--appends 1000] [--rows 200] [--dim 64] [--seconds 10]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("LANCE_LOG", "error")  # pylance's deprecation warnings, once per search
import lance  # noqa: E402
import numpy as np
import pyarrow as pa
from lance.namespace import RestNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import metadata  # noqa: E402
import ratios  # noqa: E402


def batch(start, n, dim):
    rng = np.random.default_rng(start)
    flat = rng.standard_normal((n, dim)).astype(np.float32).reshape(-1)
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "score": pa.array(rng.random(n), pa.float64()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(flat), dim),
    })


def rate(work, seconds):
    """Calls of `work` per second over `seconds`."""
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        work()
        n += 1
    return n / (time.perf_counter() - t0)


def throughput(uri, dim, seconds):
    ds = lance.dataset(uri)
    rng = np.random.default_rng(7)
    queries = [rng.standard_normal(dim).astype(np.float32) for _ in range(64)]
    i = [0]

    def search():
        i[0] += 1
        ds.to_table(columns=["id"], nearest={"column": "vector", "q": queries[i[0] % 64], "k": 10,
                                             "nprobes": 8})

    def scan():
        i[0] += 1
        lo = (i[0] % 100) / 100
        ds.to_table(columns=["id"], filter=f"score >= {lo} AND score < {lo + 0.001}")

    return {"filter scan (queries/s)": rate(scan, seconds), "vector search (queries/s)": rate(search, seconds),
            "fragments": len(ds.get_fragments())}


def index(uri, dim):
    lance.dataset(uri).create_index("vector", index_type="IVF_PQ", num_partitions=16,
                                    num_sub_vectors=dim // 8)


def metadata_describe(port, table, wrk, seconds):
    lua = os.path.join(tempfile.mkdtemp(), "describe.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                f"wrk.body = '{json.dumps({'id': table})}'\n")
    out = subprocess.run([wrk, "-t2", "-c16", f"-d{seconds}s", "--latency", "-s", lua,
                          f"http://127.0.0.1:{port}/v1/table/{metadata.enc(table)}/describe"],
                         capture_output=True, text=True, check=True).stdout
    return (float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            metadata.parse_latency(out, "50%"), metadata.parse_latency(out, "99%"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gateway", default=os.environ.get("LANCE_GATEWAY_BIN"))
    ap.add_argument("--appends", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=200, help="rows per append")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--ratios", help="append the ratios to this file (bench/guard)")
    args = ap.parse_args()
    wrk = shutil.which("wrk") or sys.exit("wrk not found: run bench/run (it installs wrk)")
    os.environ["RUST_LOG"] = "warn,lance_gateway::maintain=info"
    root = tempfile.mkdtemp(prefix="bench-maint-")
    port = metadata.free_port()

    def gateway(maintain):
        # The tables are built and measured under a gateway that does not maintain them (its
        # first sweep would find A due a minute after start); a second one maintains A when
        # it sees a commit of it, with no sweep before the bench is done.
        return metadata.Server("gateway", [args.gateway, "serve", "--listen", f"127.0.0.1:{port}",
                                           "--warehouse", root, "--fs-sync", "false",
                                           "--maintenance", "true" if maintain else "false",
                                           "--maintenance-delay-secs", "1", "--maintenance-sweep-secs", "86400"],
                               port)

    server = gateway(False)
    results = {}
    try:
        ns = RestNamespace(uri=f"http://127.0.0.1:{port}")
        conn = metadata.http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        metadata.call(conn, "POST", "/v1/namespace/bench/create", {"id": ["bench"]})
        a, b = ["bench", "appended"], ["bench", "oneshot"]
        total = args.appends * args.rows
        t0 = time.perf_counter()
        for i in range(args.appends):
            lance.write_dataset(batch(i * args.rows, args.rows, args.dim), namespace_client=ns, table_id=a,
                                mode="create" if i == 0 else "append")
            if i == args.appends // 2:
                index(lance.dataset(namespace_client=ns, table_id=a).uri, args.dim)
        print(f"{args.appends} appends of {args.rows} rows: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        whole = pa.concat_tables([batch(i * args.rows, args.rows, args.dim) for i in range(args.appends)])
        lance.write_dataset(whole, namespace_client=ns, table_id=b, mode="create")
        uri_a = lance.dataset(namespace_client=ns, table_id=a).uri
        uri_b = lance.dataset(namespace_client=ns, table_id=b).uri
        index(uri_b, args.dim)
        before = throughput(uri_a, args.dim, args.seconds)
        oneshot = throughput(uri_b, args.dim, args.seconds)
        server.stop()
        server = gateway(True)
        idle = metadata_describe(port, b, wrk, args.seconds)

        # Maintenance of A starts when the gateway sees a commit of it: one row through the
        # gateway's own insert route. The describe load runs while it works.
        sink = pa.BufferOutputStream()
        one = batch(total, 1, args.dim)
        with pa.ipc.new_stream(sink, one.schema) as w:
            w.write_table(one)
        c = metadata.http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.request("POST", f"/v1/table/{metadata.enc(a)}/insert", body=sink.getvalue().to_pybytes(),
                  headers={"content-type": "application/vnd.apache.arrow.stream"})
        assert c.getresponse().read() is not None
        t0 = time.perf_counter()
        time.sleep(1.2)  # --maintenance-delay-secs 1: the run starts a second after the commit
        during = {}
        load = threading.Thread(target=lambda: during.update(figures=metadata_describe(port, b, wrk, args.seconds)))
        load.start()

        def done():
            # A connection per poll: one left idle through the figures above would be closed.
            conn = metadata.http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            status, body = metadata.call(conn, "POST", f"/v1/table/{metadata.enc(a)}/describe?load_detailed_metadata=true",
                                         {"id": a})
            m = json.loads(body).get("maintenance", {})
            return all(m.get(t, {}).get("last_run") for t in ("compaction", "index"))

        while not done():
            time.sleep(0.2)
        took = time.perf_counter() - t0 - 1.0  # less the delay before a run starts
        load.join()
        during = during["figures"]
        overlap = max(0.0, min(took - 0.2, args.seconds))
        after = throughput(uri_a, args.dim, args.seconds)
        for name, uri in (("after maintenance", uri_a), ("one go", uri_b)):
            stats = lance.dataset(uri).stats.index_stats("vector_idx")
            print(f"index of {name}: {stats['num_indexed_rows']} rows indexed, {stats['num_unindexed_rows']} not, "
                  f"{len(stats['indices'])} segment(s), {stats['num_indexed_fragments']} fragment(s) covered",
                  file=sys.stderr)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)

    print(f"\nmaintenance of a table built by {args.appends} appends of {args.rows} rows "
          f"({total} rows, {args.dim}-dim vectors), local warehouse, {args.seconds} s per figure")
    print(f"{'':32} {'before':>10} {'after':>10} {'one go':>10} {'after/one go':>13}")
    for m in ("filter scan (queries/s)", "vector search (queries/s)", "fragments"):
        ratio = after[m] / oneshot[m] if oneshot[m] else float("inf")
        print(f"{m:32} {before[m]:10.1f} {after[m]:10.1f} {oneshot[m]:10.1f} {ratio:12.2f}x")
        if m != "fragments":
            ratios.record(args.ratios, "maintenance", f"{m} after maintenance", after[m], oneshot[m],
                          "the same rows written in one go")
    print(f"{'describe p50 / p99 (ms)':32} idle {idle[1]:.2f} / {idle[2]:.2f}, during maintenance "
          f"{during[1]:.2f} / {during[2]:.2f} (p99 {during[2] / idle[2]:.2f}x idle; maintenance ran through {overlap:.0f} s of "
          f"the {args.seconds} s load)")
    print(f"{'describe (req/s)':32} idle {idle[0]:.0f}, during maintenance {during[0]:.0f}")
    print(f"maintenance (compaction and index upkeep): {took:.1f} s, {took / (total / 1e6):.1f} s per million rows")
    ratios.record(args.ratios, "maintenance", "describe p99 during maintenance (ms)", during[2], idle[2], "idle")


if __name__ == "__main__":
    main()
