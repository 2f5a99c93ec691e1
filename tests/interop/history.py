"""Random colliding workloads against several gateway processes over one warehouse,
recorded as histories for the linearizability checker, optionally with a gateway killed
(SIGKILL) and restarted at random moments.

Each round uses fresh names: two namespaces, three table names in each, two folders holding
a dataset for RegisterTable. Workers send random requests to random gateways; every request
is recorded with its start, end and answer. After the workload the warehouse is left to
settle (recovery runs every second with a two-second grace period), every gateway reads
the final state, and the whole history, final reads included, must be linearizable.
Then the warehouse itself is inspected: no intent is left, no two tables share or nest a
folder, every folder claim belongs to a live table, and no temporary file is left.

The `paged` pattern aims at paged listings: one namespace starts with four tables among six
names (one of which continues another with "-", so its key sorts before the shorter name's),
mutators race renames (within it, and into and out of a second namespace), declares and
drops on those few names, and drops and creates of the two namespaces, and walkers list it
with small limits, following each page token to the end, every page a request of its own
(and so checked over its own time span). Its gateways run with a grace period long enough
that rivals wait the full two seconds.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from conftest import Gateway, free_port, start_gateway
from linearizability import CONFLICT, Op, State, around, check

# What every gateway of a history run is started with: recovery settles what a killed
# gateway left two seconds after it was left, and sweeps every second.
RECOVERY = ["--recovery-grace-secs", "2", "--recovery-interval-secs", "1"]
# The same with the grace period long enough (a quarter of it is at least two seconds) that
# a request meeting a rival waits the full two seconds before it answers 409 code 14, as in
# production; nothing is killed under it, so nothing waits for a settler.
RECOVERY_FULL_WAIT = ["--recovery-grace-secs", "8", "--recovery-interval-secs", "1"]
REQUEST_TIMEOUT = 20.0


class NotSent(Exception):
    """The gateway was not reachable: the request never left."""


class Lost(Exception):
    """The connection failed after the request was sent: its outcome is unknown."""


def enc(parts: list[str]) -> str:
    return urllib.parse.quote("$".join(parts), safe="")


def call(port: int, method: str, path: str, body: dict | None = None, request_id: str | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    try:
        try:
            conn.connect()
        except OSError as e:
            raise NotSent() from e
        try:
            data = None if body is None else json.dumps(body)
            headers = {"content-type": "application/json"}
            if request_id:
                headers["x-request-id"] = request_id
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            text = resp.read().decode()
        except (OSError, http.client.HTTPException) as e:
            raise Lost() from e
        return resp.status, (json.loads(text) if text.strip() else {})
    finally:
        conn.close()


def request_of(kind: str, args: tuple) -> tuple[str, str, dict | None]:
    """The HTTP request for an operation of the model."""
    if kind == "create_ns":
        return "POST", f"/v1/namespace/{enc([args[0]])}/create", {}
    if kind == "drop_ns":
        return "POST", f"/v1/namespace/{enc([args[0]])}/drop", {}
    if kind == "describe_ns":
        return "POST", f"/v1/namespace/{enc([args[0]])}/describe", {}
    if kind == "list_tables" or kind == "list_ns":
        ns, token, limit, _ = args
        q = {}
        if token:
            q["page_token"] = token
        if limit:
            q["limit"] = str(limit)
        where = enc([ns]) + "/table/list" if kind == "list_tables" else "%24/list"
        return "GET", f"/v1/namespace/{where}?{urllib.parse.urlencode(q)}", None
    table = enc([args[0], args[1]])
    if kind == "register":
        return "POST", f"/v1/table/{table}/register", {"location": args[2]}
    if kind == "rename":
        return "POST", f"/v1/table/{table}/rename", {"new_table_name": args[3], "new_namespace_id": [args[2]]}
    return "POST", f"/v1/table/{table}/{kind}", {}


class Cluster:
    """N gateway processes over one warehouse, each on a port of its own that it keeps
    across restarts (so it keeps its node id)."""

    def __init__(self, args: list[str], env: dict, n: int, recovery: list[str] = RECOVERY,
                 binaries: list[str | None] | None = None):
        self.args, self.env = args + recovery, env
        self.ports = [free_port() for _ in range(n)]
        # Which binary each gateway runs (None: the built one); `kill_and_restart` may change it.
        self.binaries = list(binaries or [None] * n)
        self.gateways: list[Gateway | None] = [start_gateway(self.args, env, port=p, binary=b)
                                               for p, b in zip(self.ports, self.binaries)]
        self.all_logs = [gw.log for gw in self.gateways]
        self.lock = threading.Lock()
        self.kills = 0

    def kill_and_restart(self, i: int, down: float, binary: str | None = None):
        """SIGKILLs gateway `i` and starts it again after `down` seconds on the same port
        (so the same node id), as `binary` if given (an upgrade or a rollback)."""
        with self.lock:
            gw = self.gateways[i]
            self.gateways[i] = None
        gw.proc.kill()
        gw.proc.wait()
        self.kills += 1
        time.sleep(down)
        if binary is not None:
            self.binaries[i] = binary
        started = start_gateway(self.args, self.env, port=self.ports[i], binary=self.binaries[i])
        self.all_logs.append(started.log)
        with self.lock:
            self.gateways[i] = started

    def stop(self):
        codes = []
        for gw in self.gateways:
            if gw is not None:
                codes.append(gw.stop())
        return codes

    def logs(self) -> str:
        """Where every gateway process of this cluster logged (killed ones included)."""
        return "gateway logs: " + " ".join(self.all_logs)


class Warehouse:
    """Direct access to the warehouse's objects, for setting up folders and inspecting it."""

    def __init__(self, fs: pafs.FileSystem, base: str, uri_base: str, local: bool):
        self.fs, self.base, self.uri_base, self.local = fs, base.rstrip("/"), uri_base.rstrip("/"), local

    def write(self, key: str, data: bytes):
        path = f"{self.base}/{key}"
        self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(path) as f:
            f.write(data)

    def keys(self, prefix: str) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(f"{self.base}/{prefix}", recursive=True, allow_not_found=True))
        return sorted(i.path[len(self.base) + 1 :] for i in infos if i.type == pafs.FileType.File)

    def delete(self, key: str):
        self.fs.delete_file(f"{self.base}/{key}")

    def read_json(self, key: str) -> dict:
        with self.fs.open_input_stream(f"{self.base}/{key}") as f:
            return json.loads(f.read())

    def uri(self, key: str) -> str:
        return f"{self.uri_base}/{key}"


