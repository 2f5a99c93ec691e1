"""Where describe's tail comes from while a table is maintained (issue 36, item 6).

`bench/maintenance.py` measures describe p99 under `wrk -t2 -c16` at 3.4x idle while the
gateway compacts and re-indexes a table of a million rows built by 1 000 appends. This bench
takes that apart. Table A is built once (as there) and copied afresh for each run that
maintains it; describe is loaded for `--seconds` while, in turn:

  idle              nothing else runs (first and last, to show the run's own spread);
  gateway           the gateway maintains A (compaction and index upkeep), as by default;
  gateway, 1 thread the same with `--data-threads 1` and LANCE_CPU_THREADS=1, the settings an
                    operator has to keep maintenance to one of the machine's cores;
  pylance apart     the same compaction and index upkeep by pylance in another process, the
                    gateway only answering describes: the work without the gateway's process
                    (its allocator, memory map lock and runtimes);
  CPU, 1 and 2      one and two processes spinning on the CPU: contention for the cores alone
                    (and two at nice 10: whether lowering the work's priority would help);
  writeback         300 MB written and fsynced by `dd`: page-cache writeback alone.

If `pylance apart` costs describe as much as `gateway`, the tail comes from sharing the
machine, not from the gateway's process; the CPU and writeback runs tell which share. Timings
vary with the machine's load: read them, never test them. Usage:
  python bench/tail.py [--appends 1000] [--rows 1000] [--seconds 8]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("LANCE_LOG", "error")
import lance  # noqa: E402
import pyarrow as pa  # noqa: E402
from lance.namespace import RestNamespace  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import maintenance  # noqa: E402
import metadata  # noqa: E402
import ratios  # noqa: E402

A, B = ["bench", "appended"], ["bench", "oneshot"]


def gateway(binary, root, port, maintain, *extra):
    return metadata.Server("gateway", [binary, "serve", "--listen", f"127.0.0.1:{port}", "--warehouse", root,
                                       "--fs-sync", "false", "--maintenance", "true" if maintain else "false",
                                       "--maintenance-delay-secs", "1", "--maintenance-sweep-secs", "86400",
                                       *extra], port)


def build(binary, root, appends, rows, dim):
    """Table A by `appends` appends (an index half-way), table B: one row to describe."""
    port = metadata.free_port()
    server = gateway(binary, root, port, False)
    try:
        ns = RestNamespace(uri=f"http://127.0.0.1:{port}")
        conn = metadata.http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        metadata.call(conn, "POST", "/v1/namespace/bench/create", {"id": ["bench"]})
        for i in range(appends):
            lance.write_dataset(maintenance.batch(i * rows, rows, dim), namespace_client=ns, table_id=A,
                                mode="create" if i == 0 else "append")
            if i == appends // 2:
                maintenance.index(lance.dataset(namespace_client=ns, table_id=A).uri, dim)
        lance.write_dataset(maintenance.batch(0, 1, dim), namespace_client=ns, table_id=B, mode="create")
        return lance.dataset(namespace_client=ns, table_id=A).uri
    finally:
        server.stop()


def maintained(port):
    conn = metadata.http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    status, body = metadata.call(conn, "POST", f"/v1/table/{metadata.enc(A)}/describe?load_detailed_metadata=true",
                                 {"id": A})
    m = metadata.json.loads(body).get("maintenance", {})
    return all(m.get(t, {}).get("last_run") for t in ("compaction", "index"))


def poke(port, dim, total):
    """One row through the gateway's insert route: the gateway sees a commit of A and
    maintains it a second later."""
    sink = pa.BufferOutputStream()
    one = maintenance.batch(total, 1, dim)
    with pa.ipc.new_stream(sink, one.schema) as w:
        w.write_table(one)
    c = metadata.http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", f"/v1/table/{metadata.enc(A)}/insert", body=sink.getvalue().to_pybytes(),
              headers={"content-type": "application/vnd.apache.arrow.stream"})
    assert c.getresponse().read() is not None


def run(a, pristine, name, disturb, *flags, env=None):
    """Describe under load for `a.seconds` while `disturb(port, uri)` runs (it returns when
    its work is done), on the warehouse as built, put back at the path it was built at
    (table locations are absolute). Returns (req/s, p50, p99, seconds the work took)."""
    root = a.root
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(pristine, root)
    port = metadata.free_port()
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        server = gateway(a.gateway, root, port, True, *flags)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        uri = a.uri
        got = {}
        load = threading.Thread(target=lambda: got.update(
            figures=maintenance.metadata_describe(port, B, a.wrk, a.seconds)))
        load.start()
        time.sleep(0.5)
        t0 = time.perf_counter()
        disturb(port, uri)
        took = time.perf_counter() - t0
        load.join()
        rps, p50, p99 = got["figures"]
        print(f"{name:20} {rps:9.0f} req/s  p50 {p50:5.2f}  p99 {p99:6.2f} ms  work {took:5.1f} s", flush=True)
        return rps, p50, p99, took
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gateway", default=os.environ.get("LANCE_GATEWAY_BIN"))
    ap.add_argument("--appends", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=1000, help="rows per append")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--ratios", help="append the ratios to this file")
    a = ap.parse_args()
    a.wrk = shutil.which("wrk") or sys.exit("wrk not found: run bench/run (it installs wrk)")
    os.environ["RUST_LOG"] = "warn"
    a.root = tempfile.mkdtemp(prefix="bench-tail-")
    t0 = time.perf_counter()
    a.uri = build(a.gateway, a.root, a.appends, a.rows, a.dim)
    a.pristine_root = a.root + ".built"
    shutil.copytree(a.root, a.pristine_root)
    print(f"table of {a.appends} appends of {a.rows} rows built in {time.perf_counter() - t0:.0f} s", flush=True)
    total = a.appends * a.rows
    scratch = tempfile.mkdtemp(prefix="bench-tail-scratch-")

    def nothing(port, uri):
        time.sleep(a.seconds - 1)

    def in_gateway(port, uri):
        poke(port, a.dim, total)
        while not maintained(port):
            time.sleep(0.1)

    def by_pylance(port, uri):
        subprocess.run([sys.executable, "-c",
                        "import lance, sys; ds = lance.dataset(sys.argv[1]); ds.optimize.compact_files(); "
                        "lance.dataset(sys.argv[1]).optimize.optimize_indices()", uri], check=True,
                       env={**os.environ, "LANCE_LOG": "error"})

    def spinning(n, nice=0):
        def spin(port, uri):
            procs = [subprocess.Popen(["nice", "-n", str(nice), sys.executable, "-c", "while True: pass"])
                     for _ in range(n)]
            time.sleep(a.seconds - 1)
            for p in procs:
                p.kill()
                p.wait()
        return spin

    def writeback(port, uri):
        subprocess.run(["dd", "if=/dev/zero", f"of={scratch}/fill", "bs=1M", "count=300", "conv=fsync"],
                       check=True, capture_output=True)
        os.remove(f"{scratch}/fill")

    print(f"describe under wrk -t2 -c16 for {a.seconds} s while:", flush=True)
    got = {}
    try:
        got["idle"] = run(a, a.pristine_root, "idle", nothing)
        got["gateway"] = run(a, a.pristine_root, "gateway", in_gateway)
        got["gateway, 1 thread"] = run(a, a.pristine_root, "gateway, 1 thread", in_gateway, "--data-threads", "1",
                                       env={"LANCE_CPU_THREADS": "1"})
        got["pylance apart"] = run(a, a.pristine_root, "pylance apart", by_pylance)
        got["CPU, 1 process"] = run(a, a.pristine_root, "CPU, 1 process", spinning(1))
        got["CPU, 2 processes"] = run(a, a.pristine_root, "CPU, 2 processes", spinning(2))
        got["CPU, 2 processes at nice 10"] = run(a, a.pristine_root, "CPU, 2 at nice 10", spinning(2, 10))
        got["writeback"] = run(a, a.pristine_root, "writeback", writeback)
        got["idle, again"] = run(a, a.pristine_root, "idle, again", nothing)
    finally:
        shutil.rmtree(a.pristine_root, ignore_errors=True)
        shutil.rmtree(a.root, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    idle = (got["idle"][2] + got["idle, again"][2]) / 2
    print(f"\n| while | describe req/s | p50 / p99 (ms) | p99 ÷ idle | work (s) |\n|---|---:|---:|---:|---:|")
    for name, (rps, p50, p99, took) in got.items():
        work = f"{took:.1f}" if not name.startswith("idle") else ""
        print(f"| {name} | {rps:,.0f} | {p50:.2f} / {p99:.2f} | {p99 / idle:.2f}× | {work} |")
        if not name.startswith("idle"):
            ratios.record(a.ratios, "describe beside other work", f"p99 (ms), {name}", p99, idle, "idle")


if __name__ == "__main__":
    main()
