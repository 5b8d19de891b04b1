"""Channel formatting and reply handling, without a network: size limits, UTF-8-safe cuts, the
retryable/permanent split on each service's real replies, Alertmanager's payload shape."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest
from fake_chat import alertmanager_problems, dingtalk_reply, feishu_reply, slack_reply, wecom_reply
from hypothesis import given
from hypothesis import strategies as st

from agent.alerts.message import Message, NodeIdentity
from agent.alerts.services import channel_types
from agent.alerts.services.base import Reply, fit_lines, redact_url, truncate_utf8
from agent.alerts.services.dingtalk import DingTalk
from agent.alerts.services.feishu import Feishu
from agent.alerts.services.slack import Slack
from agent.alerts.services.webhook import Webhook
from agent.alerts.services.wecom import MARKDOWN_LIMIT, TEXT_LIMIT, WeCom

NOW = datetime(2025, 3, 14, 6, 21, 13, tzinfo=UTC)


def message(lines: tuple[str, ...] = (), lang: str = "en", **kw) -> Message:
    base = {
        "fingerprint": "gpu/GPU-1/ecc",
        "kind": "gpu_fault",
        "severity": "critical",
        "resolved": False,
        "title": "Uncorrectable ECC errors on GPU 1 of gpu-node-17",
        "node": NodeIdentity("gpu-node-17", "i-1"),
        "language": lang,
        "at": NOW,
        "fields": (("Node", "gpu-node-17 · i-1"), ("GPUs", "GPU 1 · A100")),
        "lines": lines,
        "footer": "training-node-agent · 2025-03-14 06:21:13 UTC",
        "labels": (("alertname", "TrainingNodeGpuFault"), ("severity", "critical"), ("node", "gpu-node-17")),
    }
    return Message(**{**base, **kw})


def answer(a: tuple[int, dict[str, str], str]) -> Reply:
    status, headers, body = a
    return Reply(status, {k.lower(): v for k, v in headers.items()}, body)


# --- UTF-8 and fitting ------------------------------------------------------------------------------


@given(
    st.text(alphabet=st.sampled_from("a数据瓶颈🔥é\n "), max_size=3000),
    st.integers(min_value=4, max_value=5000),
)
def test_truncate_utf8_never_splits_a_character(text: str, limit: int) -> None:
    out = truncate_utf8(text, limit)
    raw = out.encode()
    assert len(raw) <= limit
    if out != text:
        assert out.endswith("…") and text.startswith(out[:-1])
        assert len(raw) > limit - 3 - 4  # cut as late as the character boundaries allow


def test_wecom_markdown_cut_at_4096_bytes_on_a_chinese_character() -> None:
    # each Chinese character is 3 bytes: make the 4096th byte fall inside one
    detail = "显存出现不可纠正错误，请排查。" * 400
    msg = message(fields=(("节点", "gpu-node-17"), ("详情", detail)), lang="zh-CN")
    content = json.loads(WeCom("w", "http://x/cgi-bin/webhook/send?key=k").build(msg).body)["markdown"][
        "content"
    ]
    raw = content.encode()
    assert MARKDOWN_LIMIT - 3 <= len(raw) <= MARKDOWN_LIMIT
    assert content.endswith("…") and content.startswith('### <font color="warning">')
    raw.decode("utf-8")  # strict: a cut inside a character would raise
    text = json.loads(WeCom("w", "http://x", style="text").build(msg).body)["text"]["content"]
    assert TEXT_LIMIT - 3 <= len(text.encode()) <= TEXT_LIMIT


@pytest.mark.parametrize("n", [1, 5, 80, 400])
def test_fit_lines_keeps_whole_lines_and_counts_the_rest(n: int) -> None:
    lines = [f"🟠 06:21:{i % 60:02d} GPU {i} thermal throttling on gpu-node-17" for i in range(n)]
    out = fit_lines(lines, 2000, "en")
    shown = [x for x in out if not x.startswith("…")]
    assert shown == lines[: len(shown)]
    more = [x for x in out if x.startswith("… and")]
    assert len(shown) + (int(more[0].split()[2]) if more else 0) == n
    assert len("\n".join(out).encode()) <= 2000


def test_digest_in_wecom_says_how_many_it_could_not_show() -> None:
    members = tuple(
        message(title=f"GPU {i} power throttling 功耗封顶降频", fingerprint=f"f{i}") for i in range(300)
    )
    digest_msg = message(
        kind="digest", title="300 alerts on gpu-node-17", items=members, lines=tuple(m.title for m in members)
    )
    content = json.loads(WeCom("w", "http://x").build(digest_msg).body)["markdown"]["content"]
    assert len(content.encode()) <= MARKDOWN_LIMIT
    assert "300 alerts" in content and "… and " in content


# --- Slack limits ------------------------------------------------------------------------------------


def test_slack_blocks_stay_within_block_kit_limits_and_escape() -> None:
    fields = tuple((f"F{i}", "<b>&" * 1000) for i in range(13))
    msg = message(
        title="x" * 400, fields=fields, lines=tuple("y" * 100 for _ in range(100)), hint=("Hint", "a<b")
    )
    body = json.loads(Slack("s", "http://x").build(msg).body)
    blocks = body["blocks"]
    assert len(blocks[0]["text"]["text"]) == 150
    sections = [b for b in blocks if b["type"] == "section"]
    assert [len(b.get("fields", [])) for b in sections[:2]] == [10, 3]
    assert all(len(f["text"]) <= 2000 for b in sections for f in b.get("fields", []))
    assert all(len(b["text"]["text"]) <= 3000 for b in sections if "text" in b)
    assert "&lt;b&gt;&amp;" in sections[0]["fields"][0]["text"] and "<b>" not in json.dumps(blocks)


# --- reply handling ----------------------------------------------------------------------------------

RETRYABLE, PERMANENT = True, False
CASES = [
    (DingTalk, dingtalk_reply(0), None),
    (DingTalk, dingtalk_reply(130101), (RETRYABLE, "rate_limited", "send too fast")),
    (DingTalk, dingtalk_reply(410100), (RETRYABLE, "rate_limited", "限流")),
    (DingTalk, dingtalk_reply(310000, "sign not match"), (PERMANENT, "config_error", "sign not match")),
    (DingTalk, dingtalk_reply(300001), (PERMANENT, "config_error", "token is not exist")),
    (DingTalk, dingtalk_reply(460101), (PERMANENT, "rejected", "message too long")),
    (DingTalk, (502, {}, "<html>bad gateway</html>"), (RETRYABLE, "http_5xx", "bad gateway")),
    (Feishu, feishu_reply(0), None),
    (Feishu, (200, {}, '{"Extra":null,"StatusCode":0,"StatusMessage":"success"}'), None),
    (Feishu, feishu_reply(11232), (RETRYABLE, "rate_limited", "frequency limited")),
    (Feishu, feishu_reply(9499, 429, {"x-ogw-ratelimit-reset": "7"}), (RETRYABLE, "rate_limited", "")),
    (Feishu, feishu_reply(19021), (PERMANENT, "config_error", "sign match fail")),
    (Feishu, feishu_reply(19022), (PERMANENT, "config_error", "Ip Not Allowed")),
    (Feishu, feishu_reply(19024), (PERMANENT, "config_error", "Key Words Not Found")),
    (Feishu, feishu_reply(9499, 400), (PERMANENT, "rejected", "Bad Request")),
    (WeCom, wecom_reply(0), None),
    (WeCom, wecom_reply(45009), (RETRYABLE, "rate_limited", "api freq out of limit")),
    (WeCom, wecom_reply(93000), (PERMANENT, "config_error", "invalid webhook url")),
    (WeCom, wecom_reply(40058), (PERMANENT, "rejected", "exceed max length")),
    (Slack, slack_reply(200, "ok"), None),
    (Slack, slack_reply(429, "rate_limited", {"Retry-After": "3"}), (RETRYABLE, "rate_limited", "")),
    (Slack, slack_reply(403, "invalid_token"), (PERMANENT, "config_error", "invalid_token")),
    (Slack, slack_reply(404, "no_service"), (PERMANENT, "config_error", "no_service")),
    (Slack, slack_reply(400, "invalid_blocks"), (PERMANENT, "rejected", "invalid_blocks")),
    (Slack, slack_reply(500, "rollup_error"), (RETRYABLE, "http_5xx", "rollup_error")),
    (Webhook, (200, {}, "ok"), None),
    (Webhook, (503, {}, "down"), (RETRYABLE, "http_5xx", "down")),
    (Webhook, (400, {}, "bad alert"), (PERMANENT, "http_4xx", "bad alert")),
]


@pytest.mark.parametrize(
    ("cls", "reply", "want"), CASES, ids=[f"{c.type}-{i}" for i, (c, _, _) in enumerate(CASES)]
)
def test_replies_are_classified_as_the_service_means_them(cls, reply, want) -> None:
    outcome = cls("c", "http://x").judge(answer(reply))
    if want is None:
        assert outcome.ok
        return
    retryable, reason, detail = want
    assert not outcome.ok and outcome.retryable is retryable and outcome.reason == reason
    assert detail in outcome.detail  # the provider's own message is kept for the log and status


def test_retry_after_comes_from_the_service() -> None:
    feishu = Feishu("f", "http://x").judge(answer(feishu_reply(9499, 429, {"x-ogw-ratelimit-reset": "7"})))
    slack = Slack("s", "http://x").judge(answer(slack_reply(429, "rate_limited", {"Retry-After": "3"})))
    assert feishu.retry_after == 7 and slack.retry_after == 3


# --- signing, URLs, the generic payload --------------------------------------------------------------


def test_signatures_change_with_time_and_are_url_safe() -> None:
    ticks = iter(range(1741933273, 1741933283))

    def clock() -> float:
        return float(next(ticks))

    ding = DingTalk("d", "https://oapi.dingtalk.com/robot/send?access_token=t", "SECx", clock=clock)
    first, second = (parse_qs(urlsplit(ding.build(message()).url).query) for _ in range(2))
    assert first["timestamp"] == ["1741933273000"] and second["timestamp"] == ["1741933274000"]
    assert first["sign"] != second["sign"] and first["access_token"] == ["t"]
    raw_sign = ding.build(message()).url.split("&sign=")[1]
    assert re.fullmatch(r"[A-Za-z0-9%]+", raw_sign)  # base64's + / = are percent-encoded
    feishu = Feishu("f", "https://open.feishu.cn/open-apis/bot/v2/hook/h", "s", clock=lambda: 1741933273.0)
    body = json.loads(feishu.build(message()).body)
    assert body["timestamp"] == "1741933273" and body["sign"] and body["msg_type"] == "interactive"
    assert "sign" not in json.loads(Feishu("f", "http://x").build(message()).body)


def test_redact_url_keeps_only_the_host() -> None:
    assert redact_url("https://oapi.dingtalk.com/robot/send?access_token=abc&x=1") == (
        "https://oapi.dingtalk.com/***?access_token=***&x=***"
    )
    assert redact_url("https://hooks.slack.com/services/T1/B2/sec") == "https://hooks.slack.com/***"
    assert redact_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"


def test_webhook_payload_follows_alertmanagers_schema() -> None:
    one = json.loads(Webhook("recv", "http://x").build(message(hint=("Hint", "drain the node"))).body)
    assert alertmanager_problems(one) == []
    assert one["status"] == "firing" and one["alerts"][0]["endsAt"] == "0001-01-01T00:00:00Z"
    assert one["alerts"][0]["annotations"]["hint"] == "drain the node"
    members = (
        message(),
        message(fingerprint="b", resolved=True, labels=(("alertname", "B"), ("node", "gpu-node-17"))),
    )
    many = json.loads(Webhook("recv", "http://x").build(message(kind="digest", items=members)).body)
    assert alertmanager_problems(many) == []
    assert [a["status"] for a in many["alerts"]] == ["firing", "resolved"]
    assert many["commonLabels"] == {"node": "gpu-node-17"} and many["receiver"] == "recv"
    assert alertmanager_problems({**many, "version": 4}) and alertmanager_problems({**many, "alerts": []})


@pytest.mark.parametrize("kind", sorted(channel_types()))
@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_every_channel_formats_every_style(kind: str, lang: str) -> None:
    cls = channel_types()[kind]
    for style in cls.styles:
        ch = cls("c", "http://x", link="https://grafana/d/node?var-host={hostname}", style=style)
        body = json.loads(ch.build(message(lines=("a", "b"), hint=("Hint", "do x"), lang=lang)).body)
        text = json.dumps(body, ensure_ascii=False)
        assert "gpu-node-17" in text and "do x" in text, (kind, style)
        if kind != "webhook" and style not in ("text",):
            assert "https://grafana/d/node?var-host=gpu-node-17" in text, (kind, style)