@dataclass
class Round:
    prefix: str
    namespaces: list[str]
    tables: list[str]
    folders: list[str]
    # "mixed" (every kind of request on every name) or "paged" (see the module's doc).
    pattern: str = "mixed"
    ops: list[Op] = field(default_factory=list)
    # Paged walks that ran to their last page, the pages they took, and how many of them
    # took more than one.
    walks: int = 0
    pages: int = 0
    long_walks: int = 0
    conflicts: int = 0
    not_sent: int = 0
    sent: int = 0
    # Answers of 500 and above, by status, with the message of each.
    server_errors: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    clock0: float = field(default_factory=time.monotonic)

    def record(self, op: Op):
        with self.lock:
            op.id = len(self.ops)
            self.ops.append(op)


def random_op(rng: random.Random, r: Round) -> tuple[str, tuple]:
    ns, ns2 = rng.choice(r.namespaces), rng.choice(r.namespaces)
    t, t2 = rng.choice(r.tables), rng.choice(r.tables)
    kind = rng.choices(
        ["describe", "exists", "declare", "register", "deregister", "drop", "rename", "create_ns", "drop_ns",
         "list_tables", "list_ns", "describe_ns"],
        weights=[14, 8, 14, 6, 7, 7, 12, 5, 4, 10, 3, 3],
    )[0]
    if kind in ("create_ns", "drop_ns", "describe_ns"):
        return kind, (ns,)
    if kind == "register":
        return kind, (ns, t, rng.choice(r.folders))
    if kind == "rename":
        while (ns2, t2) == (ns, t):
            ns2, t2 = rng.choice(r.namespaces), rng.choice(r.tables)
        return kind, (ns, t, ns2, t2)
    if kind == "list_tables":
        return kind, (ns, None, rng.choice([1, 2, None]), None)
    if kind == "list_ns":
        return kind, (None, None, rng.choice([1, 2, None]), r.prefix)
    return kind, (ns, t)


