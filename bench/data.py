"""The data plane, side by side with pylance in process, in one run:

  - bulk insert: Arrow batches appended through the gateway (pylance's RestNamespace,
    `insert_into_table`) versus `lance.write_dataset(mode="append")` on a dataset of its own,
    rows per second;
  - top-10 vector search on a 100 000 x 128 float32 table with an IVF_PQ index: through the
    gateway (`query_table`) versus pylance's `to_table(nearest=...)` on the same dataset,
    opened once, with the same parameters. Queries per second and p50/p99 latency, with one
    caller and with four concurrent callers;
  - describe latency while an index build runs on the gateway, versus idle (data work runs on
    a runtime of its own).

Rounds alternate their order; inserts report the median round. Both sides write to the same
folder kind, tmpfs (`/dev/shm`) by default so the disk's write-back bursts do not decide the
insert figures (`--dir` picks another). Timings vary with the machine's load: a script to
read, not a test to pass. Usage: python bench/data.py [--rows 100000] [--queries 500] [--dir D]
"""

import argparse
import io
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ratios  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))

import lance  # noqa: E402
import lance_namespace as ln  # noqa: E402
import lance_namespace_urllib3_client.models as m  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from lance.namespace import RestNamespace  # noqa: E402

from conftest import start_gateway  # noqa: E402
from security import call, enc  # noqa: E402

DIM = 128


def table(n: int, start: int = 0, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(np.arange(start, start + n), pa.int64()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * DIM, dtype=np.float32)), DIM),
    })


