"""A Debian bookworm system booted by ``systemd-nspawn``: systemd 252 as PID 1, for the unit's test.

The rootfs is made once with ``mmdebstrap`` from Debian's packages and cached under
``build/nspawn/`` (keyed by the package list); each test run boots a copy of it, so the cache stays
clean. Commands run inside through ``nsenter`` into the container's PID 1 (``--register=no`` leaves
no machined to ask), with a clean environment: nothing of the host's leaks in.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

SUITE = "bookworm"
# systemd as init, D-Bus for systemctl, and what install.sh needs: python3 with venv, useradd. No
# tzdata, as on a minimal image: the agent must run without a system tz database. procps for ps in a
# failure's post-mortem.
PACKAGES = ("systemd", "systemd-sysv", "dbus", "python3", "python3-venv", "passwd", "procps")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BOOT_TIMEOUT = 90.0


class CannotBoot(Exception):
    """nspawn could not boot the container here; the message is the exact reason."""


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def rootfs(cache: Path, mirror: str | None = None, timeout: float = 900) -> Path:
    """The cached rootfs for :data:`PACKAGES`, built on first use (a few minutes, needs Debian's
    mirror); concurrent runs wait for one build."""
    key = hashlib.sha256(" ".join((SUITE, *PACKAGES)).encode()).hexdigest()[:12]
    dest = cache / f"{SUITE}-{key}"
    if dest.is_dir():
        return dest
    with _locked(cache / ".lock"):
        if dest.is_dir():
            return dest
        tmp = cache / f".{dest.name}.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = ["mmdebstrap", "--variant=apt", f"--include={','.join(PACKAGES)}", SUITE, str(tmp)]
        if mirror:
            cmd.append(mirror)
        log = cache / f"{dest.name}.log"
        with open(log, "wb") as out:
            done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"mmdebstrap failed ({done.returncode}):\n{log.read_text()[-3000:]}")
        tmp.rename(dest)  # the cache entry appears whole or not at all
    return dest


def copy_tree(src: Path, dst: Path) -> Path:
    subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(dst)], check=True, timeout=300)
    return dst


class Container:
    """One booted container: ``boot()``, ``run([...])``, ``poweroff()``."""

    def __init__(
        self,
        root: Path,
        name: str,
        binds_ro: dict[str, Path] | None = None,
        unified: bool = True,
        log_path: Path | None = None,
    ) -> None:
        self.root = root
        self.name = name
        self.binds_ro = binds_ro or {}
        self.unified = unified
        self.log_path = log_path or root.parent / f"{name}.console.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.leader: int | None = None

    def _command(self) -> list[str]:
        cmd = [
            "systemd-nspawn",
            "--quiet",
            f"--directory={self.root}",
            f"--machine={self.name}",
            "--boot",
            "--register=no",
            "--keep-unit",
            "--console=passive",
            # the host's network: the fake chat service on the host's loopback is reachable
        ]
        if self.unified:
            # cgroup v2 inside, and bpf(): systemd's device policy is a BPF program on v2
            cmd += ["--system-call-filter=bpf", "--capability=CAP_BPF"]
        for guest, host in self.binds_ro.items():
            cmd.append(f"--bind-ro={host}:{guest}")
        return cmd

    def boot(self, timeout: float = BOOT_TIMEOUT) -> None:
        env = {**os.environ}
        if self.unified:
            env["SYSTEMD_NSPAWN_UNIFIED_HIERARCHY"] = "1"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the container
        self.proc = subprocess.Popen(
            self._command(), stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + timeout
        while self.leader is None:
            if self.proc.poll() is not None:
                raise CannotBoot(f"systemd-nspawn exited {self.proc.returncode}: {self.console()[-1500:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise CannotBoot(f"no init process within {timeout:.0f} s: {self.console()[-1500:]}")
            self.leader = self._find_leader(self.proc.pid)
            time.sleep(0.1)
        while True:
            # "running" or "degraded" once the boot is done; "starting" before
            r = self.run(
                ["systemctl", "is-system-running", "--wait"], timeout=max(1, deadline - time.monotonic())
            )
            state = r.stdout.strip()
            if state in ("running", "degraded"):
                return
            if time.monotonic() > deadline or self.proc.poll() is not None:
                failed = self.run(["systemctl", "--failed", "--no-pager"]).stdout
                self.kill()
                raise CannotBoot(f"boot did not finish (state {state!r}): {failed}\n{self.console()[-1500:]}")
            time.sleep(0.5)

    @staticmethod
    def _find_leader(nspawn_pid: int) -> int | None:
        # the container's PID 1 is nspawn's child; it has exec'd systemd once its comm says so
        for child in Path(f"/proc/{nspawn_pid}/task/{nspawn_pid}/children").read_text().split():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                    return int(child)
        return None

    def console(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def run(
        self,
        cmd: list[str],
        user: str | None = None,
        timeout: float = 120,
        input: str | None = None,
        check: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """``cmd`` inside the container, as root (or ``user`` via runuser, with its groups)."""
        assert self.leader is not None, "not booted"
        inner = ["runuser", "-u", user, "--", *cmd] if user else cmd
        full = [
            "nsenter",
            f"--target={self.leader}",
            "--all",
            "--wd",  # the container's PID 1's: /
            "env",
            "-i",
            f"PATH={PATH}",
            "LANG=C.UTF-8",
            "HOME=/root",
            *inner,
        ]
        r = subprocess.run(full, capture_output=True, text=True, timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def sh(self, script: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return self.run(["sh", "-c", script], **kw)  # type: ignore[arg-type]

    def show(self, unit: str, *props: str) -> dict[str, str]:
        r = self.run(["systemctl", "show", unit, *(f"--property={p}" for p in props)], check=True)
        return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)

    def poweroff(self, timeout: float = 60) -> int | None:
        """A clean shutdown of the whole container; its exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.run(["systemctl", "poweroff", "--no-block"], timeout=10)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # nspawn halts the container; twice: immediately
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()
