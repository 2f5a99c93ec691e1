"""Table-scoped credentials from SeaweedFS's STS (`--credentials sts`): what vended keys
reach, checked with a plain S3 client, and clients that keep working across an expiry
because they describe the table again. SeaweedFS here caps sessions at 30 seconds."""

import json
import os
import tempfile
import time
import uuid

import boto3
import botocore.exceptions
import lance
import lance_namespace as ln
import lancedb
import pyarrow as pa
import pytest

import seaweedfs
from conftest import start_gateway
from security import call, enc, make_key, write
from test_security import grants_toml


def sts_gateway_at(seaweed, *extra: str, ray_args: list[str] | None = None, env: dict | None = None):
    """A gateway vending STS credentials over a fresh bucket, with API keys: `admin`, and
    `reader`/`writer` of table ml.a, `builder` of ml.lt. With `ray_args`, it hands work to
    that Ray cluster, whose jobs present the `admin` key."""
    bucket = f"lg-sts-{uuid.uuid4().hex[:8]}"
    admin_s3 = boto3.client("s3", endpoint_url=seaweed.endpoint, region_name="us-east-1",
                            aws_access_key_id=seaweedfs.ADMIN_KEY, aws_secret_access_key=seaweedfs.ADMIN_SECRET)
    admin_s3.create_bucket(Bucket=bucket)
    keys = {who: make_key(who) for who in ("admin", "reader", "writer", "builder")}
    work = tempfile.mkdtemp(prefix="lg-sts-")
    keys_file, grants_file, audit = (os.path.join(work, n) for n in ("keys", "grants.toml", "audit.log"))
    write(keys_file, "\n".join(line for _, line in keys.values()) + "\n")
    write(grants_file, grants_toml([
        ("principal", "admin", [], "admin"),
        ("principal", "reader", ["ml", "a"], "read"),
        ("principal", "writer", ["ml", "a"], "write"),
        ("principal", "builder", ["ml", "lt"], "write"),
    ]))
    args = ["--warehouse", f"s3://{bucket}/wh", "--s3-endpoint", seaweed.endpoint, "--s3-region", "us-east-1",
            "--credentials", "sts", "--sts-role-arn", seaweedfs.STS_ROLE_ARN, "--sts-duration-secs", "900",
            "--api-keys", keys_file, "--grants", grants_file, "--audit-log", audit, *extra]
    if ray_args is not None:
        args += [*ray_args, "--ray-api-key", keys["admin"][0]]
    env = {"AWS_ACCESS_KEY_ID": seaweedfs.ADMIN_KEY, "AWS_SECRET_ACCESS_KEY": seaweedfs.ADMIN_SECRET, **(env or {})}
    gw = start_gateway(args, env)
    return gw, {"gw": gw, "keys": {k: v[0] for k, v in keys.items()}, "bucket": bucket, "s3": admin_s3,
                "endpoint": seaweed.endpoint, "audit": audit}


@pytest.fixture
def sts_gateway(seaweed):
    gw, g = sts_gateway_at(seaweed)
    yield g
    assert gw.stop() == 0


@pytest.fixture
def sts_managed(seaweed):
    gw, g = sts_gateway_at(seaweed, "--managed-versioning", "true")
    yield g
    assert gw.stop() == 0


def s3_with(options: dict, endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=options["aws_access_key_id"],
                        aws_secret_access_key=options["aws_secret_access_key"],
                        aws_session_token=options["aws_session_token"])


def denied(fn) -> bool:
    try:
        fn()
    except botocore.exceptions.ClientError as e:
        return e.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    return False


def describe(gw, key: str, table: list[str]) -> dict:
    status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(table)}/describe", {}, {"x-api-key": key})
    assert status == 200, body
    return body


