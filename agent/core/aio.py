"""Waiting with a time limit in loops that a reload cancels.

Not ``asyncio.wait_for``: on Python 3.11 it wraps the awaited call in a task of its own, and a
cancel that arrives while that task is finishing (an event put on the queue, or the flag set, in
the same turn of the loop as the cancel) is swallowed: ``wait_for`` returns the result and the loop
goes on. A part's loop that a reload cancelled that way never ends; it waits on a queue the bus no
longer feeds and keeps its whole generation (context, sampler, the other parts) alive: the soak's
RSS grew by ~30 KiB per SIGHUP. ``asyncio.timeout`` awaits in the caller's own task, where a cancel
always raises (and a queued item stays queued). CPython gh-86296; 3.12 rebuilt ``wait_for`` on it.
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

T = TypeVar("T")


async def next_within(queue: asyncio.Queue[T], seconds: float) -> T | None:
    """The next item of ``queue``, or None when none comes within ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            return await queue.get()
    except TimeoutError:
        return None


async def wait_within(flag: asyncio.Event, seconds: float) -> bool:
    """Wait until ``flag`` is set, at most ``seconds``; whether it was."""
    try:
        async with asyncio.timeout(seconds):
            await flag.wait()
    except TimeoutError:
        return False
    return True
