"""WeCom group robot (企业微信群机器人): markdown or text.

Markdown content is at most 4096 bytes of UTF-8 and text content 2048; longer content is cut on a
character boundary (the service would refuse it with errcode 40058). Success is ``errcode == 0``.
"""

from __future__ import annotations

from agent.alerts.channel import (
    OK,
    Channel,
    Outcome,
    Reply,
    Request,
    fit_lines,
    hint_text,
    http_outcome,
    json_body,
    parse_json,
    plain_text,
    snippet,
    truncate_utf8,
    utf8_size,
)
from agent.alerts.i18n import t
from agent.alerts.message import Message

MARKDOWN_LIMIT = 4096
TEXT_LIMIT = 2048
RATE_LIMITED = frozenset({45009})  # "api freq out of limit"
CONFIG_ERRORS = frozenset({93000})  # "invalid webhook url"
_COLORS = {"critical": "warning", "warning": "warning", "info": "info"}  # WeCom's three font colors


class WeCom(Channel):
    type = "wecom"

    def markdown(self, msg: Message) -> str:
        color = "info" if msg.resolved else _COLORS.get(msg.severity, "comment")
        head = [f'### <font color="{color}">{self.title(msg)}</font>']
        head += [f"> **{label}**: {value}" for label, value in msg.fields]
        tail = hint_text(msg)
        link = self.link_for(msg)
        if link:
            tail.append(f"[{t('open_link', msg.language)}]({link})")
        tail.append(f'<font color="comment">{msg.footer}</font>')
        used = sum(utf8_size(x) + 1 for x in head + tail)
        lines = fit_lines([f"• {x}" for x in msg.lines], MARKDOWN_LIMIT - used, msg.language)
        return truncate_utf8("\n".join([*head, *lines, *tail]), MARKDOWN_LIMIT)

    def build(self, msg: Message) -> Request:
        if self.style == "text":
            head = plain_text(self.title(msg), msg)
            tail = [*hint_text(msg, bold=""), msg.footer]
            used = sum(utf8_size(x) + 1 for x in head + tail)
            lines = fit_lines([f"- {x}" for x in msg.lines], TEXT_LIMIT - used, msg.language)
            text = truncate_utf8("\n".join([*head, *lines, *tail]), TEXT_LIMIT)
            return Request(self.url, json_body({"msgtype": "text", "text": {"content": text}}))
        return Request(
            self.url, json_body({"msgtype": "markdown", "markdown": {"content": self.markdown(msg)}})
        )

    def judge(self, reply: Reply) -> Outcome:
        if (early := http_outcome(reply)) is not None:
            return early
        if reply.status != 200:
            return Outcome(False, False, "http_4xx", f"HTTP {reply.status}", snippet(reply.body))
        data = parse_json(reply)
        if data is None or "errcode" not in data:
            return Outcome(False, True, "bad_reply", "", snippet(reply.body))
        code = data["errcode"]
        if code == 0:
            return OK
        detail = snippet(str(data.get("errmsg", "")))
        if code in RATE_LIMITED:
            return Outcome(False, True, "rate_limited", str(code), detail)
        if code in CONFIG_ERRORS:
            return Outcome(False, False, "config_error", str(code), detail)
        return Outcome(False, False, "rejected", str(code), detail)
