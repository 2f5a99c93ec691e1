"""Commits and their outcomes, side by side in one run: this build against another (`--old`,
main's binary from bench/guard), on a local-directory warehouse with managed versioning.

Every commit is the catalog's work alone: the client stages a manifest's bytes in the
table's `_versions/` folder (the gateway checks the staged manifest's place and size, not
its content) and sends CreateTableVersion or BatchCreateTableVersions over a kept-alive
connection. So the figures are the catalog's cost, not Lance's.

  1. single-table commits per second, one client: plain, and (new only) with an
     Idempotency-Key on each commit: the key's cost;
  2. batch commits of 2, 4 and 8 tables per second, one client, no contention;
  3. contention: two gateways on one warehouse, `--clients` clients (half on each) each
     committing batches over a random subset of 2 to 4 of 4 tables for `--seconds`, a
     refused batch (409) written again on the versions then current, up to `--tries`
     times: attempts, refusals, batches committed per second, batches that never
     committed; afterwards every table's versions are counted against the batches
     committed (a batch applied twice or lost fails the run).

Timings vary with the machine's load: read the figures, never test them. Usage:
  python bench/commits.py --old BIN [--new BIN] [--commits 400] [--batches 150]
                          [--clients 8] [--seconds 60] [--tries 5] [--rounds 2] [--ratios F]
"""

import argparse
import http.client
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from metadata import Server, enc, free_port  # noqa: E402

U64 = 2 ** 64 - 1


def final_name(version: int) -> str:
    return f"{U64 - version:020d}.manifest"


class Client:
    """One kept-alive connection to a gateway over a local warehouse at `root`."""

    def __init__(self, port: int, root: str):
        self.port, self.root = port, root
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def call(self, method, path, body=None, headers=None):
        data = json.dumps(body).encode() if body is not None else None
        h = {"content-type": "application/json", **(headers or {})}
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=data, headers=h)
                resp = self.conn.getresponse()
                return resp.status, json.loads(resp.read() or b"{}")
            except (http.client.HTTPException, OSError):
                if attempt:
                    raise
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def declare(self, tid):
        status, body = self.call("POST", f"/v1/table/{enc(tid)}/declare", {"id": tid})
        assert status == 200, body
        return body["location"]

    def stage(self, location: str, version: int, body: bytes) -> dict:
        """Stages `body` as version `version` of the table at `location`, as Lance would."""
        folder = os.path.join(location.removeprefix("file://"), "_versions")
        os.makedirs(folder, exist_ok=True)
        name = f"{final_name(version)}-{uuid.uuid4().hex}"
        with open(os.path.join(folder, name), "wb") as f:
            f.write(body)
        return {"version": version, "manifest_path": f"{location.rstrip('/')}/_versions/{name}",
                "manifest_size": len(body), "naming_scheme": "V2"}


def latest(location: str) -> int:
    """The newest published version of the table at `location` (what storage holds)."""
    folder = os.path.join(location.removeprefix("file://"), "_versions")
    versions = [U64 - int(n[:20]) for n in os.listdir(folder) if n.endswith(".manifest")] if os.path.isdir(
        folder) else []
    return max(versions, default=0)


def single(port, root, commits, keyed):
    c = Client(port, root)
    tid = [f"single{uuid.uuid4().hex[:6]}"]
    location = c.declare(tid)
    t0 = time.perf_counter()
    for v in range(1, commits + 1):
        req = {"id": tid, **c.stage(location, v, b"m" * 200)}
        headers = {"idempotency-key": f"bench-{uuid.uuid4().hex}"} if keyed else None
        status, body = c.call("POST", f"/v1/table/{enc(tid)}/version/create", req, headers)
        assert status == 200, body
    return commits / (time.perf_counter() - t0)


def batches(port, root, width, count, keyed):
    c = Client(port, root)
    ids = [[f"b{width}x{k}{uuid.uuid4().hex[:6]}"] for k in range(width)]
    locations = [c.declare(t) for t in ids]
    t0 = time.perf_counter()
    for v in range(1, count + 1):
        entries = [{"id": t, **c.stage(loc, v, b"m" * 200)} for t, loc in zip(ids, locations)]
        headers = {"idempotency-key": f"bench-{uuid.uuid4().hex}"} if keyed else None
        status, body = c.call("POST", "/v1/table/version/batch-create", {"entries": entries}, headers)
        assert status == 200, body
    return count / (time.perf_counter() - t0)


