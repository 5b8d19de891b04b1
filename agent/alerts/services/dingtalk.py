"""DingTalk custom robot (钉钉自定义机器人): markdown, actionCard or text, optionally signed.

Signing: timestamp in milliseconds; HMAC-SHA256 keyed with the secret over ``"{timestamp}\\n{secret}"``,
base64, URL-encoded; ``timestamp`` and ``sign`` go in the query string. The service answers HTTP 200
even on failure; ``errcode`` says what happened.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import quote_plus

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
from agent.core.vocabulary import ChannelType, Style

RATE_LIMITED = frozenset({130101, 410100})  # "send too fast, exceed 20 times per minute"
CONFIG_ERRORS = frozenset({310000, 300001})  # sign/keyword/IP/timestamp; token does not exist
TEXT_LIMIT = 20000  # bytes of message content the service accepts
_BUDGET = 18000  # what we fill, leaving room for the JSON around it


def sign(secret: str, timestamp_ms: int) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


def signed_url(url: str, secret: str, timestamp_ms: int) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}timestamp={timestamp_ms}&sign={quote_plus(sign(secret, timestamp_ms))}"


class DingTalk(Channel):
    type = ChannelType.DINGTALK
    styles = (Style.MARKDOWN, Style.CARD, Style.TEXT)
    rates = ("20/1m",)  # more gets errcode 130101 and a 10-minute mute
    example_url = "https://oapi.dingtalk.com/robot/send?access_token=TOKEN"
    example_secret = "SECexample"

    def markdown(self, msg: Message) -> str:
        head = [f"### {self.title(msg)}", *(f"**{label}**: {value}" for label, value in msg.fields)]
        tail = [f"> {x}" for x in hint_text(msg)]
        link = self.link_for(msg)
        if link and self.style != Style.CARD:
            tail.append(f"[{t('open_link', msg.language)}]({link})")
        tail.append(f"###### {msg.footer}")
        bullets = [f"- {line}" for line in msg.lines]
        return assemble(head, bullets, tail, _BUDGET, msg.language, sep="\n\n")

    def build(self, msg: Message) -> Request:
        if self.style == Style.TEXT:
            payload: dict[str, object] = {"msgtype": "text", "text": {"content": self.plain(msg, _BUDGET)}}
        elif self.style == Style.CARD:
            payload = {
                "msgtype": "actionCard",
                "actionCard": {
                    "title": self.title(msg),
                    "text": self.markdown(msg),
                    "btnOrientation": "0",
                    "singleTitle": t("open_link", msg.language),
                    "singleURL": self.link_for(msg) or "",
                },
            }
        else:
            payload = {
                "msgtype": "markdown",
                "markdown": {"title": self.title(msg), "text": self.markdown(msg)},
            }
        url = self.url
        if self.secret:
            url = signed_url(url, self.secret, int(self.clock() * 1000))
        return Request(url, json_body(payload))

    def judge(self, reply: Reply) -> Outcome:
        return errcode_outcome(reply, RATE_LIMITED, CONFIG_ERRORS)
