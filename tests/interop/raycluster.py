"""A Ray cluster on this machine for the suites that hand work to Ray: a head (with the
dashboard, whose Jobs API the gateway submits to) and one worker node, each started with
`ray start --block` from Ray's venv ($LANCE_GATEWAY_CACHE/venv-ray, scripts/install-engine-deps)
as its own process group, as a cluster's nodes would be. One CPU a node, so a job's tasks
run on both. The venv's bin is first on the nodes' PATH: a job's `python` is the venv's. The
cluster authenticates callers with a token of its own (Ray's token authentication, as a
cluster reachable by others should), which the gateway is given with --ray-token."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid

from conftest import free_port
from engines.harness import engine_python


class RayCluster:
    def __init__(self, workers: int = 1, head_cpus: int = 1, cpu_list: str | None = None):
        """`workers` worker nodes of one CPU beside a head of `head_cpus`; every node's
        processes on the CPUs `cpu_list` names (`taskset -c`), or on any."""
        self.workers, self.head_cpus = workers, head_cpus
        self.pin = ["taskset", "-c", cpu_list] if cpu_list else []
        python = engine_python("ray")
        self.bin = os.path.dirname(python)
        self.temp = tempfile.mkdtemp(prefix="lg-ray-")
        self.port = free_port()
        self.dashboard_port = free_port()
        self.jobs_url = f"http://127.0.0.1:{self.dashboard_port}"
        self.token = uuid.uuid4().hex + uuid.uuid4().hex
        self.env = dict(
            os.environ,
            PATH=f"{self.bin}:{os.environ.get('PATH', '')}",
            RAY_USAGE_STATS_ENABLED="0",
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN=self.token,
            # Small nodes: the machine runs the gateway, SeaweedFS and the tests beside them.
            RAY_memory_monitor_refresh_ms="0",
        )
        self.nodes: list[subprocess.Popen] = []
        self.logs: list[str] = []

    def _node(self, name: str, *args: str, cpus: int = 1) -> subprocess.Popen:
        log = os.path.join(self.temp, f"{name}.log")
        self.logs.append(log)
        proc = subprocess.Popen(
            [*self.pin, os.path.join(self.bin, "ray"), "start", "--block", "--node-ip-address=127.0.0.1",
             f"--num-cpus={cpus}", "--object-store-memory=200000000", "--disable-usage-stats",
             f"--dashboard-agent-listen-port={free_port()}", *args],
            stdout=open(log, "w"), stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
        )
        self.nodes.append(proc)
        return proc

    def start(self) -> "RayCluster":
        try:
            self._node("head", "--head", f"--port={self.port}", "--include-dashboard=true",
                       "--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard_port}",
                       f"--temp-dir={self.temp}/ray", cpus=self.head_cpus)
            self.wait_for_nodes(1)
            for i in range(self.workers):
                self._node(f"worker{i}", f"--address=127.0.0.1:{self.port}")
                self.wait_for_nodes(2 + i)
        except BaseException:
            self.stop()
            raise
        return self

    def add_worker(self):
        """Starts one more worker node and waits for it."""
        alive = self.alive_nodes()
        self._node(f"worker{len(self.nodes)}", f"--address=127.0.0.1:{self.port}")
        self.wait_for_nodes(alive + 1)

    def kill_worker(self):
        """Kills the newest worker node and its processes at once (SIGKILL), as a machine
        that goes away would; waits until the head sees it gone."""
        alive = self.alive_nodes()
        proc = self.nodes[-1]
        assert proc is not self.nodes[0], "only the head is left"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self.nodes.pop()
        self.logs.pop()
        deadline = time.time() + 120
        while self.alive_nodes() >= alive:
            if time.time() > deadline:
                raise RuntimeError("the head still counts the killed worker alive")
            time.sleep(0.5)

    def get(self, path: str):
        request = urllib.request.Request(self.jobs_url + path, headers={"authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)

    def gateway_args(self) -> list[str]:
        """What a gateway is given to submit jobs here."""
        return ["--ray-address", self.jobs_url, "--ray-token", self.token]

    def alive_nodes(self) -> int:
        try:
            nodes = self.get("/nodes?view=summary")
        except (urllib.error.URLError, OSError, ValueError):
            return 0
        summary = nodes.get("data", {}).get("summary", [])
        return sum(1 for n in summary if n.get("raylet", {}).get("state") == "ALIVE")

    def wait_for_nodes(self, n: int, timeout: float = 120):
        deadline = time.time() + timeout
        while self.alive_nodes() < n:
            for proc, log in zip(self.nodes, self.logs):
                if proc.poll() is not None:
                    raise RuntimeError(f"a Ray node exited with {proc.returncode}:\n{open(log).read()[-3000:]}")
            if time.time() > deadline:
                raise RuntimeError("the Ray cluster did not come up:\n" + "\n".join(open(l).read()[-2000:] for l in self.logs))
            time.sleep(0.5)

    def job(self, submission_id: str) -> dict | None:
        """Ray's record of a submitted job (`status`: PENDING, RUNNING, STOPPED, SUCCEEDED,
        FAILED), or None if Ray has none."""
        try:
            return self.get(f"/api/jobs/{urllib.request.quote(submission_id, safe='')}")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def tasks(self, job_id: str) -> list[dict]:
        """Ray's records of the tasks of job `job_id` (Ray's own id, not the submission id),
        one per attempt."""
        answer = self.get(f"/api/v0/tasks?limit=10000&filter_keys=job_id&filter_predicates=%3D&filter_values={job_id}")
        return answer.get("data", {}).get("result", {}).get("result", [])

    def jobs(self) -> list[dict]:
        return [j for j in self.get("/api/jobs/") if j.get("submission_id")]

    def stop(self):
        for proc in reversed(self.nodes):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.nodes):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(self.temp, ignore_errors=True)
