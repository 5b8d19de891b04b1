"""Local stand-ins for DingTalk, Feishu, WeCom and Slack robots and an Alertmanager-format receiver,
on 127.0.0.1, run in a thread so that both in-process tests and the real daemon can talk to them.

Each service checks every request the way the real one does (its own recomputation of the signature
from the secret, the timestamp window, the body shape, the size limits, its rate limit) and answers
with that service's real success and error replies. Tests can script the next replies
(``bot.script``) to play rate limits and config errors.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web

Answer = tuple[int, dict[str, str], str]  # HTTP status, headers, body

DINGTALK_ERRORS = {
    130101: "send too fast, exceed 20 times per minute",
    410100: "发送速度太快而限流",
    300001: "token is not exist",
    310000: "sign not match",
    460101: "message too long, exceed 20000 bytes",
}
FEISHU_ERRORS = {
    11232: "frequency limited psm[lark.oapi.app_platform_runtime]appID[1]",
    19001: "param invalid: incoming webhook access token invalid",
    19021: "sign match fail or timestamp is not within one hour from current time",
    19022: "Ip Not Allowed",
    19024: "Key Words Not Found",
    9499: "Bad Request",
}
WECOM_ERRORS = {
    45009: "api freq out of limit",
    93000: "invalid webhook url",
    40058: "markdown.content exceed max length 4096. Invalid input invalid Request Parameter",
}
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# the fake service that stands in for each channel type (tests/declarations.py holds it complete)
SERVES = {
    "dingtalk": "dingtalk",
    "feishu": "feishu",
    "wecom": "wecom",
    "slack": "slack",
    "webhook": "receiver",
}


def dingtalk_reply(code: int, msg: str | None = None) -> Answer:
    return (
        200,
        {"Content-Type": "application/json"},
        json.dumps({"errcode": code, "errmsg": msg or DINGTALK_ERRORS.get(code, "ok")}),
    )


def feishu_reply(code: int, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    if code == 0:
        body = {"StatusCode": 0, "StatusMessage": "success", "code": 0, "data": {}, "msg": "success"}
    else:
        body = {"code": code, "data": {}, "msg": FEISHU_ERRORS[code]}
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(body)


def wecom_reply(code: int) -> Answer:
    hint = (
        ""
        if code == 0
        else f", hint: [{int(time.time())}], from ip: 127.0.0.1, more info at "
        f"https://open.work.weixin.qq.com/devtool/query?e={code}"
    )
    msg = "ok" if code == 0 else WECOM_ERRORS[code] + hint
    return 200, {"Content-Type": "application/json"}, json.dumps({"errcode": code, "errmsg": msg})


def slack_reply(status: int, body: str, headers: dict[str, str] | None = None) -> Answer:
    return status, {"Content-Type": "text/html", **(headers or {})}, body


@dataclass
class Seen:
    at: float
    body: bytes
    answer: Answer
    query: dict[str, list[str]] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Bot:
    service: str
    token: str
    secret: str | None
    base: str
    limits: tuple[tuple[int, float], ...] = ()
    keyword: str | None = None
    script: deque[Answer] = field(default_factory=deque)  # the next requests get these answers
    seen: list[Seen] = field(default_factory=list)  # every request and what it got
    accepted: list[dict[str, Any]] = field(default_factory=list)  # bodies the service took
    accepted_at: list[float] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    @property
    def url(self) -> str:
        return {
            "dingtalk": f"{self.base}/robot/send?access_token={self.token}",
            "feishu": f"{self.base}/open-apis/bot/v2/hook/{self.token}",
            "wecom": f"{self.base}/cgi-bin/webhook/send?key={self.token}",
            "slack": f"{self.base}/services/{self.token}",
            "receiver": f"{self.base}/receiver/{self.token}",
        }[self.service]

    def over_limit(self, now: float) -> bool:
        return any(sum(1 for t in self.accepted_at if now - t < w) >= n for n, w in self.limits)

    def wait(self, predicate, timeout: float = 10.0, what: str = "requests") -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    answers = [s.answer[2][:200] for s in self.seen[-5:]]
                    raise AssertionError(
                        f"{self.service}: timed out waiting for {what}; last answers {answers}"
                    )
                self.cond.wait(left)


class FakeChat:
    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.bots: dict[tuple[str, str], Bot] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_post("/robot/send", self._dingtalk)
        app.router.add_post("/open-apis/bot/v2/hook/{token}", self._feishu)
        app.router.add_post("/cgi-bin/webhook/send", self._wecom)
        app.router.add_post("/services/{token:.+}", self._slack)
        app.router.add_post("/receiver/{token}", self._receiver)
        self.app = app

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(
        self,
        service: str,
        secret: str | None = None,
        limits: tuple[tuple[int, float], ...] = (),
        keyword: str | None = None,
        token: str | None = None,
    ) -> Bot:
        if token is None:
            token = uuid.uuid4().hex + uuid.uuid4().hex if service == "dingtalk" else str(uuid.uuid4())
            if service == "slack":
                token = (
                    f"T{uuid.uuid4().hex[:8].upper()}/B{uuid.uuid4().hex[:8].upper()}/{uuid.uuid4().hex[:24]}"
                )
        bot = Bot(service, token, secret, self.base, limits, keyword)
        self.bots[(service, token)] = bot
        return bot

    # --- lifecycle ---

    def start(self) -> FakeChat:
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._runner = web.AppRunner(self.app, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", self.port)
            loop.run_until_complete(site.start())
            self.port = self._runner.addresses[0][1]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=main, daemon=True, name="fake-chat")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake chat server did not start")
        for bot in self.bots.values():
            bot.base = self.base
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> FakeChat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- plumbing ---

    async def _serve(self, service: str, token: str, request: web.Request, check) -> web.Response:
        body = await request.read()
        query = parse_qs(request.query_string, keep_blank_values=True)
        bot = self.bots.get((service, token))
        answer = check(bot, body, query, request)
        seen = Seen(time.monotonic(), body, answer, query, dict(request.headers))
        if bot is not None:
            with bot.cond:
                bot.seen.append(seen)
                bot.cond.notify_all()
        status, headers, text = answer
        return web.Response(status=status, headers=headers, text=text)

    def _final(self, bot: Bot, payload: dict[str, Any], ok: Answer, limited: Answer) -> Answer:
        """After the request passed every check: a scripted answer, the rate limit, or success."""
        if bot.script:
            return bot.script.popleft()
        now = time.monotonic()
        if bot.over_limit(now):
            return limited
        bot.accepted.append(payload)
        bot.accepted_at.append(now)
        return ok

    # --- DingTalk ---

    async def _dingtalk(self, request: web.Request) -> web.Response:
        token = parse_qs(request.query_string).get("access_token", [""])[0]
        return await self._serve("dingtalk", token, request, self._check_dingtalk)

    def _check_dingtalk(self, bot: Bot | None, body: bytes, query: dict, _r: web.Request) -> Answer:
        if bot is None:
            return dingtalk_reply(300001)
        if bot.secret:
            ts, sign = query.get("timestamp", [""])[0], query.get("sign", [""])[0]
            if not ts.isdigit() or abs(time.time() * 1000 - int(ts)) > 3600 * 1000:
                return dingtalk_reply(310000, "invalid timestamp")
            mac = hmac.new(bot.secret.encode(), f"{ts}\n{bot.secret}".encode(), hashlib.sha256)
            if not hmac.compare_digest(base64.b64encode(mac.digest()).decode(), sign):
                return dingtalk_reply(310000, "sign not match")
        try:
            payload = json.loads(body)
            kind = payload["msgtype"]
            if kind == "text":
                content = payload["text"]["content"]
            elif kind == "markdown":
                content = payload["markdown"]["text"]
                assert payload["markdown"]["title"]
            elif kind == "actionCard":
                card = payload["actionCard"]
                content = card["text"]
                assert card["title"] and (card.get("btns") or (card["singleTitle"] and card["singleURL"]))
            else:
                raise KeyError(kind)
            assert isinstance(content, str) and content
        except (ValueError, KeyError, TypeError, AssertionError):
            return dingtalk_reply(300001, "param error")
        if len(content.encode()) > 20000:
            return dingtalk_reply(460101)
        if bot.keyword and bot.keyword not in body.decode():
            return dingtalk_reply(310000, "keywords not in content")
        return self._final(bot, payload, dingtalk_reply(0), dingtalk_reply(130101))

    # --- Feishu ---

    async def _feishu(self, request: web.Request) -> web.Response:
        return await self._serve("feishu", request.match_info["token"], request, self._check_feishu)

    def _check_feishu(self, bot: Bot | None, body: bytes, _q: dict, _r: web.Request) -> Answer:
        if bot is None:
            return feishu_reply(19001)
        if len(body) > 20 * 1000:
            return feishu_reply(9499, status=400)
        try:
            payload = json.loads(body)
            assert isinstance(payload, dict)
        except (ValueError, AssertionError):
            return feishu_reply(9499, status=400)
        if bot.secret:
            ts = str(payload.get("timestamp", ""))
            if not ts.isdigit() or abs(time.time() - int(ts)) > 3600:
                return feishu_reply(19021)
            mac = hmac.new(f"{ts}\n{bot.secret}".encode(), b"", hashlib.sha256)
            if not hmac.compare_digest(base64.b64encode(mac.digest()).decode(), str(payload.get("sign", ""))):
                return feishu_reply(19021)
        try:
            kind = payload["msg_type"]
            if kind == "text":
                assert payload["content"]["text"]
            elif kind == "interactive":
                card = payload["card"]
                assert card["header"]["title"]["content"] and isinstance(card["elements"], list)
                for el in card["elements"]:
                    assert el["tag"] in ("div", "hr", "note", "action", "markdown", "img")
            else:
                raise KeyError(kind)
        except (KeyError, TypeError, AssertionError):
            return feishu_reply(9499, status=400)
        if bot.keyword and bot.keyword not in body.decode():
            return feishu_reply(19024)
        return self._final(bot, payload, feishu_reply(0), feishu_reply(11232))

    # --- WeCom ---

    async def _wecom(self, request: web.Request) -> web.Response:
        key = parse_qs(request.query_string).get("key", [""])[0]
        return await self._serve("wecom", key, request, self._check_wecom)

    def _check_wecom(self, bot: Bot | None, body: bytes, _q: dict, _r: web.Request) -> Answer:
        if bot is None:
            return wecom_reply(93000)
        try:
            payload = json.loads(body)
            kind = payload["msgtype"]
            content = payload[kind]["content"]
            assert kind in ("text", "markdown") and isinstance(content, str) and content
        except (ValueError, KeyError, TypeError, AssertionError):
            return 200, {}, json.dumps({"errcode": 40008, "errmsg": "invalid message type"})
        limit = 4096 if kind == "markdown" else 2048
        if len(content.encode()) > limit:
            return wecom_reply(40058)
        return self._final(bot, payload, wecom_reply(0), wecom_reply(45009))

    # --- Slack ---

    async def _slack(self, request: web.Request) -> web.Response:
        return await self._serve("slack", request.match_info["token"], request, self._check_slack)

    def _check_slack(self, bot: Bot | None, body: bytes, _q: dict, _r: web.Request) -> Answer:
        if bot is None:
            return slack_reply(404, "no_service")
        try:
            payload = json.loads(body)
            assert isinstance(payload, dict)
        except (ValueError, AssertionError):
            return slack_reply(400, "invalid_payload")
        if not payload.get("text") and not payload.get("blocks"):
            return slack_reply(400, "no_text")
        if not _valid_blocks(payload.get("blocks", [])):
            return slack_reply(400, "invalid_blocks")
        return self._final(
            bot, payload, slack_reply(200, "ok"), slack_reply(429, "rate_limited", {"Retry-After": "1"})
        )

    # --- Alertmanager-format receiver ---

    async def _receiver(self, request: web.Request) -> web.Response:
        return await self._serve("receiver", request.match_info["token"], request, self._check_receiver)

    def _check_receiver(self, bot: Bot | None, body: bytes, _q: dict, request: web.Request) -> Answer:
        if bot is None:
            return 404, {}, "no such receiver"
        if bot.secret:
            want = "sha256=" + hmac.new(bot.secret.encode(), body, hashlib.sha256).hexdigest()
            if not hmac.compare_digest(request.headers.get("X-Training-Node-Agent-Signature", ""), want):
                return 401, {}, "bad signature"
        try:
            payload = json.loads(body)
        except ValueError:
            return 400, {}, "not JSON"
        problems = alertmanager_problems(payload)
        if problems:
            return 400, {}, "; ".join(problems)
        return self._final(bot, payload, (200, {}, "ok"), (429, {"Retry-After": "1"}, "slow down"))


def _valid_blocks(blocks: Any) -> bool:
    """Slack's Block Kit limits for the block types we send."""
    if not isinstance(blocks, list) or len(blocks) > 50:
        return False
    for b in blocks:
        kind = b.get("type")
        if kind == "header":
            if b["text"]["type"] != "plain_text" or not 0 < len(b["text"]["text"]) <= 150:
                return False
        elif kind == "section":
            fields = b.get("fields", [])
            if len(fields) > 10 or any(len(f["text"]) > 2000 for f in fields):
                return False
            if "text" in b and len(b["text"]["text"]) > 3000:
                return False
            if not fields and "text" not in b:
                return False
        elif kind == "context":
            if not 0 < len(b["elements"]) <= 10:
                return False
        elif kind == "actions":
            if any(e["type"] != "button" or len(e["text"]["text"]) > 75 for e in b["elements"]):
                return False
        else:
            return False
    return True


