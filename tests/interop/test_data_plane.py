"""The data plane through pylance's REST client (`lance.namespace.RestNamespace`): every
write, read, index, version, tag, branch and schema operation the gateway serves, each
checked against the same operation run by pylance directly on a dataset (same rows, same
version numbers), on the local warehouse and on SeaweedFS. Bad input gets the spec's codes
and changes nothing."""

import http.client
import io
import json
import os
import tempfile
import threading
import time
import urllib.parse

import boto3
import lance
import lance_namespace as ln
import lance_namespace_urllib3_client.models as m
import numpy as np
import pyarrow as pa
import pytest
from lance.namespace import RestNamespace

from conftest import start_gateway, unique
from security import call, enc

DIM = 16


def ipc_stream(table: pa.Table, batch_rows: int | None = None) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=batch_rows)
    return sink.getvalue()


def rows(n: int, start: int = 0, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array([float(i) for i in ids], pa.float64()),
            "text": [f"document number {i} about {'cats' if i % 3 == 0 else 'dogs'}" for i in ids],
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.random(n * DIM, dtype=np.float32)), DIM
            ),
        }
    )


def arrow_of(response) -> pa.Table:
    data = response.data if hasattr(response, "data") else response
    return pa.ipc.open_file(pa.BufferReader(data)).read_all()


