"""A copy of the catalog (`admin backup`, `admin restore`, `admin verify`) with the real
clients: tables written by LanceDB and pylance, a dropped table kept for undrop, then every
catalog object deleted by mistake and the catalog restored from the copy: every table is
found again with identical rows and versions, the dropped one can still be undropped, and
`admin fsck` is clean. On SeaweedFS, the data copied to another bucket and the copy
restored there: every table points at its folder in the new bucket (the backup kept as an
object in a third bucket, `--to s3://...`). Restoring over a
catalog is refused unless forced; a cut-short file is refused."""

import json
import os
import subprocess
import uuid

import boto3
import lance
import lance_namespace as ln
import lancedb
import pyarrow as pa

import seaweedfs
from conftest import gateway_binary, s3_gateway_setup, start_gateway
from security import call, enc


def admin(args: list[str], env: dict, *command: str, ok: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([gateway_binary(), "admin", *command, *args], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=300)
    if ok:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "text": [f"row {i}" for i in range(start, start + n)]})


def populate(uri: str) -> dict:
    """Two namespaces, tables at several versions (LanceDB and pylance), one dropped."""
    nsc = ln.connect("rest", {"uri": uri})
    nsc.create_namespace(ln.CreateNamespaceRequest(id=["ml"], properties={"owner": "team-a"}))
    nsc.create_namespace(ln.CreateNamespaceRequest(id=["ml", "deep"]))
    db = lancedb.connect_namespace("rest", {"uri": uri})
    t = db.create_table("docs", data=rows(100), namespace_path=["ml"])
    t.add(rows(50, 100))
    t.create_scalar_index("id")
    lance.write_dataset(rows(7), namespace_client=nsc, table_id=["ml", "deep", "emb"], mode="create")
    db.create_table("gone", data=rows(3), namespace_path=["ml"])
    db.drop_table("gone", namespace_path=["ml"])
    return snapshot(uri)


def snapshot(uri: str) -> dict:
    db = lancedb.connect_namespace("rest", {"uri": uri})
    out = {}
    for ns, name in ((["ml"], "docs"), (["ml", "deep"], "emb")):
        ds = db.open_table(name, namespace_path=ns).to_lance()
        out[name] = (ds.to_table().sort_by("id"), [v["version"] for v in ds.versions()])
    return out


def test_a_catalog_deleted_by_mistake_comes_back_from_its_backup(tmp_path):
    wh = str(tmp_path / "wh")
    args = ["--warehouse", wh]
    gw = start_gateway(args)
    try:
        before = populate(gw.uri)
    finally:
        assert gw.stop() == 0
    copy = tmp_path / "catalog.backup"
    out = json.loads(admin(args, {}, "backup", "--to", str(copy), "--json").stdout)
    assert out["header"]["tables"] == 2 and out["header"]["objects"] > 0, out
    verified = json.loads(admin(args, {}, "verify", "--from", str(copy), "--json").stdout)
    assert verified["missing"] == 0 and len(verified["tables"]) == 2, verified

    # Restoring over the catalog that is there is refused.
    refused = admin(args, {}, "restore", "--from", str(copy), ok=False)
    assert refused.returncode != 0 and "holds a catalog already" in refused.stderr, refused.stderr

    # Every catalog object deleted by mistake: the tables are gone for the clients.
    subprocess.run(["rm", "-rf", os.path.join(wh, ".lance-gateway")], check=True)
    gw = start_gateway(args)
    try:
        assert ln.connect("rest", {"uri": gw.uri}).list_namespaces(ln.ListNamespacesRequest(id=[])).namespaces == []
    finally:
        assert gw.stop() == 0

    # A cut-short copy is refused, and changes nothing.
    cut = tmp_path / "cut.backup"
    cut.write_text("\n".join(copy.read_text().splitlines()[:-1]) + "\n")
    refused = admin(args, {}, "restore", "--from", str(cut), ok=False)
    assert refused.returncode != 0 and "cut short" in refused.stderr, refused.stderr

    restored = json.loads(admin(args, {}, "restore", "--from", str(copy), "--json").stdout)["restored"]
    assert restored["tables"] == 2 and restored["relocated"] == 0, restored
    assert admin(args, {}, "fsck").returncode == 0
    gw = start_gateway(args)
    try:
        after = snapshot(gw.uri)
        for name in before:
            assert after[name][0].equals(before[name][0]), name
            assert after[name][1] == before[name][1], name
        described = ln.connect("rest", {"uri": gw.uri}).describe_namespace(ln.DescribeNamespaceRequest(id=["ml"]))
        assert described.properties.get("owner") == "team-a"
        # The dropped table came back as dropped: it can still be undropped.
        status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(['ml', 'gone'])}/undrop", {})
        assert status == 200, body
        db = lancedb.connect_namespace("rest", {"uri": gw.uri})
        assert db.open_table("gone", namespace_path=["ml"]).count_rows() == 3
    finally:
        assert gw.stop() == 0
    assert admin(args, {}, "fsck").returncode == 0