def perform(cluster: Cluster, r: Round, proc: int, gw: int, kind: str, args: tuple, note: str | None = None) -> Op | None:
    """Sends one request and records it; returns the op (None when it was never sent or
    answered 409 code 14, which claims nothing about state). `note` is kept with the
    answer (which walk a page belongs to), for reading a failure."""
    method, path, body = request_of(kind, args)
    start = time.monotonic() - r.clock0
    # The gateway logs every response with this id: `grep <prefix>-p<proc>-<n>` in its log.
    with r.lock:
        r.sent += 1
        request_id = f"{r.prefix}-p{proc}-{r.sent}"
    try:
        status, answer = call(cluster.ports[gw], method, path, body, request_id)
    except NotSent:
        with r.lock:
            r.not_sent += 1
        return None
    except Lost:
        op = Op(0, proc, kind, args, start, None, body={"request_id": request_id, **({"walk": note} if note else {})})
        r.record(op)
        return op
    end = time.monotonic() - r.clock0
    code = answer.get("code") if status != 200 else None
    if status >= 500:
        with r.lock:
            r.server_errors.append((status, code, kind, answer.get("error")))
    if status == 409 and code == CONFLICT:
        with r.lock:
            r.conflicts += 1
        return None
    # 503: the store failed or the request timed out; the change may land later.
    answer["request_id"] = request_id
    if note:
        answer["walk"] = note
    op = Op(0, proc, kind, args, start, None if status == 503 else end, status, code, answer)
    r.record(op)
    return op


def paged_op(rng: random.Random, r: Round) -> tuple[str, tuple]:
    """A mutation of the paged pattern: renames, declares and drops on a few names of the
    listed namespace (`namespaces[0]`), some renames into and out of the other one; and
    drops and creates of the namespaces: a drop marks its namespace and waits for the
    creates and renames in flight into it, which wait for its mark, so rivals wait each
    other out (two seconds) and answer 409 code 14."""
    listed, other = r.namespaces
    kind = rng.choices(["rename", "declare", "drop", "deregister", "describe", "create_ns", "drop_ns"],
                       weights=[40, 20, 12, 4, 6, 6, 6])[0]
    if kind in ("create_ns", "drop_ns"):
        return kind, (other if rng.random() < 0.7 else listed,)
    ns = listed if rng.random() < 0.8 else other
    t = rng.choice(r.tables)
    if kind == "rename":
        while True:
            ns2 = other if (ns == listed and rng.random() < 0.3) else listed
            t2 = rng.choice(r.tables)
            if (ns2, t2) != (ns, t):
                return kind, (ns, t, ns2, t2)
    return kind, (ns, t)


