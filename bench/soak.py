"""Fault soak: the real agent on fake GPUs, with a trainer, the metadata simulator and fake chat
services, while faults arrive on a seeded schedule. Then it checks what must hold through all of it.

    .venv/bin/python bench/soak.py --seconds 75 --seed 1           # the short run `make test` does
    nice -n 10 .venv/bin/python bench/soak.py --seconds 1800 --seed 7 --json   # the long one

Faults: metadata 5xx, timeouts (slow answers past the agent's 2 s), garbage bodies and flapping
(connections dropped on and off); chat 429s, 5xx and outages (nothing listening); a GPU lost and
restored; garbled /proc text (the agent reads a procfs tree whose copied files the soak garbles);
SIGHUP storms; kill -9 and restart. Spot notices come and go among them.

Checks (exit status 1 when one fails):
- every alert the agent enqueued (a trigger in its own sqlite spool keeps a ledger) is delivered
  once: the Alertmanager-format receiver got each alert's identity exactly as often as it was
  enqueued, DingTalk (digests counted) as many alerts; nothing still waits; none dropped;
- exactly one checkpoint signal reached the trainer per notice, inside that notice's lifetime;
- every supervised task that ran at the start runs at the end;
- RSS of the last agent process, from its warm-up to the end, grows by less than ``--rss-slack``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from benchlib import free_port
from soak_rig import REPO, Agent, Chat, ProcTree, identity, install_ledger, read_ledger, rss_kib

from agent.devtools.fake_nvml import FakeNvml, library_dir
from agent.devtools.simprocess import MetadataSimProcess
from tests.alerts.alerts_support import represented
from tests.alerts.fake_chat import dingtalk_reply

GPUS = 4
# the agent's log lines for rows a kill -9 left in flight (agent/alerts/delivery.py, recover)
CUT_OFF_COUNTED = "alert delivery cut off by a restart; not sent again, the service may or may not show it"
CUT_OFF_RESENT = "sending again alerts whose delivery a restart cut off; the receiver drops repeats"
FAULTS = (
    "meta_5xx", "meta_timeout", "meta_garbage", "meta_flap", "chat_429", "chat_5xx", "chat_outage",
    "gpu_lost", "proc_garbled", "sighup_storm", "kill9",
)  # fmt: skip


@dataclass
class Soak:
    seconds: float
    seed: int
    tmp: Path
    rng: random.Random = field(init=False)
    queue: list[tuple[float, int, str, dict[str, Any]]] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    notices: list[dict[str, Any]] = field(default_factory=list)  # id, added, canceled (monotonic)
    rss: list[tuple[int, float, int]] = field(default_factory=list)  # lifetime, t, KiB
    hups: int = 0
    hups_last: int = 0  # SIGHUPs the last agent process took
    cut_off: dict[str, list[int]] = field(default_factory=lambda: {"counted": [], "resent": []})
    seen: list[float] = field(default_factory=list)  # wall times of the agent's "preemption notice"
    rss_slack_kib: int = 8 * 1024

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.t0 = time.monotonic()
        self.wall0 = time.time()  # the trainer stamps its events with wall time
        self._n = 0

    def at(self, t: float, action: str, **args: Any) -> None:
        self._n += 1
        heapq.heappush(self.queue, (self.t0 + t, self._n, action, args))

    # --- set-up ------------------------------------------------------------------------------------

    def start(self) -> None:
        tmp = self.tmp
        self.sim = MetadataSimProcess(tmp / "sim.log", "alibaba")
        self.chat = Chat()
        self.fake = FakeNvml(tmp / "nvml.json", gpus=GPUS)
        self.proc = ProcTree(tmp / "proc", self.rng)
        run = tmp / "run"
        self.trainer_events = tmp / "trainer.jsonl"
        self.trainer_log = open(tmp / "trainer.log", "wb")  # noqa: SIM115
        import subprocess

        self.trainer = subprocess.Popen(
            [sys.executable, "-m", "agent.devtools.demo_trainer", "--checkpoint-dir", str(tmp / "ckpt"),
             "--request-file", str(run / "checkpoint" / "request.json"), "--keep-going",
             "--save-seconds", "0.3", "--step-seconds", "0.1", "--print-every", "1000",
             "--events", str(self.trainer_events)],
            cwd=REPO, stdout=self.trainer_log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        for i in range(GPUS):
            self.fake.device(i).update(
                utilization_gpu=90, processes=[{"pid": self.trainer.pid, "used_memory_bytes": 1 << 34}]
            )
        self.fake.write()
        install_ledger(tmp / "state" / "alerts.sqlite3")
        port = free_port()
        socket = str(run / "control.sock")
        config = tmp / "agent.toml"
        config.write_text(f"""
