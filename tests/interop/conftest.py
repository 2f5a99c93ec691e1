"""Fixtures for the interop suites: the built lance-gateway binary, a real SeaweedFS on
loopback, and a gateway serving each kind of warehouse (a local directory, and SeaweedFS in
endpoint mode where the bucket is the first level of every id)."""

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field

import pytest

import seaweedfs


def gateway_binary() -> str:
    path = os.environ.get("LANCE_GATEWAY_BIN") or os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lance-gateway/target")),
        "release",
        "lance-gateway",
    )
    if not os.path.exists(path):
        raise RuntimeError(f"lance-gateway binary not found at {path}: build it with cargo build --release")
    return path


@dataclass
class Gateway:
    proc: subprocess.Popen
    uri: str
    log: str

    def stop(self) -> int:
        """SIGTERM, then wait: a graceful shutdown exits 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return -9
        return self.proc.returncode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gateway(args: list[str], env: dict | None = None, port: int | None = None,
                  binary: str | None = None) -> Gateway:
    """Starts the built binary (or `binary`) on `port` (a free one if not given) and waits
    until it is up."""
    port = port or free_port()
    log = tempfile.NamedTemporaryFile(prefix="lance-gateway-", suffix=".log", delete=False).name
    full_env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info"))
    full_env.update(env or {})
    proc = subprocess.Popen(
        [binary or gateway_binary(), "serve", "--listen", f"127.0.0.1:{port}", *args],
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        env=full_env,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"lance-gateway exited with {proc.returncode}:\n{open(log).read()}")
        try:
            urllib.request.urlopen(f"{uri}/healthz", timeout=1)
            return Gateway(proc, uri, log)
        except Exception:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"lance-gateway did not start:\n{open(log).read()}")


@dataclass
class Warehouse:
    """A gateway over one kind of warehouse, and what a test needs to use it."""

    kind: str
    gateway: Gateway
    # Ids start with this (the bucket in endpoint mode).
    base: list[str]
    # What a client passes to open a location without the catalog (the keys vended to clients).
    storage_options: dict = field(default_factory=dict)
    s3_endpoint: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)

    @property
    def uri(self) -> str:
        return self.gateway.uri

    def id(self, *parts: str) -> list[str]:
        return [*self.base, *parts]


@pytest.fixture(scope="session")
def seaweed():
    sw = seaweedfs.start()
    yield sw
    sw.stop()


def s3_gateway_setup(sw, warehouse: str, credentials: str = "static") -> tuple[list[str], dict]:
    args = ["--warehouse", warehouse, "--s3-endpoint", sw.endpoint, "--s3-region", "us-east-1"]
    env = {
        "AWS_ACCESS_KEY_ID": seaweedfs.ADMIN_KEY,
        "AWS_SECRET_ACCESS_KEY": seaweedfs.ADMIN_SECRET,
        "LANCE_GATEWAY_CREDENTIALS": credentials,
        "LANCE_GATEWAY_CLIENT_ACCESS_KEY_ID": seaweedfs.CLIENT_KEY,
        "LANCE_GATEWAY_CLIENT_SECRET_ACCESS_KEY": seaweedfs.CLIENT_SECRET,
    }
    return args, env


def client_storage_options(sw) -> dict:
    return {
        "aws_endpoint": sw.endpoint,
        "aws_region": "us-east-1",
        "allow_http": "true",
        "aws_access_key_id": seaweedfs.CLIENT_KEY,
        "aws_secret_access_key": seaweedfs.CLIENT_SECRET,
        "aws_virtual_hosted_style_request": "false",
    }


@pytest.fixture(scope="module", params=["local", "seaweedfs"])
def warehouse(request):
    if request.param == "local":
        root = tempfile.mkdtemp(prefix="lg-warehouse-")
        args = ["--warehouse", root]
        gw = start_gateway(args)
        wh = Warehouse("local", gw, [], {}, None, args, {})
    else:
        sw = request.getfixturevalue("seaweed")
        args, env = s3_gateway_setup(sw, "s3://")
        gw = start_gateway(args, env)
        bucket = f"lg-{uuid.uuid4().hex[:12]}"
        wh = Warehouse("seaweedfs", gw, [bucket], client_storage_options(sw), sw.endpoint, args, env)
        # The level-1 namespace is the bucket; creating it creates the bucket.
        import lance_namespace as ln
        ln.connect("rest", {"uri": gw.uri}).create_namespace(ln.CreateNamespaceRequest(id=[bucket]))
    yield wh
    code = wh.gateway.stop()
    assert code == 0, f"gateway did not shut down cleanly (exit {code}):\n{open(wh.gateway.log).read()[-4000:]}"


def unique(tag: str) -> str:
    return f"{tag}_{uuid.uuid4().hex[:8]}"
