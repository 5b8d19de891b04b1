"""The training-script side of the checkpoint handshake with training-node-agent.

    guard = PreemptionGuard()            # signal from $TNA_CHECKPOINT_SIGNAL, default SIGUSR1
    for step, batch in enumerate(loader):
        train_step(batch)
        if guard.checkpoint_requested:   # the signal arrived, or a live request appeared in the file
            if guard.should_save:        # rank 0 only
                path = save_checkpoint(step)         # to NAS/CPFS/OSS, not the local disk
                fsync_tree(path)                     # durable before the ack
                guard.ack(step=step, path=path)
            break

The agent writes its request file atomically, *then* signals. The handler only sets a flag; the file
is read in :attr:`PreemptionGuard.checkpoint_requested`, in the training loop, at most every
``check_interval`` seconds (one ``stat``). No thread is started: DataLoader workers ``fork``.
"""

from __future__ import annotations

import json
import logging
import os
import signal as _signal
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from tna_client.discovery import ENV_REQUEST_FILE, Located, locate
from tna_client.files import fsync_tree, rfc3339, write_json_atomic
from tna_client.node import Node, stale_reason
from tna_client.steps import StepReporter

ENV_SIGNAL = "TNA_CHECKPOINT_SIGNAL"
ANNOUNCE_RETRY_SECONDS = 1.0
MAX_REQUEST_BYTES = 1 << 20

log = logging.getLogger("tna_client")


class AckNotDelivered(UserWarning):
    """The checkpoint was saved but the agent was not told (the integrations warn with it; make it an
    error with ``warnings.simplefilter("error", AckNotDelivered)``)."""


def rank_from_env(environ: Any = None) -> int:
    """The global rank: ``RANK`` (torchrun, Lightning), ``SLURM_PROCID``, ``OMPI_COMM_WORLD_RANK``,
    ``PMI_RANK``, then ``LOCAL_RANK``; 0 for a single process."""
    env = os.environ if environ is None else environ
    for key in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "LOCAL_RANK"):
        value = env.get(key, "")
        if value.strip().isdigit():
            return int(value)
    return 0


def signal_number(sig: int | str) -> int:
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