def by_id(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def make_table(ns, warehouse, name: str, table: pa.Table):
    top = warehouse.id(unique(name))
    ns.create_namespace(ln.CreateNamespaceRequest(id=top))
    tid = top + ["t"]
    created = ns.create_table(m.CreateTableRequest(id=tid), ipc_stream(table))
    return tid, created


def open_direct(warehouse, location: str):
    return lance.dataset(location, storage_options=warehouse.storage_options or None)


@pytest.fixture
def ns(warehouse):
    return RestNamespace(uri=warehouse.uri)


def test_writes_match_pylance_direct(warehouse, ns):
    first = rows(200)
    tid, created = make_table(ns, warehouse, "dw", first)
    twin = lance.write_dataset(first, tempfile.mkdtemp(prefix="lg-twin-"))
    assert created.version == twin.version == 1
    assert created.location.endswith(".lance") or "/" in created.location

    # append
    more = rows(50, start=200, seed=1)
    inserted = ns.insert_into_table(m.InsertIntoTableRequest(id=tid, mode="append"), ipc_stream(more))
    twin = lance.write_dataset(more, twin.uri, mode="append")
    assert (inserted.version, inserted.num_inserted_rows) == (twin.version, 50)

    # merge-insert by id: 15 rows updated, 15 inserted
    upsert = rows(30, start=235, seed=2)
    merged = ns.merge_insert_into_table(
        m.MergeInsertIntoTableRequest(id=tid, on=["id"], when_matched_update_all=True, when_not_matched_insert_all=True),
        ipc_stream(upsert),
    )
    stats = twin.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(upsert)
    twin = lance.dataset(twin.uri)
    assert merged.num_updated_rows == stats["num_updated_rows"] == 15
    assert merged.num_inserted_rows == stats["num_inserted_rows"] == 15
    assert merged.version == twin.version

    # update with a predicate
    updated = ns.update_table(m.UpdateTableRequest(id=tid, updates=[["v", "v * 2"]], predicate="id < 10"))
    result = twin.update({"v": "v * 2"}, where="id < 10")
    twin = lance.dataset(twin.uri)
    assert updated.updated_rows == result["num_rows_updated"] == 10
    assert updated.version == twin.version

    # delete
    deleted = ns.delete_from_table(m.DeleteFromTableRequest(id=tid, predicate="id >= 260"))
    twin.delete("id >= 260")
    twin = lance.dataset(twin.uri)
    assert deleted.version == twin.version

    # the same rows and versions, read straight off the gateway's location
    location = ns.describe_table(m.DescribeTableRequest(id=tid)).location
    ours = open_direct(warehouse, location)
    assert ours.version == twin.version
    assert by_id(ours.to_table()) == by_id(twin.to_table())
    assert [v["version"] for v in ours.versions()] == [v["version"] for v in twin.versions()]
    for predicate in [None, "id < 100", "text LIKE '%cats%'"]:
        got = ns.count_table_rows(m.CountTableRowsRequest(id=tid, predicate=predicate))
        count = got.count if hasattr(got, "count") else got
        assert count == twin.count_rows(filter=predicate)
    # a count at an older version
    old = ns.count_table_rows(m.CountTableRowsRequest(id=tid, version=1))
    assert (old.count if hasattr(old, "count") else old) == 200

    listed = ns.list_table_versions(m.ListTableVersionsRequest(id=tid))
    assert [v.version for v in listed.versions] == [v["version"] for v in twin.versions()]
    newest = ns.list_table_versions(m.ListTableVersionsRequest(id=tid, descending=True, limit=2))
    assert [v.version for v in newest.versions] == [twin.version, twin.version - 1]
    assert newest.page_token
    # (pylance's client takes this one request as a dict)
    described = ns.describe_table_version({"id": tid, "version": 2})["version"]
    # the manifest as a Lance object store names it: from the store's root, in the table's folder
    assert described["version"] == 2
    table_folder = location.rstrip("/").split("/")[-1]
    assert described["manifest_path"].endswith(f"{table_folder}/_versions/{2**64 - 1 - 2:020}.manifest")
    assert "://" not in described["manifest_path"] and not described["manifest_path"].startswith("/")

    # overwrite replaces the rows with a new version
    fresh = rows(7, start=1000, seed=3)
    over = ns.insert_into_table(m.InsertIntoTableRequest(id=tid, mode="overwrite"), ipc_stream(fresh))
    twin = lance.write_dataset(fresh, twin.uri, mode="overwrite")
    assert over.version == twin.version
    assert by_id(open_direct(warehouse, location).to_table()) == by_id(fresh)


def test_declared_table_is_created_by_its_first_insert(warehouse, ns):
    top = warehouse.id(unique("decl"))
    ns.create_namespace(ln.CreateNamespaceRequest(id=top))
    tid = top + ["t"]
    ns.declare_table(m.DeclareTableRequest(id=tid))
    empty = ns.count_table_rows(m.CountTableRowsRequest(id=tid))
    assert (empty.count if hasattr(empty, "count") else empty) == 0
    first = rows(12)
    inserted = ns.insert_into_table(m.InsertIntoTableRequest(id=tid), ipc_stream(first))
    assert (inserted.version, inserted.num_inserted_rows) == (1, 12)
    described = ns.describe_table(m.DescribeTableRequest(id=tid, check_declared=True))
    assert described.is_only_declared is False
    assert by_id(open_direct(warehouse, described.location).to_table()) == by_id(first)


def test_create_modes_and_an_empty_table(warehouse, ns):
    top = warehouse.id(unique("modes"))
    ns.create_namespace(ln.CreateNamespaceRequest(id=top))
    tid = top + ["empty"]
    schema = rows(1).schema
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, schema):
        pass
    created = ns.create_table(m.CreateTableRequest(id=tid, properties={"owner": "ml"}), sink.getvalue())
    assert created.version == 1
    direct = open_direct(warehouse, created.location)
    assert direct.count_rows() == 0 and direct.schema == schema
    assert ns.describe_table(m.DescribeTableRequest(id=tid)).properties == {"owner": "ml"}
    # create again: TableAlreadyExists, and the table is untouched
    with pytest.raises(Exception, match="(?i)already exists"):
        ns.create_table(m.CreateTableRequest(id=tid), ipc_stream(rows(3)))
    # exist_ok answers the table as it is
    same = ns.create_table(m.CreateTableRequest(id=tid, mode="exist_ok"), ipc_stream(rows(3)))
    assert same.location == created.location and same.version == 1
    # overwrite makes a new version of the same table
    over = ns.create_table(m.CreateTableRequest(id=tid, mode="overwrite"), ipc_stream(rows(3)))
    assert over.location == created.location and over.version == 2
    assert open_direct(warehouse, created.location).count_rows() == 3


