"""Time zones by name (``[alerts] timezone``). UTC and fixed offsets are built in, so a default config
loads on a minimal system; IANA names come from the tz database, the system's (``/usr/share/zoneinfo``,
Debian's ``tzdata`` package) or else the ``tzdata`` Python package, a dependency of the agent."""

from __future__ import annotations

import functools
import re
import zoneinfo
from datetime import UTC, timedelta, timezone, tzinfo

UTC_NAMES = frozenset({"UTC", "Etc/UTC"})
# "+08:00", "-0530", "UTC+8", "UTC-03:30"; no "GMT+8": in the tz database Etc/GMT+8 means UTC-8
_OFFSET = re.compile(r"^(?:UTC)?([+-])(\d{1,2})(?::?(\d{2}))?$")
FORMS = 'an IANA name like "Asia/Shanghai", "UTC", or a fixed offset like "+08:00"'


class ZoneError(ValueError):
    """A time zone name that cannot be used here; the message says why and what to do."""


def _offset(name: str) -> tzinfo | None:
    m = _OFFSET.match(name)
    if m is None:
        return None
    sign, hours, minutes = m.group(1), int(m.group(2)), int(m.group(3) or 0)
    if hours > 23 or minutes > 59:
        raise ZoneError(f"time zone {name!r}: an offset is at most 23:59 ({FORMS})")
    offset = timedelta(hours=hours, minutes=minutes) * (-1 if sign == "-" else 1)
    return timezone(offset) if offset else UTC


def _database() -> bool:
    """Whether zoneinfo finds any tz database at all (the system's or the tzdata package's)."""
    try:
        zoneinfo.ZoneInfo("Etc/UTC")
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


@functools.lru_cache(maxsize=64)
def zone(name: str) -> tzinfo:
    """The ``tzinfo`` for ``name``, or :class:`ZoneError`."""
    if name in UTC_NAMES:
        return UTC
    fixed = _offset(name)
    if fixed is not None:
        return fixed
    try:
        return zoneinfo.ZoneInfo(name)
    # ValueError: a malformed key or file; OSError: a directory of the database ("America")
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        pass
    if not _database():
        raise ZoneError(
            f"time zone {name!r} needs the IANA tz database, and none was found (searched "
            f"{', '.join(zoneinfo.TZPATH) or 'no TZPATH'} and the tzdata Python package): install the "
            "system's tzdata package (apt-get install tzdata) or the tzdata Python package into the "
            "agent's environment (pip install tzdata), or use UTC or a fixed offset like +08:00"
        )
    raise ZoneError(f"unknown time zone {name!r} ({FORMS})")
