"""A training tree's rank count from its launcher's environment (WORLD_SIZE and kin): the parser on
real /proc/<pid>/environ text, and the collector on real processes, torchrun's shape included (the
agent process without it, its ranks with it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.sources.processes.collector import ProcessCollector
from agent.sources.processes.procpid import world_size_from_environ

WAIT = "import sys; print('ready', flush=True); sys.stdin.read()"
# a launcher that sets WORLD_SIZE for its one rank only, as torchrun's agent does
LAUNCHER = (
    "import os, subprocess, sys\n"
    "kid = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdin=subprocess.PIPE,"
    " stdout=subprocess.PIPE, env={**os.environ, 'WORLD_SIZE': '16', 'RANK': '3'})\n"
    "kid.stdout.readline(); print('ready', flush=True); sys.stdin.read(); kid.stdin.close(); kid.wait()\n"
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")}
    return {**env, **extra}


def _start(code: str, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def test_the_parser_reads_real_environ_text() -> None:
    p = _start(WAIT, env=_env(WORLD_SIZE="8", OMPI_COMM_WORLD_SIZE="2"))
    try:
        raw = Path(f"/proc/{p.pid}/environ").read_bytes()
    finally:
        p.communicate("")
    assert world_size_from_environ(raw) == (8, 0)  # WORLD_SIZE first, as torch reads it
    assert world_size_from_environ(raw.replace(b"WORLD_SIZE=8", b"XWORLD_SIZE=8")) == (2, 0)
    assert world_size_from_environ(b"PATH=/bin\0HOME=/root\0") == (None, 0)
    assert world_size_from_environ(b"") == (None, 0)
    for bad in (b"WORLD_SIZE=eight\0", b"WORLD_SIZE=0\0", b"WORLD_SIZE=-2\0", b"WORLD_SIZE=\0"):
        assert world_size_from_environ(bad) == (None, 1), bad
    # a NUL-less tail, a value with '=' in it, binary noise: counted, never raised
    assert world_size_from_environ(b"A=b=c\0\xff\xfe\0WORLD_SIZE=4") == (4, 0)


@pytest.mark.parametrize("seed", range(20))
def test_the_parser_never_raises_on_noise(seed: int) -> None:
    import random

    rnd = random.Random(seed)
    raw = bytes(rnd.randrange(256) for _ in range(rnd.randrange(200)))
    raw += b"\0WORLD_SIZE=" + bytes(rnd.randrange(256) for _ in range(rnd.randrange(6)))
    n, bad = world_size_from_environ(raw)
    assert (n is None or n > 0) and bad in (0, 1)


def test_the_collector_reads_each_trees_rank_count_once() -> None:
    single = _start(WAIT, env=_env())
    ranked = _start(WAIT, env=_env(PMI_SIZE="4"))
    launched = _start(LAUNCHER, WAIT, env=_env())
    pids = [single.pid, ranked.pid, launched.pid]
    try:
        c = ProcessCollector("/proc", "/sys", lambda: pids)
        first = {p.pid: p.world_size for p in c.collect().processes}
        assert first == {single.pid: 1, ranked.pid: 4, launched.pid: 16}
        assert c.malformed_total == 0
        # read once a process: the environment is fixed at exec, so a second read changes nothing
        c._world = {k: (v or 0) + 100 for k, v in c._world.items()}
        again = {p.pid: p.world_size for p in c.collect().processes}
        assert again == {single.pid: 100, ranked.pid: 104, launched.pid: 116}
        c.close()
    finally:
        for p in (single, ranked, launched):
            p.communicate("")