def walk(cluster: Cluster, r: Round, proc: int, gw: int, kind: str, args: tuple, rng: random.Random | None = None,
         note: str | None = None) -> Op | None:
    """A paginated walk: the first page is `args`; follow the token page by page, each page
    one request. With `rng`, each page goes to a gateway of its own."""
    op = perform(cluster, r, proc, gw, kind, args, note)
    pages = 1
    while op is not None and op.ret is not None and op.status == 200 and op.body.get("page_token"):
        ns, _, limit, scope = args
        args = (ns, op.body["page_token"], limit, scope)
        if rng is not None:
            gw = rng.randrange(len(cluster.ports))
        op = perform(cluster, r, proc, gw, kind, args, note)
        pages += 1
    if op is not None and op.ret is not None and op.status == 200:
        with r.lock:
            r.walks += 1
            r.pages += pages
            r.long_walks += pages > 1
    return op


def worker(cluster: Cluster, r: Round, proc: int, seed: int, until: float):
    rng = random.Random(seed)
    while time.monotonic() < until:
        kind, args = paged_op(rng, r) if r.pattern == "paged" else random_op(rng, r)
        gw = rng.randrange(len(cluster.ports))
        if kind in ("list_tables", "list_ns"):
            op = walk(cluster, r, proc, gw, kind, args)
        else:
            op = perform(cluster, r, proc, gw, kind, args)
        if op is None and cluster.gateways[gw] is None:
            time.sleep(0.02)


def walker(cluster: Cluster, r: Round, proc: int, seed: int, until: float):
    """Walks the listed namespace (now and then the other) with small limits, to the end."""
    rng = random.Random(seed)
    n = 0
    while time.monotonic() < until:
        ns = r.namespaces[0] if rng.random() < 0.9 else r.namespaces[1]
        limit = rng.choice([1, 1, 2, 2, 3])
        gw = rng.randrange(len(cluster.ports))
        n += 1
        walk(cluster, r, proc, gw, "list_tables", (ns, None, limit, None), rng if rng.random() < 0.5 else None,
             note=f"p{proc}w{n}")
        # A short pause keeps the history within what the checker searches quickly.
        time.sleep(rng.uniform(0.0, 0.01))


def killer(cluster: Cluster, seed: int, until: float):
    rng = random.Random(seed)
    while True:
        pause = rng.uniform(0.3, 2.0)
        if time.monotonic() + pause >= until:
            return
        time.sleep(pause)
        cluster.kill_and_restart(rng.randrange(len(cluster.ports)), rng.uniform(0.0, 0.4))


def settle(wh: Warehouse, timeout: float = 30.0) -> list[str]:
    """Waits until no intent is left; returns what is left at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = wh.keys(".lance-gateway/pending") + wh.keys(".lance-gateway/drops")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.25)


def final_reads(cluster: Cluster, r: Round) -> dict:
    """Every gateway reads the whole final state; the reads join the history."""
    seen = {}
    for gw in range(len(cluster.ports)):
        answers = []
        for ns in r.namespaces:
            for kind, args in [("describe_ns", (ns,)), ("list_tables", (ns, None, None, None))] + [
                ("describe", (ns, t)) for t in r.tables
            ]:
                op = perform(cluster, r, 1000 + gw, gw, kind, args)
                answers.append((kind, args, op and op.status, op and json.dumps(op.body.get("location") or op.body.get("tables"))))
        op = perform(cluster, r, 1000 + gw, gw, "list_ns", (None, None, None, r.prefix))
        answers.append(("list_ns", sorted(n for n in (op.body.get("namespaces") or []) if n.startswith(r.prefix))))
        seen[gw] = answers
    return seen


def key_segment(name: str) -> str:
    """A name as the catalog encodes it into one key segment (ASCII letters, digits, - and _
    kept, everything else percent-encoded)."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "".join(f"%{b:02X}" for b in c.encode()) for c in name)


def claim_key(data_key: str) -> str:
    return ".lance-gateway/locations/" + "/".join(key_segment(s) for s in data_key.split("/")) + ".json"


