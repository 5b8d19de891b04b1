"""The other rank of the synthetic trainer: for every "gradient" it receives it sends one of the same
size back, like one step of an all-reduce between two ranks. Ends by itself after ``--seconds``.

    python -m lab.peer --listen 198.19.120.2:29500 --seconds 300
"""

from __future__ import annotations

import argparse
import selectors
import socket
import struct
import threading
import time

HEADER = struct.Struct("!Q")
CHUNK = 1 << 16


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    parts = []
    while n:
        b = sock.recv(min(n, CHUNK))
        if not b:
            return None
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def drain(sock: socket.socket, n: int) -> bool:
    while n:
        b = sock.recv(min(n, CHUNK))
        if not b:
            return False
        n -= len(b)
    return True


def exchange(sock: socket.socket, nbytes: int, payload: bytes = b"") -> None:
    """The trainer's side: send ``nbytes`` of gradient, receive as many back."""
    sock.sendall(HEADER.pack(nbytes))
    block = payload or bytes(CHUNK)
    left = nbytes
    while left:
        n = min(left, len(block))
        sock.sendall(block[:n])
        left -= n
    head = recv_exact(sock, HEADER.size)
    if head is None or not drain(sock, HEADER.unpack(head)[0]):
        raise ConnectionError("the peer went away")


def serve_one(conn: socket.socket, deadline: float) -> None:
    conn.settimeout(max(1.0, deadline - time.monotonic()))
    zeros = bytes(CHUNK)
    with conn:
        while time.monotonic() < deadline:
            head = recv_exact(conn, HEADER.size)
            if head is None:
                return
            n = HEADER.unpack(head)[0]
            if not drain(conn, n):
                return
            conn.sendall(HEADER.pack(n))
            while n:
                k = min(n, CHUNK)
                conn.sendall(zeros[:k])
                n -= k


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True, help="HOST:PORT")
    ap.add_argument("--seconds", type=float, required=True, help="exit after this long")
    args = ap.parse_args()
    host, _, port = args.listen.rpartition(":")
    deadline = time.monotonic() + args.seconds
    srv = socket.create_server((host, int(port)), reuse_port=False)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ)
    while time.monotonic() < deadline:
        if sel.select(timeout=0.5):
            conn, _ = srv.accept()
            threading.Thread(target=serve_one, args=(conn, deadline), daemon=True).start()
    srv.close()


if __name__ == "__main__":
    main()
