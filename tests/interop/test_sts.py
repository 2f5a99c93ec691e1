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


@pytest.fixture
def sts_gateway(seaweed):
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
            "--api-keys", keys_file, "--grants", grants_file, "--audit-log", audit]
    env = {"AWS_ACCESS_KEY_ID": seaweedfs.ADMIN_KEY, "AWS_SECRET_ACCESS_KEY": seaweedfs.ADMIN_SECRET}
    gw = start_gateway(args, env)
    yield {"gw": gw, "keys": {k: v[0] for k, v in keys.items()}, "bucket": bucket, "s3": admin_s3,
           "endpoint": seaweed.endpoint, "audit": audit}
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