def search_table(ns, warehouse):
    table = rows(2000, seed=7)
    tid, created = make_table(ns, warehouse, "rd", table)
    ns.create_table_index(m.CreateTableIndexRequest(
        id=tid, column="vec", index_type="IVF_PQ", num_partitions=4, num_sub_vectors=4, distance_type="l2"))
    ns.create_table_index(m.CreateTableIndexRequest(id=tid, column="text", index_type="FTS", with_position=True))
    ns.create_table_scalar_index(m.CreateTableIndexRequest(id=tid, column="id", index_type="BTREE"))
    return tid, created.location, table


def query(ns, tid, **fields):
    if "vector" not in fields:
        fields["vector"] = m.QueryTableRequestVector()
    return arrow_of(ns.query_table(m.QueryTableRequest(id=tid, **fields)))


def test_reads_match_pylance_direct(warehouse, ns):
    tid, location, table = search_table(ns, warehouse)
    direct = open_direct(warehouse, location)
    q = np.random.default_rng(99).random(DIM, dtype=np.float32)
    vector = m.QueryTableRequestVector(single_vector=q.tolist())

    # exact search (index bypassed) and ANN with nprobes and refine: the same ids and
    # distances as the same search run by pylance on the same dataset
    for params, nearest in [
        (dict(bypass_vector_index=True), dict(use_index=False)),
        (dict(nprobes=2, refine_factor=2), dict(nprobes=2, refine_factor=2)),
        (dict(minimum_nprobes=4, maximum_nprobes=4), dict(minimum_nprobes=4, maximum_nprobes=4)),
        (dict(distance_type="cosine", bypass_vector_index=True), dict(metric="cosine", use_index=False)),
    ]:
        got = query(ns, tid, k=10, vector=vector, vector_column="vec",
                    columns=m.QueryTableRequestColumns(column_names=["id", "v"]), **params)
        want = direct.to_table(columns=["id", "v"], nearest={"column": "vec", "q": q, "k": 10, **nearest})
        assert got["id"].to_pylist() == want["id"].to_pylist(), params
        assert np.allclose(got["_distance"].to_numpy(), want["_distance"].to_numpy()), params

    # a prefiltered vector search, and a postfiltered one
    got = query(ns, tid, k=5, vector=vector, filter="id < 500", prefilter=True, bypass_vector_index=True,
                columns=m.QueryTableRequestColumns(column_names=["id"]))
    want = direct.to_table(columns=["id"], filter="id < 500", prefilter=True,
                           nearest={"column": "vec", "q": q, "k": 5, "use_index": False})
    assert got["id"].to_pylist() == want["id"].to_pylist()
    assert all(i < 500 for i in got["id"].to_pylist())
    post = query(ns, tid, k=5, vector=vector, filter="id < 500", prefilter=False, bypass_vector_index=True,
                 columns=m.QueryTableRequestColumns(column_names=["id"]))
    assert all(i < 500 for i in post["id"].to_pylist()) and len(post) <= 5

    # a distance bound
    bounded = query(ns, tid, k=50, vector=vector, bypass_vector_index=True, upper_bound=1.0,
                    columns=m.QueryTableRequestColumns(column_names=["id"]))
    assert all(d < 1.0 for d in bounded["_distance"].to_pylist())

    # plain scans: filter, columns, aliases, offset, row ids
    got = query(ns, tid, k=20, filter="id >= 100 AND id < 110",
                columns=m.QueryTableRequestColumns(column_names=["id", "text"]))
    want = direct.to_table(columns=["id", "text"], filter="id >= 100 AND id < 110")
    assert by_id(got) == by_id(want)
    aliased = query(ns, tid, k=3, filter="id < 3",
                    columns=m.QueryTableRequestColumns(column_aliases={"ident": "id", "twice": "v * 2"}))
    assert sorted(aliased.column_names) == ["ident", "twice"]
    assert sorted(zip(aliased["ident"].to_pylist(), aliased["twice"].to_pylist())) == [(0, 0.0), (1, 2.0), (2, 4.0)]
    page = query(ns, tid, k=5, offset=5, filter="id < 1000", columns=m.QueryTableRequestColumns(column_names=["id"]))
    assert len(page) == 5
    with_ids = query(ns, tid, k=4, with_row_id=True, columns=m.QueryTableRequestColumns(column_names=["id"]))
    assert "_rowid" in with_ids.column_names

    # full-text search: a string query and a structured match
    got = query(ns, tid, k=10, full_text_query=m.QueryTableRequestFullTextQuery(
        string_query=m.StringFtsQuery(query="cats", columns=["text"])), columns=m.QueryTableRequestColumns(column_names=["id", "text"]))
    want = direct.to_table(columns=["id", "text"], full_text_query={"query": "cats", "columns": ["text"]}, limit=10)
    assert sorted(got["id"].to_pylist()) == sorted(want["id"].to_pylist())
    assert len(got) == 10 and all("cats" in t for t in got["text"].to_pylist())
    structured = m.QueryTableRequestFullTextQuery(structured_query=m.StructuredFtsQuery(
        query=m.FtsQuery(match=m.MatchQuery(terms="number 42", column="text", operator="And"))))
    got = query(ns, tid, k=5, full_text_query=structured, columns=m.QueryTableRequestColumns(column_names=["id"]))
    assert 42 in got["id"].to_pylist()

    # explain and analyze
    plan = ns.explain_table_query_plan(m.ExplainTableQueryPlanRequest(
        id=tid, query=m.QueryTableRequest(k=5, vector=vector, filter="id < 10")))
    text = plan.plan if hasattr(plan, "plan") else plan
    assert "KNN" in text.upper() or "ANN" in text.upper()
    analysis = ns.analyze_table_query_plan(m.AnalyzeTableQueryPlanRequest(
        id=tid, k=5, vector=m.QueryTableRequestVector(), filter="id < 10"))
    analysis = analysis.analysis if hasattr(analysis, "analysis") else analysis
    assert "metrics" in analysis.lower() or "output_rows" in analysis.lower()

    # stats and indices
    stats = ns.get_table_stats(m.GetTableStatsRequest(id=tid))
    assert stats.num_rows == direct.count_rows() == 2000
    assert stats.num_indices == 3 and stats.fragment_stats.num_fragments == len(direct.get_fragments())
    indices = ns.list_table_indices(m.ListTableIndicesRequest(id=tid)).indexes
    assert sorted(i.columns[0] for i in indices) == ["id", "text", "vec"]
    assert sorted(i.index_name for i in indices) == sorted(i["name"] for i in direct.list_indices())
    vec_index = next(i.index_name for i in indices if i.columns == ["vec"])
    status, body, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/index/{vec_index}/stats", {})
    assert status == 200 and body["num_indexed_rows"] == 2000 and body["distance_type"] == "l2"
    paged = ns.list_table_indices(m.ListTableIndicesRequest(id=tid, limit=2))
    assert len(paged.indexes) == 2 and paged.page_token
    status, body, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/index/{vec_index}/drop")
    assert status == 200, body
    assert vec_index not in [i.index_name for i in ns.list_table_indices(m.ListTableIndicesRequest(id=tid)).indexes]
    status, body, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/index/{vec_index}/drop")
    assert (status, body["code"]) == (404, 6)

    # a query at an older version sees the rows of that version
    ns.delete_from_table(m.DeleteFromTableRequest(id=tid, predicate="id < 1000"))
    assert len(query(ns, tid, k=3000, filter="id < 1000")) == 0
    assert len(query(ns, tid, k=3000, filter="id < 1000", version=1)) == 1000


