"""TLS handshakes on the metrics port are started from a token bucket, in accept order, and a
connection closed before its turn costs no handshake: the gate on its own, then the real daemon."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time

from webtls import client_context, make_pki

from agent.exporter.handshake import HandshakeGate


class Conn:
    def __init__(self, n: int, started: list[tuple[int, float]]) -> None:
        self.n, self.started = n, started

    def begin_tls(self) -> None:
        self.started.append((self.n, time.monotonic()))


def test_the_gate_starts_a_burst_at_once_then_at_the_rate_in_accept_order():
    async def scenario() -> tuple[list[tuple[int, float]], float, int]:
        started: list[tuple[int, float]] = []
        gate = HandshakeGate(rate=50, burst=4)
        t0 = time.monotonic()
        conns = [Conn(i, started) for i in range(20)]
        for c in conns:
            gate.enqueue(c)
        gate.discard(conns[10])  # evicted while it waited: never started
        waiting_then = gate.waiting
        while len(started) < 19 and time.monotonic() - t0 < 30:
            await asyncio.sleep(0.01)
        gate.close()
        return started, t0, waiting_then

    started, t0, waiting_then = asyncio.run(scenario())
    assert waiting_then == 15
    assert [n for n, _ in started] == [i for i in range(20) if i != 10]
    assert all(t - t0 < 0.01 for _, t in started[:4])  # the burst: no waiting at all
    # a token every 1/50 s: a load can only delay the later ones, never hurry them
    for k, (_, t) in enumerate(started[4:], start=1):
        assert t - t0 >= k / 50 * 0.95, (k, t - t0)


def test_connections_evicted_before_their_turn_cost_no_handshake(agent_factory, tmp_path):
    pki = make_pki(tmp_path / "pki")
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n")
    a = agent_factory(
        {
            "http": {
                "web_config": str(web),
                "max_connections": 8,
                "tls_handshake_rate": 2,
                "tls_handshake_burst": 1,
                "header_timeout": "20s",
            }
        },
        start=False,
    ).start(wait=False)
    a.wait_for(lambda: "metrics port ready" in a.log(), timeout=30, what="agent up")
    t0 = time.monotonic()
    silent = [socket.create_connection(("127.0.0.1", a.port)) for _ in range(40)]
    try:
        # a real client behind 40 silent ones: it is served, once its turn comes
        ctx = client_context(pki)
        raw = socket.create_connection(("127.0.0.1", a.port), timeout=20)
        with raw, ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            reply = tls.recv(100)
        assert reply.startswith(b"HTTP/1.1 "), reply
        http = a.status()["http"]
        elapsed = time.monotonic() - t0
    finally:
        for s in silent:
            s.close()
    hs = http["tls_handshakes"]
    # 41 connections in a table of 8: those evicted before their turn never had a handshake, and
    # no more were started than the bucket allows (its one token, then two a second)
    assert http["connections_accepted"] >= 41, http
    assert http["connections_closed"]["evicted"] >= 30, http
    assert hs["started"] <= 1 + 2 * elapsed, (hs, elapsed)
    assert hs["deferred"] >= 1, hs


def test_a_request_sent_right_after_the_handshake_is_not_lost(agent_factory, tmp_path):
    """TLS 1.3 clients send the request with their Finished; asyncio delivers it before start_tls
    returns, and it must reach the app (found when the gate first replaced create_server's ssl=)."""
    pki = make_pki(tmp_path / "pki")
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n")
    a = agent_factory({"http": {"web_config": str(web)}}, start=False).start(wait=False)
    a.wait_for(lambda: "metrics port ready" in a.log(), timeout=30, what="agent up")
    ctx = client_context(pki)
    ctx.maximum_version = ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    for _ in range(20):
        raw = socket.create_connection(("127.0.0.1", a.port), timeout=10)
        # no wait for the server's reply to the handshake: the request rides right behind it
        with raw, ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            reply = b""
            while chunk := tls.recv(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 200") or reply.startswith(b"HTTP/1.1 503"), reply[:80]
