"""Start the cloud storage emulators on loopback: fake-gcs-server (Google Cloud Storage) and
Azurite (Azure Blob Storage), both installed pinned by scripts/install-emulators.

Used by the pytest suites (session fixtures) and, through `python emulators.py run ENV LOG`,
by scripts/test-all for the Rust suites: it writes the endpoints into ENV as shell exports
and serves until it is terminated.

What each checks (and so what the suites can prove on it):
- Azurite checks Shared Key signatures and SAS tokens (signature, permissions, expiry,
  container), and honours If-Match / If-None-Match on writes and deletes.
- fake-gcs-server checks no tokens at all (any or none is accepted), honours
  ifGenerationMatch on JSON API uploads, and deletes a named generation only while it is
  the live one; it ignores preconditions on the XML API.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass

from seaweedfs import free_port

# Azurite's well-known development account (the one its documentation publishes).
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _cache() -> str:
    return os.environ.get("LANCE_GATEWAY_CACHE", os.path.expanduser("~/.cache/lance-gateway"))


def _binary(env: str, default: str) -> str:
    path = os.environ.get(env) or default
    if not os.path.exists(path):
        raise RuntimeError(f"{path} not found: run scripts/install-emulators first")
    return path


def _wait(url: str, proc: subprocess.Popen, log: str, ok=(200, 400, 403, 404)):
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the emulator exited: {open(log).read()[-2000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError as e:
            if e.code in ok:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within 60 s")


@dataclass
class Emulator:
    proc: subprocess.Popen
    dir: str
    port: int

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class XmlPuts:
    """What stands in front of fake-gcs-server: it passes every request through unchanged,
    except a plain XML API upload (`PUT /bucket/object`), which fake-gcs-server 1.56.1 does not
    serve (it takes XML PUTs only as signed-URL uploads) and which object_store, and so every
    Lance client, writes objects with. Such a PUT is sent on as the JSON API's media upload of
    the same bytes, its `x-goog-if-generation-match` precondition as `ifGenerationMatch` (which
    fake-gcs-server checks), and answered as GCS answers the XML PUT: the ETag and the
    generation in headers. Nothing else is changed or answered here."""

    JSON_PREFIXES = ("/storage/", "/upload/", "/download/", "/batch/", "/_internal/")

    def __init__(self, upstream_port: int):
        import http.server
        import threading

        upstream = upstream_port
        prefixes = self.JSON_PREFIXES

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self, method, path, body, headers):
                import http.client

                conn = http.client.HTTPConnection("127.0.0.1", upstream, timeout=60)
                try:
                    conn.request(method, path, body=body, headers=headers)
                    resp = conn.getresponse()
                    return resp.status, resp.getheaders(), resp.read()
                finally:
                    conn.close()

            def _answer(self, status, headers, body):
                self.send_response(status)
                # A HEAD's answer says the object's length, with no body.
                keep = ("content-length",) if self.command == "HEAD" else ()
                for k, v in headers:
                    if k.lower() not in ("transfer-encoding", "content-length", "connection") or k.lower() in keep:
                        self.send_header(k, v)
                if self.command != "HEAD":
                    self.send_header("content-length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _handle(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["host"] = f"127.0.0.1:{upstream}"
                parsed = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(parsed.query)
                plain_put = (self.command == "PUT" and not parsed.path.startswith(prefixes)
                             and "uploadType" not in query and "X-Goog-Algorithm" not in query
                             and parsed.path.count("/") >= 2 and "x-goog-copy-source" not in self.headers)
                if not plain_put:
                    self._answer(*self._forward(self.command, self.path, body, headers))
                    return
                bucket, name = parsed.path[1:].split("/", 1)
                params = {"uploadType": "media", "name": urllib.parse.unquote(name)}
                match = self.headers.get("x-goog-if-generation-match")
                if match is not None:
                    params["ifGenerationMatch"] = match
                status, rheaders, rbody = self._forward(
                    "POST", f"/upload/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(params)}", body or b"",
                    {"content-type": self.headers.get("content-type", "application/octet-stream"),
                     "content-length": str(len(body or b""))})
                if status != 200:
                    self._answer(status, rheaders, rbody)
                    return
                made = json.loads(rbody)
                self._answer(200, [("ETag", f'"{made["etag"]}"'), ("x-goog-generation", str(made["generation"]))], b"")

            do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class FakeGcs(Emulator):
    puts: "XmlPuts | None" = None

    @property
    def endpoint(self) -> str:
        """Where clients and the gateway reach it: through `XmlPuts`."""
        return f"http://127.0.0.1:{self.puts.port}"

    def stop(self):
        if self.puts:
            self.puts.stop()
        super().stop()

    def create_bucket(self, name: str | None = None) -> str:
        name = name or f"lg-{uuid.uuid4().hex[:12]}"
        req = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=lance-gateway",
            data=json.dumps({"name": name}).encode(),
            headers={"content-type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(req, timeout=10).read()
        return name

    def storage_options(self) -> dict:
        """What a Lance client needs to reach this emulator by itself (any token does: the
        emulator checks none, but Lance's GCS writes always ask for one)."""
        return {"google_base_url": self.endpoint, "allow_http": "true", "google_storage_token": "unchecked"}


def service_account_key(path: str) -> dict:
    """Writes a service account key file with a fresh RSA key, as Google's console gives one.
    A gateway given it signs its own access tokens with it (self-signed JWTs): no token
    service is needed, and a test can check what was vended against the public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    info = {
        "type": "service_account",
        "project_id": "lance-gateway",
        "private_key_id": uuid.uuid4().hex,
        "private_key": pem,
        "client_email": "gateway@lance-gateway.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    with open(path, "w") as f:
        json.dump(info, f)
    info["public_key"] = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return info


class Azurite(Emulator):
    @property
    def endpoint(self) -> str:
        """The blob service URL, path-style: the account is the first path segment."""
        return f"http://127.0.0.1:{self.port}/{AZURE_ACCOUNT}"

    def create_container(self, name: str | None = None) -> str:
        name = name or f"lg-{uuid.uuid4().hex[:12]}"
        self.filesystem().create_dir(name)
        return name

    def filesystem(self):
        """Arrow's Azure filesystem on this emulator (path-style, with the development
        account's key): the suites create containers and look at blobs through it."""
        import pyarrow.fs as pafs

        return pafs.AzureFileSystem(
            account_name=AZURE_ACCOUNT,
            account_key=AZURE_KEY,
            blob_storage_authority=f"127.0.0.1:{self.port}",
            blob_storage_scheme="http",
            dfs_storage_authority=f"127.0.0.1:{self.port}",
            dfs_storage_scheme="http",
        )

    def storage_options(self) -> dict:
        return {
            "azure_storage_account_name": AZURE_ACCOUNT,
            "azure_storage_account_key": AZURE_KEY,
            "azure_storage_endpoint": self.endpoint,
            "allow_http": "true",
        }


def start_gcs(log_path: str | None = None) -> FakeGcs:
    binary = _binary("FAKE_GCS_BIN", os.path.join(_cache(), "bin", "fake-gcs-server"))
    data = tempfile.mkdtemp(prefix="lg-fake-gcs-")
    port = free_port()
    log = log_path or os.path.join(data, "fake-gcs.log")
    proc = subprocess.Popen(
        [
            binary,
            "-scheme", "http",
            "-host", "127.0.0.1",
            "-port", str(port),
            "-backend", "memory",
            "-public-host", f"127.0.0.1:{port}",
            "-external-url", f"http://127.0.0.1:{port}",
            "-log-level", "warn",
        ],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    emu = FakeGcs(proc, data, port)
    emu.puts = XmlPuts(port)
    _wait(f"{emu.endpoint}/storage/v1/b?project=x", proc, log)
    return emu


def start_azurite(log_path: str | None = None) -> Azurite:
    binary = _binary("AZURITE_BIN", os.path.join(_cache(), "azurite", "node_modules", ".bin", "azurite-blob"))
    data = tempfile.mkdtemp(prefix="lg-azurite-")
    port = free_port()
    log = log_path or os.path.join(data, "azurite.log")
    proc = subprocess.Popen(
        [
            "node",
            binary,
            "--blobHost", "127.0.0.1",
            "--blobPort", str(port),
            "--location", data,
            "--skipApiVersionCheck",
            "--disableProductStyleUrl",
        ],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    emu = Azurite(proc, data, port)
    _wait(f"http://127.0.0.1:{port}/{AZURE_ACCOUNT}?comp=list", proc, log)
    return emu


def main():
    if len(sys.argv) < 3 or sys.argv[1] != "run":
        print("usage: emulators.py run ENV_FILE [LOG_DIR]", file=sys.stderr)
        sys.exit(2)
    env_file = sys.argv[2]
    logs = sys.argv[3] if len(sys.argv) > 3 else None
    gcs = start_gcs(os.path.join(logs, "fake-gcs.log") if logs else None)
    azurite = start_azurite(os.path.join(logs, "azurite.log") if logs else None)
    # One bucket and one container for the Rust suites, which give each test a prefix of its
    # own inside them.
    gcs.create_bucket("lg-rust")
    azurite.create_container("lg-rust")
    tmp = env_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"export LANCE_GATEWAY_TEST_GCS_ENDPOINT={gcs.endpoint}\n")
        f.write(f"export LANCE_GATEWAY_TEST_AZURE_ENDPOINT={azurite.endpoint}\n")
        f.write(f"export LANCE_GATEWAY_TEST_AZURE_ACCOUNT={AZURE_ACCOUNT}\n")
        f.write(f"export LANCE_GATEWAY_TEST_AZURE_KEY={AZURE_KEY}\n")
        f.write("export LANCE_GATEWAY_TEST_CLOUD_BUCKET=lg-rust\n")
    os.replace(tmp, env_file)

    def stop(*_):
        gcs.stop()
        azurite.stop()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        if gcs.proc.poll() is not None or azurite.proc.poll() is not None:
            print("an emulator exited", file=sys.stderr)
            stop()
        time.sleep(1)


if __name__ == "__main__":
    main()
