"""Heavy work in the gateway against on a Ray cluster (`--ray-address`): how long it takes, and
what it costs the requests the gateway serves meanwhile. In one run, on a local warehouse
(`--fs-sync false`), for each executor in turn:

  - `gateway`: no Ray cluster; the gateway compacts and builds indices itself;
  - `ray x1`, `ray x2`: a Ray cluster of a head (no CPUs of its own: it runs the job's
    driver) and one or two one-CPU workers; the policy sends every table to it
    (`ray.min_rows=1`).

For each table size (`--rows`, written in `--fragments` fragments of an id, a text of five
words and a 32-dimensional vector): the compaction the gateway starts on its own after the table is written (to
fragments of Lance's 1 Mi rows), then a BTREE build on the id and a full-text build on the
text through CreateTableIndex. Each is timed from its start to its transaction's end, with
wrk asking the gateway to describe another table for the first `--seconds` of it; describe's
p99 then is set against the gateway's idle p99 (the median of three runs, with the cluster
up).

The machine has two cores, so the cluster and the gateway are pinned apart (`taskset`): the
gateway and wrk on CPU 0, every Ray node on CPU 1, as if the cluster were other machines.
Two one-CPU workers then share one core: `ray x2` shows the job spread over two workers,
not a faster build. Timings vary with the machine's load: read the figures, never test them.

Usage: python bench/ray.py [--rows 1000000,10000000] [--fragments 300] [--seconds 10]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

os.environ.setdefault("LANCE_LOG", "error")
import lance  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from lance.namespace import RestNamespace  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, "..", "tests", "interop"))
import metadata  # noqa: E402
import ratios  # noqa: E402
from maintenance import metadata_describe  # noqa: E402
from raycluster import RayCluster  # noqa: E402

WORDS = pa.array(("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi "
                  "rho sigma tau upsilon phi chi psi omega").split())
GATEWAY_CPU, RAY_CPU = "0", "1"


DIM = 32


def documents(start: int, n: int) -> pa.RecordBatch:
    """Rows of an id, a text of five words and a 32-dimensional vector (168 bytes a row,
    so a compaction has bytes to move)."""
    rng = np.random.default_rng(start)
    picks = rng.integers(0, len(WORDS), (5, n))
    text = pc.binary_join_element_wise(*(WORDS.take(pa.array(p)) for p in picks), " ")
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * DIM, dtype=np.float32)), DIM)
    return pa.RecordBatch.from_arrays([pa.array(np.arange(start, start + n, dtype=np.int64)), text, vectors],
                                      names=["id", "text", "vec"])


def write(ns, table_id, rows: int, fragments: int):
    per = -(-rows // fragments)
    schema = documents(0, 1).schema
    batches = (documents(s, min(per, rows - s)) for s in range(0, rows, per))
    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches), namespace_client=ns,
                        table_id=table_id, mode="create", max_rows_per_file=per, max_rows_per_group=8192)


class Gateway:
    def __init__(self, binary: str, root: str, cluster: RayCluster | None):
        self.port = metadata.free_port()
        ray = [*cluster.gateway_args(), "--ray-gateway-uri", f"http://127.0.0.1:{self.port}"] if cluster else []
        self.server = metadata.Server("gateway", [
            "taskset", "-c", GATEWAY_CPU, binary, "serve", "--listen", f"127.0.0.1:{self.port}",
            "--warehouse", root, "--fs-sync", "false", "--maintenance-delay-secs", "1",
            "--maintenance-sweep-secs", "86400", "--maintenance-policy", "ray.min_rows=1", *ray], self.port)
        self.ns = RestNamespace(uri=f"http://127.0.0.1:{self.port}")

    def post(self, path: str, body: dict) -> dict:
        conn = metadata.http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        status, answer = metadata.call(conn, "POST", path, body)
        if status != 200:
            raise RuntimeError(f"{path}: {status} {answer}")
        return json.loads(answer)

    def insert(self, table_id, batch: pa.RecordBatch):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as w:
            w.write_batch(batch)
        conn = metadata.http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        conn.request("POST", f"/v1/table/{metadata.enc(table_id)}/insert", body=sink.getvalue().to_pybytes(),
                     headers={"content-type": "application/vnd.apache.arrow.stream"})
        answer = conn.getresponse()
        if answer.status != 200:
            raise RuntimeError(f"insert: {answer.status} {answer.read()!r}")

    def last_run(self, table_id, task: str):
        described = self.post(f"/v1/table/{metadata.enc(table_id)}/describe?load_detailed_metadata=true",
                              {"id": table_id})
        return described.get("maintenance", {}).get(task, {}).get("last_run")

    def transaction(self, tx_id: str) -> dict:
        return self.post(f"/v1/transaction/{urllib.parse.quote(tx_id, safe='')}/describe", {})


def under_load(gw: Gateway, probe, wrk: str, seconds: int, start, done) -> dict:
    """Puts the describe load on the gateway for `seconds`, starts the work (`start`, in a
    thread of its own: a build's request waits for it), and waits for `done` to answer the
    work's record: the figures."""
    during = {}
    load = threading.Thread(target=lambda: during.update(f=metadata_describe(gw.port, probe, wrk, seconds)))
    load.start()
    t0 = time.perf_counter()
    threading.Thread(target=start).start()
    while not (tx := done()):
        time.sleep(0.2)
    took = time.perf_counter() - t0
    load.join()
    rate, p50, p99 = during["f"]
    return {"seconds": took, "p50": p50, "p99": p99, "rate": rate, "overlap": min(took, seconds), "tx": tx}


def measure(binary, executor, workers, sizes, fragments, seconds, wrk):
    cluster = RayCluster(workers=workers, head_cpus=0, cpu_list=RAY_CPU).start() if workers else None
    root = tempfile.mkdtemp(prefix="bench-ray-")
    gw = Gateway(binary, root, cluster)
    out = []
    try:
        gw.post("/v1/namespace/bench/create", {"id": ["bench"]})
        probe = ["bench", "probe"]
        lance.write_dataset(pa.Table.from_batches([documents(0, 100)]), namespace_client=gw.ns, table_id=probe, mode="create")
        # Idle: the median of three runs (one run's p99 moves by 2x between runs here).
        idle = sorted((metadata_describe(gw.port, probe, wrk, seconds) for _ in range(3)), key=lambda f: f[2])[1]
        for rows in sizes:
            table = ["bench", f"t{rows}"]
            write(gw.ns, table, rows, fragments)
            # A row through the gateway's insert route is a commit it sees: it compacts the
            # table a second later.
            r = under_load(gw, probe, wrk, seconds, lambda: gw.insert(table, documents(rows, 1)),
                           lambda: gw.last_run(table, "compaction"))
            r["seconds"] -= 1.0  # the run itself: less the delay before it starts
            assert r["tx"]["outcome"] == "succeeded", r["tx"]
            r["tx"] = gw.transaction(r["tx"]["transaction_id"])
            out.append((rows, "compaction", r))
            for task, route, body in (
                    ("BTREE build", "create_index", {"column": "id", "index_type": "BTREE"}),
                    ("FTS build", "create_scalar_index", {"column": "text", "index_type": "FTS",
                                                          "with_position": False})):
                tx = {}
                r = under_load(
                    gw, probe, wrk, seconds,
                    lambda: tx.update(id=gw.post(f"/v1/table/{metadata.enc(table)}/{route}",
                                                 {"id": table, **body})["transaction_id"]),
                    lambda: "id" in tx and (t := gw.transaction(tx["id"]))["status"] != "Running" and t)
                assert r["tx"]["status"] == "Succeeded", r["tx"]
                out.append((rows, task, r))
            for (_, task, r) in out[-3:]:
                # Where it ran, as its transaction says.
                where = r["tx"]["properties"].get("lance_gateway.executor", "gateway")
                assert where == ("ray" if workers else "gateway"), r["tx"]
                print(f"{executor:8} {rows:>10} {task:12} {r['seconds']:7.1f} s  describe p99 {r['p99']:.2f} ms "
                      f"({r['p99'] / idle[2]:.2f}x idle {idle[2]:.2f}), on {where}", file=sys.stderr)
    finally:
        gw.server.stop()
        if cluster:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return idle, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gateway", default=os.environ.get("LANCE_GATEWAY_BIN"))
    ap.add_argument("--rows", default="1000000,10000000")
    ap.add_argument("--fragments", type=int, default=300)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--executors", default="gateway,ray x1,ray x2")
    ap.add_argument("--ratios", help="append the ratios to this file (bench/guard)")
    args = ap.parse_args()
    wrk = shutil.which("wrk") or sys.exit("wrk not found: run bench/run (it installs wrk)")
    if not shutil.which("taskset"):
        sys.exit("taskset not found (util-linux)")
    os.environ["RUST_LOG"] = "warn,lance_gateway::maintain=info"
    sizes = [int(n) for n in args.rows.split(",")]
    results = {}
    for executor in args.executors.split(","):
        workers = 0 if executor == "gateway" else int(executor.split("x")[1])
        results[executor] = measure(args.gateway, executor, workers, sizes, args.fragments, args.seconds, wrk)

    print(f"\nheavy work in the gateway and on Ray, local warehouse, {args.fragments} fragments written; "
          f"the gateway and wrk on CPU {GATEWAY_CPU}, Ray's nodes on CPU {RAY_CPU}; describe under wrk "
          f"(2 threads, 16 connections) for the first {args.seconds} s of each")
    executors = list(results)
    print(f"{'rows':>10} {'work':12} " + " ".join(f"{e + ' (s)':>12} {'p99 (ms)':>9} {'x idle':>7}" for e in executors))
    print(f"{'':10} {'idle':12} " + " ".join(f"{'':>12} {results[e][0][2]:9.2f} {'':>7}" for e in executors))
    for i, (rows, task, _) in enumerate(results[executors[0]][1]):
        cells = []
        for e in executors:
            idle, out = results[e]
            r = out[i][2]
            cells.append(f"{r['seconds']:12.1f} {r['p99']:9.2f} {r['p99'] / idle[2]:6.2f}x")
        print(f"{rows:>10} {task:12} " + " ".join(cells))
        if "gateway" in results:
            gw_r = results["gateway"][1][i][2]
            for e in executors:
                if e != "gateway":
                    r = results[e][1][i][2]
                    ratios.record(args.ratios, "ray", f"{task} of {rows} rows, describe p99 while it runs (ms), {e}",
                                  r["p99"], gw_r["p99"], "the same work in the gateway")


if __name__ == "__main__":
    main()
