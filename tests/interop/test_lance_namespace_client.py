"""(a) The `lance_namespace` REST client (pylance 14.0.2's Rust RestNamespace) through every
namespace and table operation the gateway serves, on each kind of warehouse."""

import time

import lance
import lance_namespace as ln
import pyarrow as pa
import pytest
from lance_namespace import errors

from conftest import unique


@pytest.fixture
def ns(warehouse):
    return ln.connect("rest", {"uri": warehouse.uri})


def test_namespace_lifecycle(ns, warehouse):
    top = warehouse.id(unique("ns"))
    resp = ns.create_namespace(ln.CreateNamespaceRequest(id=top, properties={"owner": "ml"}))
    assert resp.properties == {"owner": "ml"}
    with pytest.raises(errors.NamespaceAlreadyExistsError):
        ns.create_namespace(ln.CreateNamespaceRequest(id=top))
    for mode in ["exist_ok", "ExistOk"]:
        again = ns.create_namespace(ln.CreateNamespaceRequest(id=top, mode=mode))
        assert again.properties == {"owner": "ml"}
    assert ns.describe_namespace(ln.DescribeNamespaceRequest(id=top)).properties == {"owner": "ml"}
    ns.namespace_exists(ln.NamespaceExistsRequest(id=top))

    children = [f"c{i}" for i in range(5)]
    for c in children:
        ns.create_namespace(ln.CreateNamespaceRequest(id=top + [c]))
    ns.create_namespace(ln.CreateNamespaceRequest(id=top + ["c0", "deeper"]))
    assert ns.list_namespaces(ln.ListNamespacesRequest(id=top)).namespaces == children
    # paging with a limit returns each child exactly once
    seen, token = [], None
    while True:
        page = ns.list_namespaces(ln.ListNamespacesRequest(id=top, limit=2, page_token=token))
        assert len(page.namespaces) <= 2
        seen += page.namespaces
        token = page.page_token
        if not token:
            break
    assert seen == children
    root = ns.list_namespaces(ln.ListNamespacesRequest(id=warehouse.base)).namespaces
    assert top[-1] in root

    with pytest.raises(errors.NamespaceNotFoundError):
        ns.describe_namespace(ln.DescribeNamespaceRequest(id=top + ["missing"]))
    with pytest.raises(errors.NamespaceNotFoundError):
        ns.namespace_exists(ln.NamespaceExistsRequest(id=top + ["missing"]))
    with pytest.raises(errors.NamespaceNotFoundError):
        ns.create_namespace(ln.CreateNamespaceRequest(id=top + ["missing", "child"]))
    with pytest.raises(errors.NamespaceNotEmptyError):
        ns.drop_namespace(ln.DropNamespaceRequest(id=top))
    ns.drop_namespace(ln.DropNamespaceRequest(id=top + ["missing"], mode="Skip"))
    with pytest.raises(errors.NamespaceNotFoundError):
        ns.drop_namespace(ln.DropNamespaceRequest(id=top + ["missing"]))
    ns.drop_namespace(ln.DropNamespaceRequest(id=top + ["c1"]))
    ns.drop_namespace(ln.DropNamespaceRequest(id=top, behavior="Cascade"))
    with pytest.raises(errors.NamespaceNotFoundError):
        ns.namespace_exists(ln.NamespaceExistsRequest(id=top))


