"""docker/compose.ha.yaml run for real with podman: three lance-gateway replicas behind
haproxy over one SeaweedFS, started as the previous release's image. While a client keeps
creating namespaces and tables and reading them back through the balancer, each replica is
replaced in turn by this release's image (a rolling upgrade), then each in turn by the
previous one again (a rollback). The client retries what answers 5xx or is cut; nothing it
was told fails for good, every table it was told exists is there exactly once, and `admin
fsck` of the warehouse is clean."""

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

from conftest import gateway_binary
from test_compose import compose_project, run
from test_two_releases import previous_release

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COMPOSE = os.path.join(ROOT, "docker", "compose.ha.yaml")
REPLICAS = ["gw1", "gw2", "gw3"]


def answer_of(raw: bytes) -> dict:
    """A gateway answers JSON; the balancer's own pages (its 503 when no replica is up) are
    HTML, kept as text."""
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        return {"not_json": raw.decode(errors="replace")[:200]}


def send(uri: str, method: str, path: str, body=None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{uri}{path}", data=data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, answer_of(r.read())
    except urllib.error.HTTPError as e:
        return e.code, answer_of(e.read())


class Client:
    """Sends each request until it gets an answer that is not 5xx (or 409 code 14, "retry"),
    as a client behind a balancer would; counts what it had to retry."""

    def __init__(self, uri: str):
        self.uri, self.retried, self.failed = uri, [], []

    def call(self, method: str, path: str, body=None, within: float = 60.0) -> tuple[int, dict]:
        last, deadline = None, time.time() + within
        while time.time() < deadline:
            try:
                status, answer = send(self.uri, method, path, body)
            except OSError as e:  # cut, refused: the request may or may not have landed
                status, answer = None, {"error": str(e)}
            if status is not None and status < 500 and not (status == 409 and answer.get("code") == 14):
                return status, answer
            last = (status, answer)
            self.retried.append((method, path, last))
            time.sleep(0.25)
        self.failed.append((method, path, last))
        return last


def replace(base: list[str], env: dict, project: str, replica: str, image: str):
    """Stops the replica (SIGTERM: it finishes what it holds) and starts it from `image`."""
    run("podman", "stop", "-t", "30", f"{project}_{replica}_1")
    run("podman", "rm", f"{project}_{replica}_1")
    run(*base, "up", "-d", "--no-deps", replica, env={**env, f"{replica.upper()}_IMAGE": image})
    running = run("podman", "inspect", "--format", "{{.ImageName}}", f"{project}_{replica}_1").stdout.strip()
    assert running.endswith(image), (replica, running, image)
    deadline = time.time() + 60
    while time.time() < deadline:
        if run("podman", "exec", f"{project}_{replica}_1", "curl", "-fsS", "http://127.0.0.1:2333/readyz",
               check=False).returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"{replica} did not become ready as {image}")


@pytest.fixture(scope="module")
def ha():
    previous = previous_release()
    run(os.path.join(ROOT, "scripts", "images"), env={**os.environ, "LANCE_GATEWAY_PREVIOUS_BIN": previous},
        timeout=900)
    images = {f"{r.upper()}_IMAGE": "lance-gateway:previous" for r in REPLICAS}
    with compose_project(COMPOSE, "lgha", ["LANCE_GATEWAY_PORT", "SEAWEEDFS_S3_PORT"], ["balancer", *REPLICAS],
                         images) as up:
        yield up


def test_replicas_replaced_one_at_a_time_lose_nothing(ha):
    client = Client(ha["uri"])
    bucket = f"ha-{uuid.uuid4().hex[:6]}"
    for ns in ([bucket], [bucket, "ml"]):
        status, body = client.call("POST", f"/v1/namespace/{'%24'.join(ns)}/create", {})
        assert status == 200, body
    told, stop = [], threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            name = f"t{i}"
            i += 1
            status, body = client.call("POST", f"/v1/table/{bucket}%24ml%24{name}/declare", {})
            # A declare whose first answer was lost and that landed answers "exists" when
            # sent again: it is there, once.
            if status == 200 or (status == 409 and body.get("code") == 5):
                told.append(name)
                status, body = client.call("POST", f"/v1/table/{bucket}%24ml%24{name}/describe", {})
                assert status == 200, (name, body)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        # Up to this release, one replica at a time; then back, one at a time.
        for image in ("lance-gateway:latest", "lance-gateway:previous"):
            for replica in REPLICAS:
                time.sleep(1)
                replace(ha["base"], ha["env"], ha["project"], replica, image)
        time.sleep(1)
    finally:
        stop.set()
        thread.join()
    print(f"{len(told)} tables declared through six replacements; {len(client.retried)} requests retried")
    assert not client.failed, client.failed[:5]
    assert len(told) > 20, "the writer hardly wrote"

    listed, token = [], None
    while True:
        query = "?limit=200" + (f"&page_token={token}" if token else "")
        status, body = client.call("GET", f"/v1/namespace/{bucket}%24ml/table/list{query}")
        assert status == 200, body
        listed += body["tables"]
        token = body.get("page_token")
        if not token:
            break
    assert sorted(listed) == sorted(set(listed)), "a table listed twice"
    assert set(told) <= set(listed), sorted(set(told) - set(listed))[:10]

    # The store, checked by this release's admin from the host (the replicas still serve).
    out = subprocess.run([gateway_binary(), "admin", "fsck", "--warehouse", "s3://",
                          "--s3-endpoint", f"http://127.0.0.1:{ha['ports']['SEAWEEDFS_S3_PORT']}",
                          "--s3-region", "us-east-1"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "AWS_ACCESS_KEY_ID": "lgadmin", "AWS_SECRET_ACCESS_KEY": "lgadminsecret"})
    assert out.returncode == 0, out.stdout + out.stderr
