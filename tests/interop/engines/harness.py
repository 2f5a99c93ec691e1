"""The pytest side of the engine suites: runs an engine's driver (`drive_<engine>.py`) with the
python of that engine's venv ($LANCE_GATEWAY_CACHE/venv-<engine>, made by
scripts/install-engine-deps from `<engine>.txt`) and calls its operations one JSON line at a
time (the protocol is in driver_loop.py).

A missing or outdated venv fails the test that needs it (never skips it): the suites are
there to prove the engines work, and a skipped suite proves nothing."""

import hashlib
import json
import os
import queue
import subprocess
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

import lance_namespace as ln
import pytest

from conftest import Gateway, free_port, s3_gateway_setup, start_gateway
from test_metrics import moved, scrape  # noqa: F401  (scrape: for the suites)

HERE = os.path.dirname(os.path.abspath(__file__))
# How long one engine call may take before the suite calls the driver hung (a Ray start or
# a Daft job on two busy cores takes seconds, not minutes).
CALL_TIMEOUT_S = 180


class EngineError(AssertionError):
    """The engine refused or failed an operation; the message is the engine's own."""

    def __init__(self, op: str, answer: dict):
        self.type = answer.get("type", "")
        self.message = answer.get("error", "")
        self.trace = answer.get("trace", "")
        super().__init__(f"{op} failed in the engine: {self.type}: {self.message}")


def engine_python(engine: str) -> str:
    """The python of `engine`'s venv, checked against its requirements file's sha256."""
    cache = os.environ.get("LANCE_GATEWAY_CACHE", os.path.expanduser("~/.cache/lance-gateway"))
    venv = os.path.join(cache, f"venv-{engine}")
    req = os.path.join(HERE, f"{engine}.txt")
    with open(req, "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    stamp = os.path.join(venv, ".requirements.sha")
    have = open(stamp).read().strip() if os.path.exists(stamp) else None
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python) or have != want:
        pytest.fail(f"{engine} is not installed at {venv} from {req}: run scripts/install-engine-deps {engine}")
    return python


class Driver:
    """One engine process: `driver(op, **args)` answers the operation's result or raises
    EngineError; `driver.error(op, **args)` expects the operation to fail and answers the
    EngineError. The engine's own output goes to `driver.log`."""

    def __init__(self, engine: str, env: dict | None = None):
        self.engine = engine
        self.log = tempfile.NamedTemporaryFile(prefix=f"lg-{engine}-", suffix=".log", delete=False).name
        full_env = dict(os.environ, PYTHONUNBUFFERED="1")
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [engine_python(engine), os.path.join(HERE, f"drive_{engine}.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log, "w"),
            env=full_env, text=True, cwd=tempfile.mkdtemp(prefix=f"lg-{engine}-cwd-"))
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._answer("start")

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def tail(self, chars: int = 4000) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()[-chars:]

    def _answer(self, op: str):
        try:
            line = self.lines.get(timeout=CALL_TIMEOUT_S)
        except queue.Empty:
            self.proc.kill()
            raise AssertionError(f"{self.engine} driver: no answer to {op} in {CALL_TIMEOUT_S} s:\n{self.tail()}")
        if line is None:
            raise AssertionError(f"{self.engine} driver exited ({self.proc.wait()}) during {op}:\n{self.tail()}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise EngineError(op, answer)
        return answer["result"]

    def __call__(self, op: str, **args):
        print(f"[{self.engine}] {op} {json.dumps(args, default=str)[:300]}", flush=True)
        started = time.monotonic()
        self.proc.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.proc.stdin.flush()
        result = self._answer(op)
        took = time.monotonic() - started
        print(f"[{self.engine}]   -> ({took:.2f} s) {json.dumps(result, default=str)[:300]}", flush=True)
        return result

    def error(self, op: str, **args) -> EngineError:
        try:
            result = self(op, **args)
        except EngineError as e:
            print(f"[{self.engine}]   -> refused: {e.type}: {e.message[:300]}", flush=True)
            return e
        raise AssertionError(f"{op} was expected to fail in {self.engine}, and answered {result!r}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ------------------------------------------------------------------- gateways to drive


@dataclass
class Served:
    """A gateway for an engine suite: where it is, the id prefix of its tables ([] or
    [bucket]), whether it manages versions, and its metrics port."""

    gateway: Gateway
    kind: str
    base: list[str]
    managed: bool
    metrics_port: int

    @property
    def uri(self) -> str:
        return self.gateway.uri

    def id(self, *parts: str) -> list[str]:
        return [*self.base, *parts]


@contextmanager
def served(request, kind: str, managed: bool):
    """A gateway over a fresh local warehouse, or over SeaweedFS in endpoint mode with keys
    vended to clients (`--credentials static`), with metrics on, managing versions or not."""
    metrics_port = free_port()
    args = ["--metrics-listen", f"127.0.0.1:{metrics_port}", "--managed-versioning", "true" if managed else "false"]
    if kind == "local":
        gw = start_gateway(["--warehouse", tempfile.mkdtemp(prefix="lg-engine-wh-"), *args])
        base = []
    else:
        sw_args, env = s3_gateway_setup(request.getfixturevalue("seaweed"), "s3://")
        gw = start_gateway([*sw_args, *args], env)
        base = [f"lg-{uuid.uuid4().hex[:12]}"]
        # the level-1 namespace is the bucket; creating it creates the bucket
        ln.connect("rest", {"uri": gw.uri}).create_namespace(ln.CreateNamespaceRequest(id=base))
    try:
        yield Served(gw, kind, base, managed, metrics_port)
    finally:
        code = gw.stop()
        assert code == 0, f"gateway did not shut down cleanly (exit {code}):\n{open(gw.log).read()[-4000:]}"


VERSION_CREATE = {"route": "/v1/table/{id}/version/create", "status": "200"}


def commits_through_gateway(before: dict, after: dict) -> int:
    """CreateTableVersion requests the gateway accepted between two scrapes."""
    return int(moved(before, after, "lance_gateway_requests_total", **VERSION_CREATE))
