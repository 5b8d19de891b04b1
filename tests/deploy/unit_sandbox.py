"""Run a command under the seccomp policies of a systemd unit, for hosts where systemd is not PID 1.

    python unit_sandbox.py systemd/training-node-agent.service -- COMMAND ARGS...

What the unit file says is what gets installed, through libseccomp as systemd does it:
- ``SystemCallFilter=``: the allow-list (groups expanded by ``systemd-analyze syscall-filter``) minus
  the ``~`` lines; anything else fails with ``SystemCallErrorNumber=``;
- ``SystemCallArchitectures=native``: libseccomp's default, other ABIs are killed;
- ``MemoryDenyWriteExecute=yes``: systemd's rules (no mmap with PROT_WRITE|PROT_EXEC, no mprotect or
  pkey_mprotect adding PROT_EXEC, no shmat with SHM_EXEC);
- ``RestrictAddressFamilies=``: socket() with another family fails with EAFNOSUPPORT;
- ``NoNewPrivileges=yes`` (prctl), which seccomp needs anyway.
User, capabilities and mount namespaces are not set here (setpriv does the first two).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import shutil
import subprocess
import sys

SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_EQ = 4
SCMP_CMP_GT = 6
SCMP_CMP_MASKED_EQ = 7
PR_SET_NO_NEW_PRIVS = 38
SHM_EXEC = 0o100000
AF = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16, "AF_PACKET": 17}


def SCMP_ACT_ERRNO(e: int) -> int:  # libseccomp's name
    return 0x00050000 | (e & 0xFFFF)


class ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def unit_settings(path: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    with open(path) as f:
        text = f.read()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            k, _, v = line.partition("=")
            out.setdefault(k.strip(), []).append(v.strip())
    return out


def expand(name: str, seen: set[str] | None = None) -> set[str]:
    """A syscall or @group -> syscall names, groups expanded recursively."""
    if not name.startswith("@"):
        return {name}
    seen = seen if seen is not None else set()
    if name in seen:
        return set()
    seen.add(name)
    text = subprocess.run(
        ["systemd-analyze", "syscall-filter", "--no-pager", name], capture_output=True, text=True, check=True
    ).stdout
    out: set[str] = set()
    for line in text.splitlines()[1:]:
        item = line.strip()
        if item and not item.startswith("#"):
            out |= expand(item, seen)
    return out


class Filter:
    def __init__(self, lib: ctypes.CDLL, default: int) -> None:
        self.lib = lib
        self.ctx = lib.seccomp_init(ctypes.c_uint32(default))
        if not self.ctx:
            raise OSError("seccomp_init failed")

    def nr(self, name: str) -> int:
        return self.lib.seccomp_syscall_resolve_name(name.encode())

    def rule(self, action: int, syscall: str, *cmps: tuple[int, int, int, int]) -> None:
        nr = self.nr(syscall)
        if nr < 0:  # not a syscall of this architecture
            return
        arr = (ArgCmp * max(1, len(cmps)))(*[ArgCmp(*c) for c in cmps])
        rc = self.lib.seccomp_rule_add_array(self.ctx, ctypes.c_uint32(action), nr, len(cmps), arr)
        if rc < 0:
            raise OSError(-rc, f"seccomp_rule_add {syscall}: {os.strerror(-rc)}")

    def load(self) -> None:
        rc = self.lib.seccomp_load(self.ctx)
        if rc < 0:
            raise OSError(-rc, f"seccomp_load: {os.strerror(-rc)}")


def install(unit: str) -> list[str]:
    s = unit_settings(unit)
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_void_p,
    ]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    done = []
    if s.get("NoNewPrivileges") == ["yes"]:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        done.append("NoNewPrivileges")

    if s.get("MemoryDenyWriteExecute") == ["yes"]:
        f = Filter(lib, SCMP_ACT_ALLOW)
        wx = mmap.PROT_WRITE | mmap.PROT_EXEC
        f.rule(SCMP_ACT_ERRNO(errno.EPERM), "mmap", (2, SCMP_CMP_MASKED_EQ, wx, wx))
        f.rule(
            SCMP_ACT_ERRNO(errno.EPERM), "mprotect", (2, SCMP_CMP_MASKED_EQ, mmap.PROT_EXEC, mmap.PROT_EXEC)
        )
        f.rule(
            SCMP_ACT_ERRNO(errno.EPERM),
            "pkey_mprotect",
            (2, SCMP_CMP_MASKED_EQ, mmap.PROT_EXEC, mmap.PROT_EXEC),
        )
        f.rule(SCMP_ACT_ERRNO(errno.EPERM), "shmat", (2, SCMP_CMP_MASKED_EQ, SHM_EXEC, SHM_EXEC))
        f.load()
        done.append("MemoryDenyWriteExecute")

    if "RestrictAddressFamilies" in s:
        allowed = {AF[a] for a in s["RestrictAddressFamilies"][0].split()}
        f = Filter(lib, SCMP_ACT_ALLOW)
        top = max(allowed)
        for fam in range(top):
            if fam not in allowed:
                f.rule(SCMP_ACT_ERRNO(errno.EAFNOSUPPORT), "socket", (0, SCMP_CMP_EQ, fam, 0))
        f.rule(SCMP_ACT_ERRNO(errno.EAFNOSUPPORT), "socket", (0, SCMP_CMP_GT, top, 0))
        f.load()
        done.append(f"RestrictAddressFamilies ({' '.join(s['RestrictAddressFamilies'][0].split())})")
    # last, as systemd does: it may forbid the seccomp() the other filters are loaded with
    if "SystemCallFilter" in s:
        allow: set[str] = set()
        for value in s["SystemCallFilter"]:
            deny = value.startswith("~")
            names = set().union(*(expand(n) for n in value.lstrip("~").split()))
            allow = allow - names if deny else allow | names
        err = getattr(errno, s.get("SystemCallErrorNumber", ["EPERM"])[0])
        f = Filter(lib, SCMP_ACT_ERRNO(err))
        for name in sorted(allow):
            f.rule(SCMP_ACT_ALLOW, name)
        f.load()
        done.append(f"SystemCallFilter ({len(allow)} syscalls allowed)")

    return done


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 3 or args[1] != "--":
        sys.exit("usage: unit_sandbox.py UNIT -- COMMAND [ARGS...]")
    done = install(args[0])
    print(f"unit_sandbox: {', '.join(done)}", file=sys.stderr, flush=True)
    cmd = args[2:]
    os.execv(shutil.which(cmd[0]) or cmd[0], cmd)


if __name__ == "__main__":
    main()
