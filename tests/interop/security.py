"""Test doubles of the outside world the security suites need, all on loopback: a test CA
with server and client certificates, an OIDC issuer (discovery document and JWKS over HTTP)
that signs tokens with keys of its own, API keys made by the gateway binary, and raw HTTP
calls that show status, code and headers exactly."""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import hmac as hmac_lib
import http.client
import http.server
import json
import os
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from conftest import client_storage_options, gateway_binary, s3_gateway_setup, start_gateway


# ----------------------------------------------------------------------------------- PKI


class Pki:
    """A CA and certificates it issued, written as PEM files in one folder."""

    def __init__(self, name: str = "lance-gateway test CA"):
        self.dir = tempfile.mkdtemp(prefix="lg-pki-")
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
            .sign(self.key, hashes.SHA256())
        )
        self.ca_path = self._write("ca.pem", self.cert.public_bytes(serialization.Encoding.PEM))

    def _write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def issue(self, common_name: str, server: bool, prefix: str | None = None) -> tuple[str, str]:
        """A certificate for `common_name` (a server one valid for 127.0.0.1 and localhost, or
        a client one); returns the paths of its PEM certificate and key."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server:
            import ipaddress

            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            ).add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        else:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
        cert = builder.sign(self.key, hashes.SHA256())
        prefix = prefix or common_name.replace(" ", "_")
        cert_path = self._write(f"{prefix}.pem", cert.public_bytes(serialization.Encoding.PEM))
        key_path = self._write(
            f"{prefix}.key",
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        )
        return cert_path, key_path


# ---------------------------------------------------------------------------------- OIDC


def _b64(n: int) -> str:
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class Issuer:
    """An OIDC issuer on loopback: `/.well-known/openid-configuration` and `/jwks.json`,
    with an RSA key (`rsa1`) and an EC key (`ec1`); more keys can be published later."""

    def __init__(self):
        self.keys = {"rsa1": rsa.generate_private_key(public_exponent=65537, key_size=2048),
                     "ec1": ec.generate_private_key(ec.SECP256R1())}
        self.published = {"rsa1", "ec1"}
        self.jwks_fetches = 0
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/jwks.json"}
                elif self.path == "/jwks.json":
                    issuer.jwks_fetches += 1
                    body = issuer.jwks()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def jwks(self) -> dict:
        out = []
        for kid in sorted(self.published):
            key = self.keys[kid].public_key()
            if isinstance(key, rsa.RSAPublicKey):
                nums = key.public_numbers()
                out.append({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": _b64(nums.n), "e": _b64(nums.e)})
            else:
                nums = key.public_numbers()
                out.append({"kty": "EC", "kid": kid, "use": "sig", "alg": "ES256", "crv": "P-256",
                            "x": _b64(nums.x).rjust(43, "A"), "y": _b64(nums.y).rjust(43, "A")})
        return {"keys": out}

    def add_key(self, kid: str, publish: bool = True):
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if publish:
            self.published.add(kid)

    def token(self, sub: str = "alice", audience: str = "lance-gateway", groups=None, kid: str = "rsa1",
              lifetime: int = 300, not_before: int = 0, issuer: str | None = None, alg: str | None = None,
              **extra) -> str:
        now = int(time.time())
        claims = {"iss": issuer or self.url, "sub": sub, "aud": audience, "iat": now,
                  "exp": now + lifetime, "nbf": now + not_before, **extra}
        if groups is not None:
            claims["groups"] = groups
        key = self.keys[kid]
        alg = alg or ("RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256")
        return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})

    def public_pem(self, kid: str = "rsa1") -> bytes:
        return self.keys[kid].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def stop(self):
        self.server.shutdown()


def forged_tokens(issuer: Issuer) -> dict[str, str]:
    """Tokens the gateway must refuse, by what is wrong with them."""
    good = issuer.token()
    header, payload, signature = good.split(".")

    def b64json(obj) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    tampered = b64json({**claims, "sub": "root"})
    # HS256 "signed" with the issuer's public key as the secret (the classic confusion;
    # PyJWT itself refuses to make one, so it is made by hand).
    hs_header = b64json({"alg": "HS256", "typ": "JWT", "kid": "rsa1"})
    signing_input = f"{hs_header}.{payload}".encode()
    mac = hmac_lib.new(issuer.public_pem(), signing_input, hashlib.sha256).digest()
    hmac_with_public_key = f"{hs_header}.{payload}." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    issuer.add_key("unpublished", publish=False)
    return {
        "expired": issuer.token(lifetime=-600),
        "not yet valid": issuer.token(not_before=600),
        "wrong audience": issuer.token(audience="someone-else"),
        "wrong issuer": issuer.token(issuer="https://evil.example"),
        "unknown key id": issuer.token(kid="unpublished"),
        "alg none": f"{b64json({'alg': 'none', 'typ': 'JWT'})}.{payload}.",
        "HMAC signed with the public key": hmac_with_public_key,
        "tampered payload": f"{header}.{tampered}.{signature}",
        "not a JWT": "not.a.jwt",
    }


# ------------------------------------------------------------------------------ API keys


def make_key(principal: str, groups: list[str] | None = None) -> tuple[str, str]:
    """A key made by `lance-gateway keys create`: (the key, the line for the keys file)."""
    args = [gateway_binary(), "keys", "create", "--principal", principal]
    if groups:
        args += ["--groups", ",".join(groups)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout.splitlines()
    key = next(line for line in out if line.startswith("lgk_"))
    line = out[-1]
    return key, line


def grants_toml(rules: list[tuple[str, str, list[str], str]]) -> str:
    """[(principal|group, name, id, access)] as a grants file."""
    out = []
    for kind, name, ident, access in rules:
        out.append(f'[[grant]]\n{kind} = "{name}"\nid = {json.dumps(ident)}\naccess = "{access}"\n')
    return "\n".join(out)


@contextlib.contextmanager
def keyed_gateway(request, prefix: str, extra_args: tuple[str, ...] = (), kind: str | None = None):
    """A gateway over the warehouse kind `request.param` (local, seaweedfs, gcs or azure) with API keys
    and grants: `app` writes under `base`, `viewer` reads, `ops` administers everything,
    `nobody` has a key and no grant. Yields {gw, keys, base, storage, args, env} (the last two
    start another gateway over the same warehouse)."""
    work = tempfile.mkdtemp(prefix=prefix)
    keys = {who: make_key(who) for who in ("app", "viewer", "ops", "nobody")}
    keys_file, grants_file = os.path.join(work, "keys"), os.path.join(work, "grants.toml")
    write(keys_file, "\n".join(line for _, line in keys.values()) + "\n")
    kind = kind or request.param
    if kind == "local":
        args, env, base, storage = ["--warehouse", os.path.join(work, "wh")], {}, [], None
    elif kind in ("gcs", "azure"):
        from conftest import cloud_gateway_setup
        args, env, storage = cloud_gateway_setup(request, kind)
        base = []
    else:
        sw = request.getfixturevalue("seaweed")
        args, env = s3_gateway_setup(sw, "s3://")
        base = [f"{prefix}{uuid.uuid4().hex[:8]}"]
        storage = client_storage_options(sw)
    write(grants_file, grants_toml([
        ("principal", "ops", [], "admin"),
        ("principal", "app", base, "write"),
        ("principal", "viewer", base, "read"),
    ]))
    args = args + ["--api-keys", keys_file, "--grants", grants_file, *extra_args]
    gw = start_gateway(args, env)
    if base:
        import lance_namespace as ln
        ln.connect("rest", {"uri": gw.uri, "headers.x-api-key": keys["ops"][0]}).create_namespace(
            ln.CreateNamespaceRequest(id=base))
    try:
        yield {"gw": gw, "keys": {k: v[0] for k, v in keys.items()}, "base": base, "storage": storage,
               "args": args, "env": env}
    finally:
        code = gw.stop()
    assert code == 0, f"gateway did not shut down cleanly (exit {code})"


def write(path: str, text: str):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------- raw HTTP


def call(uri: str, method: str, path: str, body=None, headers: dict | None = None,
         context: ssl.SSLContext | None = None) -> tuple[int, dict, dict]:
    """One request on a new connection: (status, JSON body or {}, headers)."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme == "https":
        conn = http.client.HTTPSConnection(parsed.hostname, parsed.port, timeout=30, context=context)
    else:
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    try:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        hdrs = {"content-type": "application/json", **(headers or {})}
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        text = resp.read()
        try:
            parsed_body = json.loads(text) if text.strip() else {}
        except ValueError:
            parsed_body = {"raw": text.decode(errors="replace")}
        return resp.status, parsed_body, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def enc(parts: list[str]) -> str:
    return urllib.parse.quote("$".join(parts), safe="")
