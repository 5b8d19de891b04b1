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
    type = "dingtalk"

    def markdown(self, msg: Message) -> str:
        head = [f"### {self.title(msg)}", *(f"**{label}**: {value}" for label, value in msg.fields)]
        tail = [f"> {x}" for x in hint_text(msg)]
        link = self.link_for(msg)
        if link and self.style != "card":
            tail.append(f"[{t('open_link', msg.language)}]({link})")
        tail.append(f"###### {msg.footer}")
        used = sum(utf8_size(x) + 2 for x in head + tail)
        lines = fit_lines([f"- {line}" for line in msg.lines], _BUDGET - used, msg.language)
        body = "\n\n".join(head) + ("\n\n" + "\n".join(lines) if lines else "") + "\n\n" + "\n\n".join(tail)
        return truncate_utf8(body, _BUDGET)

    def build(self, msg: Message) -> Request:
        if self.style == "text":
            head = plain_text(self.title(msg), msg)
            tail = [*hint_text(msg, bold=""), msg.footer]
            used = sum(utf8_size(x) + 1 for x in head + tail)
            lines = fit_lines([f"- {x}" for x in msg.lines], _BUDGET - used, msg.language)
            text = truncate_utf8("\n".join([*head, *lines, *tail]), _BUDGET)
            payload: dict[str, object] = {"msgtype": "text", "text": {"content": text}}
        elif self.style == "card":
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
        if (early := http_outcome(reply)) is not None:
            return early
        data = parse_json(reply)
        if reply.status != 200:
            return Outcome(False, False, "http_4xx", f"HTTP {reply.status}", snippet(reply.body))
        if data is None or "errcode" not in data:
            return Outcome(False, True, "bad_reply", "", snippet(reply.body))
        code = data.get("errcode")
        if code == 0:
            return OK
        detail = snippet(str(data.get("errmsg", "")))
        if code in RATE_LIMITED:
            return Outcome(False, True, "rate_limited", str(code), detail)
        if code in CONFIG_ERRORS:
            return Outcome(False, False, "config_error", str(code), detail)
        return Outcome(False, False, "rejected", str(code), detail)