def test_tags_branches_and_restore(warehouse, ns):
    tid, created = make_table(ns, warehouse, "refs", rows(10))
    ns.insert_into_table(m.InsertIntoTableRequest(id=tid), ipc_stream(rows(5, start=10)))
    ns.create_table_tag(m.CreateTableTagRequest(id=tid, tag="first", version=1))
    with pytest.raises(Exception, match="(?i)exist"):
        ns.create_table_tag(m.CreateTableTagRequest(id=tid, tag="first", version=2))
    assert ns.get_table_tag_version(m.GetTableTagVersionRequest(id=tid, tag="first")).version == 1
    ns.update_table_tag(m.UpdateTableTagRequest(id=tid, tag="first", version=2))
    assert ns.get_table_tag_version(m.GetTableTagVersionRequest(id=tid, tag="first")).version == 2
    ns.create_table_tag(m.CreateTableTagRequest(id=tid, tag="second", version=1))
    tags = ns.list_table_tags(m.ListTableTagsRequest(id=tid)).tags
    assert {k: v.version for k, v in tags.items()} == {"first": 2, "second": 1}
    # the tags are Lance's own: pylance sees them on the dataset
    direct = open_direct(warehouse, created.location)
    assert {k: v["version"] for k, v in direct.tags.list().items()} == {"first": 2, "second": 1}
    ns.delete_table_tag(m.DeleteTableTagRequest(id=tid, tag="second"))
    status, body, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/tags/version", {"tag": "second"})
    assert (status, body["code"]) == (404, 8)
    status, body, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/tags/create", {"tag": "x", "version": 99})
    assert status == 404 and body["code"] in (11, 8), body

    # restore version 1: a new version holding version 1's rows
    ns.restore_table(m.RestoreTableRequest(id=tid, version=1))
    direct = open_direct(warehouse, created.location)
    assert direct.version == 3 and direct.count_rows() == 10
    status, body, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/restore", {"version": 42})
    assert (status, body["code"]) == (404, 11)

    # branches: create from version 2, write on it, main is unchanged
    ns.create_table_branch(m.CreateTableBranchRequest(id=tid, name="exp", from_version=2))
    status, body, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/branches/create", {"name": "exp"})
    assert (status, body["code"]) == (409, 23)
    branches = ns.list_table_branches(m.ListTableBranchesRequest(id=tid)).branches
    assert list(branches) == ["exp"] and branches["exp"].parent_version == 2
    ns.insert_into_table(m.InsertIntoTableRequest(id=tid, branch="exp"), ipc_stream(rows(3, start=100)))
    on_branch = ns.count_table_rows(m.CountTableRowsRequest(id=tid, branch="exp"))
    assert (on_branch.count if hasattr(on_branch, "count") else on_branch) == 18
    assert open_direct(warehouse, created.location).count_rows() == 10
    ns.delete_table_branch(m.DeleteTableBranchRequest(id=tid, name="exp"))
    assert ns.list_table_branches(m.ListTableBranchesRequest(id=tid)).branches == {}
    status, body, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/count_rows", {"branch": "exp"})
    assert (status, body["code"]) == (404, 22), body


