"""Slack incoming webhook: Block Kit (header, fields, reasons, button, context) or mrkdwn text.

Success is HTTP 200 with the body ``ok``. 429 carries ``Retry-After``; other 4xx are permanent, with
the reason in the body (``invalid_token``, ``no_service``, ``channel_is_archived`` ...).
"""

from __future__ import annotations

from typing import Any

from agent.alerts.i18n import t
from agent.alerts.message import Message
from agent.alerts.services.base import (
    OK,
    Channel,
    Outcome,
    Reply,
    Request,
    fit_lines,
    hint_text,
    http_outcome,
    json_body,
    snippet,
)
from agent.core.vocabulary import ChannelType, Style

HEADER_LIMIT = 150  # characters of a header block
SECTION_LIMIT = 3000  # characters of a section's text
FIELD_LIMIT = 2000  # characters of one field
TEXT_LIMIT = 40000  # characters of the top-level text
CONFIG_ERRORS = frozenset(
    {
        "invalid_token",
        "no_service",
        "no_team",
        "team_disabled",
        "channel_not_found",
        "channel_is_archived",
        "action_prohibited",
        "posting_to_general_channel_denied",
        "user_not_found",
    }
)


def escape(text: str) -> str:
    """mrkdwn treats &, < and > as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Slack(Channel):
    type = ChannelType.SLACK
    styles = (Style.BLOCKS, Style.TEXT)
    rates = ("1/1s",)
    example_url = "https://hooks.slack.com/services/T000/B000/XXXX"

    def blocks(self, msg: Message) -> list[dict[str, Any]]:
        title = _cut(self.title(msg), HEADER_LIMIT)
        blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": title}}]
        fields = [
            {"type": "mrkdwn", "text": _cut(f"*{escape(label)}*\n{escape(value)}", FIELD_LIMIT)}
            for label, value in msg.fields
        ]
        for i in range(0, len(fields), 10):  # ten fields to a section
            blocks.append({"type": "section", "fields": fields[i : i + 10]})
        if msg.lines:
            lines = fit_lines([f"• {escape(x)}" for x in msg.lines], SECTION_LIMIT, msg.language, size=len)
            blocks.append(
                {"type": "section", "text": {"type": "mrkdwn", "text": _cut("\n".join(lines), SECTION_LIMIT)}}
            )
        for hint in hint_text(msg, bold="*"):
            blocks.append(
                {"type": "section", "text": {"type": "mrkdwn", "text": _cut(escape(hint), SECTION_LIMIT)}}
            )
        link = self.link_for(msg)
        if link:
            button = {"type": "button", "text": {"type": "plain_text", "text": t("open_link", msg.language)}}
            button["url"] = link
            blocks.append({"type": "actions", "elements": [button]})
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": escape(msg.footer)}]})
        return blocks

    def text(self, msg: Message) -> str:
        head = [f"*{escape(self.title(msg))}*", *(f"*{escape(k)}*: {escape(v)}" for k, v in msg.fields)]
        lines = fit_lines([f"• {escape(x)}" for x in msg.lines], SECTION_LIMIT, msg.language, size=len)
        tail = [escape(x) for x in hint_text(msg, bold="*")] + [escape(msg.footer)]
        return _cut("\n".join([*head, *lines, *tail]), TEXT_LIMIT)

    def build(self, msg: Message) -> Request:
        if self.style == Style.TEXT:
            return Request(self.url, json_body({"text": self.text(msg)}))
        # the top-level text is what notifications and screen readers show
        return Request(
            self.url, json_body({"text": _cut(self.title(msg), TEXT_LIMIT), "blocks": self.blocks(msg)})
        )

    def judge(self, reply: Reply) -> Outcome:
        if (early := http_outcome(reply)) is not None:
            return early
        body = reply.body.strip()
        if reply.status == 200:
            return OK if body == "ok" else Outcome(False, True, "bad_reply", "HTTP 200", snippet(body))
        reason = "config_error" if body in CONFIG_ERRORS else "rejected"
        return Outcome(False, False, reason, f"HTTP {reply.status}", snippet(body))
