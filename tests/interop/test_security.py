"""Who may do what, through the real binary and the real clients: API keys and grants with
the lance_namespace client, LanceDB and pylance (on a local warehouse and on SeaweedFS),
OIDC tokens signed by a test issuer, TLS and client certificates, the audit log, grants
reloaded while serving, and the refusal to hand keys to anyone on a public address."""

import json
import os
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import uuid

import lance
import lance_namespace as ln
import lancedb
import pyarrow as pa
import pytest

from conftest import gateway_binary, s3_gateway_setup, start_gateway
from security import Issuer, Pki, call, enc, forged_tokens, grants_toml, make_key, write


@pytest.fixture(params=["local", "seaweedfs"])
def secured(request):
    """A gateway with API keys, grants and an audit log, over each kind of warehouse."""
    keys = {who: make_key(who, groups) for who, groups in
            [("admin", []), ("alice", []), ("bob", ["analysts"]), ("mallory", [])]}
    work = tempfile.mkdtemp(prefix="lg-sec-")
    keys_file, grants_file, audit = (os.path.join(work, n) for n in ("keys", "grants.toml", "audit.log"))
    write(keys_file, "\n".join(line for _, line in keys.values()) + "\n")
    if request.param == "local":
        args, env, base = ["--warehouse", os.path.join(work, "wh")], {}, []
    else:
        sw = request.getfixturevalue("seaweed")
        args, env = s3_gateway_setup(sw, "s3://")
        base = [f"lg-sec-{uuid.uuid4().hex[:8]}"]
    write(grants_file, grants_toml([
        ("principal", "admin", [], "admin"),
        ("principal", "alice", base + ["ml"], "write"),
        ("group", "analysts", base + ["ml", "emb"], "read"),
    ]))
    gw = start_gateway(args + ["--api-keys", keys_file, "--grants", grants_file, "--audit-log", audit], env)
    yield {"gw": gw, "keys": {k: v[0] for k, v in keys.items()}, "base": base, "grants": grants_file,
           "audit": audit, "kind": request.param}
    assert gw.stop() == 0


def client(uri: str, key: str | None = None, **more):
    props = {"uri": uri, **more}
    if key:
        props["headers.x-api-key"] = key
    return ln.connect("rest", props)


def code_of(fn) -> int:
    """The spec code of the error a client call raises."""
    with pytest.raises(ln.LanceNamespaceError) as e:
        fn()
    kinds = {ln.PermissionDeniedError: 15, ln.UnauthenticatedError: 16, ln.TableNotFoundError: 4,
             ln.NamespaceNotFoundError: 1}
    return next((code for kind, code in kinds.items() if isinstance(e.value, kind)), -1)


