"""The soak's moving parts (bench/soak.py drives them): a procfs tree that can be garbled, the alert
ledger in the agent's own spool, the fake chat services across outages, and the agent process.

Imported by bench/soak.py as ``soak_rig`` (``python bench/soak.py`` puts this folder on sys.path).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.alerts.message import Message  # noqa: E402
from agent.alerts.services.webhook import alert as webhook_alert  # noqa: E402
from agent.alerts.spool import _SCHEMA  # noqa: E402
from agent.core.statefile import write_atomic  # noqa: E402
from tests.alerts.fake_chat import Bot, FakeChat  # noqa: E402

# /proc files the collectors parse that the rig copies (so it can garble them); the rest of /proc,
# every pid included, is a symlink to the real thing: the trainer stays findable and signallable
COPIED = ("stat", "meminfo", "loadavg", "diskstats", "pressure/cpu", "pressure/io", "pressure/memory")
NET_COPIED = ("dev",)


class ProcTree:
    """``<root>/`` stands in for /proc: copies of :data:`COPIED` refreshed from the real /proc (so the
    counters move), garbled on demand; symlinks for everything else."""

    def __init__(self, root: Path, rng: random.Random) -> None:
        self.root = root
        self.rng = rng
        self.garbled_until = 0.0
        (root / "pressure").mkdir(parents=True)
        (root / "net").mkdir()
        self.refresh()

    def _link(self, name: str, target: str) -> None:
        p = self.root / name
        if not p.is_symlink() and not p.exists():
            os.symlink(target, p)

    def refresh(self) -> None:
        real = set(os.listdir("/proc"))
        for name in real:
            if name not in ("net", "pressure") and name not in COPIED:
                self._link(name, f"/proc/{name}")
        for name in os.listdir(self.root):
            if name.isdigit() and name not in real:
                os.unlink(self.root / name)  # a pid that exited
        for name in os.listdir("/proc/net"):
            if name not in NET_COPIED:
                self._link(f"net/{name}", f"/proc/net/{name}")
        garbled = time.monotonic() < self.garbled_until
        for rel in (*COPIED, *(f"net/{n}" for n in NET_COPIED)):
            try:
                text = Path("/proc", rel).read_bytes()
            except OSError:
                continue
            write_atomic(self.root / rel, self._garble(text) if garbled else text)

    def garble(self, seconds: float) -> None:
        self.garbled_until = time.monotonic() + seconds
        self.refresh()

    def _garble(self, text: bytes) -> bytes:
        """What a flaky reader, a half-written buffer or a kernel quirk could hand the parsers."""
        how = self.rng.choice(("truncate", "bytes", "fields", "empty", "numbers"))
        if how == "truncate":
            return text[: self.rng.randrange(max(1, len(text)))]
        if how == "bytes":
            b = bytearray(text)
            for _ in range(max(1, len(b) // 20)):
                b[self.rng.randrange(len(b))] = self.rng.randrange(256)
            return bytes(b)
        if how == "fields":
            lines = text.split(b"\n")
            return b"\n".join(b" ".join(ln.split()[: self.rng.randrange(1, 4)]) for ln in lines)
        if how == "numbers":
            return re.sub(rb"\d+", lambda m: b"-" + m.group() * 3, text)
        return b""


# --- the alert ledger ------------------------------------------------------------------------------

LEDGER = """
CREATE TABLE IF NOT EXISTS soak_ledger (id INTEGER PRIMARY KEY, channel TEXT NOT NULL, message TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS soak_ledger_add AFTER INSERT ON queue
BEGIN INSERT INTO soak_ledger (id, channel, message) VALUES (NEW.id, NEW.channel, NEW.message); END;
"""


def install_ledger(spool: Path) -> None:
    """A trigger in the agent's own spool records every alert it enqueues, in the same transaction:
    an alert that reached the spool is in the ledger, across kill -9 too."""
    spool.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(spool)
    db.executescript(_SCHEMA + LEDGER)
    db.close()


def read_ledger(spool: Path) -> tuple[list[tuple[int, str, Message]], int]:
    """Every alert ever enqueued (id, channel, message) and how many still wait in the spool."""
    db = sqlite3.connect(f"file:{spool}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT id, channel, message FROM soak_ledger ORDER BY id").fetchall()
        waiting = db.execute("SELECT COUNT(*) FROM queue").fetchone()[0]
    finally:
        db.close()
    return [(i, ch, Message.from_dict(json.loads(m))) for i, ch, m in rows], int(waiting)


def identity(msg: Message) -> tuple[str, str, str, str]:
    """One alert as the Alertmanager-format receiver sees it: fingerprint, status, start, end."""
    a = webhook_alert(msg, "")
    return a["fingerprint"], a["status"], a["startsAt"], a["endsAt"]


# --- chat services that can go away ----------------------------------------------------------------


class Chat:
    """The fake services on one fixed port; ``outage()`` stops listening, ``back()`` listens again
    with the same robots. Bots of every incarnation are kept for the accounting."""

    SERVICES = ("receiver", "dingtalk")

    def __init__(self) -> None:
        self.chat = FakeChat().start()
        self.port = self.chat.port
        self.secret = "SEC" + "ab" * 30
        self.bots: dict[str, list[Bot]] = {s: [] for s in self.SERVICES}
        self.tokens: dict[str, str] = {}
        self.out = False
        self._add_bots()

    def _add_bots(self) -> None:
        for s in self.SERVICES:
            secret = self.secret if s == "dingtalk" else None
            bot = self.chat.add(s, secret=secret, token=self.tokens.get(s))
            self.tokens[s] = bot.token
            self.bots[s].append(bot)

    def url(self, service: str) -> str:
        return self.bots[service][-1].url

    def outage(self) -> bool:
        if self.out:
            return False
        self.chat.stop()
        self.out = True
        return True

    def back(self) -> None:
        if self.out:
            left = {s: list(self.bots[s][-1].script) for s in self.SERVICES}
            self.chat = FakeChat(port=self.port).start()
            self._add_bots()
            for s, answers in left.items():  # scripted errors not yet met still come
                self.bots[s][-1].script.extend(answers)
            self.out = False

    def script(self, service: str, answers: list[tuple[int, dict[str, str], str]]) -> None:
        """The next requests to ``service`` get these answers (each service's own error shape)."""
        self.bots[service][-1].script.extend(answers)

    def accepted(self, service: str) -> list[dict[str, Any]]:
        return [p for b in self.bots[service] for p in b.accepted]

    def refused(self) -> int:
        """Requests the services answered with an error (a 429, a 5xx, DingTalk's errcode)."""
        return sum(len(b.seen) - len(b.accepted) for bots in self.bots.values() for b in bots)

    def stop(self) -> None:
        if not self.out:
            self.chat.stop()


# --- the agent -------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class Agent:
    def __init__(self, tmp: Path, config: Path, env: dict[str, str], socket: str, port: int) -> None:
        self.tmp, self.config, self.env, self.socket, self.port = tmp, config, env, socket, port
        self.proc: subprocess.Popen[bytes] | None = None
        self.lifetimes = 0
        self.hangs = 0  # starts that did not serve within 30 s
        self.log = open(tmp / "agent.log", "ab")  # noqa: SIM115 - lives as long as the soak

    def start(self) -> None:
        """Start the agent; one that does not serve within 30 s is counted in ``hangs``, dumps its
        threads' stacks into the log (faulthandler, on SIGABRT) and is started again."""
        for _ in range(3):
            if self._start_once():
                return
            self.hangs += 1
            assert self.proc is not None
            self.proc.send_signal(signal.SIGABRT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        raise RuntimeError(f"the agent did not serve three times in a row; see {self.tmp / 'agent.log'}")

    def _start_once(self) -> bool:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent", "run", "--config", str(self.config)],
            cwd=REPO,
            env={**self.env, "PYTHONFAULTHANDLER": "1"},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.lifetimes += 1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the agent exited {self.proc.returncode}; see {self.tmp / 'agent.log'}")
            if self.get("/healthz") is not None:
                return True
            time.sleep(0.1)
        return False

    def get(self, path: str, timeout: float = 5) -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as r:
                return r.read().decode()
        except OSError as e:
            if getattr(e, "code", None) == 503:
                return ""
            return None

    def status(self) -> dict[str, Any]:
        """The full status, over the control socket (the TCP one is redacted)."""
        from agent.runtime.control import control_request

        try:
            code, body = asyncio.run(control_request(self.socket, "GET", "/status", timeout=10))
        except (ConnectionError, OSError, TimeoutError):
            return {}
        return body if code == 200 and isinstance(body, dict) else {}

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def hup(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGHUP)

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
