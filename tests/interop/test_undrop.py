"""Soft drops through the real clients: a table LanceDB drops is gone for every client at
once, its name free for a new table, and undropped (the REST extension, `admin undrop`) it
gives back bit-identical rows, every version, its tags and its indices; a purge deletes it.
Local directory and SeaweedFS (endpoint mode, raised to format 3 by `admin upgrade`)."""

import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import boto3

import lance
import lancedb
import lance_namespace as ln
import pyarrow as pa
import pytest

import seaweedfs
from conftest import gateway_binary, unique


def call(uri: str, method: str, path: str, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{uri}{path}", data=data, method=method, headers={
        "content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def admin(wh, *args):
    out = subprocess.run([gateway_binary(), "admin", *args, *wh.args, "--json"], capture_output=True,
                         text=True, env={**os.environ, **wh.env}, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def wh(warehouse):
    if warehouse.kind == "seaweedfs":
        # A new bucket starts at format 2 (a gateway of the previous release may serve it);
        # the operator raises it once none does.
        up = admin(warehouse, "upgrade", "--to", "3")
        assert all(c["warehouse_format"] == 3 for c in up["cells"]), up
    return warehouse


def objects(wh, location: str) -> int:
    """How many objects lie under a table's location, read from the store itself."""
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme == "s3":
        s3 = boto3.client("s3", endpoint_url=wh.s3_endpoint, region_name="us-east-1",
                          aws_access_key_id=seaweedfs.ADMIN_KEY, aws_secret_access_key=seaweedfs.ADMIN_SECRET)
        prefix = parsed.path.strip("/") + "/"
        return s3.list_objects_v2(Bucket=parsed.netloc, Prefix=prefix).get("KeyCount", 0)
    root = parsed.path if parsed.scheme == "file" else location
    return sum(len(files) for _, _, files in os.walk(root))


def snapshot(tbl) -> dict:
    ds = tbl.to_lance()
    return {
        "rows": ds.to_table().sort_by("id"),
        "versions": [v["version"] for v in ds.versions()],
        "tags": {name: t["version"] for name, t in ds.tags.list().items()},
        "indices": sorted((i["name"], tuple(i["fields"])) for i in ds.list_indices()),
        "schema": ds.schema,
    }


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "text": [f"row {i}" for i in range(start, start + n)]})


def test_drop_then_undrop_gives_back_the_whole_table(wh):
    ns = wh.id(unique("ud"))
    ln.connect("rest", {"uri": wh.uri}).create_namespace(ln.CreateNamespaceRequest(id=ns))
    db = lancedb.connect_namespace("rest", {"uri": wh.uri})
    tbl = db.create_table("t", data=rows(100), namespace_path=ns)
    tbl.add(rows(50, 100))
    tbl.create_scalar_index("id")
    tbl.to_lance().tags.create("v2", 2)
    tbl.add(rows(25, 150))
    before = snapshot(db.open_table("t", namespace_path=ns))
    location = db.open_table("t", namespace_path=ns).to_lance().uri

    db.drop_table("t", namespace_path=ns)
    assert "t" not in db.table_names(namespace_path=ns)
    with pytest.raises(Exception):
        db.open_table("t", namespace_path=ns)
    s, listed = call(wh.uri, "GET", f"/v1/namespace/{'$'.join(ns)}/dropped_tables?delimiter=%24")
    assert s == 200, listed
    [dropped] = listed["dropped"]
    assert dropped["id"] == ns + ["t"] and dropped["bytes"] > 0, dropped

    # The name is free: a new table under it gets a folder of its own.
    fresh = db.create_table("t", data=rows(3, 1000), namespace_path=ns)
    assert fresh.count_rows() == 3

    # Undrop under the taken name: refused, nothing changed.
    path = f"/v1/table/{'$'.join(ns + ['t'])}/undrop?delimiter=%24"
    s, b = call(wh.uri, "POST", path, {})
    assert (s, b["code"]) == (409, 5), b
    # Under another name: the whole table as it was.
    s, b = call(wh.uri, "POST", path, {"drop_id": dropped["drop_id"], "new_id": ns + ["t_back"]})
    assert s == 200, b
    back = db.open_table("t_back", namespace_path=ns)
    after = snapshot(back)
    assert after["rows"].equals(before["rows"]), "bit-identical rows"
    for key in ("versions", "tags", "indices", "schema"):
        assert after[key] == before[key], (key, after[key], before[key])
    assert back.to_lance().uri.rstrip("/") == location.rstrip("/")
    assert db.open_table("t", namespace_path=ns).count_rows() == 3, "the new table is untouched"
    # pylance reads the undropped table through the namespace too, at an old version by tag.
    nsc = ln.connect("rest", {"uri": wh.uri})
    old = lance.dataset(namespace_client=nsc, table_id=ns + ["t_back"], version="v2")
    assert old.count_rows() == 150
    s, listed = call(wh.uri, "GET", f"/v1/namespace/{'$'.join(ns)}/dropped_tables?delimiter=%24")
    assert listed["dropped"] == [], listed


