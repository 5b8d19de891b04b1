"""The web-config file: exporter-toolkit's format, its errors, and the TLS context built from it."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from webtls import bcrypt_hash, make_pki

from agent.config.webconfig import WebConfigError, load_web_config
from agent.exporter.auth import AuthOutcome, BasicAuth, LogThrottle, parse_basic, request_limit
from agent.exporter.http import accepts_gzip
from agent.exporter.server import WebConfigInvalid, load
from agent.exporter.tls import build_context

# exporter-toolkit's own sample (docs/web-config.yml), hashes included: a file written for
# node_exporter must load here unchanged
TOOLKIT_SAMPLE = """\
tls_server_config:
  cert_file: server.crt
  key_file: server.key
basic_auth_users:
  alice: $2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze
  bob: $2y$10$hLqFl9jSjoAAy95Z/zw8Ye8wkdMBM8c5Bn1ptYqP/AXyV0.oy0S8m
rate_limit:
  interval: "1s"
  burst: 20
"""


TLS_AB = "tls_server_config:\n  cert_file: a\n  key_file: b\n"


def write(d: Path, text: str, name: str = "web.yml") -> Path:
    p = d / name
    p.write_text(text)
    return p


def problems(path: Path) -> str:
    with pytest.raises(WebConfigError) as e:
        load_web_config(path)
    return "; ".join(e.value.problems)


def test_toolkit_sample_loads_with_paths_relative_to_the_file(tmp_path):
    cfg = load_web_config(write(tmp_path, TOOLKIT_SAMPLE))
    tls = cfg.tls_server_config
    assert tls.enabled and tls.cert_file == str(tmp_path / "server.crt")
    assert tls.key_file == str(tmp_path / "server.key")
    assert tls.min_version == "TLS12" and tls.client_auth_type == "NoClientCert"
    assert sorted(cfg.basic_auth_users) == ["alice", "bob"]
    assert cfg.rate_limit.interval == 1.0 and cfg.rate_limit.burst == 20


def test_empty_file_is_plain_http_without_auth(tmp_path):
    cfg = load_web_config(write(tmp_path, ""))
    assert not cfg.tls_server_config.enabled and not cfg.basic_auth_users


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tls_server_config:\n  cert_file: a.crt\n", "missing key_file"),
        ("tls_server_config:\n  key_file: a.key\n", "missing cert_file"),
        ("tls_server_config:\n  cert_fil: a.crt\n", "tls_server_config.cert_fil: Extra inputs"),
        ("tls_server_confg: {}\n", "tls_server_confg: Extra inputs"),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Sometimes\n",
            "client_auth_type: Input should be",
        ),
        (
            TLS_AB + "  client_auth_type: RequireAndVerifyClientCert\n",
            "needs client_ca_file",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: ca.crt\n",
            "without a Client Auth Policy",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n",
            "unverified certificates",
        ),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS14\n", "min_version"),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS13\n  max_version: TLS12\n",
            "above max_version",
        ),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [RC4]\n", "unknown cipher"),
        ("http_server_config:\n  headers:\n    X-Powered-By: me\n", "can not be configured"),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
            "invalid value for X-Frame-Options",
        ),
        ("auth_excluded_paths: [healthz]\n", "must start with /"),
        ("rate_limit:\n  interval: 1s\n", "burst must be at least 1"),
        ("- just\n- a list\n", "must be a YAML mapping"),
        ("basic_auth_users: {alice: [unclosed\n", "invalid YAML at line"),
    ],
)
def test_bad_files_say_what_is_wrong(tmp_path, text, expected):
    assert expected in problems(write(tmp_path, text))


def test_a_plaintext_password_is_refused_and_never_echoed(tmp_path):
    msg = problems(write(tmp_path, "basic_auth_users:\n  alice: hunter2-plaintext\n"))
    assert "alice" in msg and "not a bcrypt hash" in msg
    assert "hunter2" not in msg


def test_missing_file_is_named(tmp_path):
    with pytest.raises(WebConfigError) as e:
        load_web_config(tmp_path / "nope.yml")
    assert e.value.path.endswith("nope.yml") and e.value.problems == ["file not found"]


def test_tls_context_from_real_certificates(tmp_path):
    pki = make_pki(tmp_path / "pki")
    text = (
        f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"
        "  min_version: TLS13\n"
    )
    ctx = build_context(load_web_config(write(tmp_path, text)).tls_server_config)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "ca"),),)]


def test_unusable_certificates_are_clear_errors(tmp_path):
    pki = make_pki(tmp_path / "pki")
    cases = {
        f"cert_file: {tmp_path}/absent.crt\n  key_file: {pki.server_key}": "absent.crt: No such file",
        # a key that belongs to another certificate
        f"cert_file: {pki.server_cert}\n  key_file: {pki.client_key}": "KEY_VALUES_MISMATCH",
        f"cert_file: {pki.server_key}\n  key_file: {pki.server_key}": "cannot use cert_file",
    }
    for body, expected in cases.items():
        path = write(tmp_path, f"tls_server_config:\n  {body}\n")
        with pytest.raises(WebConfigInvalid) as e:
            load(str(path))
        assert expected in str(e.value) and str(path) in str(e.value)


def test_parse_basic_credentials():
    assert parse_basic(None) is None
    assert parse_basic("Bearer abc") is None
    assert parse_basic("Basic YWxpY2U6cGE6c3M=") == ("alice", "pa:ss")  # a colon in the password
    with pytest.raises(ValueError):
        parse_basic("Basic !!!")
    with pytest.raises(ValueError):
        parse_basic("Basic YWxpY2U=")  # "alice", no colon


async def test_basic_auth_outcomes_and_cache():
    auth = BasicAuth({"alice": bcrypt_hash("right")})
    try:

        def header(u: str, p: str) -> str:
            import base64

            return "Basic " + base64.b64encode(f"{u}:{p}".encode()).decode()

        assert (await auth.check(header("alice", "right"))).outcome is AuthOutcome.OK
        assert (await auth.check(header("alice", "wrong"))).outcome is AuthOutcome.WRONG_PASSWORD
        v = await auth.check(header("mallory", "right"))
        assert v.outcome is AuthOutcome.UNKNOWN_USER and v.user is None  # a stranger's name is not kept
        assert (await auth.check(None)).outcome is AuthOutcome.NO_CREDENTIALS
        assert (await auth.check("Basic %%%")).outcome is AuthOutcome.MALFORMED
        # cached: the same triple again does not queue another bcrypt
        assert len(auth._cache) == 3
        assert (await auth.check(header("alice", "right"))).ok
        assert len(auth._cache) == 3
        assert all(b"right" not in k and b"alice" not in k for k in auth._cache)
    finally:
        auth.close()


def test_token_bucket_and_log_throttle():
    now = [0.0]
    tb = request_limit(interval=1.0, burst=3, clock=lambda: now[0])
    assert [tb.try_take() for _ in range(4)] == [True, True, True, False]
    now[0] = 1.0
    assert tb.try_take() and not tb.try_take()
    lt = LogThrottle(every=10)
    assert lt.ready(0) == 0
    assert lt.ready(1) is None and lt.ready(2) is None
    assert lt.ready(11) == 2


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("gzip", True),
        ("deflate, gzip;q=0.5", True),
        ("gzip;q=0", False),
        ("identity", False),
        ("", False),
        ("*", True),
        ("br, GZIP", True),
    ],
)
def test_accept_encoding(header, ok):
    assert accepts_gzip(header) is ok
