"""The sampler and the supervisor contain failures: a raising collector, a crashing task."""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time

from agent.core.events import CollectorFailingEvent, EventBus
from agent.faults.collectors import CollectorFailureWatch
from agent.runtime import sampler as sampler_module
from agent.runtime.sampler import Sampler
from agent.runtime.supervisor import Supervisor
from agent.sources import SourceAbsent
from agent.sources.host.collector import HostCollector
from agent.sources.storage.part import DiskStat, StoragePart
from agent.sources.storage.rates import StorageRates


class Raising:
    name = "broken"
    part = "storage"

    def __init__(self) -> None:
        self.calls = 0

    def collect(self):
        self.calls += 1
        raise OSError(5, "Input/output error")

    def close(self):
        pass


class Absent:
    name = "gpu"
    part = "gpu"

    def collect(self):
        raise SourceAbsent("no libnvidia-ml.so.1")

    def close(self):
        pass


class Counter:
    """A storage collector whose read counter goes up by 1000 bytes a call, then resets."""

    name = "storage"
    part = "storage"

    def __init__(self, values):
        self.values = list(values)

    def collect(self):
        sectors = self.values.pop(0)
        d = DiskStat("vda", 1, 0, sectors, 0.0, 0, 0, 0.0, 0, 0.0)
        return StoragePart(disks=(d,), nfs=())

    def close(self):
        pass


def test_raising_collector_is_contained_and_reported():
    async def go():
        bus = EventBus()
        q = bus.subscribe("t")
        broken = Raising()
        s = Sampler([broken, Absent(), HostCollector("/proc")], interval=0.05, timeout=1, stall_after=10)
        watch = CollectorFailureWatch(bus, s.failing_for, after=0.1)
        s.listeners.append(watch.on_snapshot)
        snaps = []
        for _ in range(6):
            snaps.append(await s.tick())
            await asyncio.sleep(0.05)
        s.close()
        return snaps, broken, q

    snaps, broken, q = asyncio.run(go())
    last = snaps[-1]
    assert broken.calls == 6
    assert last.collectors["broken"].success is False
    assert "Input/output error" in last.collectors["broken"].error
    assert last.collectors["gpu"].absent and not last.collectors["gpu"].success
    assert last.collectors["host"].success and last.parts.get("host") is not None
    events = []
    while not q.empty():
        events.append(q.get_nowait())
    failing = [e for e in events if isinstance(e, CollectorFailingEvent)]
    # announced once, not on every tick; an absent source is not a failure
    assert [e.collector for e in failing] == ["broken"]


def test_rates_skip_counter_resets():
    async def go():
        s = Sampler([Counter([0, 2, 4, 1, 3])], interval=0.05, timeout=1, stall_after=10)
        out = []
        for _ in range(5):
            out.append(await s.tick())
            await asyncio.sleep(0.05)
        s.close()
        return out

    reads = [sn.rates.of(StorageRates).disk_read for sn in asyncio.run(go())]
    assert reads[0] == {}
    assert reads[1]["vda"] > 0
    assert "vda" not in reads[3]  # 4 -> 1 sectors: a reset, no negative rate
    assert reads[4]["vda"] > 0
    assert all(v >= 0 for r in reads for v in r.values())


class LaggingReader:
    """A storage collector that reads a counter growing at exactly 1 MB/s of its own clock, then
    (as a thread switch would) returns 0-60 ms late, differently every call."""

    name = "storage"
    part = "storage"

    def __init__(self, seed: int) -> None:
        self.lags = random.Random(seed)

    def collect(self):
        at = time.monotonic()
        sectors = int(at * 1e6 / 512)
        time.sleep(self.lags.uniform(0.0, 0.06))
        d = DiskStat("vda", 1, 0, sectors, 0.0, 0, 0, 0.0, 0, 0.0)
        return StoragePart(disks=(d,), nfs=(), read_at=at)

    def close(self):
        pass


def test_rates_span_the_reads_not_the_returns():
    async def go():
        s = Sampler([LaggingReader(3)], interval=0.1, timeout=1, stall_after=10)
        out = []
        for _ in range(12):
            out.append(await s.tick())
            await asyncio.sleep(0.1)
        s.close()
        return out

    reads = [sn.rates.of(StorageRates).disk_read for sn in asyncio.run(go())]
    rates = [r["vda"] for r in reads if "vda" in r]
    assert len(rates) >= 8
    # a sector's rounding is the only error left; timed by the returns, rates stray by tens of percent
    assert all(abs(r - 1e6) < 0.02e6 for r in rates), rates


def test_collectors_stamp_their_counter_reads():
    from agent.sources.network.collector import NetworkCollector
    from agent.sources.storage.collector import StorageCollector

    for c in (StorageCollector("/proc", "^$"), NetworkCollector("/proc", "/sys", "^$")):
        before = time.monotonic()
        part = c.collect()
        after = time.monotonic()
        c.close()
        assert part.read_at is not None and before <= part.read_at <= after, c.name


def test_supervisor_restarts_crashing_task_with_backoff():
    async def go():
        sup = Supervisor(min_backoff=0.1, max_backoff=1.0)
        starts: list[float] = []

        async def flaky():
            starts.append(time.monotonic())
            if len(starts) < 4:
                raise RuntimeError("boom")
            await asyncio.sleep(10)

        sup.start("flaky", flaky)
        for _ in range(250):
            await asyncio.sleep(0.02)
            if len(starts) >= 4:
                break
        state = sup.states["flaky"]
        await sup.stop()
        return starts, state

    starts, state = asyncio.run(go())
    assert len(starts) == 4 and state.restarts == 3
    assert state.last_error == "RuntimeError: boom"
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # the backoff doubles from 0.1 s with equal jitter (the upper half of each doubling); a loaded
    # machine only makes a gap longer, so each gap's lower bound holds, and the third one's (0.2 s) is
    # past the first one's upper (0.1 s)
    for i, gap in enumerate(gaps):
        assert gap >= 0.5 * 0.1 * 2**i - 0.005, gaps


