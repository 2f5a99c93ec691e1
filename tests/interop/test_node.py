"""LanceDB's Node client (`@lancedb/lancedb` 0.31.0 with `apache-arrow` 18.1.0) against the
gateway, in both of its connection modes, on the local warehouse and on SeaweedFS:

- `connectNamespace("rest", {uri, headers})`: the catalog routes only; the client reads and
  writes the data itself, at the locations (and with the storage options) the gateway vends;
- `connect("db://…", {apiKey, hostOverride})`: LanceDB's remote protocol; every data
  operation is sent to the gateway, which runs it with the lance crate.

Each test runs one part of the client's user-facing API through `node/driver.mjs` (one Node
process per gateway, one call per line of JSON) and checks every answer against what pylance
reads from the table's location directly, or what the spec's client (`lance_namespace`) is
told, never against values written into the test. The same checks run in both modes, so
the namespace mode (where the client does the work with its bundled lance) also shows that
what a check expects is what LanceDB itself does.

Where the remote protocol needs the gateway to answer in the client's own shapes, the test
says what the client sends (order_by, new_namespace, Lance JSON types, a `timestamp` in
version lists, `GET /v1/table/` for the root's tables, JSON-quoted namespace modes, the
prewarm routes, and the statuses it reads errors by).

The Node packages come from `scripts/install-node-deps` (a cache folder outside the clone,
installed from `node/package-lock.json`); the suite fails, rather than skips, without them.
Run: `scripts/install-node-deps && cd tests/interop && pytest test_node.py`."""

import datetime
import hashlib
import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import uuid
from dataclasses import dataclass

import lance
import lance_namespace as ln
import numpy as np
import pyarrow as pa
import pytest
from lance.dataset import ColumnOrdering

from conftest import Gateway, client_storage_options, s3_gateway_setup, start_gateway, unique
from security import make_key, write

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_SOURCES = os.path.join(HERE, "node")
DRIVER = os.path.join(NODE_SOURCES, "driver.mjs")
DIM = 8
# How long one client call may take before the suite calls the driver hung.
CALL_TIMEOUT_S = 120


# ------------------------------------------------------------------------- the driver


