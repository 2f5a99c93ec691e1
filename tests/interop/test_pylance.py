"""(b) pylance: creating through declare, appending through describe, reading back."""

import lance
import lance_namespace as ln
import pyarrow as pa
import pytest

from conftest import unique


def test_create_append_read(warehouse):
    ns = ln.connect("rest", {"uri": warehouse.uri})
    top = warehouse.id(unique("py"))
    ns.create_namespace(ln.CreateNamespaceRequest(id=top))
    table_id = top + ["events"]
    first = pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array([float(i) for i in range(10)])})
    lance.write_dataset(first, namespace_client=ns, table_id=table_id, mode="create")
    described = ns.describe_table(ln.DescribeTableRequest(id=table_id, check_declared=True))
    assert described.is_only_declared is False

    second = pa.table({"id": pa.array(range(10, 15), pa.int64()), "v": pa.array([float(i) for i in range(10, 15)])})
    lance.write_dataset(second, namespace_client=ns, table_id=table_id, mode="append")

    ds = lance.dataset(namespace_client=ns, table_id=table_id)
    assert ds.count_rows() == 15
    assert ds.version == 2
    assert sorted(ds.to_table()["id"].to_pylist()) == list(range(15))
    # the same rows straight from the location, without the catalog
    direct = lance.dataset(described.location, storage_options=warehouse.storage_options or None)
    assert direct.count_rows() == 15

    # creating it again through the catalog is refused with TableAlreadyExists
    with pytest.raises(Exception, match="(?i)already exists"):
        lance.write_dataset(first, namespace_client=ns, table_id=table_id, mode="create")
    assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 15
