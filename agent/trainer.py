"""Training-script side of the checkpoint handshake with training-node-agent. Standard library only:
import it from any training script (``from agent.trainer import PreemptionGuard``), or copy this one
file next to the script.

    guard = PreemptionGuard()            # signal from $TNA_CHECKPOINT_SIGNAL, default SIGUSR1
    for step, batch in enumerate(loader):
        train_step(batch)
        if guard.checkpoint_requested:   # the signal arrived, or the request file appeared
            if guard.should_save:        # rank 0 only
                path = save_checkpoint(step)         # to OSS/NAS/CPFS, not the local disk
                guard.ack(step=step, path=path)      # tell the agent it is durable
            break

How a request reaches the process:

* the agent writes a request file (JSON: event_id, kind, deadline, seconds_remaining, ack_path) to
  ``$TNA_CHECKPOINT_REQUEST_FILE`` (default ``/run/training-node-agent/checkpoint/request.json``),
  atomically, *then* sends the signal. The handler only sets a flag; reading the file happens in
  :attr:`PreemptionGuard.checkpoint_requested`, in the training loop, never inside the handler.
* every rank sees the file, including ranks that got no signal; the file is polled at most every
  ``check_interval`` seconds (one ``stat`` call), so checking the flag every step is cheap.
* across nodes only the preempted node gets a notice: torch.distributed users agree on the flag with
  an all-reduce (MAX) before saving, see docs/checkpoint.md.

No thread is started (a thread would be duplicated badly by DataLoader workers that ``fork``).
"""

from __future__ import annotations

import json
import os
import signal as _signal
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

DEFAULT_REQUEST_FILE = "/run/training-node-agent/checkpoint/request.json"
ENV_REQUEST_FILE = "TNA_CHECKPOINT_REQUEST_FILE"
ENV_SIGNAL = "TNA_CHECKPOINT_SIGNAL"

__all__ = ["PreemptionGuard", "rank_from_env"]


def rank_from_env(environ: Any = None) -> int:
    """The global rank: ``RANK`` (torchrun, Lightning), ``SLURM_PROCID``, ``OMPI_COMM_WORLD_RANK``,
    then ``LOCAL_RANK``; 0 for a single process."""
    env = os.environ if environ is None else environ
    for key in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "LOCAL_RANK"):
        value = env.get(key, "")
        if value.strip().isdigit():
            return int(value)
    return 0


def _signum(sig: int | str) -> int:
    if isinstance(sig, int):
        return sig
    name = sig.strip().upper()
    name = name if name.startswith("SIG") else "SIG" + name
    if name.startswith("SIGRTMIN+") and name[9:].isdigit():
        return _signal.SIGRTMIN + int(name[9:])
    try:
        return int(_signal.Signals[name])
    except KeyError:
        raise ValueError(f"unknown signal {sig!r}") from None


