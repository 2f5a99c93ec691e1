"""(c) LanceDB through `connect_namespace("rest", ...)`: a seeded vector table, an IVF_PQ
index, vector search, filtered scans, create/add/drop, and the data read straight off its
location without the catalog."""

import lance
import lancedb
import lance_namespace as ln
import numpy as np
import pyarrow as pa
import pytest

from conftest import unique

DIM = 16


def vectors(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    vecs = rng.random((n, DIM), dtype=np.float32)
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "title": [f"doc {i}" for i in range(n)],
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), DIM),
        }
    )


def test_lancedb_end_to_end(warehouse):
    # LanceDB reaches the store with only what the gateway vends: no storage_options here.
    lancedb_scenario(warehouse.uri, warehouse.base, warehouse.storage_options)


def lancedb_scenario(uri: str, base: list[str], storage_options: dict, step=lambda name: None):
    """The scenario; `step(name)` is told as each step begins (the SeaweedFS comparison
    reports how far a catalog gets)."""
    ns_client = ln.connect("rest", {"uri": uri})
    top = base + [unique("ldb")]
    step("create namespace")
    ns_client.create_namespace(ln.CreateNamespaceRequest(id=top))
    db = lancedb.connect_namespace("rest", {"uri": uri})

    step("create_table with 1024 rows")
    seed = vectors(1024)
    created = db.create_table("embeddings", data=seed, namespace_path=top)
    assert created.count_rows() == 1024
    names = db.table_names(namespace_path=top)
    assert "embeddings" in names, f"table_names listed {names}"

    step("open_table")
    tbl = db.open_table("embeddings", namespace_path=top)
    assert tbl.count_rows() == 1024
    schema = tbl.schema
    assert schema.names == ["id", "title", "vector"]
    assert schema.field("vector").type == pa.list_(pa.float32(), DIM)

    step("IVF_PQ index")
    tbl.create_index(metric="l2", vector_column_name="vector", index_type="IVF_PQ", num_partitions=2, num_sub_vectors=4)
    indices = tbl.list_indices()
    assert len(indices) == 1 and indices[0].index_type == "IvfPq"

    step("vector search")
    query = seed["vector"][7].values.to_numpy()
    hits = tbl.search(query).limit(5).to_arrow()
    assert hits.num_rows == 5
    assert 7 in hits["id"].to_pylist(), "the exact vector is among the nearest"
    filtered = tbl.search(query).where("id > 100", prefilter=True).limit(5).to_arrow()
    assert filtered.num_rows == 5 and min(filtered["id"].to_pylist()) > 100
    step("filtered scan")
    scan = tbl.search().where("id < 3").to_arrow()
    assert sorted(scan["id"].to_pylist()) == [0, 1, 2]

    step("create_table + add")
    second = db.create_table("second", data=vectors(10, seed=1), namespace_path=top)
    second.add(vectors(5, seed=2))
    assert db.open_table("second", namespace_path=top).count_rows() == 15

    step("create_table with CreateTable pushdown")
    # With CreateTable pushdown asked for, lancedb 0.40 still declares and writes itself.
    pushdown = lancedb.connect_namespace(
        "rest", {"uri": uri}, namespace_client_pushdown_operations=["CreateTable"]
    )
    pushed = pushdown.create_table("pushed", data=vectors(2, seed=3), namespace_path=top)
    assert pushed.count_rows() == 2
    names = sorted(db.table_names(namespace_path=top))
    assert names == ["embeddings", "pushed", "second"], f"table_names listed {names}"

    step("read straight from the location")
    # The dataset read straight from its location, without the catalog.
    location = ns_client.describe_table(ln.DescribeTableRequest(id=top + ["embeddings"])).location
    direct = lance.dataset(location, storage_options=storage_options or None)
    assert direct.count_rows() == 1024

    step("drop_table")
    db.drop_table("second", namespace_path=top)
    names = sorted(db.table_names(namespace_path=top))
    assert names == ["embeddings", "pushed"], f"table_names listed {names}"
    with pytest.raises(Exception):
        db.open_table("second", namespace_path=top)
