"""The one token bucket (agent/core/tokens.py), under the chat limits, the metrics port's request
limit and its TLS handshake gate."""

from __future__ import annotations

from conftest import REPO

from agent.core.tokens import TokenBucket


def test_it_starts_full_spends_and_refills_at_its_rate():
    now = [0.0]
    b = TokenBucket(3, 2.0, lambda: now[0])
    assert b.available() == 3 and b.wait_time() == 0.0
    assert [b.try_take() for _ in range(4)] == [True, True, True, False]
    assert b.wait_time() == 0.5
    now[0] = 0.5
    assert b.available() == 1 and b.try_take() and not b.try_take()
    now[0] = 100.0
    assert b.available() == 3  # never past its capacity


def test_take_spends_even_an_empty_bucket():
    now = [0.0]
    b = TokenBucket(1, 1.0, lambda: now[0])
    b.take()
    b.take()
    assert b.available() == 0 and b.wait_time() == 2.0


def test_float_dust_is_a_token():
    now = [0.0]
    b = TokenBucket(1, 10.0, lambda: now[0])
    assert b.try_take()
    now[0] = 0.1 - 1e-12  # 0.99999999999 tokens
    assert b.try_take()


def test_no_other_bucket_is_kept():
    """Every rate limit spends tokens from agent/core/tokens.py; a second refill is a second rule."""
    helper = REPO / "agent" / "core" / "tokens.py"
    keepers = [p for p in (REPO / "agent").rglob("*.py") if p != helper and "self._tokens" in p.read_text()]
    assert keepers == []
    assert "self._tokens" in helper.read_text()
