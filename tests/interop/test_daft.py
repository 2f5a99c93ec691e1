"""Daft (`daft` 0.7.26 with `daft-lance` 0.6.0) against the gateway, as a Daft user drives it
through a Lance Namespace (`namespace_impl="rest"`, `namespace_properties={"uri": …}`,
`table_id`): write (create, append, overwrite), read with a filter, compact_files,
create_scalar_index. On the local warehouse and on SeaweedFS in endpoint mode (Daft reaching
the store with what the gateway vends, `--credentials static`), each with the gateway's
managed versioning off and on.

Daft honours `managed_versioning`: with it on, every version Daft makes must be committed
through the gateway's CreateTableVersion (counted in the gateway's metrics, and matched
against the versions the gateway lists); with it off, none is. Every answer Daft gives is
checked against what pylance (the clients' venv) reads from the same table.

Daft runs in its own venv (scripts/install-engine-deps) through engines/drive_daft.py; the
suite fails, rather than skips, without it."""

import lance
import lance_namespace as ln
import pytest

from conftest import unique
from engines.harness import Driver, commits_through_gateway, scrape, served


@pytest.fixture(scope="module")
def daft():
    d = Driver("daft")
    yield d
    d.close()


@pytest.fixture(scope="module", params=[("local", False), ("local", True), ("seaweedfs", False), ("seaweedfs", True)],
                ids=["local", "local-managed", "seaweedfs", "seaweedfs-managed"])
def gateway(request):
    kind, managed = request.param
    with served(request, kind, managed) as gw:
        ln.connect("rest", {"uri": gw.uri}).create_namespace(ln.CreateNamespaceRequest(id=gw.id("ml")))
        yield gw


def columns(ids) -> dict:
    ids = list(ids)
    return {"id": ids, "name": [f"n{i}" for i in ids], "grp": ["a" if i % 2 else "b" for i in ids],
            "score": [i * 0.75 for i in ids]}


def pylance(gw, table_id) -> lance.LanceDataset:
    return lance.dataset(namespace_client=ln.connect("rest", {"uri": gw.uri}), table_id=table_id)


def by_id(data: dict) -> dict:
    """Columns reordered by id (Daft's row order is its own)."""
    order = sorted(range(len(data["id"])), key=lambda i: data["id"][i])
    return {k: [v[i] for i in order] for k, v in data.items()}


def check_commits(gw, before: dict, table_id: list[str], versions_made: int):
    """With managed versioning every version Daft made went through CreateTableVersion, and
    the gateway lists them all; without it, none did."""
    ns = ln.connect("rest", {"uri": gw.uri})
    described = ns.describe_table(ln.DescribeTableRequest(id=table_id))
    assert bool(described.managed_versioning) is gw.managed
    committed = commits_through_gateway(before, scrape(gw.metrics_port))
    listed = ns.list_table_versions(ln.ListTableVersionsRequest(id=table_id)).versions
    print(f"versions made {versions_made}, listed {len(listed)}, through CreateTableVersion {committed}")
    assert len(listed) == versions_made
    assert committed == (versions_made if gw.managed else 0)


def test_write_append_read_overwrite(gateway, daft):
    gw = gateway
    table_id = gw.id("ml", unique("daft"))
    before = scrape(gw.metrics_port)

    first = columns(range(1, 7))
    stats = daft("write", uri=gw.uri, table_id=table_id, columns=first, mode="create")
    ds = pylance(gw, table_id)
    assert stats["version"] == [ds.version]
    assert ds.to_table().sort_by("id").to_pydict() == first

    more = columns(range(7, 11))
    stats = daft("write", uri=gw.uri, table_id=table_id, columns=more, mode="append")
    ds = pylance(gw, table_id)
    assert stats["version"] == [ds.version]
    assert ds.to_table().sort_by("id").to_pydict() == {k: first[k] + more[k] for k in first}

    assert by_id(daft("read", uri=gw.uri, table_id=table_id)) == ds.to_table().sort_by("id").to_pydict()
    predicate = "grp = 'a' AND score > 1.5"
    got = by_id(daft("read", uri=gw.uri, table_id=table_id, where=predicate))
    want = ds.to_table(filter=predicate).sort_by("id").to_pydict()
    assert got == want
    assert 0 < len(got["id"]) < ds.count_rows()

    replacement = columns(range(100, 103))
    stats = daft("write", uri=gw.uri, table_id=table_id, columns=replacement, mode="overwrite")
    ds = pylance(gw, table_id)
    assert stats["version"] == [ds.version]
    assert ds.to_table().sort_by("id").to_pydict() == replacement
    assert by_id(daft("read", uri=gw.uri, table_id=table_id)) == replacement
    check_commits(gw, before, table_id, ds.version)


def test_compact_and_scalar_index(gateway, daft):
    gw = gateway
    table_id = gw.id("ml", unique("daftc"))
    before = scrape(gw.metrics_port)
    daft("write", uri=gw.uri, table_id=table_id, columns=columns(range(1, 5)), mode="create")
    for start in (5, 9, 13):
        daft("write", uri=gw.uri, table_id=table_id, columns=columns(range(start, start + 4)), mode="append")
    ds = pylance(gw, table_id)
    rows_before = ds.to_table().sort_by("id").to_pydict()
    fragments_before = len(ds.get_fragments())
    assert fragments_before == 4

    metrics = daft("compact", uri=gw.uri, table_id=table_id)
    ds = pylance(gw, table_id)
    assert metrics is not None, "compact_files compacted nothing"
    assert metrics["fragments_removed"] == fragments_before
    assert len(ds.get_fragments()) == metrics["fragments_added"] < fragments_before
    assert ds.to_table().sort_by("id").to_pydict() == rows_before

    daft("create_scalar_index", uri=gw.uri, table_id=table_id, column="grp", index_type="BTREE", name="grp_idx")
    ds = pylance(gw, table_id)
    indices = {i.name: i for i in ds.describe_indices()}
    assert "grp_idx" in indices, indices
    index = indices["grp_idx"]
    assert (index.field_names, index.type_url.endswith("BTreeIndexDetails")) == (["grp"], True), index
    assert index.num_rows_indexed == ds.count_rows()
    # the index answers the same rows as a scan
    got = by_id(daft("read", uri=gw.uri, table_id=table_id, where="grp = 'b'"))
    assert got == ds.to_table(filter="grp = 'b'").sort_by("id").to_pydict()
    assert got["id"] == [i for i in rows_before["id"] if i % 2 == 0]
    check_commits(gw, before, table_id, ds.version)