def contention(ports, root, clients, seconds, tries, seed):
    """Clients on the gateways at `ports` committing batches over random subsets of four
    tables for `seconds`; answers the counts, and checks the tables' versions."""
    setup = Client(ports[0], root)
    ids = [[f"c{k}{uuid.uuid4().hex[:6]}"] for k in range(4)]
    locations = [setup.declare(t) for t in ids]
    stop = time.monotonic() + seconds
    lock = threading.Lock()
    counts = {"attempts": 0, "refused": 0, "committed": 0, "abandoned": 0, "by_width": {}}
    committed_per_table = [0] * 4
    errors = []

    def run(n):
        rng = random.Random(seed * 100 + n)
        c = Client(ports[n % len(ports)], root)
        try:
            while time.monotonic() < stop:
                subset = sorted(rng.sample(range(4), rng.choice((2, 3, 4))))
                for attempt in range(tries):
                    entries = [{"id": ids[i], **c.stage(locations[i], latest(locations[i]) + 1, b"m" * 200)}
                               for i in subset]
                    status, body = c.call("POST", "/v1/table/version/batch-create", {"entries": entries},
                                          {"idempotency-key": f"bench-{uuid.uuid4().hex}"})
                    with lock:
                        counts["attempts"] += 1
                        w = counts["by_width"].setdefault(len(subset), [0, 0])
                        w[0] += 1
                        if status == 200:
                            counts["committed"] += 1
                            for i in subset:
                                committed_per_table[i] += 1
                            break
                        if status != 409:
                            raise RuntimeError(f"{status}: {body}")
                        counts["refused"] += 1
                        w[1] += 1
                else:
                    with lock:
                        counts["abandoned"] += 1
        except Exception as e:  # noqa: BLE001 - reported after the run
            errors.append(e)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    # What managed readers are answered: after a settle, every committed batch's version once.
    for i, tid in enumerate(ids):
        status, body = setup.call("POST", f"/v1/table/{enc(tid)}/describe", {"id": tid})
        assert status == 200, body
        deadline = time.time() + 10
        while latest(locations[i]) != committed_per_table[i]:
            assert time.time() < deadline, (tid, latest(locations[i]), committed_per_table[i])
            time.sleep(0.1)
    counts["per_second"] = counts["committed"] / elapsed
    return counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", default=os.environ.get("LANCE_GATEWAY_BIN"))
    ap.add_argument("--commits", type=int, default=400)
    ap.add_argument("--batches", type=int, default=150)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", help="where the warehouses go (default: the temp dir)")
    ap.add_argument("--ratios", help="append `metric<TAB>new<TAB>old` lines here (bench/guard)")
    args = ap.parse_args()
    os.environ["RUST_LOG"] = "warn"
    runs = {"old": [], "new": []}
    roots = []
    try:
        for round_ in range(args.rounds):
            for name in (("old", "new") if round_ % 2 == 0 else ("new", "old")):
                binary = args.old if name == "old" else args.new
                root = tempfile.mkdtemp(prefix="bench-commits-", dir=args.dir)
                roots.append(root)
                ports = [free_port(), free_port()]
                servers = [Server(f"{name}{i}", [binary, "serve", "--listen", f"127.0.0.1:{p}", "--warehouse", root,
                                                 "--managed-versioning", "true", "--fs-sync", "false",
                                                 "--node-id", f"{name}{i}"], p)
                           for i, p in enumerate(ports)]
                try:
                    print(f"running {name} ...", file=sys.stderr, flush=True)
                    out = {"single-table commits (ops/s)": single(ports[0], root, args.commits, False)}
                    if name == "new":
                        out["single-table commits, keyed (ops/s)"] = single(ports[0], root, args.commits, True)
                    for width in (2, 4, 8):
                        out[f"batch of {width}, no contention (batches/s)"] = batches(
                            ports[0], root, width, args.batches, name == "new")
                    c = contention(ports, root, args.clients, args.seconds, args.tries, round_)
                    out["contention: batches committed (/s)"] = c["per_second"]
                    out["contention: refused (% of attempts)"] = 100 * c["refused"] / max(c["attempts"], 1)
                    out["contention: batches never committed"] = c["abandoned"]
                    for width, (attempts, refused) in sorted(c["by_width"].items()):
                        out[f"contention: {width}-table refused (%)"] = 100 * refused / max(attempts, 1)
                    out["contention: attempts"] = c["attempts"]
                    runs[name].append(out)
                finally:
                    for s in servers:
                        s.stop()
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
    mean = {n: {m: sum(r.get(m, 0) for r in rs) / len(rs) for m in rs[0]} for n, rs in runs.items()}
    old, new = mean["old"], mean["new"]
    print(f"\nCommits, local directory (fs-sync off), {args.commits} single commits, {args.batches} batches per "
          f"width, contention: {args.clients} clients on 2 gateways for {args.seconds} s, {args.tries} tries a batch; "
          f"mean of {args.rounds} rounds in alternating orders")
    print(f"{'metric':44} {'new':>10} {'old':>10} {'new/old':>8}")
    for metric in new:
        o = old.get(metric)
        ratio = f"{new[metric] / o:7.2f}x" if o else ""
        print(f"{metric:44} {new[metric]:10.2f} {'' if o is None else f'{o:10.2f}':>10} {ratio}")
    key = new["single-table commits, keyed (ops/s)"] / new["single-table commits (ops/s)"]
    print(f"{'the key on a single-table commit (keyed/plain)':44} {key:10.2f}x")
    if args.ratios:
        import ratios
        for metric in ("single-table commits (ops/s)", "batch of 2, no contention (batches/s)",
                       "batch of 4, no contention (batches/s)", "batch of 8, no contention (batches/s)",
                       "contention: batches committed (/s)"):
            ratios.record(args.ratios, "commits, local, fs-sync off", metric, new[metric], old[metric], "main")
        ratios.record(args.ratios, "commits, local, fs-sync off", "single-table commit with a key (ops/s)",
                      new["single-table commits, keyed (ops/s)"], new["single-table commits (ops/s)"],
                      "this build, no key")


if __name__ == "__main__":
    main()
