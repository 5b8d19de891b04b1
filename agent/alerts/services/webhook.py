"""Generic JSON webhook in Alertmanager's webhook format (version 4), so existing receivers
(alertmanager-webhook adapters, PrometheusAlert, custom handlers) work unchanged.

With a ``secret`` the body is signed: header ``X-Training-Node-Agent-Signature: sha256=<hex HMAC of
the body>``.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime
from typing import Any

from agent.alerts.message import Message
from agent.alerts.services.base import OK, Channel, Outcome, Reply, Request, http_outcome, json_body, snippet
from agent.core.vocabulary import ChannelType, Style

SIGNATURE_HEADER = "X-Training-Node-Agent-Signature"
ZERO_TIME = "0001-01-01T00:00:00Z"  # what Alertmanager sends as endsAt of a firing alert


def rfc3339(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def alert(msg: Message, generator_url: str) -> dict[str, Any]:
    text = [f"{label}: {value}" for label, value in msg.fields] + list(msg.lines)
    annotations = {"summary": msg.title, "description": "\n".join(text)}
    if msg.hint:
        annotations["hint"] = msg.hint[1]
    if msg.deadline is not None:
        annotations["deadline"] = rfc3339(msg.deadline)
    return {
        "status": "resolved" if msg.resolved else "firing",
        "labels": dict(msg.labels) or {"alertname": "TrainingNodeAlert", "node": msg.node.hostname},
        "annotations": annotations,
        "startsAt": rfc3339(msg.starts_at or msg.at),
        "endsAt": rfc3339(msg.at) if msg.resolved else ZERO_TIME,
        "generatorURL": generator_url,
        "fingerprint": hashlib.sha256(msg.fingerprint.encode()).hexdigest()[:16],
    }


def _common(dicts: list[dict[str, str]]) -> dict[str, str]:
    first = dicts[0]
    return {k: v for k, v in first.items() if all(d.get(k) == v for d in dicts[1:])}


def payload(msg: Message, receiver: str, generator_url: str = "") -> dict[str, Any]:
    """One message, or every member of a digest, as one Alertmanager notification."""
    alerts = [alert(m, generator_url) for m in (msg.items or (msg,))]
    group = {"node": msg.node.hostname}
    return {
        "version": "4",
        "groupKey": "{}:{" + ",".join(f'{k}="{v}"' for k, v in group.items()) + "}",
        "truncatedAlerts": 0,
        "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
        "receiver": receiver,
        "groupLabels": group,
        "commonLabels": _common([a["labels"] for a in alerts]),
        "commonAnnotations": _common([a["annotations"] for a in alerts]),
        "externalURL": generator_url,
        "alerts": alerts,
    }


class Webhook(Channel):
    type = ChannelType.WEBHOOK
    styles = (Style.ALERTMANAGER,)
    rates = ()  # a receiver you run yourself: no limit unless you set one
    example_url = "https://alert-receiver.example/hook"
    idempotent = True  # Alertmanager format: each alert carries its fingerprint, status and times

    def build(self, msg: Message) -> Request:
        body = json_body(payload(msg, self.name, self.link_for(msg) or ""))
        req = Request(self.url, body)
        if self.secret:
            req.headers[SIGNATURE_HEADER] = (
                "sha256=" + hmac.new(self.secret.encode(), body, "sha256").hexdigest()
            )
        return req

    def judge(self, reply: Reply) -> Outcome:
        if (early := http_outcome(reply)) is not None:
            return early
        if 200 <= reply.status < 300:
            return OK
        return Outcome(False, False, "http_4xx", f"HTTP {reply.status}", snippet(reply.body))