[agent]
interval = "500ms"
procfs = "{self.proc.root}"
state_dir = "{tmp / "state"}"
runtime_dir = "{run}"
log_format = "json"
[http]
listen = "127.0.0.1:{port}"
control_socket = "{socket}"
[preemption]
provider = "alibaba"
endpoint = "{self.sim.url}"
poll_interval = "500ms"
[trainer]
discover = ["nvml"]
[alerts]
backoff_initial = "200ms"
backoff_max = "2s"
flush_timeout = "1s"
[[alerts.webhooks]]
name = "hook"
type = "webhook"
url = "{self.chat.url("receiver")}"
[[alerts.webhooks]]
name = "ding"
type = "dingtalk"
url = "{self.chat.url("dingtalk")}"
secret = "{self.chat.secret}"
""")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "LD_LIBRARY_PATH": str(library_dir()),
               "FAKE_NVML_STATE": str(self.fake.path)}  # fmt: skip
        self.agent = Agent(tmp, config, env, socket, port)
        self.agent.start()

    # --- the schedule ------------------------------------------------------------------------------

    def plan(self) -> None:
        """Faults every 1-4 s between a warm-up and a quiet tail, each kind at least once (in a random
        order), then random picks; kill -9 only in the first half, so that the last process lives
        long enough for its RSS to mean something. Notices one at a time, in slots."""
        warm, tail = 8.0, 20.0
        end = self.seconds - tail
        half = warm + (end - warm) / 2
        order = self.rng.sample(FAULTS, len(FAULTS))
        order.remove("kill9")
        order.insert(self.rng.randrange(3), "kill9")  # early, so the short run has one
        t = warm
        while t < end:
            kind = order.pop(0) if order else self.rng.choice(FAULTS)
            if kind == "kill9" and t > half:
                kind = "sighup_storm"
            self.at(t, kind)
            t += self.rng.uniform(1.0, 4.0)
        slots = max(1, int((end - warm) / 40))
        slot = (end - warm - 4) / slots
        for k in range(slots):
            self.at(warm + 2 + k * slot, "notice", life=self.rng.uniform(8, max(9, slot - 8)))

    def act(self, action: str, args: dict[str, Any]) -> None:
        rng, now = self.rng, time.monotonic()
        if action in FAULTS:
            self.faults[action] += 1
        d = rng.uniform(1.5, 6.0)
        if action == "meta_5xx":
            self.sim.control(
                "/fault", {"kind": "status", "status": rng.choice([500, 502, 503]), "seconds": d}
            )
        elif action == "meta_timeout":
            self.sim.control("/fault", {"kind": "slow", "delay": 4, "seconds": d})
        elif action == "meta_garbage":
            self.sim.control("/fault", {"kind": rng.choice(["garbage", "empty"]), "seconds": d})
        elif action == "meta_flap":
            for k in range(rng.randint(3, 6)):
                self.at(now - self.t0 + 1.2 * k, "meta_drop", seconds=0.6)
        elif action == "meta_drop":
            self.sim.control("/fault", {"kind": "drop", "seconds": args["seconds"]})
        elif action == "chat_429":
            self.chat.script("receiver", [(429, {"Retry-After": "1"}, "rate limited")] * 2)
            self.chat.script("dingtalk", [dingtalk_reply(130101)] * 2)
        elif action == "chat_5xx":
            for service in self.chat.SERVICES:
                self.chat.script(service, [(rng.choice([500, 502, 503]), {}, "unavailable")] * 3)
        elif action == "chat_outage":
            if self.chat.outage():
                self.at(now - self.t0 + d, "chat_back")
        elif action == "chat_back":
            self.chat.back()
        elif action == "gpu_lost":
            i = rng.randrange(GPUS)
            self.fake.set(i, lost=True)
            self.at(now - self.t0 + d, "gpu_back", index=i)
        elif action == "gpu_back":
            self.fake.set(args["index"], lost=False)
        elif action == "proc_garbled":
            self.proc.garble(d)
        elif action == "sighup_storm":
            for _ in range(rng.randint(3, 8)):
                if self.agent.alive():
                    self.agent.hup()
                    self.hups += 1
                    self.hups_last += 1
                time.sleep(0.05)
        elif action == "kill9":
            self.hups_last = 0
            self.agent.kill9()
            time.sleep(rng.uniform(0.2, 1.5))
            self.agent.start()
        elif action == "notice":
            ev = self.sim.control("/notice", {"kind": "spot-termination", "seconds": 600})
            self.notices.append({"id": ev["id"], "added": now, "canceled": None})
            self.at(now - self.t0 + args["life"], "cancel", id=ev["id"])
        elif action == "cancel":
            self.sim.control("/cancel", {"id": args["id"]})
            next(n for n in self.notices if n["id"] == args["id"])["canceled"] = now

    def _log_counts(self) -> Counter[str]:
        """What the agent's own log says about delivery, across every process and reload (its
        counters start over at each)."""
        out: Counter[str] = Counter()
        for line in (self.tmp / "agent.log").read_text(errors="replace").splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            e = d.get("event")
            if e == "alert delivered":
                out["sent"] += d.get("alerts", 1)
            elif e == "alert delivery failed; will retry":
                out["retried"] += 1
            elif e in ("alert refused by the service; not retrying", "alert queue full; dropped the oldest"):
                out["failed"] += 1
            elif e == CUT_OFF_COUNTED:
                out["cut_off_counted"] += len(d["ids"])
                self.cut_off["counted"].extend(d["ids"])
            elif e == CUT_OFF_RESENT:
                out["cut_off_resent"] += len(d["ids"])
                self.cut_off["resent"].extend(d["ids"])
            elif e == "preemption notice":
                self.seen.append(datetime.fromisoformat(d["timestamp"]).timestamp())
        return out

    def run(self) -> None:
        self.plan()
        self.initial_tasks = self._running_tasks()
        end = self.t0 + self.seconds
        last_sample = 0.0
        while self.queue or time.monotonic() < end:
            now = time.monotonic()
            while self.queue and self.queue[0][0] <= now:
                _, _, action, args = heapq.heappop(self.queue)
                self.act(action, args)
            self.proc.refresh()
            if now - last_sample >= 2 and self.agent.alive():
                last_sample = now
                assert self.agent.proc is not None
                if (kib := rss_kib(self.agent.proc.pid)) is not None:
                    self.rss.append((self.agent.lifetimes, now - self.t0, kib))
            time.sleep(0.3)

    def _running_tasks(self) -> set[str]:
        return {n for n, t in self.agent.status().get("tasks", {}).items() if t.get("running")}

    # --- the end -----------------------------------------------------------------------------------

    def settle(self, limit: float = 60.0) -> None:
        """Faults off; wait until the spool is empty and the ledger has stopped growing."""
        self.sim.control("/clear-faults")
        self.chat.back()
        self.proc.garbled_until = 0.0
        for i in range(GPUS):
            self.fake.set(i, lost=False)
        for bots in self.chat.bots.values():
            bots[-1].script.clear()
        deadline, stable, last = time.monotonic() + limit, 0, -1
        while time.monotonic() < deadline and stable < 3:
            self.proc.refresh()
            rows, waiting = read_ledger(self.tmp / "state" / "alerts.sqlite3")
            stable = stable + 1 if (waiting == 0 and len(rows) == last) else 0
            last = len(rows)
            time.sleep(1.0)

    def figures(self) -> dict[str, Any]:
        _, waiting = read_ledger(self.tmp / "state" / "alerts.sqlite3")
        final_tasks = self._running_tasks()
        task_restarts = sum(t.get("restarts", 0) for t in self.agent.status().get("tasks", {}).values())
        exit_code = self.agent.stop()
        # the accounting after the stop: its "Agent stopping" alert is in the ledger and the services
        rows, _ = read_ledger(self.tmp / "state" / "alerts.sqlite3")
        totals = self._log_counts()
        enqueued = Counter(identity(m) for _, ch, m in rows if ch == "hook")
        got = Counter(
            (a["fingerprint"], a["status"], a["startsAt"], a["endsAt"])
            for p in self.chat.accepted("receiver")
            for a in p["alerts"]
        )
        missing = sum((enqueued - got).values())
        # a row a kill -9 left in flight is sent again to this receiver (it drops repeats by
        # fingerprint): it may arrive once more than it was enqueued, nothing else may
        resent = Counter(identity(m) for i, ch, m in rows if ch == "hook" and i in self.cut_off["resent"])
        duplicates = sum((got - enqueued - resent).values())
        titles = {identity(m): m.title for _, ch, m in rows if ch == "hook"}
        self.problems = {
            "missing": [(titles.get(k), k[2]) for k in (enqueued - got)],
            "duplicates": [k for k in (got - enqueued)],
        }
        notice_alerts = Counter(
            m.deadline for _, ch, m in rows if ch == "hook" and m.kind == "preemption" and not m.resolved
        )
        ding_enqueued = sum(1 for _, ch, _m in rows if ch == "ding")
        # DingTalk would show a repeat: a row left in flight is counted and not sent again, so it
        # arrived once or not at all
        ding_unknown = sum(1 for i, ch, _m in rows if ch == "ding" and i in self.cut_off["counted"])
        ding_low = ding_enqueued - ding_unknown
        ding_sent = represented(self.chat.accepted("dingtalk"))
        signals = [json.loads(ln) for ln in self.trainer_events.read_text().splitlines()]
        signals = [s for s in signals if s["event"] == "signal"]
        per_notice, unseen = [], []
        for k, n in enumerate(self.notices):
            lo = n["added"] - self.t0
            hi = (n["canceled"] or time.monotonic()) - self.t0 + 2
            per_notice.append(sum(1 for s in signals if lo <= s["at"] - self.wall0 <= hi))
            # a notice the agent never read (the metadata service failed, or the agent was down,
            # for all of its life) cannot be signalled; it must not be, either
            if not any(lo - 1 <= t - self.wall0 <= hi for t in self.seen):
                unseen.append(k)
        wanted = [0 if k in unseen else 1 for k in range(len(self.notices))]
        last = [(t, k) for life, t, k in self.rss if life == self.agent.lifetimes]
        warm = [k for t, k in last if t >= last[0][0] + 10] if last else []
        rss_start, rss_end = (warm[0], warm[-1]) if warm else (None, None)
        checks = {
            "every alert delivered (receiver: identities)": missing == 0,
            "no alert delivered twice (receiver), but ones resent after a kill -9": duplicates == 0,
            "every alert delivered once or counted (dingtalk: count, digests included)": ding_low
            <= ding_sent
            <= ding_enqueued,
            "nothing left in the spool": waiting == 0,
            "none failed for good": totals["failed"] == 0,
            "one checkpoint signal per notice the agent saw": per_notice == wanted
            and len(signals) == sum(wanted),
            "one preemption alert per notice": sorted(notice_alerts.values()) == [1] * sum(wanted),
            "every task running at the start runs at the end": self.initial_tasks <= final_tasks,
            "RSS flat": rss_start is not None and rss_end - rss_start <= self.rss_slack_kib,
            "every start serves within 30 s": self.agent.hangs == 0,
            "clean exit on SIGTERM": exit_code == 0,
        }
        return {
            "seconds": self.seconds,
            "seed": self.seed,
            "faults": dict(sorted(self.faults.items())),
            "faults_injected": sum(self.faults.values()),
            "sighups": self.hups,
            "notices": len(self.notices),
            "signals": len(signals),
            "signals_per_notice": per_notice,
            "notices_never_seen": len(unseen),
            "preemption_alerts_per_notice": sorted(notice_alerts.values()),
            "alerts": {
                "enqueued": len(rows),
                "receiver": {
                    "enqueued": sum(enqueued.values()),
                    "missing": missing,
                    "duplicates": duplicates,
                },
                "dingtalk": {
                    "enqueued": ding_enqueued,
                    "sent": ding_sent,
                    "digests": sum(1 for p in self.chat.accepted("dingtalk") if "alerts on" in json.dumps(p)),
                },
                "sent": totals["sent"],
                "retried": totals["retried"],
                "failed": totals["failed"],
                "cut_off_by_kill9": {
                    "resent_to_receiver": totals["cut_off_resent"],
                    "counted_not_resent_dingtalk": totals["cut_off_counted"],
                },
                "refused_by_chat": self.chat.refused(),
                "waiting_at_end": waiting,
            },
            "restarts": {
                "kill9": self.faults["kill9"],
                "agent_processes": self.agent.lifetimes,
                "start_hangs": self.agent.hangs,
                "task_restarts_last_process": task_restarts,
            },
            "tasks": {"start": sorted(self.initial_tasks), "end": sorted(final_tasks)},
            "rss_kib": {
                "start": rss_start,
                "end": rss_end,
                "growth": None if rss_start is None else rss_end - rss_start,
                # the last process's curve, about one sample a minute: a leak climbs all the way,
                # a warm-up levels off
                "last_process": [(round(t), k) for t, k in last[:: max(1, len(last) // 30)]],
                "sighups_last_process": self.hups_last,
            },
            "checks": checks,
            "problems": self.problems,
            "ok": all(checks.values()),
        }

    def close(self) -> None:
        """Everything started, stopped; whatever part of start() ran."""
        if hasattr(self, "agent"):
            self.agent.stop()
        if hasattr(self, "trainer"):
            self.trainer.terminate()
            self.trainer.wait(10)
        if hasattr(self, "sim"):
            self.sim.stop()
        if hasattr(self, "chat"):
            self.chat.stop()
        if hasattr(self, "proc"):
            # its symlinks lead into /proc (every pid's root is /): a tree walk must never meet it
            shutil.rmtree(self.proc.root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=75.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rss-slack", type=float, default=8.0, help="MiB the last process may grow (default 8)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, spool)")
    p.add_argument("--dir", type=Path, help="work in this folder (kept) instead of a temporary one")
    args = p.parse_args(argv)
    # SIGTERM (a CI timeout, kill) ends the soak through its clean-up: no agent, trainer or simulator
    # is left behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = args.dir or Path(tempfile.mkdtemp(prefix="tna-soak-"))
    tmp.mkdir(parents=True, exist_ok=True)
    soak = Soak(args.seconds, args.seed, tmp, rss_slack_kib=int(args.rss_slack * 1024))
    try:
        soak.start()
        soak.run()
        soak.settle()
        fig = soak.figures()
    finally:
        soak.close()
    fig["folder"] = str(tmp)
    (tmp / "figures.json").write_text(json.dumps(fig, indent=1))
    if args.json:
        print(json.dumps(fig, indent=1))
    else:
        for name, ok in fig["checks"].items():
            print(f"{'ok  ' if ok else 'FAIL'} {name}")
        print(json.dumps({k: v for k, v in fig.items() if k != "checks"}, indent=1))
    if not (args.keep or args.dir):
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if fig["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
