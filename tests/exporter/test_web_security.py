"""The real daemon behind a web config: TLS, basic auth, mutual TLS, headers, reloads, gzip."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import ssl
import time
from pathlib import Path

import pytest
from conftest import http_get, run_cli, unix_get, wait_until
from prometheus_client.parser import text_string_to_metric_families
from webtls import Pki, basic, bcrypt_hash, client_context, https_get, make_pki

PASSWORD = "correct horse battery staple"
HEADERS = {
    "X-Frame-Options": "deny",
    "X-Content-Type-Options": "nosniff",
    "Strict-Transport-Security": "max-age=300",
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def web_yml(
    pki: Pki,
    users: dict[str, str] | None = None,
    mtls: bool = False,
    excluded: list[str] | None = None,
    tls: bool = True,
) -> str:
    lines = []
    if tls:
        lines += ["tls_server_config:", f"  cert_file: {pki.server_cert}", f"  key_file: {pki.server_key}"]
        if mtls:
            lines += ["  client_auth_type: RequireAndVerifyClientCert", f"  client_ca_file: {pki.ca}"]
    lines += ["http_server_config:", "  headers:"] + [f"    {k}: {v}" for k, v in HEADERS.items()]
    if users:
        lines += ["basic_auth_users:"] + [f"  {u}: '{h}'" for u, h in users.items()]
    if excluded:
        lines += ["auth_excluded_paths:"] + [f"  - {p}" for p in excluded]
    return "\n".join(lines) + "\n"


def secured_agent(agent_factory, tmp_path: Path, text: str, name: str = "agent", **http: object):
    path = tmp_path / f"{name}-web.yml"
    path.write_text(text)
    a = agent_factory({"http": {"web_config": str(path), **http}}, name=name, start=False)
    a.web_yml = path
    a.start(wait=False)

    def ready() -> bool:
        assert a.proc.poll() is None, a.log()
        return "metrics port ready" in a.log()

    wait_until(ready, timeout=30, what="the metrics port", detail=a.log)
    return a


def refused(port: int, ctx: ssl.SSLContext, path: str = "/metrics") -> str:
    """The reason a request did not get an HTTP answer."""
    try:
        status, _, _ = https_get(port, path, ctx, timeout=5)
    except (ssl.SSLError, ConnectionError, OSError) as e:
        return f"{type(e).__name__}: {e}"
    raise AssertionError(f"{path} answered {status}")


def test_tls_basic_auth_headers_and_the_401_log(agent_factory, tmp_path, pki):
    a = secured_agent(agent_factory, tmp_path, web_yml(pki, {"prometheus": bcrypt_hash(PASSWORD)}))
    ctx = client_context(pki)
    status, headers, body = https_get(a.port, "/metrics", ctx, basic("prometheus", PASSWORD))
    assert status == 200, body
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert "training_node_collector_success" in names
    for k, v in HEADERS.items():
        assert headers[k.lower()] == v

    for creds in ({}, basic("prometheus", "wrong password"), basic("mallory", PASSWORD)):
        status, headers, _ = https_get(a.port, "/metrics", ctx, creds)
        assert status == 401
        assert headers["www-authenticate"].startswith("Basic realm=")
        assert headers["x-frame-options"] == "deny"  # the configured headers on refusals too
    # /healthz is under the same auth when not excluded
    assert https_get(a.port, "/healthz", ctx)[0] == 401
    assert https_get(a.port, "/healthz", ctx, basic("prometheus", PASSWORD))[0] in (200, 503)

    # the refusal is logged, throttled, and never with the password or a stranger's name
    a.wait_for(lambda: "http request refused" in a.log(), what="401 log line")
    line = next(e for e in a.log_lines() if e.get("event") == "http request refused")
    assert line["status"] == 401 and line["path"] == "/metrics" and line["remote"] == "127.0.0.1"
    log = a.log()
    assert PASSWORD not in log and line["reason"] == "no credentials"
    assert "mallory" not in log and "Authorization" not in log
    counts = a.status()["http"]["unauthorized"]
    assert counts == {"no credentials": 2, "wrong password": 1, "unknown user": 1}

    # nothing is served in plaintext on the TLS port
    with pytest.raises((ConnectionError, OSError)) as e:
        http_get(f"http://127.0.0.1:{a.port}/metrics", timeout=5)
    assert "timed out" not in str(e.value)


def test_healthz_can_be_exempted_for_probes(agent_factory, tmp_path, pki):
    a = secured_agent(
        agent_factory, tmp_path, web_yml(pki, {"prometheus": bcrypt_hash(PASSWORD)}, excluded=["/healthz"])
    )
    ctx = client_context(pki)
    assert https_get(a.port, "/healthz", ctx)[0] in (200, 503)
    assert https_get(a.port, "/metrics", ctx)[0] == 401
    assert https_get(a.port, "/api/v1/status", ctx)[0] == 401


def test_mutual_tls_refuses_clients_without_a_trusted_certificate(agent_factory, tmp_path, pki):
    a = secured_agent(agent_factory, tmp_path, web_yml(pki, mtls=True))
    assert https_get(a.port, "/metrics", client_context(pki, "client"))[0] == 200
    # no HTTP answer at all, in TLS 1.3 (refused after the handshake) and in 1.2 (during it)
    refused(a.port, client_context(pki))
    refused(a.port, client_context(pki, "stranger"))
    tls12 = client_context(pki)
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    assert refused(a.port, tls12).startswith("SSL")  # the handshake itself fails
    assert https_get(a.port, "/healthz", client_context(pki, "client"))[0] in (200, 503)


def test_web_config_reloads_on_change_and_on_sighup_keeping_the_old_one_when_broken(
    agent_factory, tmp_path, pki
):
    old_hash = bcrypt_hash("old-password")
    a = secured_agent(agent_factory, tmp_path, web_yml(pki, {"prometheus": old_hash}))
    ctx = client_context(pki)
    assert https_get(a.port, "/metrics", ctx, basic("prometheus", "old-password"))[0] == 200

    # changed file -> picked up by the watcher (no signal)
    a.web_yml.write_text(web_yml(pki, {"prometheus": bcrypt_hash("new-password")}))
    a.wait_for(
        lambda: https_get(a.port, "/metrics", ctx, basic("prometheus", "new-password"))[0] == 200,
        timeout=20,
        what="new password accepted",
    )
    assert https_get(a.port, "/metrics", ctx, basic("prometheus", "old-password"))[0] == 401

    # a broken file: logged, and the running web config stays
    a.web_yml.write_text("basic_auth_users:\n  prometheus: plaintext-oops\n")
    a.wait_for(lambda: "web config rejected" in a.log(), timeout=20, what="rejection logged")
    assert "plaintext-oops" not in a.log()
    assert https_get(a.port, "/metrics", ctx, basic("prometheus", "new-password"))[0] == 200
    http = a.status()["http"]
    assert http["reloads"]["failure"] == 1 and "not a bcrypt hash" in http["last_error"]
    assert (
        "training_node_web_config_last_reload_successful 0.0"
        in https_get(a.port, "/metrics", ctx, basic("prometheus", "new-password"))[2].decode()
    )

    # SIGHUP: a change the watcher cannot see (same size, same mtime, same inode)
    a.web_yml.write_text(web_yml(pki, {"prometheus": old_hash}))
    a.wait_for(lambda: a.status()["http"]["last_error"] is None, timeout=20, what="good file back")
    st = os.stat(a.web_yml)
    swapped = web_yml(pki, {"prometheus": bcrypt_hash("third-password")})
    assert len(swapped) == st.st_size
    with open(a.web_yml, "r+") as f:  # in place: the inode stays
        f.write(swapped)
    os.utime(a.web_yml, ns=(st.st_atime_ns, st.st_mtime_ns))
    time.sleep(3)  # longer than a watch period: the watcher did not notice
    assert https_get(a.port, "/metrics", ctx, basic("prometheus", "third-password"))[0] == 401
    a.signal(signal.SIGHUP)
    a.wait_for(
        lambda: https_get(a.port, "/metrics", ctx, basic("prometheus", "third-password"))[0] == 200,
        timeout=20,
        what="SIGHUP reload",
    )


def test_turning_tls_off_needs_a_restart(agent_factory, tmp_path, pki):
    a = secured_agent(agent_factory, tmp_path, web_yml(pki))
    a.web_yml.write_text(web_yml(pki, tls=False))
    a.wait_for(lambda: "needs a restart" in a.log(), timeout=20, what="refusal")
    assert https_get(a.port, "/metrics", client_context(pki))[0] == 200


def test_certificate_rotation_applies_to_new_connections(agent_factory, tmp_path, pki):
    d = tmp_path / "rotating"
    d.mkdir()
    (d / "server.crt").write_bytes(pki.server_cert.read_bytes())
    (d / "server.key").write_bytes(pki.server_key.read_bytes())
    text = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"  # relative to the file
    path = d / "web.yml"
    path.write_text(text)
    a = agent_factory({"http": {"web_config": str(path)}}, start=False).start(wait=False)
    ctx = client_context(pki)
    a.wait_for(lambda: "metrics port ready" in a.log(), timeout=30, what="start")

    def served_cn() -> str:
        with (
            socket.create_connection(("127.0.0.1", a.port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s,
        ):
            return dict(x[0] for x in s.getpeercert()["subject"])["commonName"]

    assert served_cn() == "server"
    other = make_pki(tmp_path / "pki2")  # same names, new keys, another CA
    (d / "server.key").write_bytes(other.server_key.read_bytes())
    (d / "server.crt").write_bytes(other.server_cert.read_bytes())
    ctx = client_context(other)
    a.wait_for(lambda: _quiet(served_cn) == "server", timeout=20, what="the new certificate served")


def _quiet(fn):
    try:
        return fn()
    except (ssl.SSLError, OSError):
        return None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("basic_auth_users:\n  a: nope\n", "not a bcrypt hash"),
        ("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n", "No such file"),
    ],
)
def test_a_bad_web_config_stops_the_start_with_a_clear_error(agent_factory, tmp_path, text, expected):
    path = tmp_path / "web.yml"
    path.write_text(text)
    a = agent_factory({"http": {"web_config": str(path)}}, start=False).start(wait=False)
    assert a.proc.wait(30) == 1
    assert f"[http] web_config: {path}" in a.log() and expected in a.log()
    out = run_cli("check-config", "--config", str(a.config_path))
    assert out.returncode == 2 and expected in out.stderr


def test_check_config_reports_the_web_config(agent_factory, tmp_path, pki):
    path = tmp_path / "web.yml"
    path.write_text(web_yml(pki, {"u": bcrypt_hash("x")}, mtls=True))
    a = agent_factory({"http": {"web_config": str(path)}}, start=False)
    out = run_cli("check-config", "--config", str(a.config_path))
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert "(https, client certificates RequireAndVerifyClientCert, 1 basic auth user)" in first


def test_gzip_is_negotiated_and_parses_to_the_same_families(agent_factory):
    a = agent_factory({})
    code, plain = a.get("/metrics")
    assert code == 200
    import urllib.request

    req = urllib.request.Request(a.url + "/metrics", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.headers["Content-Encoding"] == "gzip" and r.headers["Vary"] == "Accept-Encoding"
        raw = r.read()
    text = gzip.decompress(raw).decode()
    assert len(raw) < len(text) / 3
    names = lambda t: {f.name for f in text_string_to_metric_families(t)}  # noqa: E731
    assert names(text) == names(plain)
    req = urllib.request.Request(a.url + "/metrics", headers={"Accept-Encoding": "gzip;q=0, identity"})
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.headers.get("Content-Encoding") is None


def test_tcp_status_off_keeps_the_control_socket_view(agent_factory):
    a = agent_factory({"http": {"tcp_status": "off"}})
    assert a.get("/api/v1/status")[0] == 404
    assert "/api/v1/status" not in a.get("/")[1]
    code, body = unix_get(a.control_socket, "/status")
    assert code == 200 and json.loads(body)["config"] == str(a.config_path)


@pytest.mark.parametrize(("sans", "allowed"), [(["prometheus.example"], True), (["other.example"], False)])
def test_client_allowed_sans(agent_factory, tmp_path, pki, sans, allowed):
    # client_allowed_sans belongs to tls_server_config: just before http_server_config
    lines = web_yml(pki, mtls=True).splitlines()
    at = lines.index("http_server_config:")
    lines.insert(at, f"  client_allowed_sans: {json.dumps(sans)}")
    a = secured_agent(agent_factory, tmp_path, "\n".join(lines) + "\n")
    ctx = client_context(pki, "client")  # its SAN is DNS:prometheus.example
    if allowed:
        assert https_get(a.port, "/metrics", ctx)[0] == 200
    else:
        refused(a.port, ctx)
        assert a.status()["http"]["connections_closed"]["client_cert_san"] >= 1


def test_rate_limit_answers_429_beyond_the_bucket(agent_factory, tmp_path, pki):
    a = secured_agent(agent_factory, tmp_path, web_yml(pki) + "rate_limit:\n  interval: 10s\n  burst: 3\n")
    ctx = client_context(pki)
    codes = [https_get(a.port, "/healthz", ctx)[0] for _ in range(5)]
    assert all(c in (200, 503) for c in codes[:3]) and codes[3:] == [429, 429], codes
