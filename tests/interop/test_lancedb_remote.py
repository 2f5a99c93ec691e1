"""LanceDB's server-side clients against the gateway's data plane:

- the remote client, `lancedb.connect("db://<name>", api_key=..., host_override=<gateway>)`:
  create, add, vector / filter / full-text search, count, update, delete, merge_insert,
  indices, tags and versions, every answer checked against pylance reading the table's
  location directly; its API key is authenticated and its grants enforced like any other;
- `connect_namespace` with `namespace_client_pushdown_operations=["QueryTable"]`, whose scans
  run on the gateway.

On the local warehouse and on SeaweedFS."""

import datetime
import os
import tempfile
import uuid

import lance
import lancedb
import lance_namespace as ln
import numpy as np
import pyarrow as pa
import pytest
from lancedb.index import FTS, IvfPq

from conftest import start_gateway, s3_gateway_setup, unique
from security import keyed_gateway

DIM = 8


def data(n: int, start: int = 0, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "text": [f"item {i} {'cats' if i % 2 else 'dogs'}" for i in ids],
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * DIM, dtype=np.float32)), DIM),
    })


@pytest.fixture(params=["local", "seaweedfs"])
def remote(request):
    """A gateway with API keys and grants: `app` writes under `base`, `viewer` reads, `ops`
    administers everything, `nobody` has a key and no grant."""
    with keyed_gateway(request, "lg-remote-") as gw:
        yield gw


def connect(remote, who: str):
    return lancedb.connect("db://gateway", api_key=remote["keys"][who], host_override=remote["gw"].uri,
                           region="us-east-1")


def location_of(remote, name: str) -> str:
    ns = ln.connect("rest", {"uri": remote["gw"].uri, "headers.x-api-key": remote["keys"]["ops"]})
    return ns.describe_table(ln.DescribeTableRequest(id=remote["base"] + [name])).location


def direct(remote, name: str):
    return lance.dataset(location_of(remote, name), storage_options=remote["storage"])


def tables(db, path) -> list[str]:
    return list(db.list_tables(namespace_path=path).tables)


def rows_by_id(table: pa.Table, columns=("id", "text")) -> list:
    return sorted((tuple(r[c] for c in columns) for r in table.to_pylist()))


