"""Signalling a target safely.

Two things can turn a checkpoint request into the loss of the job: signalling a *different* process
that got the target's pid, and signalling a process that has no handler for a signal whose default
action kills it. The first is ruled out by a pidfd opened before the start time is re-checked (the
pidfd then pins exactly the process that was verified); the second by reading ``SigCgt`` first.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from agent.checkpoint.targets import Target, read_pid_stat
from agent.core.fsread import read_optional
from agent.core.vocabulary import DeliveryOutcome, HandlerState
from agent.sources.processes.sigmask import SignalMasks, parse_signal_masks

# signals whose default action neither kills nor stops the process; everything else is harmful
# to send to a process that has not installed a handler
_HARMLESS_BY_DEFAULT = {signal.SIGCHLD, signal.SIGCONT, signal.SIGURG, signal.SIGWINCH}


@dataclass(frozen=True, slots=True)
class SignalDelivery:
    target: Target
    signal: str
    outcome: DeliveryOutcome
    detail: str = ""

    def line(self) -> str:
        return f"{self.target.describe()}: {self.outcome}" + (f" ({self.detail})" if self.detail else "")


def harmful_by_default(signum: int) -> bool:
    return signum not in _HARMLESS_BY_DEFAULT


def read_masks(procfs: str, pid: int) -> SignalMasks | None:
    text = read_optional(f"{procfs}/{pid}/status", 64 * 1024)
    if text is None:
        return None
    try:
        return parse_signal_masks(text)
    except ValueError:
        return None


def handler_state(procfs: str, pid: int, signum: int) -> HandlerState:
    """What sending ``signum`` to ``pid`` would do, for status and the drill report."""
    if not harmful_by_default(signum):
        return HandlerState.HARMLESS
    masks = read_masks(procfs, pid)
    if masks is None:
        return HandlerState.UNKNOWN
    if masks.catches(signum):
        return HandlerState.HANDLER
    return HandlerState.IGNORED if masks.ignores(signum) else HandlerState.NO_HANDLER


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError) as e:
        if isinstance(e, ProcessLookupError):
            raise
        return None  # kernel < 5.3 or no pidfd support: fall back to kill(2) right after the check


def deliver(
    target: Target, signum: int, procfs: str = "/proc", dry_run: bool = False, check_handler: bool = True
) -> SignalDelivery:
    """Send ``signum`` to ``target`` if, and only if, it is still the same process and (with
    ``check_handler``) the signal will not kill it. The final SIGTERM escalation passes
    ``check_handler=False``: it is meant to end the process. Never raises for a vanished or foreign
    process; the outcome says what happened."""
    name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else str(signum)
    try:
        fd = _open_pidfd(target.pid)
    except ProcessLookupError:
        return SignalDelivery(target, name, DeliveryOutcome.GONE, "exited")
    try:
        st = read_pid_stat(procfs, target.pid)
        if st is None or st.state in ("Z", "X"):
            return SignalDelivery(target, name, DeliveryOutcome.GONE, "exited")
        if st.start_time != target.start_time_ticks:
            return SignalDelivery(
                target,
                name,
                DeliveryOutcome.REUSED,
                f"pid now belongs to {st.comm!r}, started at tick {st.start_time}, "
                f"not {target.start_time_ticks}",
            )
        state = handler_state(procfs, target.pid, signum) if check_handler else HandlerState.UNCHECKED
        if state == HandlerState.UNKNOWN:
            return SignalDelivery(
                target, name, DeliveryOutcome.UNKNOWN, "cannot read its signal masks; not sent"
            )
        if state == HandlerState.NO_HANDLER:
            return SignalDelivery(
                target,
                name,
                DeliveryOutcome.NO_HANDLER,
                f"no {name} handler installed; sending it would kill it",
            )
        if state == HandlerState.IGNORED:
            return SignalDelivery(target, name, DeliveryOutcome.IGNORED, f"it ignores {name}")
        if dry_run:
            return SignalDelivery(target, name, DeliveryOutcome.DRY_RUN, f"would send {name}")
        try:
            if fd is not None:
                signal.pidfd_send_signal(fd, signum)
            else:
                os.kill(target.pid, signum)
        except ProcessLookupError:
            return SignalDelivery(target, name, DeliveryOutcome.GONE, "exited")
        except PermissionError:
            return SignalDelivery(target, name, DeliveryOutcome.DENIED, "permission denied")
        return SignalDelivery(target, name, DeliveryOutcome.SIGNALLED)
    finally:
        if fd is not None:
            os.close(fd)
