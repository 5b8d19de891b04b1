"""Feishu / Lark custom bot (飞书自定义机器人): an interactive card or text, optionally signed.

Signing: timestamp in seconds; HMAC-SHA256 keyed with ``"{timestamp}\\n{secret}"`` over an empty
message, base64; ``timestamp`` and ``sign`` go in the JSON body. Success is ``code == 0`` (older
deployments answer ``StatusCode == 0``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from agent.alerts.i18n import t
from agent.alerts.message import Message
from agent.alerts.services.base import (
    Channel,
    Outcome,
    Reply,
    Request,
    coded_outcome,
    fit_lines,
    hint_text,
    http_outcome,
    json_body,
    parse_json,
    retry_after_seconds,
    snippet,
)
from agent.core.vocabulary import ChannelType, Severity, Style

RATE_LIMITED = frozenset({11232, 99991400})  # bot frequency limit; gateway frequency limit
CONFIG_ERRORS = frozenset({19021, 19022, 19024})  # signature/timestamp, IP not allowed, keyword missing
_BUDGET = 18000  # the service refuses request bodies over 20 KB
_TEMPLATES: dict[str, str] = {Severity.CRITICAL: "red", Severity.WARNING: "orange", Severity.INFO: "blue"}


def sign(secret: str, timestamp_s: int) -> str:
    mac = hmac.new(f"{timestamp_s}\n{secret}".encode(), b"", hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


class Feishu(Channel):
    type = ChannelType.FEISHU
    styles = (Style.CARD, Style.TEXT)
    rates = ("5/1s", "100/1m")
    example_url = "https://open.feishu.cn/open-apis/bot/v2/hook/HOOK-ID"
    example_secret = "SECexample"

    def card(self, msg: Message, lines: list[str]) -> dict[str, Any]:
        elements: list[dict[str, Any]] = []
        if msg.fields:
            elements.append(
                {
                    "tag": "div",
                    "fields": [
                        {
                            "is_short": len(value) <= 40,
                            "text": {"tag": "lark_md", "content": f"**{label}**\n{value}"},
                        }
                        for label, value in msg.fields
                    ],
                }
            )
        if lines:
            elements.append({"tag": "div", "text": {"tag": "lark_md", "content": "\n".join(lines)}})
        for hint in hint_text(msg):
            elements.append({"tag": "div", "text": {"tag": "lark_md", "content": hint}})
        link = self.link_for(msg)
        if link:
            button: dict[str, Any] = {"tag": "button", "type": "primary", "url": link}
            button["text"] = {"tag": "plain_text", "content": t("open_link", msg.language)}
            elements.append({"tag": "action", "actions": [button]})
        elements.append({"tag": "hr"})
        elements.append({"tag": "note", "elements": [{"tag": "plain_text", "content": msg.footer}]})
        template = "green" if msg.resolved else _TEMPLATES.get(msg.severity, "blue")
        return {
            "config": {"wide_screen_mode": True},
            "header": {"template": template, "title": {"tag": "plain_text", "content": self.title(msg)}},
            "elements": elements,
        }

    def payload(self, msg: Message) -> dict[str, Any]:
        bullets = [f"- {line}" for line in msg.lines]
        if self.style == Style.TEXT:
            return {"msg_type": "text", "content": {"text": self.plain(msg, _BUDGET)}}
        used = len(json_body(self.card(msg, [])))
        return {
            "msg_type": "interactive",
            "card": self.card(msg, fit_lines(bullets, _BUDGET - used, msg.language)),
        }

    def build(self, msg: Message) -> Request:
        body: dict[str, Any] = {}
        if self.secret:
            ts = int(self.clock())
            body = {"timestamp": str(ts), "sign": sign(self.secret, ts)}
        body.update(self.payload(msg))
        return Request(self.url, json_body(body))

    def judge(self, reply: Reply) -> Outcome:
        if reply.status == 429:
            wait = retry_after_seconds(reply.headers, "x-ogw-ratelimit-reset")
            return Outcome(False, True, "rate_limited", "HTTP 429", snippet(reply.body), wait)
        if (early := http_outcome(reply)) is not None:
            return early
        data = parse_json(reply)
        if data is None:
            if reply.status != 200:
                return Outcome(False, False, "http_4xx", f"HTTP {reply.status}", snippet(reply.body))
            return Outcome(False, True, "bad_reply", "", snippet(reply.body))
        code = data.get("code", data.get("StatusCode"))
        if data.get("StatusCode") == 0:
            code = 0
        if code is None:
            return Outcome(False, True, "bad_reply", f"HTTP {reply.status}", snippet(reply.body))
        detail = snippet(str(data.get("msg") or data.get("StatusMessage") or f"HTTP {reply.status}"))
        return coded_outcome(code, detail, RATE_LIMITED, CONFIG_ERRORS)
