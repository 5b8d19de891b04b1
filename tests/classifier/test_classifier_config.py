"""[classifier]: bad values get one clear line each (tests/test_daemon.py checks the shipped defaults)."""

from __future__ import annotations

import pytest

from agent.config import ConfigError, parse_config


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"iowait": [0.3, 0.1]}, "classifier.iowait: a ramp is [start, full] with 0 <= start < full"),
        ({"exit_score": 0.6, "enter_score": 0.5}, "exit_score must not exceed enter_score"),
        ({"window": "5s", "evaluate_every": "10s"}, "evaluate_every must not exceed window"),
        ({"window": 60}, "classifier.window: expected a duration string"),
        ({"nic_capacity": {"eth0": "fast"}}, "classifier.nic_capacity.eth0: expected a size"),
        ({"publish": ["data", "slow"]}, "classifier.publish[1]"),
        ({"confirmations": 0}, "classifier.confirmations"),
        ({"threshold": 1}, "classifier.threshold: unknown key"),
    ],
)
def test_bad_values_are_refused_with_the_key(values: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({"classifier": values})
    assert any(message in p for p in e.value.problems), e.value.problems


def test_sizes_and_durations_read_as_humans_write_them() -> None:
    c = parse_config(
        {
            "classifier": {
                "window": "1.5s",
                "evaluate_every": "500ms",
                "nfs_capacity": {"/mnt/data": "1.2GB/s"},
                "learn_floor": "1MiB",
            }
        }
    ).classifier
    assert c.window == 1.5 and c.nfs_capacity == {"/mnt/data": 1.2e9} and c.learn_floor == 1024**2