def test_table_lifecycle(ns, warehouse):
    top = warehouse.id(unique("tb"))
    ns.create_namespace(ln.CreateNamespaceRequest(id=top))
    t1 = top + ["t1"]
    declared = ns.declare_table(ln.DeclareTableRequest(id=t1, properties={"team": "a"}))
    assert declared.location.endswith("/t1.lance")
    if warehouse.kind == "seaweedfs":
        opts = declared.storage_options
        assert opts["aws_endpoint"] == warehouse.s3_endpoint and opts["allow_http"] == "true"
        assert opts["aws_access_key_id"] == warehouse.storage_options["aws_access_key_id"]
    with pytest.raises(errors.TableAlreadyExistsError):
        ns.declare_table(ln.DeclareTableRequest(id=t1))
    with pytest.raises(errors.NamespaceNotFoundError):
        ns.declare_table(ln.DeclareTableRequest(id=top + ["nope", "t"]))

    d = ns.describe_table(ln.DescribeTableRequest(id=t1, check_declared=True, with_table_uri=True))
    assert d.location == declared.location
    assert d.is_only_declared is True
    assert d.table_uri == declared.location
    assert d.properties == {"team": "a"}
    ns.table_exists(ln.TableExistsRequest(id=t1))
    with pytest.raises(errors.TableNotFoundError):
        ns.table_exists(ln.TableExistsRequest(id=top + ["nope"]))
    with pytest.raises(errors.TableNotFoundError):
        ns.describe_table(ln.DescribeTableRequest(id=top + ["nope"]))

    # write data at the declared location, then detailed metadata reads it
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
    lance.write_dataset(data, d.location, storage_options=warehouse.storage_options or None)
    detailed = ns.describe_table(ln.DescribeTableRequest(id=t1, load_detailed_metadata=True))
    assert detailed.version == 1
    assert [f.name for f in detailed.var_schema.fields] == ["id", "name"]
    assert detailed.is_only_declared is False

    for name in ["t2", "t3", "t4"]:
        ns.declare_table(ln.DeclareTableRequest(id=top + [name]))
    assert ns.list_tables(ln.ListTablesRequest(id=top)).tables == ["t1", "t2", "t3", "t4"]
    assert ns.list_tables(ln.ListTablesRequest(id=top, include_declared=False)).tables == ["t1"]
    seen, token = [], None
    while True:
        page = ns.list_tables(ln.ListTablesRequest(id=top, limit=3, page_token=token))
        seen += page.tables
        token = page.page_token
        if not token:
            break
    assert seen == ["t1", "t2", "t3", "t4"]
    all_tables = ns.list_all_tables(ln.ListTablesRequest()).tables
    assert "$".join(t1) in all_tables

    # deregister keeps the data; register adopts it again; a folder without data is refused
    dereg = ns.deregister_table(ln.DeregisterTableRequest(id=t1))
    assert dereg.location == declared.location
    with pytest.raises(errors.TableNotFoundError):
        ns.describe_table(ln.DescribeTableRequest(id=t1))
    assert lance.dataset(declared.location, storage_options=warehouse.storage_options or None).count_rows() == 3
    reg = ns.register_table(ln.RegisterTableRequest(id=top + ["adopted"], location=declared.location))
    assert reg.location == declared.location
    with pytest.raises(errors.InvalidInputError):
        ns.register_table(ln.RegisterTableRequest(id=top + ["empty"], location=declared.location.replace("t1.lance", "void.lance")))

    # rename within and across namespaces: the location stays
    ns.rename_table(ln.RenameTableRequest(id=top + ["adopted"], new_table_name="renamed"))
    other = top + ["other"]
    ns.create_namespace(ln.CreateNamespaceRequest(id=other))
    ns.rename_table(ln.RenameTableRequest(id=top + ["renamed"], new_table_name="moved", new_namespace_id=other))
    moved = ns.describe_table(ln.DescribeTableRequest(id=other + ["moved"], load_detailed_metadata=True))
    assert moved.location == declared.location and moved.version == 1
    with pytest.raises(errors.TableAlreadyExistsError):
        ns.rename_table(ln.RenameTableRequest(id=top + ["t2"], new_table_name="t3"))

    # drop forgets the table at once; asked to purge (the gateway's header, passed on from
    # the request's context) it deletes its data just after its answer rather than keeping
    # the table for undrop
    dropped = ns.drop_table(ln.DropTableRequest(id=other + ["moved"], context={"header.x-lance-gateway-purge": "true"}))
    assert dropped.location == declared.location
    with pytest.raises(errors.TableNotFoundError):
        ns.describe_table(ln.DescribeTableRequest(id=other + ["moved"]))
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            lance.dataset(declared.location, storage_options=warehouse.storage_options or None).count_rows()
        except Exception:
            break
        time.sleep(0.05)
    with pytest.raises(Exception):
        lance.dataset(declared.location, storage_options=warehouse.storage_options or None).count_rows()
    with pytest.raises(errors.TableNotFoundError):
        ns.drop_table(ln.DropTableRequest(id=other + ["moved"]))
    ns.drop_namespace(ln.DropNamespaceRequest(id=top, behavior="Cascade"))
    assert not [t for t in ns.list_all_tables(ln.ListTablesRequest()).tables if t.startswith("$".join(top) + "$")]


def test_unsupported_operations_are_classified(ns, warehouse):
    top = warehouse.id(unique("un"))
    ns.create_namespace(ln.CreateNamespaceRequest(id=top))
    ns.declare_table(ln.DeclareTableRequest(id=top + ["t"]))
    # Batch commits are served (test_batch_commit.py), though this client does not send them
    # (its batch_commit_tables refuses before any request); an empty batch is a mistake.
    from security import call
    status, body, _ = call(warehouse.uri, "POST", "/v1/table/batch-commit", {"operations": []})
    assert (status, body["code"]) == (400, 13), body
    # Computed-column backfills stay Unsupported.
    with pytest.raises(errors.UnsupportedOperationError):
        ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(id=top + ["t"], column="c"))
    # A transaction the gateway never started is not found (index builds start them).
    with pytest.raises(errors.TransactionNotFoundError):
        ns.describe_transaction(ln.DescribeTransactionRequest(id=["txn-1"]))
    # A declared table holds no rows yet: counting them is served.
    assert ns.count_table_rows(ln.CountTableRowsRequest(id=top + ["t"])).count == 0
