"""/proc/<pid>/mountstats: the kernel NFS client's counters, one block per mount.

Only NFS mounts (``nfs``, ``nfs4``) are kept; every other mount has a one-line entry and is skipped.
Per mount: the ``bytes:`` line (1st number: bytes served to read() calls, page cache included;
5th: bytes the client read from the server), the transport's protocol from the first ``xprt:``
line, and the ``READ:`` line of the per-op statistics (operations, then cumulative queue, RTT and
execute times in milliseconds at positions 6, 7 and 8). ``statvers=1.0`` and ``1.1`` differ only
in the transport line, whose first token is all that is read here.

A block without its ``bytes:`` or ``READ:`` line (a truncated file) is dropped and counted.

An NFSv4 block is ~80 lines of which three matter, so blocks are cut with ``str.split`` and the
three lines found with ``str.find`` (from the block's header on, without copying its body) instead
of looking at every line in Python.
"""

from __future__ import annotations

import re

from agent.sources.host.parse import Parsed, counters
from agent.sources.storage.part import NfsMount

NFS_TYPES = frozenset({"nfs", "nfs4"})
_DEVICE = re.compile(r"(\S+) mounted on (\S+) with fstype (\S+)(?: statvers=(\S+))?")  # after "device "
_OCTAL = re.compile(r"\\([0-7]{3})")


def unescape(path: str) -> str:
    """Mount paths are printed with space, tab, newline and backslash as ``\\ooo`` octal escapes."""
    if "\\" not in path:
        return path
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), path)


def _ints(text: str, need: int) -> list[int] | None:
    n = counters(text.split(None, need)[:need])
    return n if n is not None and len(n) == need else None


def _line(block: str, key: str, start: int) -> str | None:
    """What follows ``key`` on the first line of ``block`` after ``start`` (the end of the header)
    that starts with it (after blanks)."""
    i = block.find(key, start)
    while i >= 0:
        if not block[block.rfind("\n", start, i) + 1 : i].strip():
            end = block.find("\n", i)
            return block[i + len(key) : end if end >= 0 else len(block)]
        i = block.find(key, i + 1)
    return None


def _block(header: re.Match[str], block: str, start: int) -> tuple[NfsMount | None, int]:
    """One NFS mount's block, its lines from ``start`` on: the mount, or None and how many malformed
    lines made it unusable."""
    bytes_line, read_line = _line(block, "bytes:", start), _line(block, "READ:", start)
    xprt = _line(block, "xprt:", start)
    counters = None if bytes_line is None else _ints(bytes_line, 5)
    read = None if read_line is None else _ints(read_line, 8)
    if counters is None or read is None:
        # a line that is there but unreadable is what is counted; a missing one counts once
        bad = (bytes_line is not None and counters is None) + (read_line is not None and read is None)
        return None, bad or 1
    return (
        NfsMount(
            mountpoint=unescape(header.group(2)),
            export=unescape(header.group(1)),
            protocol=xprt.split(maxsplit=1)[0] if xprt and xprt.strip() else "",
            fstype=header.group(3),
            read_bytes=counters[0],
            server_read_bytes=counters[4],
            read_ops=read[0],
            read_rtt_seconds=read[6] / 1000,
            read_exe_seconds=read[7] / 1000,
        ),
        0,
    )


def parse_mountstats(text: str) -> Parsed[list[NfsMount]]:
    mounts: list[NfsMount] = []
    bad = 0
    blocks = text.split("\ndevice ")  # each without its leading "device "
    # everything before the first "device " line belongs to no mount and is ignored
    if text.startswith("device "):
        blocks[0] = blocks[0][len("device ") :]
    else:
        del blocks[0]
    for block in blocks:
        end = block.find("\n")
        end = len(block) if end < 0 else end
        h = _DEVICE.match(block, 0, end)
        if h is None:
            bad += 1
            continue
        # a mount without statvers has no counters yet (still being set up): not an error
        if h.group(3) not in NFS_TYPES or h.group(4) is None:
            continue
        mount, broken = _block(h, block, end)
        if mount is None:
            bad += broken
        else:
            mounts.append(mount)
    return Parsed(mounts, bad)