def test_purge_and_the_purge_header_delete_the_data(wh):
    ns = wh.id(unique("pg"))
    nsc = ln.connect("rest", {"uri": wh.uri})
    nsc.create_namespace(ln.CreateNamespaceRequest(id=ns))
    db = lancedb.connect_namespace("rest", {"uri": wh.uri})
    for name in ("a", "b"):
        db.create_table(name, data=rows(10), namespace_path=ns)
    loc_a = db.open_table("a", namespace_path=ns).to_lance().uri
    opts = wh.storage_options
    # `a`: dropped, then purged through the extension route. A reader that held it before
    # the drop keeps reading it until the purge.
    held = lance.dataset(loc_a, storage_options=opts)
    db.drop_table("a", namespace_path=ns)
    assert held.to_table().num_rows == 10, "a held reader reads on after the drop"
    assert lance.dataset(loc_a, storage_options=opts).count_rows() == 10, "kept after the drop"
    s, b = call(wh.uri, "POST", f"/v1/table/{'$'.join(ns + ['a'])}/purge?delimiter=%24", {})
    assert s == 200, b
    assert objects(wh, loc_a) == 0, "purged: nothing under its location"
    # `b`: dropped with the purge header, as pylance's namespace client passes it on from
    # its request context.
    loc_b = db.open_table("b", namespace_path=ns).to_lance().uri
    nsc.drop_table(ln.DropTableRequest(id=ns + ["b"], context={"header.x-lance-gateway-purge": "true"}))
    # (a drop that deletes at once deletes the data just after it answers)
    deadline = time.monotonic() + 15
    while objects(wh, loc_b) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert objects(wh, loc_b) == 0, "purged by the header: nothing under its location"
    s, listed = call(wh.uri, "GET", f"/v1/namespace/{'$'.join(ns)}/dropped_tables?delimiter=%24")
    assert listed["dropped"] == [], listed
    # Undrop of a purged table: 404 code 4.
    s, b = call(wh.uri, "POST", f"/v1/table/{'$'.join(ns + ['a'])}/undrop?delimiter=%24", {})
    assert (s, b["code"]) == (404, 4), b


def test_admin_lists_and_undrops(wh):
    ns = wh.id(unique("ad"))
    ln.connect("rest", {"uri": wh.uri}).create_namespace(ln.CreateNamespaceRequest(id=ns))
    db = lancedb.connect_namespace("rest", {"uri": wh.uri})
    db.create_table("t", data=rows(7), namespace_path=ns)
    db.drop_table("t", namespace_path=ns)
    listed = admin(wh, "dropped", "$".join(ns))
    assert [d["id"] for d in listed["dropped"]] == [ns + ["t"]], listed
    undone = admin(wh, "undrop", "$".join(ns + ["t"]))
    assert undone["id"] == ns + ["t"]
    assert db.open_table("t", namespace_path=ns).count_rows() == 7
