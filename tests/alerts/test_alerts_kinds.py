"""Every kind of event the alerter may receive has an entry in ``kinds.KINDS`` (its facts and its
wording): a new event in ``agent/core/events.py`` is named here until it has one."""

from __future__ import annotations

import inspect

from agent.alerts.alerter import EVENT_TYPES
from agent.alerts.kinds import KINDS
from agent.core import events

# events the alerter reads but says nothing of
NOT_ALERTS = {events.InstanceIdentityEvent}  # the node's identity, for every message's scene


def _event_types() -> set[type[events.Event]]:
    return {
        c
        for _, c in inspect.getmembers(events, inspect.isclass)
        if issubclass(c, events.Event) and c is not events.Event and c.__module__ == events.__name__
    }


def test_every_event_kind_has_its_facts_and_wording() -> None:
    missing = sorted(c.__name__ for c in _event_types() - NOT_ALERTS - set(KINDS))
    assert not missing, f"no entry in agent/alerts/kinds.py KINDS for {', '.join(missing)}"


def test_the_alerter_receives_every_kind_it_has_words_for() -> None:
    assert set(EVENT_TYPES) == set(KINDS) | NOT_ALERTS
    assert not NOT_ALERTS & set(KINDS)