def test_schema_changes(warehouse, ns):
    tid, created = make_table(ns, warehouse, "schema", rows(20))
    added = ns.alter_table_add_columns(m.AlterTableAddColumnsRequest(
        id=tid, new_columns=[m.AddColumnsEntry(name="double_id", expression="id * 2")]))
    direct = open_direct(warehouse, created.location)
    assert added.version == direct.version == 2
    assert direct.to_table(columns=["id", "double_id"], filter="id = 7").to_pylist() == [{"id": 7, "double_id": 14}]
    ns.alter_table_alter_columns(m.AlterTableAlterColumnsRequest(
        id=tid, alterations=[m.AlterColumnsEntry(path="v", rename="value", nullable=True)]))
    ns.alter_table_drop_columns(m.AlterTableDropColumnsRequest(id=tid, columns=["text"]))
    direct = open_direct(warehouse, created.location)
    assert direct.schema.names == ["id", "value", "vec", "double_id"]
    assert direct.version == 4
    # (pylance's client refuses this one itself: it is sent as the spec writes it)
    status, meta, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/update_field_metadata",
                           {"updates": [{"path": "value", "metadata": {"unit": "m"}}]})
    assert status == 200 and meta["fields"]["value"] == {"unit": "m"} and meta["version"] == 5, meta
    assert open_direct(warehouse, created.location).schema.field("value").metadata == {b"unit": b"m"}
    status, body, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/schema_metadata/update", {"team": "ml"})
    assert status == 200 and body == {"team": "ml"}
    assert open_direct(warehouse, created.location).schema.metadata == {b"team": b"ml"}
    # a column that is not there
    status, body, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/drop_columns", {"columns": ["nope"]})
    assert (status, body["code"]) == (404, 12)
    # computed columns belong to other products
    status, body, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/add_columns",
                           {"new_columns": [{"name": "c", "computed": "id + 1"}]})
    assert (status, body["code"]) == (406, 0)
    assert open_direct(warehouse, created.location).version == 6


