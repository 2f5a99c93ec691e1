"""docker/compose.yaml run for real with podman: the lance-gateway image (packed from the
built binary) next to SeaweedFS (packed from the pinned `weed`), driven by LanceDB and Spark
as a user would, on published loopback ports. The gateway container is healthy by its own
HEALTHCHECK, runs as a non-root user, serves metrics, and keeps every table across a
restart of its container."""

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from conftest import free_port
from test_spark import spark_session

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COMPOSE = os.path.join(ROOT, "docker", "compose.yaml")


def run(*args, env=None, check=True, timeout=600) -> subprocess.CompletedProcess:
    out = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


def wait_ready(uri: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{uri}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{uri} did not become ready")


@contextlib.contextmanager
def compose_project(compose_file: str, tag: str, port_names: list[str], logged: list[str], extra_env=None):
    """Brings `compose_file` up with podman-compose as a project of its own, on free
    loopback ports (the variables `port_names`), waits for LANCE_GATEWAY_PORT to be ready,
    and takes it down after, printing the tail of the `logged` services' logs."""
    project = f"{tag}{uuid.uuid4().hex[:8]}"
    ports = {name: free_port() for name in port_names}
    env = {**os.environ, **{k: str(v) for k, v in ports.items()}, **(extra_env or {})}
    podman_compose = os.path.join(os.path.dirname(sys.executable), "podman-compose")
    base = [podman_compose, "-p", project, "-f", compose_file]
    try:
        run(*base, "up", "-d", env=env)
        uri = f"http://127.0.0.1:{ports['LANCE_GATEWAY_PORT']}"
        wait_ready(uri)
        yield {"uri": uri, "project": project, "ports": ports, "base": base, "env": env}
    finally:
        for name in logged:
            logs = run("podman", "logs", "--tail", "40", f"{project}_{name}_1", check=False)
            print(name, logs.stdout[-4000:], logs.stderr[-4000:])
        run(*base, "down", "-v", env=env, check=False)


@pytest.fixture(scope="module")
def compose():
    run(os.path.join(ROOT, "scripts", "images"), timeout=900)
    ports = ["LANCE_GATEWAY_PORT", "SEAWEEDFS_S3_PORT", "LANCE_GATEWAY_METRICS_PORT"]
    with compose_project(COMPOSE, "lgc", ports, ["lance-gateway"]) as up:
        yield {**up, "gateway": f"{up['project']}_lance-gateway_1"}


def test_the_image_is_healthy_and_not_root(compose):
    name = compose["gateway"]
    image = json.loads(run("podman", "image", "inspect", "lance-gateway:latest").stdout)[0]
    check = image["Healthcheck"]
    assert image["Config"]["User"] == "lance" and "healthz" in " ".join(check["Test"])
    # No systemd here to run healthchecks on a timer: run the image's own check as the engine
    # would, where a container turns unhealthy only after `Retries` failures in a row.
    failures = []
    for _ in range(check["Retries"]):
        out = run("podman", "healthcheck", "run", name, check=False)
        if out.returncode == 0:
            break
        failures.append(out.stdout + out.stderr)
        time.sleep(1)
    else:
        raise AssertionError(f"the image's healthcheck failed {len(failures)} times in a row: {failures}")
    assert run("podman", "inspect", name, "--format", "{{.State.Health.Status}}").stdout.strip() == "healthy"
    assert run("podman", "exec", name, "id", "-u").stdout.strip() == "10001"
    with urllib.request.urlopen(f"http://127.0.0.1:{compose['ports']['LANCE_GATEWAY_METRICS_PORT']}/metrics") as r:
        assert "lance_gateway_requests_total" in r.read().decode()


def test_lancedb_and_spark_keep_their_tables_across_a_restart(compose):
    uri, bucket = compose["uri"], f"vectors-{uuid.uuid4().hex[:6]}"
    db = lancedb.connect_namespace("rest", {"uri": uri})
    db.create_namespace([bucket])
    db.create_namespace([bucket, "ml"])
    rng = np.random.default_rng(7)
    vectors = rng.random((200, 8), dtype=np.float32)
    data = pa.table({"id": np.arange(200), "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 8)})
    db.create_table("emb", data=data, namespace_path=[bucket, "ml"])
    hits = db.open_table("emb", namespace_path=[bucket, "ml"]).search(vectors[42]).limit(3).to_arrow()
    assert hits["id"][0].as_py() == 42

    spark = spark_session(uri, extra={
        "spark.sql.catalog.compose": "org.lance.spark.LanceNamespaceSparkCatalog",
        "spark.sql.catalog.compose.impl": "rest",
        "spark.sql.catalog.compose.uri": uri,
    })
    try:
        spark.sql(f"CREATE TABLE compose.`{bucket}`.ml.events (id BIGINT, kind STRING) USING lance")
        spark.sql(f"INSERT INTO compose.`{bucket}`.ml.events VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        assert spark.sql(f"SELECT count(*) FROM compose.`{bucket}`.ml.events").collect()[0][0] == 3

        run("podman", "restart", compose["gateway"])
        wait_ready(uri)

        assert sorted(db.table_names(namespace_path=[bucket, "ml"])) == ["emb", "events"]
        assert db.open_table("emb", namespace_path=[bucket, "ml"]).count_rows() == 200
        rows = spark.sql(f"SELECT id FROM compose.`{bucket}`.ml.events ORDER BY id").collect()
        assert [r[0] for r in rows] == [1, 2, 3]
    finally:
        spark.stop()
