"""De-duplication of notices across polls and across agent restarts.

Every read of a source gives the notices present now. :class:`NoticeTracker` turns that stream into
announcements: a notice seen for the first time is announced once; one the cloud marks canceled or
completed, or that stays absent for ``withdraw_after`` successful reads in a row, is announced as
withdrawn; a notice whose deadline moves earlier is announced again with the same ``event_id``. A
read that failed says nothing about presence, so errors never withdraw anything.

A notice's identity is what the cloud means by one event. Where the cloud gives an id (Azure,
AWS and Alibaba maintenance ``EventId``) that is it. Where it gives none (spot and rebalance
notices, GCE's values), there is at most one notice of a kind per source at a time, so the
identity is the source and the kind on this instance, and the id is minted when the notice is first
seen: never derived from the body, whose time field may move on every read (AWS's own
amazon-ec2-metadata-mock recomputes it per request). A moved deadline updates the notice in place.

:class:`NoticeStore` keeps the active notices in ``<state_dir>/preemption-notices.json`` (atomic
write) so a restart during a notice does not announce it again as new.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from agent.core.events import PreemptionEvent
from agent.core.statefile import write_atomic

log = structlog.get_logger("preemption.notices")

EARLIER_BY = 1.0  # seconds a deadline must move earlier to be announced again


def notice_key(source: str, event: PreemptionEvent) -> str:
    """The identity the tracker keeps: the cloud's event id, or the source and kind when it gives none
    (a reading's notice without an id has ``event_id == ""``)."""
    return event.event_id or f"{source}/{event.kind}"


def minted_id(event: PreemptionEvent, instance: str | None) -> str:
    """``aws-spot-termination-i-0abc-20260101T120000Z``: the instance and kind, and when this
    occurrence was first seen (a stopped or hibernated spot instance can be reclaimed again later,
    and the checkpoint ledger must not take that for the old notice)."""
    seen = event.received_at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return "-".join(p for p in (event.provider, event.kind, instance, seen) if p)


@dataclass
class ActiveNotice:
    event: PreemptionEvent  # as last announced
    source: str
    last_seen: datetime
    misses: int = 0
    deadline: datetime | None = None  # the cloud's latest word (may be later than the announced one)
    key: str = ""  # see notice_key


class NoticeTracker:
    def __init__(self, withdraw_after: int = 3) -> None:
        self.withdraw_after = withdraw_after
        self.active: dict[str, ActiveNotice] = {}  # by notice_key
        self.instance: str | None = None  # the instance id once known: part of minted ids
        # every id minted or restored: a second occurrence within the same second gets "-2", not the
        # first one's id (a consumer acting once per event id would skip it). A handful a lifetime
        self.minted: set[str] = set()

    def restore(self, source: str, event: PreemptionEvent, key: str | None = None) -> None:
        key = key or event.event_id
        self.minted.add(event.event_id)
        self.active[key] = ActiveNotice(event, source, event.received_at, deadline=event.deadline, key=key)

    def find(self, event_id: str) -> ActiveNotice | None:
        return next((n for n in self.active.values() if n.event.event_id == event_id), None)

    def observe(
        self, source: str, seen: list[PreemptionEvent], withdraw_after: int | None = None
    ) -> list[PreemptionEvent]:
        """One successful read of ``source`` -> the events to announce (possibly none)."""
        out: list[PreemptionEvent] = []
        present: set[str] = set()
        for ev in seen:
            key = notice_key(source, ev)
            current = self.active.get(key)
            if ev.withdrawn:
                if current is not None:
                    del self.active[key]
                    out.append(_withdrawn(current.event, ev.received_at, ev.raw))
                continue
            present.add(key)
            if current is None:
                if not ev.event_id:
                    ev = replace(ev, event_id=self._mint(ev))
                self.active[key] = ActiveNotice(ev, source, ev.received_at, deadline=ev.deadline, key=key)
                out.append(ev)
                continue
            current.misses = 0
            current.last_seen = ev.received_at
            current.deadline = ev.deadline or current.deadline
            announced = current.event.deadline
            if (
                ev.deadline is not None
                and announced is not None
                and (announced - ev.deadline).total_seconds() > EARLIER_BY
            ):
                # moved earlier: acting on the old deadline would be late. The same notice, said again
                current.event = replace(ev, event_id=current.event.event_id, replayed=False)
                out.append(current.event)
        limit = withdraw_after or self.withdraw_after
        now = seen[0].received_at if seen else datetime.now(UTC)
        for key, notice in list(self.active.items()):
            if notice.source != source or key in present:
                continue
            notice.misses += 1
            if notice.misses >= limit:
                del self.active[key]
                out.append(_withdrawn(notice.event, now, ""))
        return out

    def _mint(self, event: PreemptionEvent) -> str:
        base = minted_id(event, self.instance)
        event_id, n = base, 1
        while event_id in self.minted:
            n += 1
            event_id = f"{base}-{n}"
        self.minted.add(event_id)
        return event_id


def _withdrawn(event: PreemptionEvent, at: datetime, raw: str) -> PreemptionEvent:
    return replace(event, withdrawn=True, received_at=at, raw=raw or event.raw, replayed=False)


# --- persistence ---------------------------------------------------------------------------------

VERSION = 1


def event_to_json(event: PreemptionEvent) -> dict[str, Any]:
    return {
        "provider": event.provider,
        "kind": event.kind,
        "event_id": event.event_id,
        "deadline": event.deadline.isoformat() if event.deadline else None,
        "received_at": event.received_at.isoformat(),
        "raw": event.raw,
    }


def event_from_json(d: dict[str, Any]) -> PreemptionEvent:
    deadline = d.get("deadline")
    return PreemptionEvent(
        provider=str(d["provider"]),
        kind=str(d["kind"]),
        event_id=str(d["event_id"]),
        deadline=datetime.fromisoformat(deadline) if deadline else None,
        received_at=datetime.fromisoformat(d["received_at"]),
        raw=str(d.get("raw", "")),
    )


def _legacy_key(source: str, event: PreemptionEvent) -> str:
    """A notice saved before keys were (an agent upgraded during a notice): one whose id was the old
    hash of its body (``aws-spot-termination-3f2a9c...``, 16 hex digits) is known by source and kind
    now, so the upgraded agent takes it for the same notice rather than announce it again."""
    prefix = f"{event.provider}-{event.kind}-"
    digest = event.event_id.removeprefix(prefix)
    hashed = event.event_id.startswith(prefix) and len(digest) == 16
    if hashed and all(c in "0123456789abcdef" for c in digest):
        return notice_key(source, replace(event, event_id=""))
    return event.event_id


class NoticeStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, provider: str) -> list[tuple[str, PreemptionEvent, str]]:
        """Active notices (source, event, identity key) saved by an earlier run for ``provider``.
        An unreadable file is kept aside as ``*.corrupt`` (nothing is silently lost) and the watcher
        starts empty."""
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            self._set_aside(f"unreadable: {e}")
            return []
        try:
            if doc.get("version") != VERSION:
                raise ValueError(f"version {doc.get('version')!r}")
            if doc.get("provider") != provider:
                log.info("saved notices are for another provider; ignoring them", saved=doc.get("provider"))
                return []
            return [
                (str(item["source"]), ev, str(item.get("key") or _legacy_key(str(item["source"]), ev)))
                for item in doc["active"]
                if (ev := event_from_json(item["event"]))
            ]
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            self._set_aside(f"unexpected content: {e}")
            return []

    def _set_aside(self, why: str) -> None:
        aside = self.path.with_suffix(".corrupt")
        with contextlib.suppress(OSError):
            os.replace(self.path, aside)
        log.error(
            "saved preemption notices unusable; set aside", path=str(self.path), aside=str(aside), why=why
        )

    def save(self, provider: str, active: dict[str, ActiveNotice]) -> None:
        doc = {
            "version": VERSION,
            "provider": provider,
            "saved_at": datetime.now(UTC).isoformat(),
            "active": [
                {"source": n.source, "key": n.key, "event": event_to_json(n.event)} for n in active.values()
            ],
        }
        write_atomic(self.path, json.dumps(doc, indent=1).encode())
