"""Finding the agent: where its request file is, without being told.

In this order (the first that answers wins):

1. ``request_file=`` given to :class:`~tna_client.PreemptionGuard`;
2. ``$TNA_CHECKPOINT_REQUEST_FILE``;
3. the agent's discovery record, at a fixed place: ``/run/training-node-agent/agent.json`` (an agent
   running as root, or as the packaged unit's user, which owns that directory), then
   ``/tmp/training-node-agent-<uid>/agent.json`` for this user, then the same file of any other
   user (an agent run without root, e.g. ``make run`` with ``--state-dir``). A record counts only
   when its agent is alive on this node and the file and its directory belong to one user and
   nobody else can write the directory;
4. the default request file ``/run/training-node-agent/checkpoint/request.json``, when its directory
   exists (an agent older than discovery records).
"""

from __future__ import annotations

import glob
import json
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tna_client.node import Node, gone_reason, start_ticks

ENV_REQUEST_FILE = "TNA_CHECKPOINT_REQUEST_FILE"
DEFAULT_REQUEST_FILE = "/run/training-node-agent/checkpoint/request.json"
ROOT_DISCOVERY_FILE = "/run/training-node-agent/agent.json"
USER_DISCOVERY_DIR = "/tmp/training-node-agent-{uid}"
DISCOVERY_NAME = "agent.json"
MAX_RECORD_BYTES = 64 * 1024


def discovery_file_for(uid: int) -> str:
    """Where an agent running as ``uid`` publishes its record (the agent calls this too)."""
    if uid == 0:
        return ROOT_DISCOVERY_FILE
    return os.path.join(USER_DISCOVERY_DIR.format(uid=uid), DISCOVERY_NAME)


def discovery_places(uid: int | None = None) -> list[str]:
    uid = os.getuid() if uid is None else uid
    places = [ROOT_DISCOVERY_FILE] + ([discovery_file_for(uid)] if uid else [])
    others = sorted(glob.glob(os.path.join(USER_DISCOVERY_DIR.format(uid="*"), DISCOVERY_NAME)))
    return places + [p for p in others if p not in places]


@dataclass(frozen=True, slots=True)
class Located:
    request_file: str | None  # None: no agent found
    via: str  # "argument", "$TNA_CHECKPOINT_REQUEST_FILE", the discovery file, "default", ""
    looked: tuple[str, ...] = ()  # what was tried and why it did not count, for the one-time message
    record: Mapping[str, Any] | None = field(default=None, compare=False)


def read_record(
    path: str, node: Node, started: Callable[[int], int | None] = start_ticks
) -> tuple[dict[str, Any] | None, str]:
    """The discovery record at ``path`` when it is trustworthy and its agent is alive, with "" as the
    reason; otherwise None and why not."""
    try:
        st = os.stat(path)
        dst = os.stat(os.path.dirname(path) or ".")
    except FileNotFoundError:
        return None, "absent"
    except OSError as e:
        return None, f"unreadable ({e.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return None, "not a regular file"
    if dst.st_mode & 0o022 or st.st_uid != dst.st_uid:
        # anyone could have planted it: acks would go where a stranger says
        return None, "its directory is writable by others or owned by another user; ignored"
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(MAX_RECORD_BYTES))
    except (OSError, ValueError):
        return None, "not a JSON record"
    if not isinstance(data, dict) or not isinstance(data.get("request_file"), str):
        return None, "no request_file in it"
    why = gone_reason(data.get("agent"), node, started)
    if why is not None:
        return None, f"stale: {why.replace('it was written', 'written')}"
    return data, ""


def locate(
    request_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    places: Iterable[str] | None = None,
    node: Node | None = None,
    default: str | None = DEFAULT_REQUEST_FILE,
) -> Located:
    env = os.environ if environ is None else environ
    if request_file:
        return Located(request_file, "argument")
    if env.get(ENV_REQUEST_FILE):
        return Located(env[ENV_REQUEST_FILE], f"${ENV_REQUEST_FILE}")
    node = node or Node.here()
    looked: list[str] = []
    for place in discovery_places() if places is None else places:
        record, why = read_record(place, node)
        if record is not None:
            return Located(str(record["request_file"]), place, tuple(looked), record)
        looked.append(f"{place}: {why}")
    if default and os.path.isdir(os.path.dirname(default)):
        return Located(default, "default", tuple(looked))
    if default:
        looked.append(f"{os.path.dirname(default)}: absent")
    return Located(None, "", tuple(looked))
