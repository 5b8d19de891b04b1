"""The metrics port under abuse: while flood.py (its own process) trickles, oversizes, piles up
idle connections or bursts concurrent scrapes, a Prometheus-like client keeps scraping an 8-GPU
agent over TLS with basic auth, and its scrapes must stay correct and fast: each flood's p99
within 2x of the quiet p99 measured right around it. Every flood is bounded (seconds, connections).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from webtls import basic, bcrypt_hash, client_context, make_pki

from agent.devtools.fake_nvml import FakeNvml, device, library_dir

# its p99s are compared within 2x: run alone, after the parallel phase (tests/phases.py)
pytestmark = [pytest.mark.slow, pytest.mark.serial]

HERE = Path(__file__).resolve().parent
PHASE_SECONDS = 8.0  # ~600 scrapes a phase: a p99 that a handful of scheduler hiccups cannot move
ROUNDS = 5
GPUS = 8


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(0.99 * (len(s) - 1)))]


class Scraper:
    """Sequential scrapes on a kept-alive connection, reconnecting when the server closed it, as
    Prometheus does; every scrape is checked (status, size, and a full parse every tenth)."""

    def __init__(self, port: int, ctx, headers: dict[str, str]) -> None:
        import http.client

        self.port, self.ctx, self.headers = port, ctx, headers
        self._http = http.client
        self.conn = None
        self.reconnects = 0

    def _connection(self):
        if self.conn is None:
            self.conn = self._http.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=10)
            self.reconnects += 1
        return self.conn

    def scrape(self, parse: bool) -> float:
        t0 = time.perf_counter()
        for attempt in (1, 2):
            try:
                conn = self._connection()
                conn.request("GET", "/metrics", headers=self.headers)
                r = conn.getresponse()
                body = r.read()
                break
            except (OSError, self._http.HTTPException):
                self.conn = None
                if attempt == 2:
                    raise
        elapsed = time.perf_counter() - t0
        assert r.status == 200, (r.status, body[:200])
        assert len(body) > 20_000
        if parse:
            fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
            util = fams["training_node_gpu_utilization_ratio"]
            assert len({s.labels["gpu"] for s in util.samples}) == GPUS
        return elapsed

    def run(self, seconds: float) -> list[float]:
        out: list[float] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            out.append(self.scrape(parse=len(out) % 10 == 0))
            time.sleep(0.005)  # a client that scrapes back to back, not a busy loop
        return out


def test_scrapes_stay_fast_and_correct_under_floods(agent_factory, tmp_path):
    pki = make_pki(tmp_path / "pki")
    nvml = FakeNvml(tmp_path / "gpus.json", gpus=[device(i, utilization_gpu=90) for i in range(GPUS)])
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
        f"basic_auth_users:\n  prometheus: '{bcrypt_hash('scrape-pw', cost=10)}'\n"
    )
    a = agent_factory(
        {"agent": {"interval": "1s"}, "http": {"web_config": str(web), "header_timeout": "3s"}},
        env={"LD_LIBRARY_PATH": str(library_dir()), "FAKE_NVML_STATE": str(nvml.path)},
        start=False,
    ).start(wait=False)
    a.wait_for(lambda: "metrics port ready" in a.log(), timeout=30, what="agent up")
    scraper = Scraper(a.port, client_context(pki), basic("prometheus", "scrape-pw"))
    a.wait_for(lambda: _quiet_ok(scraper), timeout=30, what="8 GPUs exported")

    figures: dict[str, dict[str, object]] = {}
    quiet = scraper.run(PHASE_SECONDS)
    for mode in ("slowloris", "oversized", "idle", "burst"):
        rounds = []
        # the machine is shared: a round whose p99 a neighbour's load spoiled is measured again,
        # up to ROUNDS times; every round's flood must still meet its limits and every scrape pass
        for _ in range(ROUNDS):
            during, flood = _flood_round(a.port, pki, mode, scraper)
            after = scraper.run(PHASE_SECONDS)
            ref = statistics.mean([p99(quiet), p99(after)])
            quiet = after
            rounds.append(
                {
                    "quiet_p99_ms": round(ref * 1000, 2),
                    "flood_p99_ms": round(p99(during) * 1000, 2),
                    "flood_p50_ms": round(statistics.median(during) * 1000, 2),
                    "scrapes": len(during),
                    "flood": flood,
                }
            )
            _check_flood(mode, flood)
            if rounds[-1]["flood_p99_ms"] <= 2 * rounds[-1]["quiet_p99_ms"]:
                break
        figures[mode] = {"rounds": rounds, **rounds[-1]}
    status = a.status()["http"]
    figures["server"] = {k: status[k] for k in ("connections_accepted", "connections_closed")}
    figures["reconnects"] = scraper.reconnects
    print("abuse figures:", json.dumps(figures, indent=1))

    closed = status["connections_closed"]
    assert closed.get("evicted", 0) > 0 and closed.get("header_too_large", 0) > 0
    for mode in ("slowloris", "oversized", "idle", "burst"):
        best = figures[mode]
        assert best["flood_p99_ms"] <= 2 * best["quiet_p99_ms"], (mode, best)


def _flood_round(port: int, pki, mode: str, scraper: Scraper) -> tuple[list[float], dict[str, int]]:
    cmd = [sys.executable, str(HERE / "flood.py"), "--port", str(port), "--mode", mode]
    cmd += ["--seconds", str(PHASE_SECONDS + 1), "--tls", str(pki.ca), "--auth", "prometheus:scrape-pw"]
    # niced: on a shared test machine the flood's own CPU must not be what slows the agent
    proc = subprocess.Popen(["nice", "-n", "15", *cmd], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # the flood is under way before measuring
        during = scraper.run(PHASE_SECONDS - 1)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return during, json.loads(out.strip().splitlines()[-1])


def _check_flood(mode: str, flood: dict[str, int]) -> None:
    """The flood really happened and met the limit meant for it."""
    if mode in ("slowloris", "idle"):  # closed by the header timeout (3 s) or evicted sooner
        assert flood.get("closed_by_server", 0) > 100, f"the flood did not happen as meant: {flood}"
        assert flood["max_held_ms"] <= 4500, flood
    elif mode == "oversized":
        statuses = {k for k in flood if k.startswith("status_")}
        assert statuses and statuses <= {"status_400", "status_431"}, flood
    else:
        assert not flood.get("scrape_failed"), flood
        assert flood.get("status_200", 0) >= 0.8 * 16 * flood["bursts"], flood


def _quiet_ok(scraper: Scraper) -> bool:
    try:
        scraper.scrape(parse=True)
        return True
    except (AssertionError, KeyError, OSError):
        return False
