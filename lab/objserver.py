"""A small object store for the lab's streaming jobs: ``GET /obj/<i>`` returns object ``i``, of
``--object-bytes`` (or ``?bytes=N``) deterministic bytes, over keep-alive HTTP/1.1, as an S3 or OSS
endpoint serves a dataset's shards. Run inside the peer's network namespace, behind the shaped veth,
so every byte the job reads crosses the capped link. Ends by itself after ``--seconds``.

    python -m lab.objserver --listen 198.19.120.2:29500 --object-bytes 1048576 --seconds 300
"""

from __future__ import annotations

import argparse
import http.client
import random
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

BLOCK = 1 << 16
_PATH = re.compile(r"/obj/(\d+)")


def block(i: int) -> bytes:
    """The 64 KiB an object ``i`` repeats: cheap to make, different per object."""
    return random.Random(i).randbytes(BLOCK)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection per client, as a loader worker keeps
    object_bytes = 1 << 20

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        m = _PATH.fullmatch(url.path)
        if m is None:
            self.send_error(404)
            return
        size = int(parse_qs(url.query).get("bytes", [self.object_bytes])[0])
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        data, left = block(int(m.group(1))), size
        try:
            while left:
                n = min(left, BLOCK)
                self.wfile.write(data[:n])
                left -= n
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the job ended mid-object: its workers are gone

    def log_message(self, format: str, *args: object) -> None:
        pass  # a request a few times a second: the lab's logs stay readable


class ObjectClient:
    """One persistent connection to the server, as each data-loader worker of a streaming dataset
    keeps its own; reconnects once if the server closed it."""

    def __init__(self, address: str, timeout: float = 60.0) -> None:
        host, _, port = address.rpartition(":")
        self.host, self.port, self.timeout = host, int(port), timeout
        self.conn: http.client.HTTPConnection | None = None

    def get(self, i: int, nbytes: int | None = None) -> bytes:
        path = f"/obj/{i}" + (f"?bytes={nbytes}" if nbytes else "")
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request("GET", path)
                resp = self.conn.getresponse()
                body = resp.read()
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
                continue
            if resp.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {resp.status}")
            return body
        raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="the lab's HTTP object server")
    ap.add_argument("--listen", required=True, help="HOST:PORT")
    ap.add_argument("--object-bytes", type=int, default=1 << 20)
    ap.add_argument("--seconds", type=float, required=True, help="exit after this long")
    args = ap.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    Handler.object_bytes = args.object_bytes
    srv = ThreadingHTTPServer((host, int(port)), Handler)
    srv.daemon_threads = True
    threading.Timer(args.seconds, srv.shutdown).start()
    srv.serve_forever(poll_interval=0.5)
    srv.server_close()


if __name__ == "__main__":
    main()
