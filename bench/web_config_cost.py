"""What TLS, basic auth and gzip cost per scrape, against the same agent's plain HTTP in the same run.

    .venv/bin/python bench/web_config_cost.py                  # 8 fake GPUs, 300 scrapes per mode
    .venv/bin/python bench/web_config_cost.py --scrapes 1000 --json out.json

Two agents with the same 8 fake GPUs: one plain, one with a web config (TLS with a P-256
certificate, one bcrypt cost-10 user, as install.sh --web-config writes). For each way of
scraping: latency p50/p99 over sequential scrapes, the agent's CPU time per scrape (from
/proc/<pid>/stat, the sampling ticks' own CPU measured idle and subtracted), and the body bytes.
Prometheus scrapes with a kept-alive connection and Accept-Encoding: gzip; the new-connection rows
show what a handshake per scrape would add.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent_overhead import fake_gpu_env, wait_http  # noqa: E402
from benchlib import cpu_seconds, free_port, pct  # noqa: E402

PASSWORD = "bench-password-0123"


def make_agent(tmp: Path, name: str, env: dict[str, str], web: Path | None) -> tuple[subprocess.Popen, int]:
    port = free_port()
    d = tmp / name
    d.mkdir()
    cfg = d / "agent.toml"
    cfg.write_text(
        f'[agent]\ninterval = "1s"\nstate_dir = "{d}/state"\nruntime_dir = "{d}/run"\n'
        'log_level = "warning"\nlog_format = "json"\n'
        f'[http]\nlisten = "127.0.0.1:{port}"\ncontrol_socket = "{d}/run/control.sock"\n'
        + (f'web_config = "{web}"\n' if web else "")
        + '[preemption]\nprovider = "none"\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", "--config", str(cfg)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, port


def web_config(tmp: Path) -> tuple[Path, Path]:
    import bcrypt

    key, crt = tmp / "agent.key", tmp / "agent.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", "/CN=bench",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    web = tmp / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    return web, crt


class Client:
    def __init__(self, port: int, ctx: ssl.SSLContext | None, keep_alive: bool, gzip: bool, auth: bool):
        self.port, self.ctx, self.keep_alive = port, ctx, keep_alive
        self.headers = {"Accept-Encoding": "gzip"} if gzip else {}
        if auth:
            token = base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"
        self.conn: http.client.HTTPConnection | None = None

    def scrape(self) -> int:
        if self.conn is None:
            if self.ctx:
                self.conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=10)
            else:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        self.conn.request("GET", "/metrics", headers=self.headers)
        r = self.conn.getresponse()
        body = r.read()
        assert r.status == 200, r.status
        if not self.keep_alive:
            self.conn.close()
            self.conn = None
        return len(body)


def measure(
    rows: dict[str, tuple[subprocess.Popen, Client]], n: int, idle: dict[int, float], rounds: int = 5
):
    """``n`` scrapes per row, in ``rounds`` chunks with the rows in turn, so that a change in the
    machine's load (it is shared) falls on every row alike."""
    for _, client in rows.values():
        for _ in range(10):
            client.scrape()  # warm-up (and the one bcrypt check, cached from then on)
    lat: dict[str, list[float]] = {label: [] for label in rows}
    cpu = dict.fromkeys(rows, 0.0)
    size = dict.fromkeys(rows, 0)
    for r in range(rounds):
        order = list(rows)[r % len(rows) :] + list(rows)[: r % len(rows)]
        for label in order:
            proc, client = rows[label]
            c0, t0 = cpu_seconds(proc.pid), time.monotonic()
            for _ in range(n // rounds):
                s = time.perf_counter()
                size[label] = client.scrape()
                lat[label].append(time.perf_counter() - s)
            cpu[label] += max(0.0, cpu_seconds(proc.pid) - c0 - idle[proc.pid] * (time.monotonic() - t0))
    return {
        label: {
            "p50_ms": round(statistics.median(v) * 1000, 3),
            "p99_ms": round(pct(v, 0.99) * 1000, 3),
            "agent_cpu_ms_per_scrape": round(cpu[label] / len(v) * 1000, 3),
            "body_bytes": size[label],
        }
        for label, v in lat.items()
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--fake-gpus", type=int, default=8)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tna-webbench-"))
    env = {**os.environ, **fake_gpu_env(args.fake_gpus, tmp)} if args.fake_gpus else {**os.environ}
    web, crt = web_config(tmp)
    plain, pport = make_agent(tmp, "plain", env, None)
    secured, sport = make_agent(tmp, "secured", env, web)
    ctx = ssl.create_default_context(cafile=str(crt))
    try:
        wait_http(f"http://127.0.0.1:{pport}/healthz")
        deadline = time.monotonic() + 30
        while True:
            try:
                Client(sport, ctx, False, False, True).scrape()
                break
            except (OSError, AssertionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        time.sleep(3)
        # the sampling ticks' own CPU, to take out of the per-scrape figures
        idle = {}
        for proc in (plain, secured):
            c0 = cpu_seconds(proc.pid)
            time.sleep(5)
            idle[proc.pid] = (cpu_seconds(proc.pid) - c0) / 5
        rows = {
            "plain HTTP, new connection": (plain, Client(pport, None, False, False, False)),
            "plain HTTP, kept alive": (plain, Client(pport, None, True, False, False)),
            "plain HTTP, kept alive, gzip": (plain, Client(pport, None, True, True, False)),
            "TLS + basic auth, kept alive, gzip": (secured, Client(sport, ctx, True, True, True)),
            "TLS + basic auth, kept alive": (secured, Client(sport, ctx, True, False, True)),
            "TLS + basic auth, new connection, gzip": (secured, Client(sport, ctx, False, True, True)),
        }
        figures = measure(rows, args.scrapes, idle)
    finally:
        for p in (plain, secured):
            p.terminate()
        for p in (plain, secured):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    print(
        f"\n{args.fake_gpus} fake GPUs, {args.scrapes} sequential scrapes per row in 5 interleaved rounds\n"
    )
    print(f"{'':50}{'p50 ms':>9}{'p99 ms':>9}{'CPU ms/scrape':>15}{'bytes':>9}")
    for label, f in figures.items():
        print(
            f"{label:50}{f['p50_ms']:>9.2f}{f['p99_ms']:>9.2f}"
            f"{f['agent_cpu_ms_per_scrape']:>15.2f}{f['body_bytes']:>9}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