def node_modules() -> str:
    """The installed node_modules of scripts/install-node-deps, checked against the lock."""
    cache = os.environ.get("LANCE_GATEWAY_CACHE", os.path.expanduser("~/.cache/lance-gateway"))
    folder = os.environ.get("LANCE_GATEWAY_NODE_DIR") or os.path.join(cache, "node")
    lock = os.path.join(NODE_SOURCES, "package-lock.json")
    with open(lock, "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    stamp = os.path.join(folder, ".lock.sha")
    have = open(stamp).read().strip() if os.path.exists(stamp) else None
    if shutil.which("node") is None:
        pytest.fail("node is not installed (Node.js 18 or newer is needed)")
    if not os.path.isdir(os.path.join(folder, "node_modules", "@lancedb", "lancedb")) or have != want:
        pytest.fail(f"LanceDB's Node client is not installed at {folder} from {lock}: "
                    "run scripts/install-node-deps")
    return os.path.join(folder, "node_modules")


class NodeError(AssertionError):
    pass


class Node:
    """One `node driver.mjs` process: `node(op, **args)` answers the call's result or raises
    NodeError with the client's message; `node.error(op, **args)` expects it to fail."""

    def __init__(self, label: str):
        self.log = tempfile.NamedTemporaryFile(prefix=f"lg-node-{label}-", suffix=".log", delete=False).name
        env = dict(os.environ, NODE_PATH=node_modules(), RUST_LOG=os.environ.get("NODE_RUST_LOG", "warn"))
        self.proc = subprocess.Popen(["node", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(self.log, "w"), text=True, env=env)
        self.answers: queue.Queue = queue.Queue()
        self.seq = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.answers.put(line)
        self.answers.put(None)

    def send(self, op: str, **args) -> dict:
        self.seq += 1
        self.proc.stdin.write(json.dumps({"op": op, "seq": self.seq, **args}) + "\n")
        self.proc.stdin.flush()
        while True:
            try:
                line = self.answers.get(timeout=CALL_TIMEOUT_S)
            except queue.Empty:
                raise NodeError(f"the Node client did not answer {op} within {CALL_TIMEOUT_S}s") from None
            if line is None:
                raise NodeError(f"the Node driver exited during {op}:\n{open(self.log).read()[-3000:]}")
            answer = json.loads(line)
            # A late answer to a call that timed out is not this call's.
            if answer.get("seq") == self.seq:
                return answer

    def __call__(self, op: str, **args):
        answer = self.send(op, **args)
        if not answer["ok"]:
            raise NodeError(f"{op} failed in the Node client: {answer['error']}")
        return answer["result"]

    def error(self, op: str, **args) -> str:
        answer = self.send(op, **args)
        assert not answer["ok"], f"{op} was expected to fail, but answered {answer['result']!r}"
        return answer["error"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --------------------------------------------------------------------------- fixtures


@dataclass
class Side:
    """A gateway, a Node client connected to it in one mode, and a way around the client."""

    mode: str  # "namespace" or "remote"
    kind: str  # "local" or "seaweedfs"
    gateway: Gateway
    node: Node
    key: str
    base: list  # ids start with this (the bucket on SeaweedFS)
    storage: dict | None  # what pylance needs to open a location directly

    @property
    def ns(self):
        return ln.connect("rest", {"uri": self.gateway.uri, "headers.x-api-key": self.key})

    def namespace(self, tag: str) -> list:
        """A new namespace for one test, made with the spec's client."""
        path = self.base + [unique(tag)]
        self.ns.create_namespace(ln.CreateNamespaceRequest(id=path))
        return path

    def location(self, tid: list) -> str:
        return self.ns.describe_table(ln.DescribeTableRequest(id=tid)).location

    def dataset(self, tid: list, version=None) -> lance.LanceDataset:
        return lance.dataset(self.location(tid), version=version, storage_options=self.storage)

    def list_tables(self, path: list) -> list:
        names, token = [], None
        while True:
            page = self.ns.list_tables(ln.ListTablesRequest(id=path, page_token=token))
            names += page.tables
            token = page.page_token
            if not token:
                return names

    def table_exists(self, tid: list) -> bool:
        try:
            self.ns.table_exists(ln.TableExistsRequest(id=tid))
            return True
        except Exception as e:
            if "not found" in str(e).lower() or "TableNotFound" in type(e).__name__:
                return False
            raise


SIDES = ["namespace-local", "namespace-seaweedfs", "remote-local", "remote-seaweedfs"]


@pytest.fixture(scope="module", params=SIDES)
def side(request):
    """A gateway with one API key (made by `lance-gateway keys create`, no grants file, so
    the key may do everything) and a Node client connected to it in the param's mode."""
    mode, kind = request.param.split("-")
    node_modules()  # before anything is started: fails the tests when the client is missing
    work = tempfile.mkdtemp(prefix=f"lg-node-{kind}-")
    key, line = make_key("node")
    keys_file = os.path.join(work, "keys")
    write(keys_file, line + "\n")
    if kind == "local":
        args, env, base, storage = ["--warehouse", os.path.join(work, "wh")], {}, [], None
    else:
        sw = request.getfixturevalue("seaweed")
        args, env = s3_gateway_setup(sw, "s3://")
        base, storage = [f"lg-node-{uuid.uuid4().hex[:8]}"], client_storage_options(sw)
    gateway = start_gateway(args + ["--api-keys", keys_file], env)
    node = None
    try:
        node = Node(request.param)
        s = Side(mode, kind, gateway, node, key, base, storage)
        if base:
            s.ns.create_namespace(ln.CreateNamespaceRequest(id=base))
        if mode == "namespace":
            node("connect", mode="namespace", uri=gateway.uri, headers={"x-api-key": key})
        else:
            node("connect", mode="remote", uri=gateway.uri, apiKey=key)
        yield s
    finally:
        if node:
            node.close()
        code = gateway.stop()
    assert code == 0, f"gateway did not shut down cleanly (exit {code}):\n{open(gateway.log).read()[-4000:]}"


# ---------------------------------------------------------------------------- helpers


def rows(table: pa.Table) -> list:
    """A pylance table as the driver's JSON rows."""
    return table.to_pylist()


def by_id(items: list) -> list:
    return sorted(items, key=lambda r: r["id"])


def query_vector(seed: int) -> list:
    return [float(x) for x in np.random.default_rng(seed).random(DIM, dtype=np.float32)]


def ids(result: dict) -> list:
    return [r["id"] for r in result["rows"]]


def arrow_type_name(t: pa.DataType) -> str:
    """pyarrow's type as apache-arrow (JS) prints it, for comparing schemas."""
    names = {pa.int64(): "Int64", pa.int32(): "Int32", pa.float64(): "Float64", pa.float32(): "Float32",
             pa.string(): "Utf8", pa.large_string(): "LargeUtf8"}
    if t in names:
        return names[t]
    if pa.types.is_fixed_size_list(t):
        return f"FixedSizeList[{t.list_size}]<{arrow_type_name(t.value_type)}>"
    return str(t)


def schema_of(ds: lance.LanceDataset) -> list:
    return [{"name": f.name, "type": arrow_type_name(f.type), "nullable": f.nullable} for f in ds.schema]


def make_table(side: Side, path: list, name: str, n: int, **extra) -> list:
    side.node("createTable", name=name, ns=path, data={"n": n, **extra}, handle=name)
    return path + [name]


# ------------------------------------------------------------------------------ tests


def test_namespaces(side):
    node, parent = side.node, side.namespace("nsp")
    child = parent + ["child"]
    node("createNamespace", path=child, properties={"owner": "node"})
    node("createNamespace", path=parent + ["other"])
    listed = node("listNamespaces", path=parent)
    spec = side.ns.list_namespaces(ln.ListNamespacesRequest(id=parent)).namespaces
    assert sorted(listed["namespaces"]) == sorted(spec) == ["child", "other"]
    first = node("listNamespaces", path=parent, limit=1)
    assert len(first["namespaces"]) == 1 and first.get("pageToken")
    rest = node("listNamespaces", path=parent, pageToken=first["pageToken"])
    assert first["namespaces"] + rest["namespaces"] == sorted(spec)
    described = node("describeNamespace", path=child)
    want = side.ns.describe_namespace(ln.DescribeNamespaceRequest(id=child)).properties
    assert described.get("properties") == want and want.get("owner") == "node"

    make_table(side, child, "t", 5)
    node.error("dropNamespace", path=child)  # restrict: it holds a table
    assert side.table_exists(child + ["t"])
    node("dropTable", name="t", ns=child)
    node("dropNamespace", path=child)
    node("dropNamespace", path=parent + ["other"])
    assert side.ns.list_namespaces(ln.ListNamespacesRequest(id=parent)).namespaces == []
    assert "not found" in node.error("describeNamespace", path=child).lower()


def test_namespace_modes(side):
    """createNamespace `mode: exist_ok`, dropNamespace `mode: skip` and `behavior: cascade`
    (LanceDB's remote client sends them JSON-quoted: `{"mode": "\\"ExistOk\\""}`)."""
    node, parent = side.node, side.namespace("modes")
    child = parent + ["child"]
    node("createNamespace", path=child, properties={"owner": "node"})
    node("createNamespace", path=child, mode="exist_ok")
    want = side.ns.describe_namespace(ln.DescribeNamespaceRequest(id=child)).properties
    assert node("describeNamespace", path=child).get("properties") == want and want.get("owner") == "node"
    node("dropNamespace", path=parent + ["missing"], mode="skip")
    make_table(side, child, "t", 5)
    node("dropNamespace", path=child, behavior="cascade")
    assert side.ns.list_namespaces(ln.ListNamespacesRequest(id=parent)).namespaces == []
    assert not side.table_exists(child + ["t"])


def test_table_lifecycle(side):
    node, path = side.node, side.namespace("life")
    full = make_table(side, path, "full", 120)
    node("createEmptyTable", name="empty", ns=path)
    node("createTable", name="objects", ns=path, data={"n": 7}, objects=True)
    assert sorted(node("tableNames", ns=path)) == sorted(side.list_tables(path)) == ["empty", "full", "objects"]

    for name in ("full", "empty", "objects"):
        assert node("countRows", table=name) == side.dataset(path + [name]).count_rows()
    assert node("schema", table="full") == schema_of(side.dataset(full))
    assert node("schema", table="empty") == schema_of(side.dataset(path + ["empty"]))
    assert node("schema", table="objects") == schema_of(side.dataset(path + ["objects"]))

    opened = node("openTable", name="full", ns=path, handle="again")
    assert opened["version"] == side.dataset(full).version
    assert node("countRows", table="again") == side.dataset(full).count_rows()
    assert "not found" in node.error("openTable", name="missing", ns=path).lower()

    # create over an existing table: refused, accepted with existOk, replaced with overwrite
    assert "already exists" in node.error("createTable", name="full", ns=path, data={"n": 3}).lower()
    node("createTable", name="full", ns=path, data={"n": 3}, existOk=True, handle="same")
    assert node("countRows", table="same") == side.dataset(full).count_rows()
    node("createTable", name="full", ns=path, data={"n": 9, "seed": 4}, mode="overwrite", handle="over")
    ds = side.dataset(full)
    assert node("countRows", table="over") == ds.count_rows() and ds.version == node("version", table="over")
    assert node("query", table="over", select=["id"])["rows"] == rows(ds.to_table(columns=["id"]))

    node("dropTable", name="objects", ns=path)
    assert not side.table_exists(path + ["objects"])
    assert sorted(node("tableNames", ns=path)) == sorted(side.list_tables(path)) == ["empty", "full"]
    assert "not found" in node.error("dropTable", name="objects", ns=path).lower()


def test_table_names_paging(side):
    node, path = side.node, side.namespace("page")
    for name in ("t1", "t2", "t3", "t4", "t5"):
        node("createEmptyTable", name=name, ns=path, vector=False)
    every = side.list_tables(path)
    assert node("tableNames", ns=path) == every
    first = node("tableNames", ns=path, limit=2)
    assert first == every[:2]
    second = node("tableNames", ns=path, limit=2, startAfter=first[-1])
    assert second == every[2:4]
    assert node("tableNames", ns=path, startAfter=second[-1]) == every[4:]


def test_root_table_names(side):
    """`tableNames()` with no namespace lists the root namespace's own tables: not those of
    its children (LanceDB's remote client sends `GET /v1/table/` for it)."""
    node, path = side.node, side.namespace("rootls")
    inner = unique("inner")
    make_table(side, path, inner, 3)
    if not side.base:
        # The local warehouse's root holds tables too (SeaweedFS's root holds buckets only).
        for _ in range(3):
            node("createTable", name=unique("top"), data={"n": 2})
    root = side.list_tables([])
    listed = node("tableNames")
    assert not [t for t in listed if inner in t], f"tableNames() at the root listed a table of {path}: {listed}"
    assert listed == root
    if len(root) >= 3:
        first = node("tableNames", limit=2)
        assert first == root[:2]
        assert node("tableNames", startAfter=first[-1]) == root[2:]


def test_writes(side):
    node, path = side.node, side.namespace("wr")
    tid = make_table(side, path, "t", 200)
    added = node("add", table="t", data={"n": 20, "start": 200, "seed": 1})
    ds = side.dataset(tid)
    assert added["version"] == ds.version and node("countRows", table="t") == ds.count_rows()

    before = side.dataset(tid).count_rows("id < 3")
    updated = node("update", table="t", where="id < 3", values={"text": "changed"})
    ds = side.dataset(tid)
    assert updated["rowsUpdated"] == before and updated["version"] == ds.version
    assert ds.to_table(filter="id < 3")["text"].to_pylist() == ["changed"] * before
    node("update", table="t", where="id = 5", valuesSql={"score": "score * 2"})
    old = side.dataset(tid, version=ds.version).to_table(filter="id = 5")["score"][0].as_py()
    assert side.dataset(tid).to_table(filter="id = 5")["score"][0].as_py() == old * 2

    before = side.dataset(tid)
    deleted = node("delete", table="t", where="id >= 210")
    after = side.dataset(tid)
    assert deleted["version"] == after.version
    assert before.count_rows() - after.count_rows() == before.count_rows("id >= 210")
    if "numDeletedRows" in deleted:
        assert deleted["numDeletedRows"] == before.count_rows("id >= 210")

    # merge: ids 205..214, of which 205..209 are there
    present = set(side.dataset(tid).to_table(columns=["id"])["id"].to_pylist())
    incoming = set(range(205, 215))
    merged = node("mergeInsert", table="t", on="id", whenMatchedUpdateAll=True, whenNotMatchedInsertAll=True,
                  data={"n": 10, "start": 205, "seed": 2, "text": "merged"})
    ds = side.dataset(tid)
    assert (merged["numUpdatedRows"], merged["numInsertedRows"]) == (len(incoming & present), len(incoming - present))
    assert merged["version"] == ds.version
    assert sorted(ds.to_table(filter="text = 'merged'")["id"].to_pylist()) == sorted(incoming)
    assert node("countRows", table="t") == ds.count_rows()

    # overwrite through add
    over = node("add", table="t", data={"n": 4, "start": 1000}, mode="overwrite")
    ds = side.dataset(tid)
    assert over["version"] == ds.version and ds.count_rows() == node("countRows", table="t")
    assert by_id(node("query", table="t", select=["id", "text"])["rows"]) == by_id(rows(ds.to_table(columns=["id", "text"])))


def test_reads(side):
    node, path = side.node, side.namespace("rd")
    tid = make_table(side, path, "t", 300)
    ds = side.dataset(tid)
    assert node("countRows", table="t") == ds.count_rows()
    assert node("countRows", table="t", filter="category = 'b' AND id < 100") == ds.count_rows("category = 'b' AND id < 100")

    got = node("query", table="t", where="id >= 100 AND id < 110", select=["id", "text", "score"])
    assert by_id(got["rows"]) == by_id(rows(ds.to_table(columns=["id", "text", "score"], filter="id >= 100 AND id < 110")))
    assert [f["name"] for f in got["schema"]] == ["id", "text", "score"]
    page = node("query", table="t", where="id < 50", select=["id"], limit=5, offset=10)
    assert ids(page) == ds.to_table(columns=["id"], filter="id < 50", limit=5, offset=10)["id"].to_pylist()
    aliased = node("query", table="t", where="id < 3", select={"twice": "id * 2", "id": "id"})
    assert sorted((r["id"], r["twice"]) for r in aliased["rows"]) == [(i, i * 2) for i in ds.to_table(filter="id < 3")["id"].to_pylist()]
    with_rowid = node("query", table="t", where="id < 4", select=["id"], withRowId=True)
    assert sorted(r["_rowid"] for r in with_rowid["rows"]) == sorted(
        ds.to_table(columns=["id"], filter="id < 4", with_row_id=True)["_rowid"].to_pylist())

    q = query_vector(5)
    near = node("vectorSearch", table="t", vector=q, limit=5, select=["id"], bypassVectorIndex=True)
    want = ds.to_table(columns=["id"], nearest={"column": "vector", "q": q, "k": 5, "use_index": False})
    assert ids(near) == want["id"].to_pylist()
    assert [r["_distance"] for r in near["rows"]] == pytest.approx(want["_distance"].to_pylist(), rel=1e-5)
    filtered = node("vectorSearch", table="t", vector=q, limit=5, where="category = 'a'", select=["id"])
    want = ds.to_table(columns=["id"], nearest={"column": "vector", "q": q, "k": 5}, filter="category = 'a'", prefilter=True)
    assert ids(filtered) == want["id"].to_pylist()
    cosine = node("vectorSearch", table="t", vector=q, limit=4, distanceType="cosine", select=["id"])
    want = ds.to_table(columns=["id"], nearest={"column": "vector", "q": q, "k": 4, "metric": "cosine"})
    assert ids(cosine) == want["id"].to_pylist()


def test_order_by(side):
    """`query().orderBy(...)`: the remote client sends `order_by: [{column_name, ascending,
    nulls_first}]`; the rows come back in that order (score has nulls)."""
    node, path = side.node, side.namespace("ord")
    tid = make_table(side, path, "t", 60)
    ds = side.dataset(tid)
    order = [{"columnName": "score", "ascending": False, "nullsFirst": True},
             {"columnName": "id", "ascending": True, "nullsFirst": False}]
    got = node("query", table="t", select=["id", "score"], orderBy=order, limit=15)
    want = ds.to_table(columns=["id", "score"], limit=15,
                       order_by=[ColumnOrdering("score", False, True), ColumnOrdering("id", True, False)])
    assert got["rows"] == rows(want)
    assert got["rows"][0]["score"] is None, "nulls first"
    got = node("query", table="t", select=["id", "score"], where="score IS NOT NULL",
               orderBy={"columnName": "score", "ascending": True}, limit=5)
    want = ds.to_table(columns=["id", "score"], filter="score IS NOT NULL", limit=5,
                       order_by=[ColumnOrdering("score", True, False)])
    assert [r["score"] for r in got["rows"]] == want["score"].to_pylist()


def test_indices(side):
    node, path = side.node, side.namespace("ix")
    tid = make_table(side, path, "t", 2048)
    node("createIndex", table="t", column="vector",
         config={"type": "ivf_pq", "numPartitions": 2, "numSubVectors": 2, "distanceType": "l2"})
    node("createIndex", table="t", column="id", config={"type": "btree"})
    node("waitForIndex", table="t", names=["vector_idx", "id_idx"])
    ds = side.dataset(tid)
    listed = {i["name"]: i for i in node("listIndices", table="t")}
    want = {i.name: i for i in ds.describe_indices()}
    assert sorted(listed) == sorted(want) == ["id_idx", "vector_idx"]
    assert {n: i["columns"] for n, i in listed.items()} == {n: list(i.field_names) for n, i in want.items()}
    kinds = {name: i["indexType"].upper().replace("_", "") for name, i in listed.items()}
    assert kinds == {"vector_idx": "IVFPQ", "id_idx": "BTREE"}

    stats = node("indexStats", table="t", name="vector_idx")
    want_stats = ds.stats.index_stats("vector_idx")
    assert stats["numIndexedRows"] == want_stats["num_indexed_rows"] == ds.count_rows()
    assert stats["numUnindexedRows"] == want_stats["num_unindexed_rows"]
    assert node("indexStats", table="t", name="id_idx")["numIndexedRows"] == ds.count_rows()

    q = query_vector(11)
    got = node("vectorSearch", table="t", vector=q, limit=5, nprobes=2, select=["id"])
    want = ds.to_table(columns=["id"], nearest={"column": "vector", "q": q, "k": 5, "nprobes": 2})
    assert ids(got) == want["id"].to_pylist()
    got = node("query", table="t", where="id IN (7, 700, 1700)", select=["id", "text"])
    assert by_id(got["rows"]) == by_id(rows(ds.to_table(columns=["id", "text"], filter="id IN (7, 700, 1700)")))
    plan = node("explainPlan", table="t", where="id = 7")
    assert "id" in plan

    # an index on rows added after it was built counts them as not indexed
    node("add", table="t", data={"n": 8, "start": 2048})
    stats = node("indexStats", table="t", name="vector_idx")
    assert stats["numUnindexedRows"] == side.dataset(tid).stats.index_stats("vector_idx")["num_unindexed_rows"] == 8

    node("dropIndex", table="t", name="id_idx")
    assert [i.name for i in side.dataset(tid).describe_indices()] == ["vector_idx"]
    assert [i["name"] for i in node("listIndices", table="t")] == ["vector_idx"]


def test_full_text_search(side):
    node, path = side.node, side.namespace("fts")
    tid = make_table(side, path, "t", 120)
    node("createIndex", table="t", column="text", config={"type": "fts"})
    node("waitForIndex", table="t", names=["text_idx"])
    ds = side.dataset(tid)
    assert [i.name for i in ds.describe_indices()] == ["text_idx"]
    matches = set(ds.to_table(columns=["id"], full_text_query="cats")["id"].to_pylist())
    got = node("fullTextSearch", table="t", query="cats", limit=10, select=["id", "text"])
    assert len(got["rows"]) == min(10, len(matches))
    assert set(ids(got)) <= matches and all("cats" in r["text"] for r in got["rows"])
    got = node("fullTextSearch", table="t", query="cats", limit=200, select=["id"], where="id < 40")
    assert set(ids(got)) == set(ds.to_table(columns=["id"], full_text_query="cats", filter="id < 40", prefilter=True)["id"].to_pylist())


def millis(value) -> float:
    if isinstance(value, str):
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000
    if value.tzinfo is None:
        value = value.astimezone()
    return value.timestamp() * 1000


def test_list_versions(side):
    """`listVersions()`: the remote client 0.31 reads an RFC 3339 `timestamp` in each
    entry of `version/list/`."""
    node, path = side.node, side.namespace("ver")
    tid = make_table(side, path, "t", 30)
    node("add", table="t", data={"n": 5, "start": 30})
    node("delete", table="t", where="id < 2")
    versions = node("listVersions", table="t")
    want = side.dataset(tid).versions()
    assert [v["version"] for v in versions] == [v["version"] for v in want]
    for got, expected in zip(versions, want):
        assert abs(millis(got["timestamp"]) - millis(expected["timestamp"])) < 1000, (got, expected)


def test_checkout_and_restore(side):
    node, path = side.node, side.namespace("co")
    tid = make_table(side, path, "t", 30)
    node("add", table="t", data={"n": 5, "start": 30})
    node("delete", table="t", where="id < 2")
    latest = side.dataset(tid).version
    assert node("version", table="t") == latest
    assert node("checkout", table="t", version=1) == 1
    assert node("countRows", table="t") == side.dataset(tid, version=1).count_rows()
    assert ids(node("query", table="t", select=["id"], where="id < 5")) == \
        side.dataset(tid, version=1).to_table(columns=["id"], filter="id < 5")["id"].to_pylist()
    assert node("checkoutLatest", table="t") == latest
    assert node("countRows", table="t") == side.dataset(tid).count_rows()

    node("checkout", table="t", version=2)
    restored = node("restore", table="t")
    ds = side.dataset(tid)
    assert restored == ds.version == latest + 1
    assert ds.count_rows() == side.dataset(tid, version=2).count_rows() == node("countRows", table="t")
    node("add", table="t", data={"n": 1, "start": 500})
    assert node("version", table="t") == side.dataset(tid).version


def test_tags(side):
    node, path = side.node, side.namespace("tag")
    tid = make_table(side, path, "t", 20)
    node("add", table="t", data={"n": 3, "start": 20})
    node("tags", table="t", action="create", tag="first", version=1)
    node("tags", table="t", action="create", tag="second", version=2)
    listed = node("tags", table="t", action="list")
    want = side.dataset(tid).tags.list()
    assert {k: v["version"] for k, v in listed.items()} == {k: v["version"] for k, v in want.items()} == {"first": 1, "second": 2}
    assert node("tags", table="t", action="getVersion", tag="second") == side.dataset(tid).tags.get_version("second")
    node("tags", table="t", action="update", tag="second", version=1)
    assert side.dataset(tid).tags.get_version("second") == 1
    node("checkout", table="t", version="first")
    assert node("countRows", table="t") == side.dataset(tid, version="first").count_rows()
    node("checkoutLatest", table="t")
    node("tags", table="t", action="delete", tag="first")
    assert list(side.dataset(tid).tags.list()) == ["second"]
    assert list(node("tags", table="t", action="list")) == ["second"]
    assert node.error("tags", table="t", action="getVersion", tag="first")


def test_schema_and_stats(side):
    node, path = side.node, side.namespace("st")
    tid = make_table(side, path, "t", 50)
    node("add", table="t", data={"n": 10, "start": 50})
    node("delete", table="t", where="id < 5")
    ds = side.dataset(tid)
    assert node("schema", table="t") == schema_of(ds)
    stats = node("stats", table="t")
    want = ds.stats.dataset_stats()
    fragments = ds.get_fragments()
    assert stats["numRows"] == ds.count_rows()
    assert stats["numIndices"] == len(ds.describe_indices())
    assert stats["fragmentStats"]["numFragments"] == len(fragments) == want["num_fragments"]
    assert stats["totalBytes"] > 0


def test_add_and_drop_columns(side):
    node, path = side.node, side.namespace("cols")
    tid = make_table(side, path, "t", 25)
    added = node("addColumns", table="t", columns=[{"name": "twice", "valueSql": "id * 2"}])
    ds = side.dataset(tid)
    assert added["version"] == ds.version
    assert [r["twice"] for r in by_id(rows(ds.to_table(columns=["id", "twice"])))] == \
        [r["id"] * 2 for r in by_id(rows(ds.to_table(columns=["id"])))]
    assert node("schema", table="t") == schema_of(ds)
    got = node("query", table="t", select=["id", "twice"], where="id < 3")
    assert by_id(got["rows"]) == by_id(rows(ds.to_table(columns=["id", "twice"], filter="id < 3")))
    empty = node("addColumns", table="t", columns=[{"name": "note", "valueSql": "CAST(NULL AS STRING)"}])
    ds = side.dataset(tid)
    assert empty["version"] == ds.version and ds.to_table(columns=["note"])["note"].null_count == ds.count_rows()

    dropped = node("dropColumns", table="t", columns=["category", "note"])
    ds = side.dataset(tid)
    assert dropped["version"] == ds.version and "category" not in ds.schema.names
    assert node("schema", table="t") == schema_of(ds)
    assert ds.count_rows() == node("countRows", table="t")


def test_alter_columns(side):
    """`alterColumns`: a rename, a nullability change, and a type change sent in Lance's
    JSON form (`{"type": "float"}` from the string "float", and from an Arrow type)."""
    node, path = side.node, side.namespace("alt")
    tid = make_table(side, path, "t", 25)
    before = side.dataset(tid).to_table(columns=["id", "score"])
    node("alterColumns", table="t", alterations=[{"path": "text", "rename": "title"}])
    ds = side.dataset(tid)
    assert "title" in ds.schema.names and "text" not in ds.schema.names
    altered = node("alterColumns", table="t", alterations=[{"path": "score", "dataType": "float"}])
    ds = side.dataset(tid)
    assert altered["version"] == ds.version
    assert ds.schema.field("score").type == pa.float32()
    assert node("schema", table="t") == schema_of(ds)
    want = [None if v is None else pytest.approx(v, rel=1e-6) for v in before["score"].to_pylist()]
    assert ds.to_table(columns=["score"])["score"].to_pylist() == want
    node("alterColumns", table="t", alterations=[{"path": "id", "dataType": {"arrow": "Int32"}}])
    assert side.dataset(tid).schema.field("id").type == pa.int32()
    assert node("countRows", table="t", filter="id < 10") == side.dataset(tid).count_rows("id < 10")


def test_rename_in_place(side):
    node, path = side.node, side.namespace("ren")
    tid = make_table(side, path, "old", 12)
    location = side.location(tid)
    node("renameTable", name="old", newName="new", ns=path)
    assert not side.table_exists(tid) and side.table_exists(path + ["new"])
    assert side.location(path + ["new"]) == location
    assert sorted(node("tableNames", ns=path)) == sorted(side.list_tables(path)) == ["new"]
    node("openTable", name="new", ns=path, handle="renamed")
    assert node("countRows", table="renamed") == side.dataset(path + ["new"]).count_rows()


def test_rename_across_namespaces(side):
    """`renameTable(…, {namespacePath, newNamespacePath})`: the remote client names the
    destination in `new_namespace`, the spec's client in `new_namespace_id`."""
    node, src = side.node, side.namespace("from")
    dest = side.namespace("to")
    tid = make_table(side, src, "t", 12)
    location = side.location(tid)
    node("renameTable", name="t", newName="moved", ns=src, newNs=dest)
    assert side.table_exists(dest + ["moved"]), f"no table {dest + ['moved']} after the rename"
    assert not side.table_exists(tid)
    assert not side.table_exists(src + ["moved"]), "renamed in place instead of into the new namespace"
    assert side.location(dest + ["moved"]) == location
    assert node("tableNames", ns=src) == side.list_tables(src) == []
    assert node("tableNames", ns=dest) == side.list_tables(dest) == ["moved"]
    node("openTable", name="moved", ns=dest, handle="moved")
    assert node("countRows", table="moved") == side.dataset(dest + ["moved"]).count_rows()


def test_optimize(side):
    """`optimize()`: compaction of small fragments (and pruning, and index updates). The
    remote client 0.31 refuses it itself ("optimize is not supported on LanceDB cloud")
    and sends nothing, so there the table must be left as it was."""
    node, path = side.node, side.namespace("opt")
    tid = make_table(side, path, "t", 10)
    for i in range(3):
        node("add", table="t", data={"n": 10, "start": 10 + 10 * i, "seed": i})
    before = side.dataset(tid)
    if side.mode == "remote":
        assert "not supported" in node.error("optimize", table="t")
        assert side.dataset(tid).version == before.version
        return
    stats = node("optimize", table="t")
    after = side.dataset(tid)
    assert after.count_rows() == before.count_rows() == node("countRows", table="t")
    assert len(after.get_fragments()) < len(before.get_fragments())
    assert stats["compaction"]["fragmentsRemoved"] == len(before.get_fragments())
    assert stats["compaction"]["fragmentsAdded"] == len(after.get_fragments())


def test_missing_columns_are_named(side):
    """A missing column is reported as such: the remote client reads any 404 outside the
    index routes as "Table '<name>' was not found", so code 12 must not come as a 404."""
    node, path = side.node, side.namespace("miss")
    tid = make_table(side, path, "t", 10)
    calls = [
        ("dropColumns", {"columns": ["nope"]}),
        ("alterColumns", {"alterations": [{"path": "nope", "rename": "x"}]}),
        ("query", {"where": "nope < 3", "select": ["id"]}),
        ("query", {"select": ["nope"]}),
        ("countRows", {"filter": "nope = 1"}),
        ("update", {"where": "id < 1", "values": {"nope": "x"}}),
    ]
    for op, args in calls:
        error = node.error(op, table="t", **args)
        assert "nope" in error, (op, error)
        assert not re.search(r"Table '[^']*' was not found", error), f"{op} said the table is missing: {error}"
    assert side.table_exists(tid) and side.dataset(tid).version == 1


def test_prewarm(side):
    """`prewarmIndex` and, on remote tables, `prewarmData` (the remote client sends
    `index/{name}/prewarm/` and `page_cache/prewarm/ {"columns": [...]}`): hints that
    change nothing visible."""
    node, path = side.node, side.namespace("warm")
    tid = make_table(side, path, "t", 50)
    node("createIndex", table="t", column="id", config={"type": "btree"})
    version = side.dataset(tid).version
    node("callTable", table="t", method="prewarmIndex", args=["id_idx"])
    if side.mode == "remote":
        # LanceDB's own tables refuse it ("only supported on remote tables"). The gateway
        # keeps no page cache of table data, and says so rather than answer as if warmed.
        error = node.error("callTable", table="t", method="prewarmData", args=[["id", "text"]])
        assert "no page cache" in error, error
        error = node.error("callTable", table="t", method="prewarmIndex", args=["nope_idx"])
        assert "nope_idx" in error and not re.search(r"Table '[^']*' was not found", error), error
    assert side.dataset(tid).version == version
    assert node("countRows", table="t", filter="id < 5") == side.dataset(tid).count_rows("id < 5")


def test_tag_errors_are_named(side):
    """A missing tag, or a tag that exists already, is reported as such: not as a missing
    table (the remote client's reading of a 404) nor as a retry limit (it retries a 409 of
    `tags/create/` three times, then gives up)."""
    node, path = side.node, side.namespace("tagerr")
    tid = make_table(side, path, "t", 10)
    node("tags", table="t", action="create", tag="x", version=1)
    for action in ("getVersion", "delete"):
        error = node.error("tags", table="t", action=action, tag="nope")
        assert "nope" in error, (action, error)
        assert not re.search(r"Table '[^']*' was not found", error), f"{action} said the table is missing: {error}"
    error = node.error("tags", table="t", action="create", tag="x", version=1)
    assert "already exists" in error and "retry limit" not in error.lower(), error
    assert {k: v["version"] for k, v in side.dataset(tid).tags.list().items()} == {"x": 1}


def test_missing_indices_answer_as_on_an_embedded_table(side):
    """An index that does not exist, asked about as LanceDB's calls do: `indexStats` answers
    nothing (undefined), `dropIndex` names the index, `waitForIndex` times out. The namespace
    mode runs LanceDB's own lance on the table (the embedded behaviour); the remote mode must
    answer the same. Its client reads a 404 of `index/{name}/stats|drop|prewarm` as "no such
    index", and any other status as a failure."""
    node, path = side.node, side.namespace("noix")
    tid = make_table(side, path, "t", 20)
    node("createIndex", table="t", column="id", config={"type": "btree"})
    assert node("indexStats", table="t", name="nope_idx") is None
    assert node("indexStats", table="t", name="id_idx")["numIndexedRows"] == 20
    error = node.error("dropIndex", table="t", name="nope_idx")
    assert "nope_idx" in error and not re.search(r"Table '[^']*' was not found", error), error
    error = node.error("waitForIndex", table="t", names=["nope_idx"], timeout=1)
    assert re.search(r"(?i)timed? ?out", error) and "nope_idx" in error, error
    assert [i.name for i in side.dataset(tid).describe_indices()] == ["id_idx"]