class PreemptionGuard:
    """Watches for the agent's checkpoint request: a signal handler plus the request file.

    ``signal``: the signal the agent sends (``[trainer] signal``); ``None`` installs no handler and
    relies on the request file alone (for frameworks that own the signal themselves).
    ``chain``: also call the handler that was installed before (Python callables only).
    """

    def __init__(
        self,
        signal: int | str | None = "",
        request_file: str | None = None,
        rank: int | None = None,
        check_interval: float = 0.5,
        chain: bool = True,
        install: bool = True,
    ) -> None:
        if signal == "":
            signal = os.environ.get(ENV_SIGNAL, "SIGUSR1")
        self.signum = None if signal is None else _signum(signal)
        self.request_file = request_file or os.environ.get(ENV_REQUEST_FILE, DEFAULT_REQUEST_FILE)
        self.rank = rank_from_env() if rank is None else rank
        self.check_interval = check_interval
        self.chain = chain
        self.request: dict[str, Any] | None = None  # the request being served, as the agent wrote it
        self.signalled_at: float | None = None  # time.time() of the last signal
        self._pending = False
        self._handled: set[str] = set()
        self._next_check = 0.0
        self._seen_mtime: tuple[int, int] | None = None
        self._previous: Any = None
        self._installed = False
        if install and self.signum is not None:
            self.install()

    # --- signal ------------------------------------------------------------------------------------

    def install(self) -> None:
        """Install the handler (main thread only, as Python requires)."""
        if self.signum is None or self._installed:
            return
        self._previous = _signal.signal(self.signum, self._on_signal)
        self._installed = True

    def uninstall(self) -> None:
        if self._installed and self.signum is not None:
            prev = self._previous if self._previous is not None else _signal.SIG_DFL
            _signal.signal(self.signum, prev)
            self._installed = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        # only flags: the file is read in the training loop, where I/O is safe
        self._pending = True
        self.signalled_at = time.time()
        self._next_check = 0.0
        if self.chain and callable(self._previous):
            self._previous(signum, frame)

    def __enter__(self) -> PreemptionGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # --- the request -------------------------------------------------------------------------------

    @property
    def checkpoint_requested(self) -> bool:
        """True from the signal or a new request in the file until :meth:`ack` (or :meth:`reset`)."""
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + self.check_interval
            self._poll_file()
        return self._pending

    @property
    def should_save(self) -> bool:
        """Whether this process writes the checkpoint: rank 0."""
        return self.rank == 0

    @property
    def event_id(self) -> str | None:
        return self.request.get("event_id") if self.request else None

    @property
    def canceled(self) -> bool:
        """The cloud withdrew the notice after it was requested (a maintenance event called off)."""
        self._poll_file(force=True)
        return bool(self.request and self.request.get("state") == "canceled")

    def seconds_remaining(self) -> float | None:
        """Seconds left until the instance goes, or None when no deadline is known (a bare signal)."""
        self.checkpoint_requested  # noqa: B018  (refreshes the request)
        if not self.request:
            return None
        deadline = self.request.get("deadline_unix")
        if not isinstance(deadline, int | float):
            return None
        return deadline - time.time()

    def _read_request(self) -> dict[str, Any] | None:
        try:
            st = os.stat(self.request_file)
        except OSError:
            return None
        stamp = (st.st_ino, st.st_mtime_ns)
        if stamp == self._seen_mtime and self.request is not None:
            return self.request
        try:
            with open(self.request_file, "rb") as f:
                data = json.loads(f.read(1 << 20))
        except (OSError, ValueError):
            return None  # the agent writes atomically, so this is a foreign or damaged file: skip it
        self._seen_mtime = stamp
        return data if isinstance(data, dict) and isinstance(data.get("event_id"), str) else None

    def _poll_file(self, force: bool = False) -> None:
        if force:
            self._seen_mtime = None
        data = self._read_request()
        if data is None:
            return
        event_id = data["event_id"]
        if self.request is not None and self.request.get("event_id") == event_id:
            self.request = data  # state changes: canceled, completed
            return
        if data.get("state", "requested") == "requested" and event_id not in self._handled:
            self.request = data
            self._pending = True

    def reset(self) -> None:
        """Forget the current request without acknowledging it (e.g. after a canceled notice)."""
        if self.event_id:
            self._handled.add(self.event_id)
        self._pending = False

    def ack(
        self, step: int | None = None, path: str | None = None, force: bool = False, **extra: Any
    ) -> bool:
        """Tell the agent the checkpoint is durable. On ranks other than 0 this only clears the flag
        (unless ``force``). Returns True when an ack was written."""
        request = self.request
        self.reset()
        if not (self.should_save or force) or not request:
            return False
        target = request.get("ack_path")
        if not isinstance(target, str) or not target:
            return False
        body: dict[str, Any] = {
            "event_id": request["event_id"],
            "at": time.time(),
            "pid": os.getpid(),
            "rank": self.rank,
            **extra,
        }
        if step is not None:
            body["step"] = int(step)
        if path is not None:
            body["path"] = str(path)
        _write_atomic(target, json.dumps(body).encode())
        return True

    def saved(
        self,
        step: int | None = None,
        path: str | None = None,
        seconds: float | None = None,
        force: bool = False,
    ) -> bool:
        """Tell the agent a periodic checkpoint is durable (``seconds``: how long saving took), so its
        goodput ledger knows what a reclaim would lose and can advise a cadence. Writes
        ``saved-<pid>-<time_ns>.json`` beside the request file; rank 0 only unless ``force``. Never
        raises for a missing agent: returns False when the report could not be written."""
        if not (self.should_save or force):
            return False
        body = {
            "kind": "saved",
            "step": None if step is None else int(step),
            "path": None if path is None else str(path),
            "seconds": None if seconds is None else float(seconds),
            "time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "pid": os.getpid(),
        }
        directory = os.path.dirname(self.request_file) or "."
        target = os.path.join(directory, f"saved-{os.getpid()}-{time.time_ns()}.json")
        try:
            _write_atomic(target, json.dumps(body).encode())
        except OSError:
            return False
        return True


def _write_atomic(path: str, data: bytes) -> None:
    # agent.runtime.statefile.write_atomic, restated: this file must work copied alone next to a training
    # script (tests/checkpoint/test_checkpoint_trainer_helper.py), so it imports nothing from agent/
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".ack.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
