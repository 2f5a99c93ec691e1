"""Spark through `LanceNamespaceSparkCatalog` (impl=rest) against lance-gateway, on the local
warehouse and on SeaweedFS in endpoint mode (the bucket is the first level of every id), with
credentials vended by the gateway and, again, with `storage.*` keys on the Spark side.

Every step prints what it saw; a wrong answer fails with the step's name."""

import json
import os
import time
import urllib.parse
import urllib.request
import uuid

import lance
import lance_namespace as ln
import pytest

from conftest import client_storage_options, s3_gateway_setup, start_gateway

# The connector as Maven Central serves it to this project (the 3.5 bundle artifact is not
# served here; this is the newest lance-spark-3.5_2.12 that is). Resolved at submit time.
SPARK_PACKAGE = "org.lance:lance-spark-3.5_2.12:0.4.0"


def spark_session(catalog_uri: str, storage: dict | None = None, extra: dict | None = None):
    from pyspark.sql import SparkSession

    cache = os.environ.get("LANCE_GATEWAY_CACHE", os.path.expanduser("~/.cache/lance-gateway"))
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("lance-gateway-interop")
        .config("spark.jars.packages", SPARK_PACKAGE)
        .config("spark.jars.ivy", os.path.join(cache, "ivy"))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.catalog.lance", "org.lance.spark.LanceNamespaceSparkCatalog")
        .config("spark.sql.catalog.lance.impl", "rest")
        .config("spark.sql.catalog.lance.uri", catalog_uri)
    )
    for key, value in (storage or {}).items():
        builder = builder.config(f"spark.sql.catalog.lance.storage.{key}", value)
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class Steps:
    def __init__(self, label: str):
        self.label = label

    def check(self, step: str, seen, expected):
        print(f"[{self.label}] {step}: saw {seen!r}", flush=True)
        assert seen == expected, f"step '{step}' failed: expected {expected!r}, saw {seen!r}"


def scenario(spark, catalog_uri: str, base: list[str], storage_options: dict | None, label: str):
    """The user's scenario; `base` is the namespace prefix ([] or [bucket])."""
    s = Steps(label)
    quoted = ".".join(f"`{p}`" for p in base)
    prefix = f"lance.{quoted}." if base else "lance."
    ns_sql = f"{prefix}ml"
    table = f"{prefix}ml.embeddings"
    if base:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lance.{quoted}")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {ns_sql}")
    listed = [r[0] for r in spark.sql(f"SHOW NAMESPACES IN {prefix.rstrip('.')}").collect()]
    s.check("SHOW NAMESPACES lists ml", "ml" in [n.split(".")[-1].strip("`") for n in listed], True)

    spark.sql(f"CREATE TABLE {table} (id BIGINT, title STRING, vector ARRAY<FLOAT>) USING lance")
    tables = [r["tableName"] for r in spark.sql(f"SHOW TABLES IN {ns_sql}").collect()]
    s.check("SHOW TABLES lists embeddings", tables, ["embeddings"])

    spark.sql(
        f"INSERT INTO {table} VALUES (1, 'one', array(1.0, 1.5)), (2, 'two', array(2.0, 2.5)),"
        " (3, 'three', array(3.0, 3.5))"
    )
    s.check("count after first INSERT", spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0], 3)
    schema = {f.name: f.dataType.simpleString() for f in spark.table(table).schema.fields}
    s.check("schema keeps three columns", schema, {"id": "bigint", "title": "string", "vector": "array<float>"})
    rows = [r["id"] for r in spark.sql(f"SELECT id FROM {table} WHERE id >= 2 ORDER BY id").collect()]
    s.check("WHERE id >= 2 ORDER BY id", rows, [2, 3])

    spark.sql(f"INSERT INTO {table} VALUES (4, 'four', array(4.0, 4.5))")
    s.check("count after second INSERT", spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0], 4)

    df = spark.createDataFrame([(5, "five", [5.0, 5.5]), (6, "six", [6.0, 6.5])], "id BIGINT, title STRING, vector ARRAY<FLOAT>")
    df.writeTo(table).append()
    ids = sorted(r["id"] for r in spark.table(table).select("id").collect())
    s.check("spark.table after DataFrame append", ids, [1, 2, 3, 4, 5, 6])

    ns = ln.connect("rest", {"uri": catalog_uri})
    location = ns.describe_table(ln.DescribeTableRequest(id=base + ["ml", "embeddings"])).location
    direct = lance.dataset(location, storage_options=storage_options or None).to_table()
    s.check("pylance read straight from the location", sorted(direct["id"].to_pylist()), [1, 2, 3, 4, 5, 6])

    # lance-spark 0.4.0 sends DeregisterTable for DROP TABLE (the data stays, as for an
    # external table) and DropTable for DROP TABLE ... PURGE.
    spark.sql(f"DROP TABLE {table} PURGE")
    tables = [r["tableName"] for r in spark.sql(f"SHOW TABLES IN {ns_sql}").collect()]
    s.check("DROP TABLE removes it from the catalog", tables, [])
    # A warehouse that keeps drops (format 3: a local one this release made) keeps the table
    # for undrop: Spark's PURGE is the same DropTable as a plain drop would be. It is purged
    # through the extension route. (A new bucket in endpoint mode, format 2, deletes at once.)
    keeps = not base
    ns_path = urllib.parse.quote("$".join(base + ["ml"]), safe="")
    with urllib.request.urlopen(f"{catalog_uri}/v1/namespace/{ns_path}/dropped_tables") as r:
        kept_ids = [d["id"] for d in json.loads(r.read())["dropped"]]
    s.check("DROP TABLE PURGE keeps it for undrop where drops are kept", base + ["ml", "embeddings"] in kept_ids, keeps)
    if keeps:
        purge = urllib.request.Request(f"{catalog_uri}/v1/table/{ns_path}%24embeddings/purge", data=b"{}",
                                       method="POST", headers={"content-type": "application/json"})
        with urllib.request.urlopen(purge) as r:
            assert r.status == 200
    # (the data is deleted just after DropTable, or the purge, answers)
    deadline = time.time() + 10
    while True:
        try:
            left = lance.dataset(location, storage_options=storage_options or None).count_rows()
        except Exception as e:  # the dataset is gone: what we want
            left = f"gone ({type(e).__name__})"
            break
        if time.time() > deadline:
            break
        time.sleep(0.05)
    s.check("DROP TABLE removes its data from the store", str(left).startswith("gone"), True)

    # Plain DROP TABLE forgets the entry and keeps the data.
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING lance")
    spark.sql(f"INSERT INTO {table} VALUES (7)")
    kept = ns.describe_table(ln.DescribeTableRequest(id=base + ["ml", "embeddings"])).location
    spark.sql(f"DROP TABLE {table}")
    tables = [r["tableName"] for r in spark.sql(f"SHOW TABLES IN {ns_sql}").collect()]
    s.check("plain DROP TABLE forgets the entry", tables, [])
    rows = lance.dataset(kept, storage_options=storage_options or None).count_rows()
    s.check("plain DROP TABLE keeps the data", rows, 1)
    spark.sql(f"DROP NAMESPACE {ns_sql}")
    s.check("DROP NAMESPACE", ns.list_namespaces(ln.ListNamespacesRequest(id=base)).namespaces.count("ml"), 0)


