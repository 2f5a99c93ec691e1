"""A fault-injecting HTTP/1.1 proxy between lance-gateway and its S3 store, on loopback.

Each request the gateway sends may, at random (seeded), be delayed; be answered with an S3
error (500 InternalError, 503 SlowDown) without reaching the store; have its connection
dropped before it reaches the store, or after the store has done it (so the gateway cannot
know the outcome); or have its answer cut half-way. `down` makes the store unreachable
(every connection is closed at once) until it is cleared. Counts of what was done are kept
in `done`. Every request that reaches the store is written to `log` as (method, target), the
store's request log as the gateway made it; `delay` adds a fixed latency to each request.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Faults:
    latency: float = 0.0        # probability of a delay of up to `max_delay` seconds
    max_delay: float = 0.3
    error: float = 0.0          # an S3 error answered by the proxy
    drop_before: float = 0.0    # the connection closed before the request is forwarded
    drop_after: float = 0.0     # forwarded and done by the store, then the connection closed
    cut: float = 0.0            # the answer cut half-way


@dataclass
class _Request:
    head: bytes
    body: bytes
    method: str


S3_ERRORS = [
    (503, "Service Unavailable", "SlowDown", "Please reduce your request rate."),
    (500, "Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
]


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while True:
            size_line = await reader.readuntil(b"\r\n")
            out += size_line
            size = int(size_line.split(b";")[0].strip(), 16)
            chunk = await reader.readexactly(size + 2)
            out += chunk
            if size == 0:
                # trailers end with an empty line; a bare \r\n was read as the chunk's end
                return out
    length = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(length) if length else b""


async def _read_message(reader: asyncio.StreamReader, request_method: str | None = None):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if request_method is not None:
        status = int(lines[0].split()[1])
        if request_method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return head, b"", lines[0]
    return head, await _read_body(reader, headers), lines[0]


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int, seed: int):
        self.upstream = (upstream_host, upstream_port)
        self.faults = Faults()
        self.down = False
        self.rng = random.Random(seed)
        self.done: Counter = Counter()
        self.delay = 0.0
        self.log: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(10)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    def stop(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def _draw(self) -> tuple[str | None, float]:
        """What happens to the next request, and its delay."""
        with self.lock:
            f = self.faults
            delay = self.rng.uniform(0, f.max_delay) if self.rng.random() < f.latency else 0.0
            roll = self.rng.random()
            for name, p in (("error", f.error), ("drop_before", f.drop_before),
                            ("drop_after", f.drop_after), ("cut", f.cut)):
                if roll < p:
                    self.done[name] += 1
                    return name, delay
                roll -= p
            self.done["passed"] += 1
            return None, delay

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        upstream_w = None
        try:
            if self.down:
                with self.lock:
                    self.done["refused while down"] += 1
                return
            upstream_r, upstream_w = await asyncio.open_connection(*self.upstream)
            while True:
                try:
                    head, body, first = await _read_message(client_r)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                if self.down:
                    with self.lock:
                        self.done["refused while down"] += 1
                    return
                fault, delay = self._draw()
                delay += self.delay
                if delay:
                    await asyncio.sleep(delay)
                if fault == "drop_before":
                    return
                if fault == "error":
                    status, reason, code, message = self.rng.choice(S3_ERRORS)
                    xml = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                           f"<Message>{message}</Message></Error>").encode()
                    client_w.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
                                   f"Content-Length: {len(xml)}\r\n\r\n".encode() + xml)
                    await client_w.drain()
                    continue
                method = first.split()[0]
                self.log.append((method, first.split()[1] if len(first.split()) > 1 else ""))
                upstream_w.write(head + body)
                await upstream_w.drain()
                rhead, rbody, _ = await _read_message(upstream_r, method)
                if fault == "drop_after":
                    return
                if fault == "cut":
                    whole = rhead + rbody
                    client_w.write(whole[: len(rhead) + len(rbody) // 2] if rbody else rhead[: len(rhead) // 2])
                    await client_w.drain()
                    return
                client_w.write(rhead + rbody)
                await client_w.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            return
        finally:
            for w in (client_w, upstream_w):
                if w is not None:
                    try:
                        w.close()
                    except Exception:
                        pass