def _rfc3339(value: Any) -> bool:
    return (
        isinstance(value, str)
        and bool(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$", value))
        and datetime.fromisoformat(value.replace("Z", "+00:00")) is not None
    )


def _str_map(value: Any, labels: bool = False) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) and (not labels or _LABEL.match(k))
        for k, v in value.items()
    )


def alertmanager_problems(p: Any) -> list[str]:
    """What in ``p`` does not follow Alertmanager's documented webhook payload (version 4)."""
    if not isinstance(p, dict):
        return ["payload is not an object"]
    out = []
    want: dict[str, Any] = {
        "version": lambda v: v == "4",
        "groupKey": lambda v: isinstance(v, str),
        "truncatedAlerts": lambda v: isinstance(v, int) and v >= 0,
        "status": lambda v: v in ("firing", "resolved"),
        "receiver": lambda v: isinstance(v, str) and v,
        "groupLabels": lambda v: _str_map(v, labels=True),
        "commonLabels": lambda v: _str_map(v, labels=True),
        "commonAnnotations": _str_map,
        "externalURL": lambda v: isinstance(v, str),
        "alerts": lambda v: isinstance(v, list) and v,
    }
    for key, ok in want.items():
        if key not in p or not ok(p[key]):
            out.append(f"{key}: missing or wrong type ({p.get(key)!r:.60})")
    for i, a in enumerate(p.get("alerts") or []):
        checks: dict[str, Any] = {
            "status": lambda v: v in ("firing", "resolved"),
            "labels": lambda v: _str_map(v, labels=True) and "alertname" in v,
            "annotations": _str_map,
            "startsAt": _rfc3339,
            "endsAt": _rfc3339,
            "generatorURL": lambda v: isinstance(v, str),
            "fingerprint": lambda v: isinstance(v, str) and bool(re.match(r"^[0-9a-f]{16}$", v)),
        }
        for key, ok in checks.items():
            if not isinstance(a, dict) or key not in a or not ok(a[key]):
                out.append(f"alerts[{i}].{key}: missing or wrong type")
    return out
