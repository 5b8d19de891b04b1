"""/sys/class/net/<if>/* single-value files."""

from __future__ import annotations

from agent.sources.host.parse import Parsed

MEGABIT_BYTES = 125_000  # the speed file is in Mb/s (10^6 bits)


def parse_speed(text: str) -> Parsed[int | None]:
    """Link capacity in bytes/s. ``-1`` (virtio, bonds without slaves, a link that is down) and 0 mean
    unknown: ``None``, not malformed. Anything that is not an integer is malformed."""
    try:
        mbit = int(text.strip())
    except ValueError:
        return Parsed(None, 1)
    return Parsed(mbit * MEGABIT_BYTES if mbit > 0 else None, 0)
