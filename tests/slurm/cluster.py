"""A real one-node Slurm for tests: munged, slurmctld and slurmd, as root, in a private tmp dir.

Nothing global is touched: the munge key and socket, the spool and state dirs, the pid and log
files live under the cluster's own directory, the ports are free high ports picked per run, and
the node and cluster names derive from the pid and a counter, so two runs side by side cannot
collide. `/etc/slurm` is never read (SLURM_CONF points at the private config; the plugstack is an
empty private file).

Use it as a context manager, or as the `slurm_cluster` pytest fixture (`from cluster import
slurm_cluster` in a test module; tests/slurm/ must be on sys.path, as pytest puts it for its own files):

    with SlurmCluster(tmp_path) as c:                 # tmp_path gets a copy of the daemons' logs
        c.run("sbatch", "--wrap", "sleep 1")          # any client, with SLURM_CONF set
        c.node_state()                                # "idle", "allocated", "drained", ...
        c.wait_until(lambda: c.node_state() == "idle")
        c.stop_ctld(); c.start_ctld()                 # slurmctld down and back, state kept

`c.env` is os.environ plus SLURM_CONF, for any subprocess (the agent) that must talk to it.
`skip_reason()` says why a cluster cannot start here (not root, binaries missing), or None.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "sinfo", "squeue", "sbatch", "scancel")
_COUNTER = itertools.count()


def skip_reason() -> str | None:
    """Why a real Slurm cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "a real slurmctld/slurmd/munged needs root (slurmd runs jobs as their user)"
    missing = [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if missing:
        return f"missing {', '.join(missing)}: install slurm-wlm and munge (.ci/apt-packages)"
    return None


def _bin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_ports(n: int) -> list[int]:
    """n distinct free TCP ports above 20000, all held open until the last is picked."""
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            socks.append(s)
            if port > 20000:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


class SlurmCluster:
    """munged + slurmctld + slurmd for one node (and optional extra, daemonless nodes)."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        extra_nodes: int = 0,
        conf_extra: Sequence[str] = (),
        start_timeout: float = 60.0,
    ) -> None:
        # Short on purpose: slurmstepd's unix sockets live under the spool dir and a socket path
        # may not pass 108 bytes, which pytest's tmp_path already nearly does.
        tag = f"{os.getpid()}x{next(_COUNTER)}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"tnas{tag}-", dir="/tmp"))
        self.keep = root  # where stop() leaves a copy of the logs (a test's tmp_path), if given
        self.cluster = f"tna{tag}"
        self.node = f"tnan{tag}"
        # Extra nodes have no slurmd: they exist so a test can drain "another" node (they go DOWN
        # after SlurmdTimeout, which the drain state shows as drained/down, never idle).
        self.extra_nodes = [f"{self.node}e{i}" for i in range(extra_nodes)]
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket"
        self.start_timeout = start_timeout
        self.conf_extra = list(conf_extra)
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ctld_port, self.slurmd_port = _free_ports(2)

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> SlurmCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        self._write_files()
        self._start_munged()
        self.start_ctld()
        self.start_slurmd()
        self.wait_until(lambda: self.node_state() == "idle", self.start_timeout, "node idle")

    def stop(self) -> None:
        """Cancel every job, wait for them to go, then stop the daemons and any stray job."""
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            try:
                ids = [str(j) for j in self.jobs()]  # pending ones too (a requeued job waits 120 s)
                if ids:
                    self.run("scancel", *ids, check=False, timeout=10)
                self.wait_until(lambda: not self.jobs(), 30, "jobs gone")
            except (TimeoutError, subprocess.SubprocessError):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            self._terminate(name)
        self._kill_strays()
        if self.keep is not None and (self.dir / "log").exists():
            shutil.copytree(self.dir / "log", Path(self.keep) / "slurm-logs", dirs_exist_ok=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def start_ctld(self) -> None:
        """slurmctld in the foreground; state in StateSaveLocation survives a stop/start."""
        self._spawn("slurmctld", [_bin("slurmctld"), "-D", "-f", str(self.conf)])
        self.wait_until(self._ctld_answers, self.start_timeout, "slurmctld answers")

    def stop_ctld(self) -> None:
        self._terminate("slurmctld")

    def start_slurmd(self) -> None:
        self._spawn("slurmd", [_bin("slurmd"), "-D", "-N", self.node, "-f", str(self.conf)])

    def stop_slurmd(self) -> None:
        self._terminate("slurmd")

    # -- clients ------------------------------------------------------------------------------

    def run(self, *argv: str, check: bool = True, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client (or anything) with this cluster's SLURM_CONF."""
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout, check=check
        )

    def sbatch(self, *args: str) -> int:
        """Submit a batch job (args as for sbatch); returns the job id."""
        out = self.run("sbatch", "--parsable", f"--chdir={self.dir}", *args).stdout.strip()
        return int(out.split(";")[0])

    def node_state(self, node: str | None = None) -> str:
        """sinfo's long state of a node, e.g. 'idle', 'allocated', 'drained', 'draining'."""
        r = self.run("sinfo", "-h", "-N", "-n", node or self.node, "-o", "%T", check=False)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else ""

    def node_reason(self, node: str | None = None) -> str:
        """The node's Reason, as `sinfo -R` shows it ('' when none)."""
        r = self.run("sinfo", "-h", "-R", "-n", node or self.node, "-o", "%E", check=False)
        return r.stdout.strip()

    def show_node(self, node: str | None = None) -> str:
        return self.run("scontrol", "show", "node", "-o", node or self.node).stdout

    def show_job(self, job_id: int) -> str:
        return self.run("scontrol", "show", "job", "-o", str(job_id)).stdout

    def jobs(self) -> dict[int, str]:
        """Every job slurmctld knows, id -> state (squeue's long state, e.g. RUNNING, PENDING)."""
        r = self.run("squeue", "-h", "-o", "%i %T")
        out: dict[int, str] = {}
        for line in r.stdout.splitlines():
            job_id, _, state = line.partition(" ")
            out[int(job_id.split("_")[0])] = state.strip()
        return out

    def job_field(self, job_id: int, field: str) -> str:
        """One Key=Value field of `scontrol show job -o`."""
        for token in self.show_job(job_id).split():
            key, _, value = token.partition("=")
            if key == field:
                return value
        return ""

    @staticmethod
    def wait_until(cond: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if cond():
                    return
            except subprocess.SubprocessError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"slurm cluster: no {what or 'condition'} in {timeout:.0f}s")
            time.sleep(0.1)

    def log(self, daemon: str) -> str:
        p = self.dir / "log" / f"{daemon}.log"
        return p.read_text(errors="replace") if p.exists() else ""

    # -- inside -------------------------------------------------------------------------------

    def _write_files(self) -> None:
        for d in ("munge", "state", "spool", "log", "run"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        (self.dir / "munge").chmod(0o700)
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (self.dir / "plugstack.conf").write_text("")
        cpus = os.cpu_count() or 1
        host = socket.gethostname().split(".")[0]
        lines = [
            f"ClusterName={self.cluster}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "MpiDefault=none",
            "ReturnToService=2",
            "JobRequeue=1",
            "SlurmdTimeout=300",
            "SlurmctldTimeout=30",
            "MessageTimeout=10",
            "KillWait=5",
            "MinJobAge=300",
            "SchedulerParameters=sched_interval=2",
            f"StateSaveLocation={self.dir / 'state'}",
            f"SlurmdSpoolDir={self.dir / 'spool'}",
            f"SlurmctldPidFile={self.dir / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.dir / 'run' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.dir / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.dir / 'log' / 'slurmd.log'}",
            f"PlugStackConfig={self.dir / 'plugstack.conf'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            *self.conf_extra,
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
        ]
        lines += [f"NodeName={n} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN" for n in self.extra_nodes]
        nodes = ",".join([self.node, *self.extra_nodes])
        lines.append(f"PartitionName=tna Nodes={nodes} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def _start_munged(self) -> None:
        m = self.dir / "munge"
        self._spawn(
            "munged",
            [
                _bin("munged"),
                "-F",
                "-f",
                f"--socket={self.munge_socket}",
                f"--key-file={m / 'munge.key'}",
                f"--pid-file={m / 'munged.pid'}",
                f"--seed-file={m / 'munged.seed'}",
                f"--log-file={self.dir / 'log' / 'munged.log'}",
            ],
        )
        self.wait_until(self.munge_socket.exists, 20, "munge socket")

    def _ctld_answers(self) -> bool:
        return self.run("scontrol", "ping", check=False, timeout=10).returncode == 0

    def _spawn(self, name: str, argv: list[str]) -> None:
        old = self._procs.get(name)
        if old is not None and old.poll() is None:
            raise RuntimeError(f"{name} already runs")
        out = open(self.dir / "log" / f"{name}.out", "ab")  # noqa: SIM115 (kept for the child)
        try:
            self._procs[name] = subprocess.Popen(
                argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            out.close()

    def _terminate(self, name: str) -> None:
        proc = self._procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def _kill_strays(self) -> None:
        """Job processes (and their slurmstepd) that outlived slurmd: they carry our SLURM_CONF."""
        mark = f"SLURM_CONF={self.conf}".encode()
        me = os.getpid()
        for p in Path("/proc").iterdir():
            if not p.name.isdigit() or int(p.name) == me:
                continue
            try:
                env = (p / "environ").read_bytes()
            except OSError:
                continue
            if mark in env.split(b"\0"):
                try:
                    os.kill(int(p.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def need_slurm() -> None:
    """Skip (in CI: fail) with the reason when a real Slurm cannot run here."""
    import pytest

    reason = skip_reason()
    if reason is None:
        return
    # as tests/conftest.py's _unavailable: CI installs everything and runs as root
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must provide this: {reason}")
    pytest.skip(reason)


def _fixture() -> object:
    import pytest

    @pytest.fixture
    def slurm_cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
        """A started one-node cluster (node ``c.node``, idle), torn down with its jobs after the
        test; the daemons' logs are copied to ``tmp_path/slurm-logs``. Use it with
        ``from cluster import slurm_cluster`` in the test module (tests/slurm on sys.path)."""
        need_slurm()
        with SlurmCluster(tmp_path) as c:
            yield c

    return slurm_cluster


slurm_cluster = _fixture()