def ipc(t: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue()


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def bench_insert(ns, tid, direct_uri, batches, rounds):
    """Rows per second appending `batches` through the gateway and directly, after one
    untimed append each."""
    results = {"gateway": [], "pylance": []}
    rows = sum(len(b) for b in batches)
    payloads = [ipc(b) for b in batches]
    # one round each, untimed, so that neither side's first large allocations count
    ns.insert_into_table(m.InsertIntoTableRequest(id=tid, mode="append"), payloads[0])
    lance.write_dataset(batches[0], direct_uri, mode="append")
    for r in range(rounds):
        order = ["gateway", "pylance"] if r % 2 == 0 else ["pylance", "gateway"]
        for who in order:
            start = time.perf_counter()
            if who == "gateway":
                for p in payloads:
                    ns.insert_into_table(m.InsertIntoTableRequest(id=tid, mode="append"), p)
            else:
                for b in batches:
                    lance.write_dataset(b, direct_uri, mode="append")
            results[who].append(rows / (time.perf_counter() - start))
    return {k: statistics.median(v) for k, v in results.items()}


def bench_search(ns, tid, ds, queries, nprobes, concurrency, rounds):
    def gateway(q):
        t = time.perf_counter()
        resp = ns.query_table(m.QueryTableRequest(
            id=tid, k=10, vector=m.QueryTableRequestVector(single_vector=q.tolist()), vector_column="vector",
            nprobes=nprobes, columns=m.QueryTableRequestColumns(column_names=["id"])))
        got = pa.ipc.open_file(pa.BufferReader(resp.data)).read_all()
        assert len(got) == 10
        return time.perf_counter() - t

    def direct(q):
        t = time.perf_counter()
        got = ds.to_table(columns=["id"], nearest={"column": "vector", "q": q, "k": 10, "nprobes": nprobes})
        assert len(got) == 10
        return time.perf_counter() - t

    runs = {"gateway": [], "pylance": []}
    for r in range(rounds):
        order = [("gateway", gateway), ("pylance", direct)]
        if r % 2:
            order.reverse()
        for who, fn in order:
            for q in queries[:20]:  # warm the index cache
                fn(q)
            start = time.perf_counter()
            with ThreadPoolExecutor(concurrency) as pool:
                latencies = list(pool.map(fn, queries))
            elapsed = time.perf_counter() - start
            runs[who].append((len(queries) / elapsed, latencies))
    out = {}
    for who, rs in runs.items():
        lat = [x for _, ls in rs for x in ls]
        out[who] = {"qps": statistics.mean(q for q, _ in rs), "p50": percentile(lat, 0.5) * 1000,
                    "p99": percentile(lat, 0.99) * 1000}
    return out


def describe_latency(uri, tid, seconds=None, until=None):
    lat = []
    end = time.time() + (seconds or 0)
    while (until is not None and not until.is_set()) or (until is None and time.time() < end):
        t = time.perf_counter()
        status, _, _ = call(uri, "POST", f"/v1/table/{enc(tid)}/describe", {})
        assert status == 200
        lat.append(time.perf_counter() - t)
    return lat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ap.add_argument("--ratios", help="append the ratios to this file, as JSON lines (bench/guard)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="lg-bench-data-", dir=args.dir)
    gw = start_gateway(["--warehouse", os.path.join(work, "wh"), "--request-timeout-secs", "600"],
                       {"RUST_LOG": "warn"})
    try:
        ns = RestNamespace(uri=gw.uri)
        ns.create_namespace(ln.CreateNamespaceRequest(id=["bench"]))

        # --- bulk insert: 100 000 rows each way as 10 appends of 10 000 and as 2 of 50 000,
        # into tables of their own
        seed = table(1000, start=10**9)
        inserts = {}
        for count, size in ((10, 10_000), (2, 50_000)):
            batches = [table(size, start=i * size, seed=i) for i in range(count)]
            ins_tid = ["bench", f"inserts_{size}"]
            ns.create_table(m.CreateTableRequest(id=ins_tid), ipc(seed))
            direct_uri = os.path.join(work, f"direct_inserts_{size}.lance")
            lance.write_dataset(seed, direct_uri)
            print(f"inserting {count} x {size} ...", file=sys.stderr, flush=True)
            inserts[(count, size)] = bench_insert(ns, ins_tid, direct_uri, batches, args.rounds)

        # --- the search table, its IVF_PQ index (built through the gateway)
        tid = ["bench", "vectors"]
        data = table(args.rows, seed=42)
        ns.create_table(m.CreateTableRequest(id=tid), ipc(data.slice(0, args.rows // 2)))
        ns.insert_into_table(m.InsertIntoTableRequest(id=tid), ipc(data.slice(args.rows // 2)))
        idle = describe_latency(gw.uri, tid, seconds=3)
        building = threading.Event()
        during = []
        watcher = threading.Thread(target=lambda: during.extend(describe_latency(gw.uri, tid, until=building)))
        print("building the IVF_PQ index ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        watcher.start()
        ns.create_table_index(m.CreateTableIndexRequest(
            id=tid, column="vector", index_type="IVF_PQ", num_partitions=256, num_sub_vectors=16,
            distance_type="l2"))
        build_seconds = time.perf_counter() - started
        building.set()
        watcher.join()

        location = ns.describe_table(m.DescribeTableRequest(id=tid)).location
        ds = lance.dataset(location)
        queries = list(np.random.default_rng(7).random((args.queries, DIM), dtype=np.float32))
        print("searching ...", file=sys.stderr, flush=True)
        one = bench_search(ns, tid, ds, queries, 20, 1, args.rounds)
        four = bench_search(ns, tid, ds, queries, 20, 4, args.rounds)
    finally:
        assert gw.stop() == 0
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nbulk insert of 100 000 rows x {DIM}-dim float32 (+ id), median of {args.rounds} rounds,"
          f" in {args.dir or 'the temp folder'}")
    print(f"{'':28} {'rows/s':>10} {'vs pylance':>11}")
    for (count, size), res in inserts.items():
        for who in ("pylance", "gateway"):
            label = f"{who}, {count} x {size}"
            print(f"{label:28} {res[who]:10.0f} {res[who] / res['pylance']:10.1%}")
        ratios.record(args.ratios, "data", f"insert {count} x {size} (rows/s)", res["gateway"], res["pylance"],
                      "pylance")
    print(f"\ntop-10 search, {args.rows} x {DIM}, IVF_PQ 256 partitions / 16 sub-vectors, nprobes 20,"
          f" {args.queries} queries, mean of {args.rounds} rounds")
    print(f"{'':28} {'queries/s':>10} {'vs pylance':>11} {'p50 ms':>8} {'p99 ms':>8}")
    for label, res in (("1 caller", one), ("4 callers", four)):
        for who in ("pylance", "gateway"):
            r = res[who]
            print(f"{who + ', ' + label:28} {r['qps']:10.1f} {r['qps'] / res['pylance']['qps']:10.1%}"
                  f" {r['p50']:8.2f} {r['p99']:8.2f}")
        ratios.record(args.ratios, "data", f"search, {label} (queries/s)", res["gateway"]["qps"],
                      res["pylance"]["qps"], "pylance")
    print(f"\ndescribe while the index builds ({build_seconds:.1f} s): "
          f"p50 {percentile(during, 0.5) * 1000:.2f} ms, p99 {percentile(during, 0.99) * 1000:.2f} ms,"
          f" {len(during)} requests; idle: p50 {percentile(idle, 0.5) * 1000:.2f} ms,"
          f" p99 {percentile(idle, 0.99) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