class PreemptionGuard(StepReporter):
    """Watches for the agent's checkpoint request: a signal handler plus the request file.

    ``signal``: the signal the agent sends (``[trainer] signal``); ``None`` installs no handler and
    relies on the request file alone (for frameworks that own the signal). ``request_file``: where the
    agent writes requests; by default found by itself (see :mod:`tna_client.discovery`).
    ``chain``: also call the handler that was installed before (Python callables only).
    ``discovery_files``: the places to look for the agent's discovery record (tests).
    :meth:`step` marks a step boundary for the agent's step figures (:mod:`tna_client.steps`).
    """

    def __init__(
        self,
        signal: int | str | None = "",
        request_file: str | None = None,
        rank: int | None = None,
        check_interval: float = 0.5,
        chain: bool = True,
        install: bool = True,
        rediscover_interval: float = 10.0,
        discovery_files: Iterable[str] | None = None,
    ) -> None:
        if signal == "":
            signal = os.environ.get(ENV_SIGNAL, "SIGUSR1")
        self.signum = None if signal is None else signal_number(signal)
        self.rank = rank_from_env() if rank is None else rank
        self.check_interval = check_interval
        self.rediscover_interval = rediscover_interval
        self.chain = chain
        self.request: dict[str, Any] | None = None  # the request being served, as the agent wrote it
        self.signalled_at: float | None = None  # time.time() of the last signal
        self.ack_error: str | None = None  # why the last ack on rank 0 could not be delivered
        self._explicit = request_file
        self._places = None if discovery_files is None else list(discovery_files)
        self._node = Node.here()
        self._pid = os.getpid()
        self._pending = False
        self._handled: set[str] = set()
        self._stale_logged: set[tuple[str, str]] = set()
        self._next_check = 0.0
        self._next_discovery = 0.0
        self._seen_stamp: tuple[int, int] | None = None
        self._previous: Any = None
        self._installed = False
        self._said_missing = False
        self._marker: str | None = None
        self._next_announce = 0.0
        self.seen: dict[str, Any] | None = None  # how and when this process learnt of the request
        self.located = Located(None, "")
        self._discover()
        self._init_steps(self.located.record)
        if install and self.signum is not None:
            self.install()

    # --- finding the agent -------------------------------------------------------------------------

    @property
    def request_file(self) -> str | None:
        """Where the agent's requests are read from; None while no agent has been found."""
        return self.located.request_file

    @property
    def found(self) -> bool:
        return self.located.request_file is not None

    def _discover(self) -> None:
        before = self.located
        self.located = locate(self._explicit, places=self._places, node=self._node)
        self._next_discovery = time.monotonic() + self.rediscover_interval
        if self.located.request_file != before.request_file:
            self._seen_stamp = None
            if self.located.request_file is not None:
                log.info(
                    "training-node-agent requests are read from %s (via %s)",
                    self.located.request_file,
                    self.located.via,
                )
                self._announce()
        if self.located.request_file is None and not self._said_missing and self.rank == 0:
            self._said_missing = True  # once: the training log must not fill up with it
            log.warning(
                "no training-node-agent found: checkpoint requests can only arrive by signal, and acks "
                "cannot be delivered. Looked at: %s. Start the agent, or set $%s to its request file "
                "(training-node-agent status shows it).",
                "; ".join(self.located.looked) or "nothing",
                ENV_REQUEST_FILE,
            )

    def _step_dir(self) -> str | None:
        if self.request_file is None and self._explicit is None and time.monotonic() >= self._next_discovery:
            self._discover()  # a loop that only calls step() still finds an agent that came later
        return os.path.dirname(self.request_file) if self.request_file else None

    def _step_rank(self) -> int:
        return self.rank

    def _announce(self) -> None:
        """Leave a note beside the request file that this process found it, and once it has, how and
        when it learnt of the request (status and the checkpoint report show it); the agent drops
        notes of processes that are gone. A trainer often starts before its agent, whose folder
        does not exist yet: :meth:`poll` tries again until the note is there."""
        directory = os.path.dirname(self.request_file or "")
        name = f"trainer-{self._pid}.json"
        body = {
            "kind": "trainer",
            "pid": self._pid,
            "pidns": self._node.pidns,
            "rank": self.rank,
            "time": rfc3339(time.time()),
            **({"seen": self.seen} if self.seen else {}),
        }
        self._next_announce = time.monotonic() + ANNOUNCE_RETRY_SECONDS
        try:
            write_json_atomic(directory, name, body)
            self._marker = os.path.join(directory, name)
        except OSError as e:
            log.debug("cannot leave the trainer note in %s: %s", directory, e)

    # --- signal ------------------------------------------------------------------------------------

    def install(self) -> None:
        """Install the handler (main thread only, as Python requires)."""
        if self.signum is None or self._installed:
            return
        self._previous = _signal.signal(self.signum, self._on_signal)
        self._installed = True

    def uninstall(self) -> None:
        """Restore the previous handler and take back the note beside the request file."""
        if self._installed and self.signum is not None:
            prev = self._previous if self._previous is not None else _signal.SIG_DFL
            _signal.signal(self.signum, prev)
            self._installed = False
        if os.getpid() == self._pid:
            self._step_forget()
        if self._marker and os.getpid() == self._pid:
            try:
                os.unlink(self._marker)
            except OSError:
                pass
            self._marker = None

    def _on_signal(self, signum: int, frame: Any) -> None:
        # only flags: the file is read in the training loop, where I/O is safe
        self._pending = True
        self.signalled_at = time.time()
        self._next_check = 0.0
        self._next_discovery = 0.0
        if self.chain and callable(self._previous):
            self._previous(signum, frame)

    def __enter__(self) -> PreemptionGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # --- the request -------------------------------------------------------------------------------

    @property
    def checkpoint_requested(self) -> bool:
        """True from the signal or a new live request in the file until :meth:`ack` (or :meth:`reset`)."""
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + self.check_interval
            self.poll()
        return self._pending

    def poll(self, force: bool = False) -> None:
        """Read the request file now (``checkpoint_requested`` does it every ``check_interval``)."""
        if time.monotonic() >= self._next_discovery and self._explicit is None:
            self._discover()
        if self._marker is None and self.request_file and time.monotonic() >= self._next_announce:
            self._announce()
        if force:
            self._seen_stamp = None
        data = self._read_request()
        if data is None:
            return
        event_id = data["event_id"]
        if self.request is not None and self.request.get("event_id") == event_id:
            self.request = data  # state changes: canceled, completed
            return
        if data.get("state", "requested") != "requested" or event_id in self._handled:
            return
        why = stale_reason(data, time.time(), self._node)
        if why is not None:
            if (event_id, why) not in self._stale_logged:
                self._stale_logged.add((event_id, why))
                log.info("ignoring checkpoint request %s: %s", event_id, why)
            return
        self.request = data
        self._took(event_id)
        self._pending = True

    def _took(self, event_id: str) -> None:
        """Record how this process learnt of the request: the signal (which set the flag before the
        file was read) or the file alone, and when; the note and the ack carry it to the agent."""
        if self._pending and self.signalled_at is not None and self.signum is not None:
            via, at = self._signal_name(), self.signalled_at
        else:
            via, at = "file", time.time()  # the agent's word for it too (agent/checkpoint/seen.py)
        self.seen = {"event_id": event_id, "via": via, "at": at}
        if self.request_file is not None:
            self._announce()

    def _signal_name(self) -> str:
        try:
            return _signal.Signals(self.signum).name  # type: ignore[arg-type]
        except ValueError:
            return f"signal {self.signum}"

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
        self.poll(force=True)
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
        path = self.request_file
        if path is None:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        stamp = (st.st_ino, st.st_mtime_ns)
        if stamp == self._seen_stamp:
            return None  # unchanged since the last read
        try:
            with open(path, "rb") as f:
                data = json.loads(f.read(MAX_REQUEST_BYTES))
        except (OSError, ValueError):
            return None  # the agent writes atomically, so this is a foreign or damaged file: skip it
        self._seen_stamp = stamp
        return data if isinstance(data, dict) and isinstance(data.get("event_id"), str) else None

    def reset(self) -> None:
        """Forget the current request without acknowledging it (e.g. after a canceled notice)."""
        if self.event_id:
            self._handled.add(self.event_id)
        self._pending = False

    # --- telling the agent -------------------------------------------------------------------------

    def ack(
        self, step: int | None = None, path: str | None = None, force: bool = False, **extra: Any
    ) -> bool:
        """Tell the agent the checkpoint is durable (flush it first: :func:`tna_client.fsync_tree`).
        On ranks other than 0 this only clears the flag (unless ``force``). Returns True when the ack
        was written; on rank 0 a False is logged as an error and kept in :attr:`ack_error`."""
        if not (self.should_save or force):
            self.reset()
            return False
        if self.request is None:
            # a collective stop: another rank saw the request, and this one saves before its own
            # poll came round; the file holds the request to answer
            self.poll(force=True)
        request = self.request
        self.reset()
        self.ack_error = None
        if not request:
            self.ack_error = "no request from the agent was read, so there is nowhere to write the ack" + (
                f" (looked at: {'; '.join(self.located.looked)})" if not self.found else ""
            )
        elif not isinstance(request.get("ack_path"), str) or not request["ack_path"]:
            self.ack_error = f"request {request.get('event_id')} names no ack_path"
        if self.ack_error is None and request is not None:
            body: dict[str, Any] = {
                "event_id": request["event_id"],
                "at": time.time(),
                "pid": os.getpid(),
                "rank": self.rank,
                **extra,
            }
            if self.seen and self.seen.get("event_id") == request["event_id"]:
                body["seen_via"], body["seen_at"] = self.seen["via"], self.seen["at"]
            if step is not None:
                body["step"] = int(step)
            if path is not None:
                body["path"] = str(path)
            target = str(request["ack_path"])
            try:
                write_json_atomic(os.path.dirname(target) or ".", os.path.basename(target), body)
                return True
            except OSError as e:
                self.ack_error = f"cannot write {target}: {e}"
        log.error("checkpoint NOT acknowledged to training-node-agent: %s", self.ack_error)
        return False

    def saved(
        self,
        step: int | None = None,
        path: str | None = None,
        seconds: float | None = None,
        force: bool = False,
    ) -> bool:
        """Tell the agent a checkpoint is durable (``seconds``: how long saving took), periodic saves
        too, so its goodput ledger knows what a reclaim would lose and can advise a cadence. Writes
        ``saved-<pid>-<time_ns>.json`` beside the request file; rank 0 only unless ``force``. Never
        raises for a missing agent: returns False when the note could not be written."""
        if not (self.should_save or force) or self.request_file is None:
            return False
        now = time.time()
        body = {
            "kind": "saved",
            "step": None if step is None else int(step),
            "path": None if path is None else str(path),
            "seconds": None if seconds is None else float(seconds),
            "time": rfc3339(now),
            "pid": os.getpid(),
        }
        directory = os.path.dirname(self.request_file) or "."
        try:
            write_json_atomic(directory, f"saved-{os.getpid()}-{time.time_ns()}.json", body)
        except OSError as e:
            log.warning("cannot tell training-node-agent about the saved checkpoint: %s", e)
            return False
        return True

    def confirm(
        self,
        step: int | None,
        path: str | None,
        on_durable: Callable[[str], object] | None = None,
        seconds: float | None = None,
    ) -> bool:
        """Rank 0, after every rank finished writing: flush ``path`` to disk (files and directories),
        run ``on_durable(path)`` (an upload to object storage, say) and only then ack. A failure in
        either is logged and warned about (:class:`AckNotDelivered`) and nothing is acked. Other
        ranks only clear the flag."""
        if not self.should_save:
            self.reset()
            return False
        try:
            if path is not None and os.path.exists(path):
                fsync_tree(path)
            if on_durable is not None and path is not None:
                on_durable(path)
        except Exception as e:  # the user's hook may raise anything; the job must still stop cleanly
            self.reset()
            self.ack_error = f"checkpoint {path} is not durable: {type(e).__name__}: {e}"
            log.error("checkpoint NOT acknowledged to training-node-agent: %s", self.ack_error)
            warnings.warn(self.ack_error, AckNotDelivered, stacklevel=2)
            return False
        self.saved(step, path, seconds)
        if not self.ack(step=step, path=path):
            warnings.warn(str(self.ack_error), AckNotDelivered, stacklevel=2)
            return False
        return True
