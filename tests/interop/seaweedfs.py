"""Start a real SeaweedFS (`weed mini`) on loopback for the test suites.

Used by the pytest suites (a session fixture) and, through `python seaweedfs.py run`, by
scripts/test-all for the Rust suites. The binary is built by scripts/install-deps from the
pinned module in tools/seaweedfs; `WEED_BIN` overrides where it is looked for.

Two identities are configured so credential vending is tested for real: `lgadmin` (the
gateway's own keys, may create buckets) and `lgclient` (keys vended to clients: read and
write objects, nothing else).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass

ADMIN_KEY, ADMIN_SECRET = "lgadmin", "lgadminsecret"
CLIENT_KEY, CLIENT_SECRET = "lgclient", "lgclientsecret"
# The role the gateway assumes to vend table-scoped credentials (seaweedfs-sts.md).
STS_ROLE_ARN = "arn:aws:iam::000000000000:role/LanceVendor"
# How long STS sessions last at most here: short, so tests see credentials expire.
STS_MAX_SESSION = "30s"


def weed_binary() -> str:
    path = os.environ.get("WEED_BIN") or os.path.join(
        os.environ.get("LANCE_GATEWAY_CACHE", os.path.expanduser("~/.cache/lance-gateway")), "bin", "weed"
    )
    if not os.path.exists(path):
        raise RuntimeError(f"SeaweedFS binary not found at {path}: run scripts/install-deps first")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_pair() -> int:
    """A port p with p+10000 free too: weed puts each gRPC port at http port + 10000."""
    for _ in range(200):
        p = free_port()
        if p + 10000 > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 10000))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port pair")


@dataclass
class SeaweedFS:
    proc: subprocess.Popen
    dir: str
    s3_port: int
    lance_port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def lance_uri(self) -> str:
        return f"http://127.0.0.1:{self.lance_port}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def start(log_path: str | None = None, open_access: bool = False) -> SeaweedFS:
    """Starts weed mini. With `open_access`, no identities are configured (S3 and SeaweedFS's
    own Lance catalog accept anyone), as in SeaweedFS's own client suites."""
    weed = weed_binary()
    data = tempfile.mkdtemp(prefix="lg-seaweedfs-")
    config = os.path.join(data, "s3.json")
    with open(config, "w") as f:
        json.dump(
            {
                "identities": [
                    {
                        "name": "gateway",
                        "credentials": [{"accessKey": ADMIN_KEY, "secretKey": ADMIN_SECRET}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    },
                    {
                        "name": "client",
                        "credentials": [{"accessKey": CLIENT_KEY, "secretKey": CLIENT_SECRET}],
                        "actions": ["Read", "Write", "List", "Tagging"],
                    },
                ]
            },
            f,
        )
    iam = os.path.join(data, "iam.json")
    with open(iam, "w") as f:
        json.dump(
            {
                "sts": {
                    "tokenDuration": "1h",
                    "maxSessionLength": STS_MAX_SESSION,
                    "issuer": "seaweedfs-sts",
                    "signingKey": "bGFuY2UtZ2F0ZXdheS10ZXN0LXNpZ25pbmcta2V5",
                },
                "policy": {"defaultEffect": "Deny", "storeType": "memory"},
                "policies": [
                    {
                        "name": "LanceWarehouse",
                        "document": {
                            "Version": "2012-10-17",
                            "Statement": [
                                {
                                    "Effect": "Allow",
                                    "Action": ["s3:*"],
                                    "Resource": ["arn:aws:s3:::*", "arn:aws:s3:::*/*"],
                                }
                            ],
                        },
                    }
                ],
                "roles": [
                    {
                        "roleName": "LanceVendor",
                        "roleArn": STS_ROLE_ARN,
                        "trustPolicy": {
                            "Version": "2012-10-17",
                            "Statement": [
                                {
                                    "Effect": "Allow",
                                    "Principal": {"AWS": "arn:aws:iam::000000000000:user/gateway"},
                                    "Action": ["sts:AssumeRole"],
                                }
                            ],
                        },
                        "attachedPolicies": ["LanceWarehouse"],
                    }
                ],
            },
            f,
        )
    ports = {name: free_port_pair() for name in ("master", "volume", "filer", "s3")}
    lance_port = free_port()
    args = [
        weed, "mini",
        f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={ports['master']}", f"-volume.port={ports['volume']}",
        f"-filer.port={ports['filer']}", f"-s3.port={ports['s3']}",
        f"-s3.port.lance={lance_port}", "-s3.port.iceberg=0",
        *([] if open_access else [f"-s3.config={config}", f"-s3.iam.config={iam}"]),
        "-webdav=false", "-admin.ui=false",
        "-master.telemetry=false", "-master.volumeSizeLimitMB=64",
    ]
    log = open(log_path or os.path.join(data, "weed.log"), "w")
    # weed mini turns AWS_* keys in its environment into an identity: keep them out.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    sw = SeaweedFS(proc=proc, dir=data, s3_port=ports["s3"], lance_port=lance_port)
    deadline = time.time() + 90
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"weed exited with {proc.returncode}; see {log.name}")
        try:
            urllib.request.urlopen(f"{sw.endpoint}/healthz", timeout=2)
            if _can_write(sw):
                return sw
        except Exception:
            pass
        time.sleep(0.5)
    sw.stop()
    raise RuntimeError(f"SeaweedFS did not become ready in 90 s; see {log.name}")


def _can_write(sw: SeaweedFS) -> bool:
    """Writes need a volume server registered with the master; the master reports that."""
    master = next(a for a in sw.proc.args if a.startswith("-master.port=")).split("=")[1]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{master}/dir/status", timeout=2) as r:
            topology = json.load(r).get("Topology", {})
        return topology.get("Max", 0) > 0
    except Exception:
        return False


def main():
    if len(sys.argv) < 2 or sys.argv[1] != "run":
        print("usage: seaweedfs.py run ENV_FILE [LOG]", file=sys.stderr)
        sys.exit(2)
    env_file = sys.argv[2]
    sw = start(sys.argv[3] if len(sys.argv) > 3 else None)
    with open(env_file + ".tmp", "w") as f:
        f.write(f"export LANCE_GATEWAY_TEST_S3_ENDPOINT={sw.endpoint}\n")
        f.write(f"export SEAWEEDFS_LANCE_URI={sw.lance_uri}\n")
        f.write(f"export SEAWEEDFS_PID={sw.proc.pid}\n")
    os.replace(env_file + ".tmp", env_file)
    # Poll rather than block in proc.wait(): a signal handler that stops the server while the
    # main thread holds Popen's wait lock would deadlock.
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    while not stopping and sw.proc.poll() is None:
        time.sleep(0.2)
    crashed = not stopping
    sw.stop()
    sys.exit(1 if crashed else 0)


if __name__ == "__main__":
    main()