def test_keys_and_grants_with_every_client(secured):
    gw, keys, base = secured["gw"], secured["keys"], secured["base"]
    uri = gw.uri
    ml = base + ["ml"]

    # Without credentials, or with wrong ones: 401, code 16, WWW-Authenticate, no 500.
    for headers in ({}, {"x-api-key": "lgk_00000000_nope"}, {"authorization": "Bearer nonsense"},
                    {"authorization": "Basic YWRtaW46eA=="}):
        status, body, hdrs = call(uri, "GET", "/v1/namespace/%24/list", headers=headers)
        assert (status, body.get("code")) == (401, 16), (headers, status, body)
        assert hdrs.get("www-authenticate", "").startswith("Bearer"), hdrs
    assert code_of(lambda: client(uri).list_namespaces(ln.ListNamespacesRequest(id=base))) == 16

    admin = client(uri, keys["admin"])
    if base:
        admin.create_namespace(ln.CreateNamespaceRequest(id=base))
    admin.create_namespace(ln.CreateNamespaceRequest(id=ml))
    admin.create_namespace(ln.CreateNamespaceRequest(id=base + ["ml2"]))

    # alice writes under ml with LanceDB and pylance, and may not administer.
    alice_props = {"uri": uri, "headers.x-api-key": keys["alice"]}
    db = lancedb.connect_namespace("rest", alice_props)
    rows = [{"id": i, "vector": [float(i), float(i) + 0.5]} for i in range(64)]
    storage = {} if secured["kind"] == "local" else None
    db.create_table("emb", data=rows, namespace_path=ml)
    tbl = db.open_table("emb", namespace_path=ml, **({} if storage is None else {"storage_options": storage}))
    assert len(tbl.search([3.0, 3.5]).limit(3).to_arrow()) == 3
    alice = client(uri, keys["alice"])
    lance.write_dataset(pa.table({"x": [1, 2]}), namespace_client=alice, table_id=ml + ["events"], mode="create")
    lance.write_dataset(pa.table({"x": [3]}), namespace_client=alice, table_id=ml + ["events"], mode="append")
    assert lance.dataset(namespace_client=alice, table_id=ml + ["events"]).count_rows() == 3
    assert code_of(lambda: alice.create_namespace(ln.CreateNamespaceRequest(id=ml + ["sub"]))) == 15
    assert code_of(lambda: alice.drop_table(ln.DropTableRequest(id=ml + ["events"]))) == 15
    # ml2 is nothing alice may see: it answers as missing.
    status, body, _ = call(uri, "POST", f"/v1/table/{enc(base + ['ml2', 't'])}/declare", {},
                           {"x-api-key": keys["alice"]})
    assert (status, body.get("code")) == (404, 1), body

    # bob (group analysts) reads emb only; the rest of ml is hidden from him.
    bob = client(uri, keys["bob"])
    assert bob.list_tables(ln.ListTablesRequest(id=ml)).tables == ["emb"]
    seen = bob.list_namespaces(ln.ListNamespacesRequest(id=base)).namespaces
    assert seen == ["ml"], seen
    assert lance.dataset(namespace_client=bob, table_id=ml + ["emb"],
                         **({} if storage is None else {"storage_options": storage})).count_rows() == 64
    for path, want in [(f"/v1/table/{enc(ml + ['events'])}/describe", (404, 4)),
                       (f"/v1/table/{enc(ml + ['x'])}/declare", (403, 15)),
                       (f"/v1/table/{enc(ml + ['emb'])}/drop", (403, 15)),
                       (f"/v1/namespace/{enc(base + ['ml2'])}/describe", (404, 1))]:
        status, body, _ = call(uri, "POST", path, {}, {"x-api-key": keys["bob"]})
        assert (status, body.get("code")) == want, (path, body)
    bob_db = lancedb.connect_namespace("rest", {"uri": uri, "headers.x-api-key": keys["bob"]})
    assert bob_db.open_table("emb", namespace_path=ml,
                             **({} if storage is None else {"storage_options": storage})).count_rows() == 64

    # mallory holds a valid key and no grant: everything is missing to her.
    status, body, _ = call(uri, "GET", f"/v1/namespace/{enc(ml)}/table/list", headers={"x-api-key": keys["mallory"]})
    assert (status, body.get("code")) == (404, 1), body

    # The audit log: mutations, refusals, and never a key.
    lines = [json.loads(l) for l in open(secured["audit"])]
    ops = {(l["principal"], l["operation"], l["decision"], l["status"]) for l in lines}
    assert ("alice", "table.declare", "allow", 200) in ops, ops
    assert ("alice", "namespace.create", "deny", 403) in ops, ops
    assert ("bob", "table.describe", "deny", 404) in ops, ops
    assert ("-", "namespace.list", "deny", 401) in ops, ops
    text = open(secured["audit"]).read()
    for key in keys.values():
        assert key.split("_", 2)[2] not in text, "a key's secret reached the audit log"


