"""Commits through the commit log, side by side, in one run.

Two lance-gateway binaries with `--managed-versioning true` (`--old`: a build from before
the commit log, e.g. landed main; `--new`: this one), each on a fresh local-directory
warehouse (or a fresh bucket of SeaweedFS with `--seaweedfs`), the rounds in opposite
orders, and beside them Lance's own commits (pylance appending by URI, a conditional put of
each manifest, no catalog) on the same kind of store:
  1. single-table commits: pylance appends (100 rows each) through the gateway, each one a
     `version/list` and a `version/create`: commits per second;
  2. the latest-version read under load: wrk on `version/list?limit=1&descending=true`
     (what Lance asks before every commit and, with strong consistency, before every read);
  3. batch commits of 2, 4 and 8 tables (the new binary only: the old one refuses them),
     each one append per table inside `lance_gateway.transaction()`: batches per second.

Timings vary with the machine's load: read the figures, never test them. Usage:
  python bench/batch.py --old BIN --new BIN [--commits 100] [--batches 30] [--seconds 10]
                        [--seaweedfs] [--rounds 2] [--fs-sync false] [--dir /dev/shm]
`--rounds` alternates the binaries that many times (old first, then new first, ...), and the
single-table commit ratio is given per pair of rounds and as their median. On a local
directory, `--fs-sync false` and `--dir /dev/shm` take the disk's flushes out of the figures,
which otherwise swing a commit rate by a third between runs of one binary.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import lance
from lance.namespace import RestNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))
from metadata import Server, enc, free_port, parse_latency  # noqa: E402
from versions import rows  # noqa: E402


def latest_under_load(port, tid, seconds, wrk):
    lua = os.path.join(tempfile.mkdtemp(), "latest.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\n')
    out = subprocess.run(
        [wrk, "-t2", "-c16", f"-d{seconds}s", "--latency", "-s", lua,
         f"http://127.0.0.1:{port}/v1/table/{enc(tid)}/version/list?limit=1&descending=true"],
        capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{errors.group(1)} failed version lists under load")
    return (float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            parse_latency(out, "50%"), parse_latency(out, "99%"))


def bench_gateway(server, args, wrk, base, batches: bool):
    ns = RestNamespace(uri=f"http://127.0.0.1:{server.port}")
    tid = base + ["single"]
    lance.write_dataset(rows(100, 0), namespace_client=ns, table_id=tid, mode="create")
    t0 = time.perf_counter()
    for i in range(args.commits):
        lance.write_dataset(rows(100, 100 * (i + 1)), namespace_client=ns, table_id=tid, mode="append")
    out = {"single-table commits (ops/s)": args.commits / (time.perf_counter() - t0)}
    ds = lance.dataset(namespace_client=ns, table_id=tid)
    if ds.version != args.commits + 1:
        raise RuntimeError(f"{server.name}: version {ds.version} after {args.commits} commits")
    rps, p50, p99 = latest_under_load(server.port, tid, args.seconds, wrk)
    out.update({"latest version (req/s)": rps, "latest version p50 (ms)": p50, "latest version p99 (ms)": p99})
    if batches:
        from lance_gateway import transaction
        for width in (2, 4, 8):
            ids = [base + [f"b{width}x{k}"] for k in range(width)]
            for t in ids:
                lance.write_dataset(rows(10, 0), namespace_client=ns, table_id=t, mode="create")
            t0 = time.perf_counter()
            for i in range(args.batches):
                with transaction(f"http://127.0.0.1:{server.port}") as tx:
                    for t in ids:
                        lance.write_dataset(rows(100, 1000 * (i + 1)), namespace_client=tx.namespace,
                                            table_id=t, mode="append")
            out[f"batch of {width} (batches/s)"] = args.batches / (time.perf_counter() - t0)
            if lance.dataset(namespace_client=ns, table_id=ids[-1]).version != args.batches + 1:
                raise RuntimeError(f"{server.name}: a batch of {width} went missing")
    return out


def lance_direct(uri, options, commits):
    """Lance's own commits: appends by URI, no catalog."""
    lance.write_dataset(rows(100, 0), uri, mode="create", storage_options=options)
    t0 = time.perf_counter()
    for i in range(commits):
        lance.write_dataset(rows(100, 100 * (i + 1)), uri, mode="append", storage_options=options)
    return commits / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", default=os.environ.get("LANCE_GATEWAY_BIN"))
    ap.add_argument("--commits", type=int, default=100)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--seaweedfs", action="store_true", help="a bucket of SeaweedFS instead of a local directory")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per binary, in alternating orders")
    ap.add_argument("--fs-sync", choices=["true", "false"], help="the gateways' --fs-sync (local directory)")
    ap.add_argument("--dir", help="where local warehouses and Lance's own table go (default: the temp dir)")
    args = ap.parse_args()
    wrk = shutil.which("wrk") or sys.exit("wrk not found: run bench/run (it installs wrk)")
    sw = None
    if args.seaweedfs:
        import seaweedfs
        sw = seaweedfs.start(os.path.join(tempfile.mkdtemp(), "weed.log"))
    env = {**os.environ, "RUST_LOG": "warn"}
    if sw:
        env.update({"AWS_ACCESS_KEY_ID": seaweedfs.ADMIN_KEY, "AWS_SECRET_ACCESS_KEY": seaweedfs.ADMIN_SECRET,
                    "AWS_REGION": "us-east-1"})
    runs = {"old": [], "new": [], "lance": []}
    roots = []
    try:
        for round_ in range(args.rounds):
            order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
            for name in order:
                port = free_port()
                if sw:
                    base = [f"bench-{uuid.uuid4().hex[:8]}"]
                    where = ["--warehouse", "s3://", "--s3-endpoint", sw.endpoint, "--s3-region", "us-east-1"]
                else:
                    root = tempfile.mkdtemp(prefix="bench-batch-", dir=args.dir)
                    roots.append(root)
                    base, where = [], ["--warehouse", root]
                    if args.fs_sync:
                        where += ["--fs-sync", args.fs_sync]
                binary = args.old if name == "old" else args.new
                argv = [binary, "serve", "--listen", f"127.0.0.1:{port}", *where, "--managed-versioning", "true"]
                os.environ.update({k: v for k, v in env.items() if k.startswith(("AWS_", "RUST_LOG"))})
                server = Server(name, argv, port)
                try:
                    if base:
                        import lance_namespace as ln
                        ln.connect("rest", {"uri": f"http://127.0.0.1:{port}"}).create_namespace(
                            ln.CreateNamespaceRequest(id=base))
                    print(f"running {name} ...", file=sys.stderr, flush=True)
                    runs[name].append(bench_gateway(server, args, wrk, base, batches=name == "new"))
                finally:
                    server.stop()
            if sw:
                bucket = f"bench-direct-{uuid.uuid4().hex[:8]}"
                import boto3
                boto3.client("s3", endpoint_url=sw.endpoint, region_name="us-east-1",
                             aws_access_key_id=seaweedfs.ADMIN_KEY,
                             aws_secret_access_key=seaweedfs.ADMIN_SECRET).create_bucket(Bucket=bucket)
                uri = f"s3://{bucket}/direct.lance"
                options = {"aws_endpoint": sw.endpoint, "aws_access_key_id": seaweedfs.ADMIN_KEY,
                           "aws_secret_access_key": seaweedfs.ADMIN_SECRET, "aws_region": "us-east-1",
                           "allow_http": "true"}
            else:
                root = tempfile.mkdtemp(prefix="bench-direct-", dir=args.dir)
                roots.append(root)
                uri, options = os.path.join(root, "direct.lance"), None
            print("running lance by URI ...", file=sys.stderr, flush=True)
            runs["lance"].append({"single-table commits (ops/s)": lance_direct(uri, options, args.commits)})
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
        if sw:
            sw.stop()
    mean = {name: {m: sum(r[m] for r in rs) / len(rs) for m in rs[0]} for name, rs in runs.items()}
    old, new, direct = mean["old"], mean["new"], mean["lance"]
    store = "SeaweedFS" if sw else "local directory"
    if not sw and (args.fs_sync or args.dir):
        store += f" (fs-sync {args.fs_sync or 'true'}, in {args.dir or tempfile.gettempdir()})"
    print(f"\nCommits through the log, {store}, {args.commits} pylance appends, "
          f"wrk -t2 -c16 -d{args.seconds}s, mean of {args.rounds} rounds in alternating orders")
    m = "single-table commits (ops/s)"
    pairs = [n[m] / o[m] for o, n in zip(runs["old"], runs["new"])]
    print("single-table commits per round, new / old: "
          + "; ".join(f"{n[m]:.1f} / {o[m]:.1f} ({n[m] / o[m]:.2f}x)" for o, n in zip(runs["old"], runs["new"]))
          + f"; median ratio {sorted(pairs)[len(pairs) // 2]:.2f}x")
    print(f"{'metric':32} {'new':>10} {'old':>10} {'new/old':>8}")
    for metric in old:
        ratio = new[metric] / old[metric] if old[metric] else float("inf")
        print(f"{metric:32} {new[metric]:10.2f} {old[metric]:10.2f} {ratio:7.2f}x")
    m = "single-table commits (ops/s)"
    print(f"{'Lance by URI, no catalog':32} {direct[m]:10.2f} {'':>10} "
          f"{new[m] / direct[m]:7.2f}x (new/Lance)")
    for width in (2, 4, 8):
        key = f"batch of {width} (batches/s)"
        print(f"{key:32} {new[key]:10.2f}   ({new[key] * width:.1f} table versions/s)")


if __name__ == "__main__":
    main()
