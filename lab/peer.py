"""The other rank of the synthetic trainer: it sends every "gradient" it receives back as it arrives,
like one step of an all-reduce between two ranks. Ends by itself after ``--seconds``.

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


def exchange(sock: socket.socket, nbytes: int) -> None:
    """The trainer's side of one step: send ``nbytes`` of gradient while receiving as many back,
    both directions at once, as a ring all-reduce keeps a full-duplex link busy both ways."""
    sender = threading.Thread(target=_send, args=(sock, nbytes), daemon=True)
    sender.start()
    head = recv_exact(sock, HEADER.size)
    ok = head is not None and drain(sock, HEADER.unpack(head)[0])
    sender.join()
    if not ok:
        raise ConnectionError("the peer went away")


def _send(sock: socket.socket, nbytes: int) -> None:
    sock.sendall(HEADER.pack(nbytes))
    block = bytes(CHUNK)
    left = nbytes
    while left:
        n = min(left, CHUNK)
        sock.sendall(block[:n])
        left -= n


def serve_one(conn: socket.socket, deadline: float) -> None:
    """Echo each gradient back chunk by chunk as it arrives."""
    conn.settimeout(max(1.0, deadline - time.monotonic()))
    with conn:
        while time.monotonic() < deadline:
            head = recv_exact(conn, HEADER.size)
            if head is None:
                return
            n = HEADER.unpack(head)[0]
            conn.sendall(head)
            while n:
                b = conn.recv(min(n, CHUNK))
                if not b:
                    return
                conn.sendall(bytes(len(b)))
                n -= len(b)


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
