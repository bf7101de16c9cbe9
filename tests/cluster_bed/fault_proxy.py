"""An HTTP/1.1 proxy that injects an object store's faults between its clients and the
store, request by request (keep-alive connections included):

    fault_proxy.py LISTEN_HOST LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT \\
        [--delay-ms 50] [--slowdown 0.1] [--error 0.02] [--reset 0.02] [--seed 1]

* ``--delay-ms``: every request waits this long before it is forwarded (latency);
* ``--slowdown``: this fraction is answered ``503 SlowDown`` (S3's throttling reply)
  without reaching the store;
* ``--error``: this fraction is answered ``500 InternalError``;
* ``--reset``: this fraction has its connection reset (RST) instead of an answer;
* ``--stall``: this fraction is never answered (the connection stays open, silent:
  a store the client cannot reach though its socket is up);
* ``--lose-answer``: this fraction reaches the store (and takes effect there), but the
  client's connection is reset instead of getting the answer: a reply lost on the way,
  after which the client cannot know whether its write happened;
* ``--only REGEX``: faults are drawn only for requests whose path matches (the others
  pass, delayed);
* ``--every N``: besides, every Nth request gets a fault, SlowDown, 500 and reset in
  turn (deterministic, for a run of few requests);
* ``--ignore-conditions``: PUT requests reach the store without their ``If-None-Match``
  and ``If-Match`` headers: a store that ignores conditional writes (each write
  overwrites whatever is there);
* ``--trace FILE``: every forwarded request is written to FILE as one tab-separated
  line: start and end (seconds since the proxy started), client address, method,
  path, request and response body bytes (for benchmarks that ask where time goes).

Requests are framed by ``Content-Length`` (what S3 clients send), responses by
``Content-Length``, chunked encoding, or the end of the connection. Each injected fault
is logged on stdout as one line ``fault <kind> <method> <path>``, with counts at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import signal
import socket
import struct
import sys
import time
from collections import Counter

COUNTS: Counter = Counter()
T0 = time.monotonic()


async def read_head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def without_headers(head: bytes, names: tuple[bytes, ...]) -> bytes:
    lines = head.split(b"\r\n")
    kept = [line for line in lines[1:] if line.partition(b":")[0].strip().lower() not in names]
    return b"\r\n".join(lines[:1] + kept)


class CountingWriter:
    """Passes what is written to it on to `writer`, counting the bytes."""

    def __init__(self, writer) -> None:
        self.writer = writer
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)
        self.writer.write(data)


class Buffer:
    """Collects what is written to it (a request's body, held until its fault is drawn)."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.chunks.append(data)


async def copy_body(head: bytes, reader: asyncio.StreamReader, writer, response: bool) -> bool:
    """Copies the body that follows `head` (a request's, or a response's that has one);
    False when the connection must end after it."""
    length = header(head, b"content-length")
    if length is not None:
        left = int(length)
        while left:
            chunk = await reader.read(min(left, 1 << 16))
            if not chunk:
                raise ConnectionError("short body")
            writer.write(chunk)
            left -= len(chunk)
        return True
    if (header(head, b"transfer-encoding") or b"").lower() == b"chunked":
        while True:
            size_line = await reader.readuntil(b"\r\n")
            writer.write(size_line)
            size = int(size_line.split(b";")[0], 16)
            data = await reader.readexactly(size + 2)
            writer.write(data)
            if size == 0:
                return True
    if response and not head.split(b" ")[1].startswith((b"204", b"304")):
        # No length: the body runs to the end of the connection.
        while chunk := await reader.read(1 << 16):
            writer.write(chunk)
        return False
    return True


def reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def canned(status: str, code: str) -> bytes:
    body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>injected by fault_proxy</Message></Error>").encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
            f"Connection: keep-alive\r\n\r\n").encode() + body


async def serve(client_r, client_w, args, rng: random.Random) -> None:
    upstream_r = upstream_w = None
    try:
        while True:
            head = await read_head(client_r)
            if head is None:
                return
            method, path = head.split(b" ")[:2]
            if args.ignore_conditions and method == b"PUT":
                head = without_headers(head, (b"if-none-match", b"if-match"))
            # The request's body is read before the fault is drawn, as a server would.
            body = Buffer()
            await copy_body(head, client_r, body, response=False)
            if args.delay_ms:
                await asyncio.sleep(args.delay_ms / 1000)
            COUNTS["requests"] += 1
            kind = None
            if args.only is not None and not re.search(args.only, path.decode()):
                pass  # not eligible: no draw, so the eligible requests' draws are the seed's
            elif args.every and COUNTS["requests"] % args.every == 0:
                kind = ("slowdown", "error", "reset")[COUNTS["requests"] // args.every % 3]
            else:
                draw = rng.random()
                for name, fraction in (("reset", args.reset), ("slowdown", args.slowdown), ("error", args.error),
                                       ("stall", args.stall), ("lose-answer", args.lose_answer)):
                    if draw < fraction:
                        kind = name
                        break
                    draw -= fraction
            if kind is not None:
                COUNTS[kind] += 1
                print(f"fault {kind} {method.decode()} {path.decode()[:120]}", flush=True)
            if kind == "reset":
                reset(client_w)
                return
            if kind == "stall":
                await asyncio.Event().wait()
            if kind in ("slowdown", "error"):
                client_w.write(canned("503 Slow Down", "SlowDown") if kind == "slowdown"
                               else canned("500 Internal Server Error", "InternalError"))
                await client_w.drain()
                continue
            COUNTS["forwarded"] += 1
            started = time.monotonic() - args.delay_ms / 1000
            if upstream_w is None:
                upstream_r, upstream_w = await asyncio.open_connection(args.upstream_host, args.upstream_port)
            upstream_w.write(head + b"".join(body.chunks))
            await upstream_w.drain()
            response = await read_head(upstream_r)
            if response is None or kind == "lose-answer":
                reset(client_w)
                return
            client_w.write(response)
            # A HEAD's answer has a length but no body.
            counted = CountingWriter(client_w)
            keep = method == b"HEAD" or await copy_body(response, upstream_r, counted, response=True)
            await client_w.drain()
            if args.trace is not None:
                peer = client_w.get_extra_info("peername")
                args.trace.write(f"{started - T0:.4f}\t{time.monotonic() - T0:.4f}\t{peer[0] if peer else '?'}\t"
                                 f"{method.decode()}\t{path.decode()}\t{sum(map(len, body.chunks))}\t"
                                 f"{counted.bytes}\n")
            if not keep:
                client_w.close()
                return
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        reset(client_w)
    finally:
        if upstream_w is not None:
            upstream_w.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("listen_host")
    ap.add_argument("listen_port", type=int)
    ap.add_argument("upstream_host")
    ap.add_argument("upstream_port", type=int)
    ap.add_argument("--delay-ms", type=float, default=0)
    ap.add_argument("--slowdown", type=float, default=0)
    ap.add_argument("--error", type=float, default=0)
    ap.add_argument("--reset", type=float, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--every", type=int, default=0)
    ap.add_argument("--stall", type=float, default=0)
    ap.add_argument("--lose-answer", type=float, default=0)
    ap.add_argument("--only", default=None)
    ap.add_argument("--ignore-conditions", action="store_true")
    ap.add_argument("--trace", type=argparse.FileType("w", bufsize=1), default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    server = await asyncio.start_server(lambda r, w: serve(r, w, args, rng), args.listen_host, args.listen_port)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(f"listening on {args.listen_host}:{args.listen_port}", flush=True)
    async with server:
        await stop.wait()
    print("counts " + " ".join(f"{k}={v}" for k, v in sorted(COUNTS.items())), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