def test_remote_client_end_to_end(remote):
    db = connect(remote, "app")
    path = remote["base"] or None
    name = unique("rt")
    first = data(300)
    table = db.create_table(name, first, namespace_path=path)
    assert name in tables(db, path)
    with pytest.raises(Exception, match="(?i)already exists"):
        db.create_table(name, first, namespace_path=path)
    same = db.create_table(name, first, namespace_path=path, exist_ok=True)
    assert same.count_rows() == 300

    table.add(data(20, start=300, seed=1))
    assert table.count_rows() == 320 == direct(remote, name).count_rows()
    assert table.count_rows("id < 10") == 10

    # vector search (exact, then through an IVF_PQ index) = pylance's on the same data
    q = np.random.default_rng(5).random(DIM, dtype=np.float32)
    got = table.search(q).limit(5).bypass_vector_index().select(["id"]).to_arrow()
    want = direct(remote, name).to_table(columns=["id"], nearest={"column": "vector", "q": q, "k": 5, "use_index": False})
    assert got["id"].to_pylist() == want["id"].to_pylist()
    table.create_index("vector", config=IvfPq(distance_type="l2", num_partitions=2, num_sub_vectors=2))
    got = table.search(q).limit(5).nprobes(2).select(["id"]).to_arrow()
    want = direct(remote, name).to_table(columns=["id"], nearest={"column": "vector", "q": q, "k": 5, "nprobes": 2})
    assert got["id"].to_pylist() == want["id"].to_pylist()

    # filters, projections, full-text search
    got = table.search().where("id >= 100 AND id < 105").select(["id", "text"]).to_arrow()
    assert rows_by_id(got) == rows_by_id(direct(remote, name).to_table(filter="id >= 100 AND id < 105"))
    table.create_index("text", config=FTS())
    hits = table.search("cats", query_type="fts").limit(5).select(["id", "text"]).to_arrow()
    assert len(hits) == 5 and all("cats" in t for t in hits["text"].to_pylist())
    indices = {i.name: i for i in table.list_indices()}
    assert sorted(str(i.index_type).upper().replace("_", "") for i in indices.values()) == ["FTS", "IVFPQ"]
    assert table.index_stats("vector_idx").num_indexed_rows == 320
    # An index that does not exist: as on an embedded table, stats are None, a drop names
    # the index (not a missing table) and a wait times out.
    assert table.index_stats("nope_idx") is None
    with pytest.raises(Exception, match="nope_idx") as dropped:
        table.drop_index("nope_idx")
    assert "Table '" not in str(dropped.value), dropped.value
    with pytest.raises(Exception, match="(?i)timed? ?out"):
        table.wait_for_index(["nope_idx"], timeout=datetime.timedelta(seconds=1))

    # update, delete, merge_insert: the versions and rows pylance sees
    updated = table.update(where="id < 3", values={"text": "changed"})
    assert updated.rows_updated == 3
    deleted = table.delete("id >= 310")
    assert deleted.num_deleted_rows == 10
    merged = table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        data(10, start=305, seed=2))
    assert (merged.num_updated_rows, merged.num_inserted_rows) == (5, 5)
    ds = direct(remote, name)
    assert ds.version == merged.version == table.version
    assert ds.count_rows() == table.count_rows() == 315
    assert ds.to_table(filter="id < 3")["text"].to_pylist() == ["changed"] * 3

    # versions and tags
    versions = [v["version"] for v in table.list_versions()]
    assert versions == [v["version"] for v in ds.versions()]
    table.tags.create("first", 1)
    assert table.tags.get_version("first") == 1
    assert {k: v["version"] for k, v in table.tags.list().items()} == {"first": 1}
    assert {k: v["version"] for k, v in ds.tags.list().items()} == {"first": 1}
    table.checkout(1)
    assert table.count_rows() == 300
    table.checkout_latest()
    assert table.count_rows() == 315

    # the reader may read, not write; a caller with no grant sees nothing
    viewer = connect(remote, "viewer").open_table(name, namespace_path=path)
    assert viewer.count_rows() == 315
    with pytest.raises(Exception, match="(?i)permission|denied|403"):
        viewer.add(data(1, start=999))
    with pytest.raises(Exception, match="(?i)permission|denied|403"):
        viewer.delete("id = 1")
    assert direct(remote, name).count_rows() == 315

    # dropping needs admin: the writer is refused, the operator may
    with pytest.raises(Exception, match="(?i)admin|403"):
        db.drop_table(name, namespace_path=path) if path else db.drop_table(name)
    ops = connect(remote, "ops")
    ops.drop_table(name, namespace_path=path) if path else ops.drop_table(name)
    assert name not in tables(db, path)


def test_an_unknown_api_key_is_refused(remote):
    db = lancedb.connect("db://gateway", api_key="lgk_not_a_real_key", host_override=remote["gw"].uri,
                         region="us-east-1")
    with pytest.raises(Exception, match="(?i)401|unauthenticated|api key"):
        db.create_table(unique("nope"), data(3), namespace_path=remote["base"] or None)


def test_an_open_gateway_serves_the_remote_client_whatever_key_it_sends(warehouse):
    """LanceDB's remote client always sends a key; a gateway with no authentication
    configured (`scripts/serve`) ignores it, as the reference server does, and serves it."""
    top = warehouse.id(unique("open"))
    ln.connect("rest", {"uri": warehouse.uri}).create_namespace(ln.CreateNamespaceRequest(id=top))
    db = lancedb.connect("db://gateway", api_key="sk-whatever-the-user-had", host_override=warehouse.uri,
                         region="us-east-1")
    table = db.create_table("t", data(20), namespace_path=top)
    assert table.count_rows("id < 5") == 5
    assert "t" in db.table_names(namespace_path=top)
    log = open(warehouse.gateway.log).read()
    assert log.count("no authentication is configured") == 1, "said once in the log"