def arrow_call(uri, path, body: bytes):
    return call(uri, "POST", path, body, {"content-type": "application/vnd.apache.arrow.stream"})


def test_bad_input_gets_the_spec_codes_and_changes_nothing(warehouse, ns):
    tid, created = make_table(ns, warehouse, "bad", rows(30))
    path = f"/v1/table/{enc(tid)}"
    version = lambda: open_direct(warehouse, created.location).version  # noqa: E731

    # a body that is not Arrow, and a truncated stream
    for body in [b"", b"{\"not\": \"arrow\"}", ipc_stream(rows(5))[:60]]:
        status, got, _ = arrow_call(warehouse.uri, f"{path}/insert", body)
        assert (status, got["code"]) == (400, 13), got
    # a create with a bad body leaves no table behind
    top = tid[:-1]
    status, got, _ = arrow_call(warehouse.uri, f"/v1/table/{enc(top + ['never'])}/create", b"garbage")
    assert (status, got["code"]) == (400, 13)
    status, got, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(top + ['never'])}/exists", {})
    assert status == 404
    # wrong types: the table's schema does not take them
    wrong = pa.table({"id": pa.array(["a", "b"]), "v": pa.array([1, 2], pa.int8())})
    status, got, _ = arrow_call(warehouse.uri, f"{path}/insert", ipc_stream(wrong))
    assert (status, got["code"]) == (400, 20), got
    # bad SQL, unknown columns
    status, got, _ = call(warehouse.uri, "POST", f"{path}/delete", {"predicate": "id >>>= 3"})
    assert (status, got["code"]) == (400, 13), got
    status, got, _ = call(warehouse.uri, "POST", f"{path}/update", {"updates": [["nope", "1"]]})
    assert status in (400, 404) and got["code"] in (12, 13), got
    status, got, _ = call(warehouse.uri, "POST", f"{path}/query",
                          {"k": 5, "vector": {}, "filter": "nope > 3"})
    assert (status, got["code"]) == (404, 12), got
    status, got, _ = call(warehouse.uri, "POST", f"{path}/query", {"k": 5, "vector": {"single_vector": ["x"]}})
    assert (status, got["code"]) == (400, 13), got
    status, got, _ = call(warehouse.uri, "POST", f"{path}/merge_insert?on=nope&when_not_matched_insert_all=true",
                          ipc_stream(rows(2)), {"content-type": "application/vnd.apache.arrow.stream"})
    assert (status, got["code"]) == (404, 12), got
    status, got, _ = call(warehouse.uri, "POST", f"{path}/create_index", {"column": "nope", "index_type": "BTREE"})
    assert (status, got["code"]) == (404, 12), got
    status, got, _ = call(warehouse.uri, "POST", f"{path}/create_index", {"column": "id", "index_type": "MAGIC"})
    assert (status, got["code"]) == (400, 13), got
    # a version that does not exist; a table that does not exist
    status, got, _ = call(warehouse.uri, "POST", f"{path}/count_rows", {"version": 99})
    assert (status, got["code"]) == (404, 11), got
    status, got, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(top + ['missing'])}/query", {"k": 1, "vector": {}})
    assert (status, got["code"]) == (404, 4), got
    # nothing changed
    assert version() == 1
    assert open_direct(warehouse, created.location).count_rows() == 30
    # the operations of other products
    status, got, _ = call(warehouse.uri, "POST", f"{path}/backfill_column", {"column": "v"})
    assert (status, got["code"]) == (406, 0)


