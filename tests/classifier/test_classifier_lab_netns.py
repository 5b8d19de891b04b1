"""The lab's link names: a namespace a killed run left behind keeps its name, and a new lab run
must pick another instead of failing on "ip netns add classifier836: File exists" (a CI run did)."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import need_binary, need_root

import lab.netns as netns

pytestmark = pytest.mark.root


def test_a_name_left_behind_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    need_root("creates a network namespace")
    need_binary("ip", "iproute2")
    monkeypatch.setattr(netns, "_COUNT", iter(range(10_000)))
    first = netns._tag()  # the name the next one would have taken, left behind by "another run"
    monkeypatch.setattr(netns, "_COUNT", iter(range(10_000)))
    stale = f"classifier{first}"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        tag = netns._tag()
        assert tag != first
        assert not os.path.exists(f"/run/netns/classifier{tag}")
    finally:
        subprocess.run(["ip", "netns", "del", stale], check=False)