def test_vended_credentials_reach_only_their_table(sts_gateway):
    g = sts_gateway
    gw, keys, bucket, admin_s3 = g["gw"], g["keys"], g["bucket"], g["s3"]
    admin = ln.connect("rest", {"uri": gw.uri, "headers.x-api-key": keys["admin"]})
    admin.create_namespace(ln.CreateNamespaceRequest(id=["ml"]))
    for t in ("a", "b", "a*x"):
        admin.declare_table(ln.DeclareTableRequest(id=["ml", t]))
    loc = {t: admin.describe_table(ln.DescribeTableRequest(id=["ml", t])).location for t in ("a", "b", "a*x")}
    key_of = {t: loc[t].split(f"s3://{bucket}/", 1)[1] for t in loc}
    assert "*" not in key_of["a*x"], "an odd name kept a wildcard in its folder"
    for t in ("a", "b"):
        admin_s3.put_object(Bucket=bucket, Key=f"{key_of[t]}/data.bin", Body=b"x")

    reader = describe(gw, keys["reader"], ["ml", "a"])["storage_options"]
    assert {"aws_access_key_id", "aws_secret_access_key", "aws_session_token", "expires_at_millis"} <= set(reader)
    assert int(reader["expires_at_millis"]) > time.time() * 1000
    s3 = s3_with(reader, g["endpoint"])
    assert s3.get_object(Bucket=bucket, Key=f"{key_of['a']}/data.bin")["Body"].read() == b"x"
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{key_of['a']}/").get("Contents", [])
    assert [o["Key"] for o in listed] == [f"{key_of['a']}/data.bin"]
    assert denied(lambda: s3.put_object(Bucket=bucket, Key=f"{key_of['a']}/w", Body=b"y")), "read grant wrote"
    assert denied(lambda: s3.get_object(Bucket=bucket, Key=f"{key_of['b']}/data.bin")), "sibling read"
    assert denied(lambda: s3.list_objects_v2(Bucket=bucket, Prefix="")), "bucket root listed"
    assert denied(lambda: s3.list_objects_v2(Bucket=bucket, Prefix="wh/ml/")), "namespace folder listed"
    assert denied(lambda: s3.list_objects_v2(Bucket=bucket, Prefix=key_of["a"])), "bare prefix listed"
    # A warm cache: the same keys again; the writer gets keys of its own, that write.
    assert describe(gw, keys["reader"], ["ml", "a"])["storage_options"]["aws_access_key_id"] == reader["aws_access_key_id"]
    writer = describe(gw, keys["writer"], ["ml", "a"])["storage_options"]
    assert writer["aws_access_key_id"] != reader["aws_access_key_id"]
    w3 = s3_with(writer, g["endpoint"])
    w3.put_object(Bucket=bucket, Key=f"{key_of['a']}/w", Body=b"y")
    assert denied(lambda: w3.put_object(Bucket=bucket, Key=f"{key_of['b']}/w", Body=b"y"))
    # The reader may not even see b; vend_credentials=false leaves keys out.
    status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(['ml', 'b'])}/describe", {}, {"x-api-key": keys["reader"]})
    assert (status, body.get("code")) == (404, 4), body
    bare = call(gw.uri, "POST", f"/v1/table/{enc(['ml', 'a'])}/describe", {"vend_credentials": False},
                {"x-api-key": keys["reader"]})[1]["storage_options"]
    assert "aws_access_key_id" not in bare and "aws_endpoint" in bare
    # The audit log shows each vend with the key id's first characters, never the secret.
    vends = [json.loads(l) for l in open(g["audit"]) if '"access_vended"' in l]
    assert any(v["principal"] == "reader" and v["access_vended"] == "read"
               and reader["aws_access_key_id"].startswith(v["key_id_prefix"]) for v in vends), vends
    assert reader["aws_secret_access_key"] not in open(g["audit"]).read()
    # After expiry (30 s sessions here) the keys are refused.
    wait = int(reader["expires_at_millis"]) / 1000 - time.time() + 2
    time.sleep(max(wait, 0))
    assert denied(lambda: s3.get_object(Bucket=bucket, Key=f"{key_of['a']}/data.bin")), "expired keys still work"


def test_clients_refresh_across_an_expiry(sts_gateway):
    g = sts_gateway
    gw, keys = g["gw"], g["keys"]
    admin = ln.connect("rest", {"uri": gw.uri, "headers.x-api-key": keys["admin"]})
    admin.create_namespace(ln.CreateNamespaceRequest(id=["ml"]))
    # pylance: a write, then appends and reads that span more than one 30 s session.
    writer = ln.connect("rest", {"uri": gw.uri, "headers.x-api-key": keys["writer"]})
    lance.write_dataset(pa.table({"x": [0]}), namespace_client=writer, table_id=["ml", "a"], mode="create")
    ds = lance.dataset(namespace_client=writer, table_id=["ml", "a"])
    first_expiry = int(describe(gw, keys["writer"], ["ml", "a"])["storage_options"]["expires_at_millis"])
    rows, deadline = 1, first_expiry / 1000 + 8
    while time.time() < deadline:
        lance.write_dataset(pa.table({"x": [rows]}), namespace_client=writer, table_id=["ml", "a"], mode="append")
        rows += 1
        assert lance.dataset(namespace_client=writer, table_id=["ml", "a"]).count_rows() == rows
        time.sleep(2)
    assert ds.count_rows() >= 1
    describes = [json.loads(l) for l in open(g["audit"])
                 if '"table.describe"' in l and '"writer"' in l and '"access_vended"' in l]
    expiries = {d["expires_at_ms"] for d in describes}
    assert len(expiries) >= 2, f"the client never obtained new credentials: {describes}"
    # LanceDB needs nothing but the catalog's address and a key.
    db = lancedb.connect_namespace("rest", {"uri": gw.uri, "headers.x-api-key": keys["builder"]})
    data = [{"id": i, "vector": [float(i), 1.0]} for i in range(32)]
    db.create_table("lt", data=data, namespace_path=["ml"])
    assert db.open_table("lt", namespace_path=["ml"]).search([3.0, 1.0]).limit(2).to_arrow().num_rows == 2