def test_limits_name_themselves(warehouse):
    gw = start_gateway(warehouse.args + ["--max-arrow-body-bytes", "16384", "--max-query-rows", "100"], warehouse.env)
    try:
        ns = RestNamespace(uri=gw.uri)
        tid, created = make_table(ns, warehouse, "lim", rows(20))
        status, got, _ = arrow_call(gw.uri, f"/v1/table/{enc(tid)}/insert", ipc_stream(rows(400)))
        assert (status, got["code"]) == (400, 13) and "16384" in got["error"], got
        # without a Content-Length, in batches: refused on reaching the cap, after some
        # batches were already handed to the writer, and nothing is committed
        status, got = chunked_upload(gw.uri, f"/v1/table/{enc(tid)}/insert", ipc_stream(rows(400), batch_rows=10))
        assert (status, got["code"]) == (400, 13) and "16384" in got["error"], got
        assert open_direct(warehouse, created.location).version == 1
        ns.insert_into_table(m.InsertIntoTableRequest(id=tid), ipc_stream(rows(10, start=20)))
        status, got, _ = call(gw.uri, "POST", f"/v1/table/{enc(tid)}/query", {"k": 1000, "vector": {}})
        assert (status, got["code"]) == (400, 13) and "max-query-rows" in got["error"], got
        # an unlimited scan of more rows than the cap is refused, not cut short
        big = rows(90, start=100)
        ns.insert_into_table(m.InsertIntoTableRequest(id=tid), ipc_stream(big[:40]))
        ns.insert_into_table(m.InsertIntoTableRequest(id=tid), ipc_stream(big[40:]))
        status, got, _ = call(gw.uri, "POST", f"/v1/table/{enc(tid)}/query", {"k": 0, "vector": {}})
        assert (status, got["code"]) == (400, 13), got
        assert len(query(ns, tid, k=100, columns=m.QueryTableRequestColumns(column_names=["id"]))) == 100
        assert open_direct(warehouse, created.location).count_rows() == 120
    finally:
        assert gw.stop() == 0


