"""The production limits, on a fake clock: no window ever holds more than the service allows, and the
bucket still lets a burst out at once and keeps a useful steady rate."""

from __future__ import annotations

import pytest

from agent.alerts.ratelimit import Limiter
from agent.alerts.services import channel_class
from agent.config.alerts import parse_rate


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def greedy(rates: tuple[tuple[int, float], ...], seconds: float) -> list[float]:
    """Send whenever the limiter allows, for ``seconds`` of fake time; the send times."""
    clock = FakeClock()
    limiter = Limiter(rates, clock)
    start = clock.now
    sent: list[float] = []
    while clock.now - start < seconds:
        wait = limiter.wait_time()
        if wait > 0:
            clock.now += wait
            continue
        limiter.take()
        sent.append(clock.now - start)
    return sent


def most_in_window(times: list[float], window: float, closed: bool) -> int:
    best = 0
    for i, t in enumerate(times):
        end = t + window
        n = sum(1 for u in times[i:] if (u <= end + 1e-9 if closed else u < end - 1e-9))
        best = max(best, n)
    return best


@pytest.mark.parametrize("service", ["dingtalk", "feishu", "wecom", "slack"])
def test_production_limits_hold_in_every_window(service: str) -> None:
    rates = tuple(parse_rate(r) for r in channel_class(service).rates)
    sent = greedy(rates, 600)
    for count, period in rates:
        assert most_in_window(sent, period, closed=False) <= count, (service, count, period)
        if count > 1:  # with a burst there is slack even for a window closed at both ends
            assert most_in_window(sent, period, closed=True) <= count, (service, count, period)


@pytest.mark.parametrize(
    ("service", "burst", "at_least_in_10_min"),
    [("dingtalk", 5, 150), ("wecom", 5, 150), ("feishu", 2, 750), ("slack", 1, 600)],
)
def test_bursts_go_out_at_once_and_the_steady_rate_stays_useful(
    service: str, burst: int, at_least_in_10_min: int
) -> None:
    rates = tuple(parse_rate(r) for r in channel_class(service).rates)
    sent = greedy(rates, 600)
    assert sum(1 for t in sent if t == 0) == burst
    assert len(sent) >= at_least_in_10_min


def test_available_and_wait() -> None:
    clock = FakeClock()
    limiter = Limiter(((20, 60.0),), clock)
    assert limiter.available() == 5 and limiter.wait_time() == 0
    for _ in range(5):
        limiter.take()
    assert limiter.available() == 0
    assert limiter.wait_time() == pytest.approx(4.0)  # 15 tokens a minute
    clock.now += 4.0
    assert limiter.available() == 1
    assert Limiter((), clock).available() > 1000  # no limit configured
