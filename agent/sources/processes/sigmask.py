"""The signal dispositions in /proc/<pid>/status (``SigCgt``, ``SigIgn``, ``SigBlk``): hex bit sets,
bit ``n-1`` for signal ``n``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SignalMasks:
    caught: int  # SigCgt: a handler is installed
    ignored: int  # SigIgn
    blocked: int  # SigBlk of the thread the file describes (informative only)

    def catches(self, signum: int) -> bool:
        return bool(self.caught >> (signum - 1) & 1)

    def ignores(self, signum: int) -> bool:
        return bool(self.ignored >> (signum - 1) & 1)


def parse_signal_masks(status_text: str) -> SignalMasks:
    """Raises ``ValueError`` when ``SigCgt`` is missing or not hex: then nothing is known, and a
    caller deciding whether a signal is safe to send must not guess."""
    values: dict[str, str] = {}
    for line in status_text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.startswith("Sig"):
            values[key] = value.strip()
    try:
        caught = int(values["SigCgt"], 16)
    except (KeyError, ValueError):
        raise ValueError("no readable SigCgt line in /proc/<pid>/status") from None

    def mask(key: str) -> int:
        try:
            return int(values.get(key, "0"), 16)
        except ValueError:
            return 0

    return SignalMasks(caught=caught, ignored=mask("SigIgn"), blocked=mask("SigBlk"))