def test_grants_reload_on_change_and_on_sighup(secured):
    gw, keys, base = secured["gw"], secured["keys"], secured["base"]
    uri, ml = gw.uri, base + ["ml"]
    admin = client(uri, keys["admin"])
    if base:
        admin.create_namespace(ln.CreateNamespaceRequest(id=base))
    admin.create_namespace(ln.CreateNamespaceRequest(id=ml))
    declare = lambda who, name: call(uri, "POST", f"/v1/table/{enc(ml + [name])}/declare", {},
                                     {"x-api-key": keys[who]})[0]
    assert declare("mallory", "m1") == 404
    original = open(secured["grants"]).read()
    write(secured["grants"], original + grants_toml([("principal", "mallory", ml, "write")]))
    deadline = time.time() + 10
    while declare("mallory", "m1") != 200:
        assert time.time() < deadline, "the changed grants file was not picked up"
        time.sleep(0.3)
    # A broken file keeps the grants in force.
    write(secured["grants"], "this is not [[ toml")
    time.sleep(2.5)
    assert declare("mallory", "m2") == 200
    # SIGHUP: a change the poller cannot see (same size, same time) is read on the signal.
    granting = original + grants_toml([("principal", "mallory", ml, "write")])
    write(secured["grants"], granting)
    time.sleep(2.5)
    stamp = os.stat(secured["grants"])
    write(secured["grants"], granting.replace('"mallory"', '"mallorx"'))
    os.utime(secured["grants"], ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    time.sleep(2.5)
    assert declare("mallory", "m3") == 200, "the poller saw a change it should not have"
    gw.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while declare("mallory", "m4") != 404:
        assert time.time() < deadline, "SIGHUP did not reload the grants"
        time.sleep(0.3)


def test_oidc_tokens():
    issuer = Issuer()
    try:
        work = tempfile.mkdtemp(prefix="lg-oidc-")
        grants = os.path.join(work, "grants.toml")
        write(grants, grants_toml([("principal", "alice", ["ml"], "admin"), ("group", "ml-readers", ["ml"], "read")]))
        gw = start_gateway(["--warehouse", os.path.join(work, "wh"), "--oidc-issuer", issuer.url,
                            "--oidc-audience", "lance-gateway", "--grants", grants])
        try:
            bearer = lambda tok: {"authorization": f"Bearer {tok}"}
            alice = ln.connect("rest", {"uri": gw.uri, "headers.Authorization": f"Bearer {issuer.token()}"})
            alice.create_namespace(ln.CreateNamespaceRequest(id=["ml"]))
            alice.declare_table(ln.DeclareTableRequest(id=["ml", "t"]))
            # An EC key signs as well, and groups come from their claim.
            reader = issuer.token(sub="carol", kid="ec1", groups=["ml-readers"])
            status, body, _ = call(gw.uri, "POST", "/v1/table/ml%24t/describe", {}, bearer(reader))
            assert status == 200, body
            status, body, _ = call(gw.uri, "POST", "/v1/table/ml%24t/drop", {}, bearer(reader))
            assert (status, body.get("code")) == (403, 15), body
            for what, token in forged_tokens(issuer).items():
                status, body, hdrs = call(gw.uri, "POST", "/v1/table/ml%24t/describe", {}, bearer(token))
                assert (status, body.get("code")) == (401, 16), (what, status, body)
            # A key the issuer publishes later is fetched when a token first names it.
            time.sleep(5.5)
            issuer.add_key("rsa2")
            fetches = issuer.jwks_fetches
            status, body, _ = call(gw.uri, "POST", "/v1/table/ml%24t/describe", {},
                                   bearer(issuer.token(kid="rsa2")))
            assert status == 200, body
            assert issuer.jwks_fetches == fetches + 1
        finally:
            assert gw.stop() == 0
    finally:
        issuer.stop()


def test_tls_and_client_certificates():
    pki, other = Pki(), Pki("another CA")
    server_cert, server_key = pki.issue("127.0.0.1", server=True, prefix="server")
    admin_cert, admin_key = pki.issue("svc-admin", server=False)
    stranger_cert, stranger_key = other.issue("svc-admin", server=False, prefix="stranger")
    work = tempfile.mkdtemp(prefix="lg-tls-")
    grants = os.path.join(work, "grants.toml")
    write(grants, grants_toml([("principal", "svc-admin", [], "admin")]))
    from conftest import free_port
    port = free_port()
    proc = subprocess.Popen(
        [gateway_binary(), "serve", "--listen", f"127.0.0.1:{port}", "--warehouse", os.path.join(work, "wh"),
         "--tls-cert", server_cert, "--tls-key", server_key, "--tls-client-ca", pki.ca_path, "--grants", grants],
        stdout=open(os.path.join(work, "gw.log"), "w"), stderr=subprocess.STDOUT)
    uri = f"https://127.0.0.1:{port}"
    try:
        ctx = ssl.create_default_context(cafile=pki.ca_path)
        ctx.load_cert_chain(admin_cert, admin_key)
        deadline = time.time() + 30
        while True:
            try:
                if call(uri, "GET", "/healthz", context=ctx)[0] == 200:
                    break
            except OSError:
                pass
            assert time.time() < deadline, open(os.path.join(work, "gw.log")).read()
            time.sleep(0.2)
        ns = ln.connect("rest", {"uri": uri, "tls.ssl_ca_cert": pki.ca_path, "tls.cert_file": admin_cert,
                                 "tls.key_file": admin_key})
        ns.create_namespace(ln.CreateNamespaceRequest(id=["ml"]))
        ns.declare_table(ln.DeclareTableRequest(id=["ml", "t"]))
        assert ns.list_tables(ln.ListTablesRequest(id=["ml"])).tables == ["t"]
        # A server the client does not trust, a client certificate the server does not, none.
        for props in ({"tls.cert_file": admin_cert, "tls.key_file": admin_key, "tls.ssl_ca_cert": other.ca_path},
                      {"tls.cert_file": stranger_cert, "tls.key_file": stranger_key, "tls.ssl_ca_cert": pki.ca_path},
                      {"tls.ssl_ca_cert": pki.ca_path}):
            with pytest.raises(Exception):
                ln.connect("rest", {"uri": uri, **props}).list_tables(ln.ListTablesRequest(id=["ml"]))
        # A renewed certificate is served without a restart.
        before = ssl.get_server_certificate(("127.0.0.1", port))
        renewed_cert, renewed_key = pki.issue("127.0.0.1", server=True, prefix="renewed")
        os.replace(renewed_key, server_key)
        os.replace(renewed_cert, server_cert)
        deadline = time.time() + 10
        while ssl.get_server_certificate(("127.0.0.1", port)) == before:
            assert time.time() < deadline, "the renewed certificate was not picked up"
            time.sleep(0.3)
        assert ns.list_tables(ln.ListTablesRequest(id=["ml"])).tables == ["t"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_keys_are_not_handed_to_anyone_on_a_public_address():
    out = subprocess.run([gateway_binary(), "serve", "--listen", "0.0.0.0:0", "--warehouse", "s3://bkt",
                          "--credentials", "gateway"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out
    assert "allow-anonymous" in out.stderr and "api-keys" in out.stderr, out.stderr