def test_a_warehouse_copied_to_another_bucket_finds_every_table(seaweed, tmp_path):
    s3 = boto3.client("s3", endpoint_url=seaweed.endpoint, region_name="us-east-1",
                      aws_access_key_id=seaweedfs.ADMIN_KEY, aws_secret_access_key=seaweedfs.ADMIN_SECRET)
    src, dst, kept = (f"lg-bk-{uuid.uuid4().hex[:8]}" for _ in range(3))
    for b in (src, dst, kept):
        s3.create_bucket(Bucket=b)
    src_args, env = s3_gateway_setup(seaweed, f"s3://{src}/wh")
    dst_args, _ = s3_gateway_setup(seaweed, f"s3://{dst}/moved")
    gw = start_gateway(src_args, env)
    try:
        before = populate(gw.uri)
    finally:
        assert gw.stop() == 0
    # The backup is kept in a bucket of its own, reached with the warehouse's S3 settings.
    copy = f"s3://{kept}/catalogs/wh.backup"
    admin(src_args, env, "backup", "--to", copy)
    kept_lines = s3.get_object(Bucket=kept, Key="catalogs/wh.backup")["Body"].read().decode().splitlines()
    assert json.loads(kept_lines[0])["header"]["tables"] == 2, kept_lines[0]
    missing_object = admin(dst_args, env, "restore", "--from", f"s3://{kept}/catalogs/none.backup", ok=False)
    assert missing_object.returncode != 0 and "no such object" in missing_object.stderr, missing_object.stderr
    # The data is copied by the operator (here object by object, as `aws s3 sync` would);
    # the catalog's own objects come from the backup.
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=src, Prefix="wh/")
    for page in pages:
        for obj in page.get("Contents", []):
            rel = obj["Key"][len("wh/"):]
            if not rel.startswith(".lance-gateway/"):
                s3.copy_object(Bucket=dst, Key=f"moved/{rel}", CopySource={"Bucket": src, "Key": obj["Key"]})
    restored = json.loads(admin(dst_args, env, "restore", "--from", copy, "--json").stdout)["restored"]
    # Two live tables and the dropped one point at their folders in the new bucket.
    assert restored["relocated"] >= 3, restored
    verified = json.loads(admin(dst_args, env, "verify", "--from", copy, "--json").stdout)
    assert verified["missing"] == 0 and all(t["location"].startswith(f"s3://{dst}/moved/") for t in verified["tables"])
    assert admin(dst_args, env, "fsck").returncode == 0
    gw = start_gateway(dst_args, env)
    try:
        after = snapshot(gw.uri)
        for name in before:
            assert after[name][0].equals(before[name][0]) and after[name][1] == before[name][1], name
        location = ln.connect("rest", {"uri": gw.uri}).describe_table(
            ln.DescribeTableRequest(id=["ml", "docs"])).location
        assert location.startswith(f"s3://{dst}/moved/"), location
    finally:
        assert gw.stop() == 0
    # A table whose data was not copied is named by verify.
    s3.delete_objects(Bucket=dst, Delete={"Objects": [
        {"Key": o["Key"]} for o in s3.list_objects_v2(Bucket=dst, Prefix="moved/ml/deep/").get("Contents", [])]})
    out = admin(dst_args, env, "verify", "--from", copy, "--json", ok=False)
    assert out.returncode == 1, out.stdout + out.stderr
    missing = [t["id"] for t in json.loads(out.stdout)["tables"] if t["state"] == "missing"]
    assert missing == [["ml", "deep", "emb"]], missing