class Recording:
    """A storage-like collector that notes the thread and the time of each call, and can be slow."""

    part = "storage"

    def __init__(self, name: str, seconds: float = 0.0) -> None:
        self.name = name
        self.seconds = seconds
        self.calls: list[tuple[int, float, float]] = []  # thread, start, end

    def collect(self):
        start = time.monotonic()
        time.sleep(self.seconds)
        self.calls.append((threading.get_ident(), start, time.monotonic()))
        return StoragePart(disks=(), nfs=())

    def close(self):
        pass


def test_quick_collectors_run_one_after_another_in_one_thread(monkeypatch):
    # no second worker unless a call outlasts STAGGER: none of these comes near it
    monkeypatch.setattr(sampler_module, "STAGGER", 10.0)
    cs = [Recording(f"c{i}") for i in range(4)]

    async def go():
        s = Sampler(cs, interval=1.0, timeout=5, stall_after=10)
        for _ in range(3):
            snap = await s.tick()
            assert all(snap.collectors[c.name].success for c in cs)
        s.close()

    asyncio.run(go())
    for tick in range(3):
        calls = sorted((c.calls[tick] for c in cs), key=lambda call: call[1])
        assert len({thread for thread, _, _ in calls}) == 1
        assert all(a[2] <= b[1] for a, b in itertools.pairwise(calls))  # never two at once


def test_slow_collector_is_passed_after_stagger():
    quick, slow, after = Recording("quick"), Recording("slow", seconds=1.0), Recording("after")

    async def go():
        s = Sampler([quick, slow, after], interval=2.0, timeout=5, stall_after=10)
        snap = await s.tick()
        s.close()
        return snap

    snap = asyncio.run(go())
    assert snap.collectors["after"].success and snap.collectors["slow"].success
    (_, after_start, _), (_, _, slow_end) = after.calls[0], slow.calls[0]
    assert after_start < slow_end - 0.5  # started beside the slow call, not behind it


def test_call_returning_after_the_tick_is_used_by_the_next():
    """A call slower than the tick waits for (but within its timeout) still gives its part."""
    slow = Recording("slow", seconds=0.3)

    async def go():
        s = Sampler([slow], interval=0.2, timeout=5, stall_after=10)  # a tick waits 0.16 s
        first = await s.tick()
        await asyncio.sleep(0.4)  # the call returns meanwhile
        second = await s.tick()
        s.close()
        return first, second

    first, second = asyncio.run(go())
    assert "storage" not in first.parts and "slow" not in first.collectors
    assert "storage" in second.parts and second.collectors["slow"].success
    assert second.collectors["slow"].duration_seconds >= 0.3


class HangsOnce:
    """A storage-like collector whose first call hangs until ``release``, and that declares
    ``join_after`` as the GPU collector does (which keeps a joined call out of what hangs)."""

    name, part = "hangs", "storage"

    def __init__(self, join_after: float | None) -> None:
        self.join_after = join_after
        self.release = threading.Event()
        self.parts: list[tuple[float, StoragePart]] = []  # (when the call started, what it returned)

    def collect(self):
        part = StoragePart(disks=(), nfs=())
        self.parts.append((time.monotonic(), part))
        if len(self.parts) == 1:
            self.release.wait(10)
        return part

    def close(self):
        self.release.set()


def test_a_call_running_past_join_after_is_joined_and_its_late_outcome_dropped():
    c = HangsOnce(join_after=0.3)

    async def go():
        s = Sampler([c], interval=0.1, timeout=5, stall_after=10)
        t0 = time.monotonic()
        snaps = []
        while time.monotonic() - t0 < 0.7:
            snaps.append((time.monotonic() - t0, await s.tick()))
            await asyncio.sleep(0.1)
        c.release.set()  # the first call returns now: too late, a newer one has answered
        await asyncio.sleep(0.2)
        stale = s._slots[0].outcome  # what the late return left for the loop to settle
        last = await s.tick()
        reason = s.stall_reason()
        s.close()
        return snaps, stale, last, reason

    snaps, stale, last, reason = asyncio.run(go())
    (first_at, first), (second_at, second) = c.parts[0], c.parts[1]
    assert second_at - first_at >= 0.3  # joined once the first call had run join_after, not before
    assert all("storage" not in snap.parts for at, snap in snaps if at < 0.3)
    shown = [snap.parts["storage"] for _, snap in snaps if "storage" in snap.parts]
    assert shown and shown[0] is second and all(p is not first for p in shown)
    assert stale is None  # the first call's outcome was dropped, not settled
    assert last.collectors["hangs"].success and last.parts["storage"] is not first
    assert reason is None


def test_a_collector_without_join_after_is_never_called_twice_at_once():
    c = HangsOnce(join_after=None)

    async def go():
        s = Sampler([c], interval=0.1, timeout=5, stall_after=10)
        for _ in range(6):
            await s.tick()
            await asyncio.sleep(0.1)
        calls = len(c.parts)
        c.release.set()
        s.close()
        return calls

    assert asyncio.run(go()) == 1
