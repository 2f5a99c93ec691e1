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

import emulators
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


@pytest.fixture(scope="session")
def fake_gcs():
    emu = emulators.start_gcs()
    yield emu
    emu.stop()


@pytest.fixture(scope="session")
def azurite():
    emu = emulators.start_azurite()
    yield emu
    emu.stop()


def cloud_gateway_setup(request, kind: str, credentials: str = "gateway") -> tuple[list[str], dict, dict]:
    """A gateway's arguments for a fresh warehouse on an emulator (`gcs` or `azure`), its
    environment, and what a client needs to open the warehouse's locations by itself."""
    if kind == "gcs":
        emu = request.getfixturevalue("fake_gcs")
        bucket = emu.create_bucket()
        # The gateway signs its requests and vends its own token, made with a service account
        # key (fake-gcs-server checks neither: test_cloud_stores checks the token instead).
        key_file = os.path.join(tempfile.mkdtemp(prefix="lg-gcs-key-"), "service-account.json")
        emulators.service_account_key(key_file)
        args = ["--warehouse", f"gs://{bucket}/wh", "--gcs-endpoint", emu.endpoint,
                "--gcs-service-account-key", key_file]
        env = {"LANCE_GATEWAY_CREDENTIALS": credentials}
        return args, env, emu.storage_options()
    emu = request.getfixturevalue("azurite")
    container = emu.create_container()
    args = ["--warehouse", f"az://{container}/wh", "--azure-account", emulators.AZURE_ACCOUNT,
            "--azure-endpoint", emu.endpoint, "--azure-sas-scope", "container"]
    env = {"LANCE_GATEWAY_AZURE_ACCESS_KEY": emulators.AZURE_KEY, "LANCE_GATEWAY_CREDENTIALS": credentials}
    return args, env, emu.storage_options()


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