def test_managed_write_credentials_cannot_publish_a_version(sts_managed):
    """Under managed versioning the vended write keys reach data files and staged manifests
    but not the final manifest names: SeaweedFS itself refuses a client that would commit
    (or roll back) behind the catalog's back, while pylance commits through it as usual."""
    from lance.namespace import RestNamespace
    from test_lancedb_remote import data

    g = sts_managed
    gw, keys, bucket = g["gw"], g["keys"], g["bucket"]
    ln.connect("rest", {"uri": gw.uri, "headers.x-api-key": keys["admin"]}).create_namespace(
        ln.CreateNamespaceRequest(id=["ml"]))
    ns = RestNamespace(uri=gw.uri, **{"headers.x-api-key": keys["writer"]})
    lance.write_dataset(data(20), namespace_client=ns, table_id=["ml", "a"], mode="create")
    ds = lance.write_dataset(data(5, start=20), namespace_client=ns, table_id=["ml", "a"], mode="append")
    assert ds.version == 2 and ds.count_rows() == 25
    described = describe(gw, keys["writer"], ["ml", "a"])
    assert described["managed_versioning"] is True
    key = described["location"].split(f"s3://{bucket}/", 1)[1]
    s3 = s3_with(described["storage_options"], g["endpoint"])
    versions = f"{key}/_versions/"
    final3 = f"{versions}{2**64 - 1 - 3:020}.manifest"
    final2 = f"{versions}{2**64 - 1 - 2:020}.manifest"
    body = s3.get_object(Bucket=bucket, Key=final2)["Body"].read()
    # The store refuses the final names: a new version, the latest one, a branch's.
    assert denied(lambda: s3.put_object(Bucket=bucket, Key=final3, Body=body)), "wrote a final manifest"
    assert denied(lambda: s3.delete_object(Bucket=bucket, Key=final2)), "deleted the latest version"
    assert denied(lambda: s3.put_object(Bucket=bucket, Key=f"{key}/tree/dev/_versions/1.manifest", Body=body))
    assert denied(lambda: s3.copy_object(Bucket=bucket, Key=final3, CopySource={"Bucket": bucket, "Key": final2}))

    def multipart():
        up = s3.create_multipart_upload(Bucket=bucket, Key=final3)
        part = s3.upload_part(Bucket=bucket, Key=final3, UploadId=up["UploadId"], PartNumber=1, Body=body)
        s3.complete_multipart_upload(Bucket=bucket, Key=final3, UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]})
    assert denied(multipart), "a multipart upload wrote a final manifest"
    # ...and lets the client stage a manifest and write data, which is all a commit needs.
    staged = f"{final3}-{uuid.uuid4()}"
    s3.put_object(Bucket=bucket, Key=staged, Body=body)
    s3.put_object(Bucket=bucket, Key=f"{key}/data/{uuid.uuid4()}.lance", Body=b"x")
    assert s3.get_object(Bucket=bucket, Key=final2)["Body"].read() == body
    # The catalog publishes what the client staged.
    status, answer, _ = call(gw.uri, "POST", f"/v1/table/{enc(['ml', 'a'])}/version/create",
                             {"version": 3, "manifest_path": staged, "naming_scheme": "V2"},
                             {"x-api-key": keys["writer"]})
    assert status == 200, answer
    assert g["s3"].get_object(Bucket=bucket, Key=final3)["Body"].read() == body
    # Without managed versioning nothing is gated (test_vended_credentials_reach_only_their_table
    # writes freely); a reader's keys write nothing at all.
    reader = s3_with(describe(gw, keys["reader"], ["ml", "a"])["storage_options"], g["endpoint"])
    assert denied(lambda: reader.put_object(Bucket=bucket, Key=staged + "x", Body=body))
