"""WeCom group robot (企业微信群机器人): markdown or text.

Markdown content is at most 4096 bytes of UTF-8 and text content 2048; longer content is cut on a
character boundary (the service would refuse it with errcode 40058). Success is ``errcode == 0``.
"""

from __future__ import annotations

from agent.alerts.i18n import t
from agent.alerts.message import Message
from agent.alerts.services.base import (
    Channel,
    Outcome,
    Reply,
    Request,
    assemble,
    errcode_outcome,
    hint_text,
    json_body,
)
from agent.core.vocabulary import ChannelType, Severity, Style

MARKDOWN_LIMIT = 4096
TEXT_LIMIT = 2048
RATE_LIMITED = frozenset({45009})  # "api freq out of limit"
CONFIG_ERRORS = frozenset({93000})  # "invalid webhook url"
# WeCom's three font colors
_COLORS: dict[str, str] = {Severity.CRITICAL: "warning", Severity.WARNING: "warning", Severity.INFO: "info"}


class WeCom(Channel):
    type = ChannelType.WECOM
    styles = (Style.MARKDOWN, Style.TEXT)
    rates = ("20/1m",)
    example_url = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=KEY"

    def markdown(self, msg: Message) -> str:
        color = "info" if msg.resolved else _COLORS.get(msg.severity, "comment")
        head = [f'### <font color="{color}">{self.title(msg)}</font>']
        head += [f"> **{label}**: {value}" for label, value in msg.fields]
        tail = hint_text(msg)
        link = self.link_for(msg)
        if link:
            tail.append(f"[{t('open_link', msg.language)}]({link})")
        tail.append(f'<font color="comment">{msg.footer}</font>')
        return assemble(head, [f"• {x}" for x in msg.lines], tail, MARKDOWN_LIMIT, msg.language)

    def build(self, msg: Message) -> Request:
        if self.style == Style.TEXT:
            text = self.plain(msg, TEXT_LIMIT)
            return Request(self.url, json_body({"msgtype": "text", "text": {"content": text}}))
        return Request(
            self.url, json_body({"msgtype": "markdown", "markdown": {"content": self.markdown(msg)}})
        )

    def judge(self, reply: Reply) -> Outcome:
        return errcode_outcome(reply, RATE_LIMITED, CONFIG_ERRORS)
