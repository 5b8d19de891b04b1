"""Who wrote a request, and is it still meant for us: the node's boot id, the agent's pid and start
time. Pure checks over plain data, plus the few ``/proc`` reads they need (standard library only)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


def read_boot_id(path: str = BOOT_ID_FILE) -> str | None:
    """A random id the kernel draws at every boot, different on any other machine and after a reboot.

    It is a hint, not proof: this file is the only place the kernel shows it, and a mount over it
    changes what one process sees. systemd-nspawn binds a per-container id over it, and a service
    sandbox that sets up its own ``/proc/sys`` (``ProtectKernelTunables=``) sees the kernel's id
    beneath, so the agent in its unit and a trainer beside it can read different ids on one boot.
    :func:`gone_reason` lets a live pid overrule it."""
    try:
        with open(path) as f:
            return f.read(64).strip() or None
    except OSError:
        return None


def pid_namespace(procfs: str = "/proc") -> int | None:
    """The inode of our pid namespace: a pid means the same process only inside one namespace."""
    try:
        return os.stat(f"{procfs}/self/ns/pid").st_ino
    except OSError:
        return None


def start_ticks(pid: int, procfs: str = "/proc") -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks since boot), or None when the
    process is gone. The command name may hold spaces and parentheses: split after the last ')'."""
    try:
        with open(f"{procfs}/{pid}/stat", "rb") as f:
            text = f.read(4096).decode(errors="replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return int(fields[19])  # fields[0] is field 3 (state)
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Node:
    boot_id: str | None
    pidns: int | None
    hostname: str | None = None

    @classmethod
    def here(cls) -> Node:
        return cls(read_boot_id(), pid_namespace(), socket.gethostname())


def identity(procfs: str = "/proc") -> dict[str, Any]:
    """This process as a request's or discovery record's ``agent`` block (the agent calls it)."""
    pid = os.getpid()
    return {
        "pid": pid,
        "start_time_ticks": start_ticks(pid, procfs),
        "boot_id": read_boot_id(),
        "pidns": pid_namespace(procfs),
        "hostname": socket.gethostname(),
    }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def gone_reason(agent: Any, node: Node, started: Callable[[int], int | None] = start_ticks) -> str | None:
    """Why the agent described by ``agent`` (a request's or discovery record's block) is not one that
    runs on this node now, or None when it is (or when it cannot be told: no block, another pid
    namespace and the same boot id).

    The strongest evidence is the kernel's own: the writer's pid, in our pid namespace, alive with the
    start time it wrote. That holds whatever the boot ids say, since they are views that mounts can
    change (:func:`read_boot_id`). But the first pid namespace has the same inode on every machine
    and boot, so where the boot ids differ a live pid must also be on a host of the agent's name: a
    request from another node (shared storage) whose pid and start tick happen to match a process
    here stays refused. Where the pid cannot be checked (another pid namespace: a container), the
    boot id decides."""
    if not isinstance(agent, Mapping):
        return None  # written by an agent too old to say who it is: nothing to check
    boot = agent.get("boot_id")
    other_boot = isinstance(boot, str) and bool(node.boot_id) and boot != node.boot_id
    pid, ticks, ns = _int(agent.get("pid")), _int(agent.get("start_time_ticks")), _int(agent.get("pidns"))
    same_ns = ns is None or node.pidns is None or ns == node.pidns
    if pid is not None and ticks is not None and same_ns:
        alive = started(pid) == ticks
        same_host = node.hostname is not None and agent.get("hostname") == node.hostname
        if alive and (not other_boot or same_host):
            return None
        if not other_boot:
            return f"the agent that wrote it (pid {pid}) is gone"
    if other_boot:
        here = (node.boot_id or "")[:8]
        return f"it was written on another node or before a reboot (boot id {str(boot)[:8]}, here {here})"
    return None


def stale_reason(
    request: Mapping[str, Any],
    now: float,
    node: Node,
    started: Callable[[int], int | None] = start_ticks,
) -> str | None:
    """Why a ``requested`` checkpoint request must not be obeyed, or None when it is live: its
    deadline passed, it was written on another node (or before a reboot), or its agent is gone."""
    deadline = request.get("deadline_unix")
    if isinstance(deadline, int | float) and not isinstance(deadline, bool) and deadline < now:
        return f"its deadline passed {now - deadline:.0f} s ago"
    return gone_reason(request.get("agent"), node, started)