def inspect(wh: Warehouse) -> list[str]:
    """What is wrong with the warehouse's objects at rest."""
    problems = []
    left = wh.keys(".lance-gateway/pending") + wh.keys(".lance-gateway/drops")
    if left:
        problems.append(f"intents left after recovery: {left}")
    records = {}
    for key in wh.keys(".lance-gateway/tables"):
        rec = wh.read_json(key)
        records[rec["uid"]] = rec
    # A dropped table kept for undrop (a warehouse at format 3) keeps its folder and claim.
    kept = {}
    for key in wh.keys(".lance-gateway/dropped"):
        rec = wh.read_json(key)["table"]
        kept[rec["uid"]] = rec
    folders = sorted((rec["data_key"], rec["uid"]) for rec in [*records.values(), *kept.values()])
    for i, (a, ua) in enumerate(folders):
        for b, ub in folders[i + 1 :]:
            if a == b or b.startswith(a + "/"):
                problems.append(f"tables {ua} and {ub} share or nest folders {a} and {b}")
    for key in wh.keys(".lance-gateway/locations"):
        claim = wh.read_json(key)
        owner = records.get(claim["uid"]) or kept.get(claim["uid"])
        if owner is None:
            problems.append(f"claim {key} belongs to no live or dropped table ({claim})")
        elif key != claim_key(owner["data_key"]):
            problems.append(f"claim {key} does not match its table's folder {owner['data_key']}")
    if wh.local:
        deadline = time.monotonic() + 10
        while wh.keys(".lance-gateway/tmp") and time.monotonic() < deadline:
            time.sleep(0.5)
        if wh.keys(".lance-gateway/tmp"):
            problems.append(f"temporary files left: {wh.keys('.lance-gateway/tmp')}")
    return problems


_DATASET: dict[str, bytes] = {}


def dataset_files() -> dict[str, bytes]:
    """The files of a small Lance dataset (made once), for the folders RegisterTable is
    given: a dataset's files name each other by relative paths, so copies open anywhere."""
    if not _DATASET:
        import tempfile

        import lance
        import pyarrow as pa

        with tempfile.TemporaryDirectory() as tmp:
            lance.write_dataset(pa.table({"id": [1, 2, 3]}), os.path.join(tmp, "d.lance"))
            base = os.path.join(tmp, "d.lance")
            for folder, _, files in os.walk(base):
                for name in files:
                    path = os.path.join(folder, name)
                    with open(path, "rb") as f:
                        _DATASET[os.path.relpath(path, base)] = f.read()
    return _DATASET


def fsck_problems(cluster: Cluster, binary: str | None = None) -> list[str]:
    """`admin fsck` of the cluster's warehouse (its gateways stopped), by the built binary or
    `binary`: every problem found.
    (The datasets the workload put under `reg/` for RegisterTable and left unregistered are
    reported as notes, data no record points to, and are no problem.)"""
    import subprocess

    from conftest import gateway_binary

    out = subprocess.run([binary or gateway_binary(), "admin", "fsck", "--json", *cluster.args],
                         capture_output=True, text=True, env={**os.environ, **cluster.env}, timeout=300)
    if out.returncode not in (0, 1):
        return [f"fsck could not run: {out.stderr}"]
    report = json.loads(out.stdout)["report"]
    if report["tables"] + report["namespaces"] == 0:
        return ["fsck saw an empty warehouse"]
    return [f"{f['problem']} {f['object']}: {f['detail']}" for f in report["findings"]
            if f["severity"] == "problem"]


# The paged pattern's names. "t2-1" continues "t2" with "-": its record's key sorts before
# t2's ("t2-1.json" < "t2.json"), so pages must keep to the order of the keys there too.
PAGED_NAMES = ["t0", "t1", "t2", "t2-1", "t3", "t4"]