def test_query_pushdown_runs_on_the_gateway(warehouse):
    ns = ln.connect("rest", {"uri": warehouse.uri})
    top = warehouse.id(unique("push"))
    ns.create_namespace(ln.CreateNamespaceRequest(id=top))
    db = lancedb.connect_namespace("rest", {"uri": warehouse.uri},
                                   namespace_client_pushdown_operations=["QueryTable"])
    table = db.create_table("pt", data(200), namespace_path=top)
    table.create_index("text", config=FTS())
    location = ns.describe_table(ln.DescribeTableRequest(id=top + ["pt"])).location
    ds = lance.dataset(location, storage_options=warehouse.storage_options or None)

    before = open(warehouse.gateway.log).read().count("/query")
    got = table.search().where("id < 7").select(["id", "text"]).to_arrow()
    assert rows_by_id(got) == rows_by_id(ds.to_table(filter="id < 7"))
    fts = table.search("cats", query_type="fts").limit(4).select(["id", "text"]).to_arrow()
    assert len(fts) == 4 and all("cats" in t for t in fts["text"].to_pylist())
    q = np.random.default_rng(3).random(DIM, dtype=np.float32)
    vec = table.search(q).limit(3).select(["id"]).to_arrow()
    want = ds.to_table(columns=["id"], nearest={"column": "vector", "q": q, "k": 3})
    assert vec["id"].to_pylist() == want["id"].to_pylist()
    # the plain scan at least went to the gateway's QueryTable
    assert open(warehouse.gateway.log).read().count("/query") > before


def test_grants_on_spec_data_operations(remote):
    """pylance's REST client with each caller's key: reads need read, writes write, the
    destructive changes admin; a caller without a grant is told the table is not there."""
    from lance.namespace import RestNamespace
    import io
    import lance_namespace_urllib3_client.models as m
    from security import call, enc

    def client(who):
        return RestNamespace(uri=remote["gw"].uri, **{"headers.x-api-key": remote["keys"][who]})

    def stream(t):
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        return sink.getvalue()

    tid = remote["base"] + [unique("g")]
    app, viewer = client("app"), client("viewer")
    created = app.create_table(m.CreateTableRequest(id=tid), stream(data(50)))
    app.create_table_index(m.CreateTableIndexRequest(id=tid, column="id", index_type="BTREE"))
    assert viewer.count_table_rows(m.CountTableRowsRequest(id=tid)).count == 50
    got = viewer.query_table(m.QueryTableRequest(id=tid, k=5, vector=m.QueryTableRequestVector(), filter="id < 5"))
    assert len(pa.ipc.open_file(pa.BufferReader(got.data)).read_all()) == 5

    def status(who, op, body, arrow=False):
        headers = {"x-api-key": remote["keys"][who]}
        if arrow:
            headers["content-type"] = "application/vnd.apache.arrow.stream"
        code, answer, _ = call(remote["gw"].uri, "POST", f"/v1/table/{enc(tid)}/{op}", body, headers)
        return code, answer.get("code")

    # the reader may not write
    assert status("viewer", "insert", stream(data(2, start=100)), arrow=True) == (403, 15)
    assert status("viewer", "delete", {"predicate": "id < 3"}) == (403, 15)
    assert status("viewer", "create_index", {"column": "text", "index_type": "FTS"}) == (403, 15)
    # the writer may write, not destroy
    assert status("app", "delete", {"predicate": "id < 3"})[0] == 200
    assert status("app", "index/id_idx/drop", None) == (403, 15)
    assert status("app", "drop_columns", {"columns": ["text"]}) == (403, 15)
    assert status("app", "restore", {"version": 1}) == (403, 15)
    # the operator may
    assert status("ops", "restore", {"version": 1})[0] == 200
    # a key with no grant on the table learns nothing of it: missing, not forbidden
    assert status("nobody", "count_rows", {})[0] == 404
    assert status("nobody", "query", {"k": 1, "vector": {}})[0] == 404
    assert status("nobody", "insert", stream(data(1, start=500)), arrow=True)[0] == 404
    assert lance.dataset(created.location, storage_options=remote["storage"]).count_rows() == 50
