"""Requests an attacker would send, through the real binary: locations that point outside the
warehouse once decoded, connections that never finish their headers, names longer than the
file system allows once encoded, bodies the gateway has no use for on kept-alive
connections, oversized headers and odd ids. None may yield a 500, a write outside the
warehouse, or a stuck server."""

import http.client
import os
import socket
import tempfile
import time

import pytest

from conftest import start_gateway
from security import call, enc


@pytest.fixture
def local_gateway():
    root = os.path.realpath(tempfile.mkdtemp(prefix="lg-hostile-"))
    warehouse = os.path.join(root, "wh")
    gw = start_gateway(["--warehouse", warehouse, "--header-timeout-secs", "2", "--max-connections", "8"])
    yield gw, warehouse, root
    assert gw.stop() == 0


def test_locations_outside_the_warehouse_are_refused_after_decoding(local_gateway):
    gw, warehouse, root = local_gateway
    assert call(gw.uri, "POST", "/v1/namespace/ml/create", {})[0] == 200
    for i, location in enumerate([
        f"file://{warehouse}/%2e%2e/evil",
        f"file://{warehouse}/%2E%2E/evil",
        f"file://{warehouse}/.%2e/evil",
        f"file://{warehouse}/x/%2e%2e/%2e%2e/evil",
        f"file://{warehouse}/../evil",
        f"file://{warehouse}/a%2F..%2F..%2Fevil",
        f"file://{warehouse}/t?x=../../evil",
        f"{warehouse}/../evil",
        "file:///etc/evil",
    ]):
        for op, body in [("declare", {"location": location}), ("register", {"location": location})]:
            status, answer, _ = call(gw.uri, "POST", f"/v1/table/{enc(['ml', f't{i}'])}/{op}", body)
            assert (status, answer.get("code")) == (400, 13), (op, location, answer)
    assert not os.path.exists(os.path.join(root, "evil"))
    assert call(gw.uri, "GET", "/v1/namespace/ml/table/list")[1]["tables"] == []


def test_connections_that_never_finish_their_headers_are_closed(local_gateway):
    gw, _, _ = local_gateway
    port = int(gw.uri.rsplit(":", 1)[1])
    idle = []
    for _ in range(6):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/namespace/x/create HTTP/1.1\r\nHost: x\r\n")
        idle.append(s)
    # The server keeps serving others meanwhile...
    assert call(gw.uri, "GET", "/healthz")[0] == 200
    # ...and closes the stalled connections once the header timeout has passed.
    for s in idle:
        s.settimeout(15)
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        assert b"200 OK" not in data
        s.close()
    # Past the connection limit, a client waits rather than being refused, and is served
    # once stalled connections are closed.
    stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
    assert call(gw.uri, "GET", "/healthz")[0] == 200
    for s in stalled:
        s.close()


def test_names_too_long_once_encoded_are_invalid_not_unavailable(local_gateway):
    gw, _, _ = local_gateway
    for name in ["n" * 249, "é" * 42, "a" * 241]:
        for method, path in [("POST", f"/v1/namespace/{enc([name])}/create"),
                             ("POST", f"/v1/namespace/{enc([name])}/describe"),
                             ("POST", f"/v1/table/{enc(['ml', name])}/declare"),
                             ("GET", f"/v1/namespace/{enc([name])}/table/list")]:
            status, body, _ = call(gw.uri, method, path, {} if method == "POST" else None)
            assert (status, body.get("code")) == (400, 13), (len(name), path, body)
    assert call(gw.uri, "POST", f"/v1/namespace/{enc(['é' * 40])}/create", {})[0] == 200


def test_an_unread_body_does_not_lose_the_next_request_on_the_connection(local_gateway):
    gw, _, _ = local_gateway
    port = int(gw.uri.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for path in ["/v1/table/ml%24t/query", "/v1/nowhere", "/v1/namespace/ml/create?x=1"]:
        conn.request("POST", path, body=b"x" * 60_000, headers={"content-type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status in (400, 406), (path, resp.status)
        conn.request("GET", "/healthz")
        again = conn.getresponse()
        assert again.status == 200
        again.read()
    conn.close()


def test_oversized_headers_and_odd_ids_never_break_the_server(local_gateway):
    gw, _, _ = local_gateway
    status, _, _ = call(gw.uri, "GET", "/healthz", headers={"x-junk": "a" * 200_000})
    assert status == 431, status
    assert call(gw.uri, "POST", "/v1/namespace/ml/create", {})[0] == 200
    for name in ["t*", "t?", "..", ".", "a/b", "a%2Fb", "x" * 300, "$", "a\\b", "`rm`", "t\x01"]:
        for op in ("declare", "describe", "drop"):
            status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(['ml', name])}/{op}", {})
            assert status < 500, (name, op, status, body)
    # The odd names that were accepted got folders without wildcards or traversal.
    for name in ["t*", "t?", "..", "a/b"]:
        status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(['ml', name])}/declare", {})
        if status == 200:
            folder = body["location"].rsplit("/", 1)[1]
            assert not any(c in folder for c in "*?/") and ".." not in folder, body["location"]
    assert call(gw.uri, "GET", "/healthz")[0] == 200