def run_round(cluster: Cluster, wh: Warehouse, index: int, seed: int, seconds: float, workers: int, kills: bool,
              on_start=None, pattern: str = "mixed", walkers: int = 0, beside=()) -> Round:
    """One round; `on_start` is called once the round's namespaces and folders are set up,
    just before the workload (the fault suite turns its faults on there). `walkers` threads
    only walk listings (see `walker`), beside the `workers`. Each of `beside` is called in a
    thread of its own with the time the workload ends (monotonic), and joined with it."""
    prefix = f"h{seed % 10000}r{index}"
    if pattern == "paged":
        r = Round(prefix, [f"{prefix}a", f"{prefix}b"], list(PAGED_NAMES), [], pattern)
    else:
        r = Round(prefix, [f"{prefix}a", f"{prefix}b"], ["t0", "t1", "t2"], [])
        for i in range(2):
            key = f"reg/{prefix}/f{i}.lance"
            for rel, data in dataset_files().items():
                wh.write(f"{key}/{rel}", data)
            r.folders.append(wh.uri(key))
    for ns in r.namespaces:
        status, body = call(cluster.ports[0], "POST", f"/v1/namespace/{enc([ns])}/create", {})
        assert status == 200, body
    if pattern == "paged":
        # Four tables to list from the start; these declares are part of the history.
        r.clock0 = time.monotonic()
        for t in r.tables[:4]:
            op = perform(cluster, r, 999, 0, "declare", (r.namespaces[0], t))
            assert op is not None and op.status == 200, op
    if on_start is not None:
        on_start()
    if pattern != "paged":
        r.clock0 = time.monotonic()
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=worker, args=(cluster, r, p, seed * 100 + p, until)) for p in range(workers)]
    threads += [threading.Thread(target=walker, args=(cluster, r, 500 + p, seed * 100 + 50 + p, until))
                for p in range(walkers)]
    if kills:
        threads.append(threading.Thread(target=killer, args=(cluster, seed * 100 + 99, until)))
    threads += [threading.Thread(target=fn, args=(until,)) for fn in beside]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return r


def verify_round(cluster: Cluster, wh: Warehouse, r: Round, seed: int) -> list[str]:
    """Settles, reads the final state through every gateway, checks the history and the
    warehouse. Returns the problems found (empty when all is well)."""
    problems = []
    left = settle(wh)
    if left:
        problems.append(f"recovery left intents: {left}")
    seen = final_reads(cluster, r)
    if len({json.dumps(v) for v in seen.values()}) != 1:
        problems.append(f"the gateways disagree about the final state: {seen}")
    initial = State(frozenset(r.namespaces), ())
    try:
        result = check(r.ops, initial)
        if not result.ok:
            stuck = None
            if "stuck at #" in result.explanation:
                stuck_id = int(result.explanation.split("stuck at #")[1].split()[0])
                stuck = r.ops[stuck_id]
            problems.append(f"{result.explanation}\nnear it:\n{around(r.ops, stuck)}\nwhole history: {dump(r)}")
    except Exception as e:  # an answer no rule explains (a 500, say)
        problems.append(f"{e}")
    problems += inspect(wh)
    return problems


def dump(r: Round) -> str:
    """Writes a round's history to a file, for reading a failure at leisure."""
    import dataclasses
    import tempfile

    with tempfile.NamedTemporaryFile("w", prefix=f"history-{r.prefix}-", suffix=".json", delete=False) as f:
        json.dump([dataclasses.asdict(op) for op in r.ops], f)
        return f.name


def local_warehouse(root: str) -> Warehouse:
    real = os.path.realpath(root)
    return Warehouse(pafs.LocalFileSystem(), real, f"file://{real}", local=True)


def s3_warehouse(endpoint: str, key: str, secret: str, bucket: str, prefix: str) -> Warehouse:
    scheme, host = endpoint.split("://", 1)
    fs = pafs.S3FileSystem(access_key=key, secret_key=secret, endpoint_override=host, scheme=scheme,
                           region="us-east-1", allow_bucket_creation=True)
    fs.create_dir(bucket)
    return Warehouse(fs, f"{bucket}/{prefix}", f"s3://{bucket}/{prefix}", local=False)
