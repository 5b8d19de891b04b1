"""For the tests that run a process as another user (setpriv): whether that user can reach what the
process needs. A checkout under a folder only root may enter (``mktemp -d`` makes it 0700, and so is
/root) leaves such a process without the agent's code or the venv's packages: each test then failed
on its own way (``No module named agent``, a wait that timed out). One check, made once per uid and
session, says it in one line instead: a skip, a failure in CI."""

from __future__ import annotations

import functools
import os
import pwd
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

from conftest import REPO, _unavailable, need_binary

# the uid a test runs a process as where it must not be root: no such user needed (the kernel
# checks the number); one for every such test, so that a checkout it cannot read is said once
UNPRIVILEGED_UID = 64991


def closed_to(uid: int, gid: int, path: Path) -> Path | None:
    """The first folder on the way to ``path`` that ``uid`` (in group ``gid`` alone) may not enter,
    or ``path`` itself where it may not read it, by the mode bits; None where all are open to it.
    The way through a symlink is checked too (a venv linked from elsewhere)."""
    real = Path(os.path.realpath(path))
    for target in dict.fromkeys((path, real)):  # each once, in order
        for p in (*reversed(target.parents), target):
            st = p.stat()
            shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
            allowed = (st.st_mode >> shift) & 0o7
            need = 0o1 if p != target else 0o5 if stat.S_ISDIR(st.st_mode) else 0o4
            if allowed & need != need:
                return p
    return None


@functools.cache
def _why_not_readable(uid: int) -> str | None:
    """Why a process of ``uid`` cannot import this checkout's agent with this interpreter and its
    packages, as the tests run it (setpriv, the checkout as its folder); None where it can."""
    setpriv = need_binary("setpriv", "util-linux")
    probe = "import agent, pydantic, structlog, prometheus_client; print(agent.__file__)"
    as_uid = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    done = subprocess.run(
        [*as_uid, sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    imported = Path(os.path.realpath(done.stdout.strip() or "/"))
    if done.returncode == 0 and imported.is_relative_to(REPO / "agent"):
        return None
    needed = (REPO / "agent" / "__init__.py", Path(sys.prefix), Path(sysconfig.get_paths()["purelib"]))
    blocked = next((b for p in needed if (b := closed_to(uid, uid, p)) is not None), None)
    if blocked is not None:
        st = blocked.stat()
        what = f"{blocked} is {stat.filemode(st.st_mode)} {_owner(st.st_uid)}"
    elif done.returncode == 0:
        what = f"it imports the agent from {imported.parent}, not this checkout's"
    else:
        what = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return (
        f"uid {uid} cannot read this checkout ({REPO}) and its venv ({sys.executable}): {what}. The tests"
        " that run a process as another user need both readable by it: clone into a folder others may"
        " enter (not under a 0700 mktemp -d folder, nor /root)"
    )


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def need_checkout_readable_by(uid: int) -> None:
    """Skip (fail in CI) with one line where a process of ``uid`` cannot run this checkout's code."""
    why = _why_not_readable(uid)
    if why is not None:
        _unavailable(why)