def chunked_upload(uri: str, path: str, body: bytes, give_up_at: int | None = None):
    """POSTs `body` without a Content-Length, 4 KiB at a time; with `give_up_at`, the
    client closes the connection after that many bytes, mid-upload (None is answered)."""
    parsed = urllib.parse.urlparse(uri)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    end = len(body) if give_up_at is None else give_up_at

    def pieces():
        for at in range(0, end, 4096):
            yield body[at:min(at + 4096, end)]
        if give_up_at is not None:
            raise ConnectionAbortedError("the client gave up")

    try:
        conn.request("POST", path, body=pieces(), encode_chunked=True,
                     headers={"content-type": "application/vnd.apache.arrow.stream"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    except ConnectionAbortedError:
        return None
    finally:
        conn.close()


def data_files(warehouse, location: str) -> list[str]:
    """The names of the files in a table's `data/` folder, as the store holds them."""
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme == "s3":
        o = warehouse.storage_options
        s3 = boto3.client("s3", endpoint_url=o["aws_endpoint"], region_name=o["aws_region"],
                          aws_access_key_id=o["aws_access_key_id"],
                          aws_secret_access_key=o["aws_secret_access_key"])
        prefix = parsed.path.strip("/") + "/data/"
        listed = s3.list_objects_v2(Bucket=parsed.netloc, Prefix=prefix).get("Contents", [])
        return sorted(x["Key"][len(prefix):] for x in listed)
    return sorted(os.listdir(os.path.join(parsed.path if parsed.scheme else location, "data")))


def test_an_upload_written_as_it_arrives_commits_only_when_whole(warehouse, ns):
    """Inserts are written batch by batch as they arrive. An upload that breaks off, is not
    a whole Arrow stream, or passes the cap after some batches were written leaves the table
    at its version, and the next insert is the next version."""
    tid, created = make_table(ns, warehouse, "streamed", rows(30))
    path = f"/v1/table/{enc(tid)}/insert"
    version = lambda: open_direct(warehouse, created.location).version  # noqa: E731
    upload = ipc_stream(rows(600, start=1000), batch_rows=50)  # 12 batches of 50
    files = data_files(warehouse, created.location)

    # whole batches arrive first, then the stream is cut inside its last one
    status, got, _ = arrow_call(warehouse.uri, path, upload[:-300])
    assert (status, got["code"]) == (400, 13), got
    status, got = chunked_upload(warehouse.uri, path, upload[:-300])
    assert (status, got["code"]) == (400, 13), got
    # the client goes away after two thirds of the upload
    assert chunked_upload(warehouse.uri, path, upload, give_up_at=len(upload) * 2 // 3) is None
    time.sleep(1)
    assert version() == 1 and open_direct(warehouse, created.location).count_rows() == 30
    # and Lance took back the data files it had begun for the earlier batches
    assert data_files(warehouse, created.location) == files

    # the same upload, whole and without a Content-Length: every batch lands, in one version
    status, got = chunked_upload(warehouse.uri, path, upload)
    assert status == 200 and got["version"] == 2 and got.get("num_inserted_rows") == 600, got
    direct = open_direct(warehouse, created.location)
    assert direct.count_rows() == 630
    assert sorted(direct.to_table(columns=["id"])["id"].to_pylist()) == list(range(30)) + list(range(1000, 1600))


def test_describe_answers_while_an_index_builds(warehouse, ns):
    table = rows(20000, seed=11)
    tid, created = make_table(ns, warehouse, "busy", table)
    done = threading.Event()
    error = []

    def build():
        try:
            ns.create_table_index(m.CreateTableIndexRequest(
                id=tid, column="vec", index_type="IVF_PQ", num_partitions=16, num_sub_vectors=8,
                max_iterations=200, sample_rate=2048))
        except Exception as e:  # noqa: BLE001
            error.append(e)
        finally:
            done.set()

    builder = threading.Thread(target=build)
    builder.start()
    answered_during_build = 0
    while not done.is_set():
        status, body, _ = call(warehouse.uri, "POST", f"/v1/table/{enc(tid)}/describe", {})
        assert status == 200 and body["location"] == created.location
        if not done.is_set():
            answered_during_build += 1
    builder.join()
    assert not error, error
    assert answered_during_build > 0
    indices = ns.list_table_indices(m.ListTableIndicesRequest(id=tid)).indexes
    assert [i.columns for i in indices] == [["vec"]]


def test_multi_vector_search_matches_pylance(warehouse, ns):
    rng = np.random.default_rng(0)
    n = 200
    inner = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 3 * 8, dtype=np.float32)), 8)
    multi = pa.ListArray.from_arrays(pa.array(np.arange(0, n * 3 + 1, 3, dtype=np.int32)), inner)
    tid, created = make_table(ns, warehouse, "mv", pa.table({"id": pa.array(range(n), pa.int64()), "mv": multi}))
    q = rng.random((2, 8), dtype=np.float32)
    got = query(ns, tid, k=3, vector=m.QueryTableRequestVector(multi_vector=q.tolist()), distance_type="cosine",
                columns=m.QueryTableRequestColumns(column_names=["id"]))
    want = open_direct(warehouse, created.location).to_table(
        columns=["id"], nearest={"column": "mv", "q": q, "k": 3, "metric": "cosine"})
    assert got["id"].to_pylist() == want["id"].to_pylist()
    assert np.allclose(got["_distance"].to_numpy(), want["_distance"].to_numpy())


def test_a_large_result_streams_out_whole(warehouse, ns):
    """A result past the gateway's hold-whole size (8 MiB) is sent as it is read: the client
    still gets one complete Arrow IPC file, the same rows pylance reads."""
    rng = np.random.default_rng(4)
    n, dim = 24_000, 128
    big = pa.table({"id": pa.array(range(n), pa.int64()),
                    "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * dim, dtype=np.float32)), dim)})
    tid, created = make_table(ns, warehouse, "big", big)
    got = query(ns, tid, k=n, filter="id >= 0")
    assert got.num_rows == n and got.nbytes > 8 * 1024 * 1024
    want = open_direct(warehouse, created.location).to_table()
    assert got.sort_by("id").equals(want.sort_by("id"))
    # the same with no limit at all (k = 0): counted first, then streamed
    assert query(ns, tid, k=0, columns=m.QueryTableRequestColumns(column_names=["id"])).num_rows == n