def run_isolated(catalog_uri, base, storage_options, label, storage=None):
    spark = spark_session(catalog_uri, storage)
    try:
        scenario(spark, catalog_uri, base, storage_options, label)
    finally:
        spark.stop()


def test_spark_local_warehouse(tmp_path):
    gw = start_gateway(["--warehouse", str(tmp_path / "wh")])
    try:
        run_isolated(gw.uri, [], None, "local")
    finally:
        assert gw.stop() == 0


@pytest.mark.parametrize("credentials", ["static", "none"])
def test_spark_seaweedfs(seaweed, credentials):
    """static: Spark has no storage.* keys, everything comes from the gateway.
    none: the gateway vends endpoint and region but no keys; Spark brings its own."""
    args, env = s3_gateway_setup(seaweed, "s3://", credentials=credentials)
    gw = start_gateway(args, env)
    try:
        bucket = f"lg-spark-{uuid.uuid4().hex[:8]}"
        storage = client_storage_options(seaweed)
        if credentials == "static":
            run_isolated(gw.uri, [bucket], storage, "seaweedfs, vended")
        else:
            run_isolated(gw.uri, [bucket], storage, "seaweedfs, storage.* keys", storage=storage)
    finally:
        assert gw.stop() == 0


def test_spark_with_keys_and_tokens(tmp_path):
    """lance-spark sends `headers.*` catalog settings on every request: an API key as
    `headers.x-api-key`, a token as `headers.Authorization`. Without them it is refused, and
    with them it is refused outside the grants."""
    from security import Issuer, make_key, write
    from test_security import grants_toml

    issuer = Issuer()
    key, line = make_key("alice")
    write(str(tmp_path / "keys"), line + "\n")
    write(str(tmp_path / "grants.toml"), grants_toml([
        ("principal", "alice", ["ml"], "admin"), ("group", "readers", ["ml", "t"], "read")]))
    gw = start_gateway(["--warehouse", str(tmp_path / "wh"), "--api-keys", str(tmp_path / "keys"),
                        "--grants", str(tmp_path / "grants.toml"), "--oidc-issuer", issuer.url,
                        "--oidc-audience", "lance-gateway"])
    token = issuer.token(sub="carol", groups=["readers"], lifetime=3600)
    extra = {"spark.sql.catalog.lance.headers.x-api-key": key}
    for name, headers in [("bearer", {"Authorization": f"Bearer {token}"}), ("anon", {})]:
        extra[f"spark.sql.catalog.{name}"] = "org.lance.spark.LanceNamespaceSparkCatalog"
        extra[f"spark.sql.catalog.{name}.impl"] = "rest"
        extra[f"spark.sql.catalog.{name}.uri"] = gw.uri
        for header, value in headers.items():
            extra[f"spark.sql.catalog.{name}.headers.{header}"] = value
    spark = spark_session(gw.uri, extra=extra)
    s = Steps("spark, keys and tokens")
    try:
        spark.sql("CREATE NAMESPACE lance.ml")
        spark.sql("CREATE TABLE lance.ml.t (id BIGINT) USING lance")
        spark.sql("INSERT INTO lance.ml.t VALUES (1), (2)")
        spark.sql("CREATE TABLE lance.ml.secret (id BIGINT) USING lance")
        spark.sql("INSERT INTO lance.ml.secret VALUES (9)")
        s.check("with an API key: count", spark.sql("SELECT count(*) FROM lance.ml.t").collect()[0][0], 2)
        s.check("with a token: count", spark.sql("SELECT count(*) FROM bearer.ml.t").collect()[0][0], 2)
        s.check("with a token: SHOW TABLES shows what it may read",
                [r["tableName"] for r in spark.sql("SHOW TABLES IN bearer.ml").collect()], ["t"])
        for label, statement in [("without credentials", "SHOW TABLES IN anon.ml"),
                                 ("outside the grants", "SELECT count(*) FROM bearer.ml.secret")]:
            try:
                spark.sql(statement).collect()
                refused = False
            except Exception:
                refused = True
            s.check(f"refused {label}", refused, True)
    finally:
        spark.stop()
        issuer.stop()
        assert gw.stop() == 0
