"""The report page from the real daemon: ``/report`` on the metrics port behind the status' basic auth,
showing no secret and no more than the TCP status, and ``report --html`` over the control socket."""

from __future__ import annotations

import base64
import socket
from pathlib import Path

import bcrypt
from conftest import free_port, http_get, run_cli, wait_until

PASSWORD = "report-viewer-passphrase"
TOKEN = "hook-token-7f3a9c"  # in the webhook's URL: a secret the page must never show


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_report_answers_401_without_credentials_and_never_shows_a_secret(agent_factory, tmp_path: Path):
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  viewer: '{hashed}'\n")
    hook = f"http://127.0.0.1:{free_port()}/hook/{TOKEN}"
    a = agent_factory(
        {
            "http": {"web_config": str(web)},
            "alerts": {"webhooks": [{"name": "ops", "type": "webhook", "url": hook}]},
            "cost": {"instance_hour_price": 12.5, "instance_type": "gn8v.48xlarge"},
        },
        start=False,
    )
    a.start(wait=False)
    wait_until(lambda: "metrics port ready" in a.log(), timeout=30, what="the metrics port", detail=a.log)

    assert http_get(a.url + "/report")[0] == 401
    assert http_get(a.url + "/report", headers=_basic("viewer", "wrong"))[0] == 401
    assert http_get(a.url + "/api/v1/status")[0] == 401  # the same gate as the status
    code, page = http_get(a.url + "/report?since=3600", headers=_basic("viewer", PASSWORD))
    assert code == 200, page
    assert page.startswith("<!doctype html>") and "<svg" in page and 'id="money"' in page
    hostname = socket.gethostname()
    for secret in (PASSWORD, hashed, TOKEN, hook, str(tmp_path), hostname):
        assert secret not in page, f"the network page shows {secret!r}"
    assert http_get(a.url + "/report?since=-1", headers=_basic("viewer", PASSWORD))[0] == 400

    # the command, over the control socket: the operator's page names the node
    out = tmp_path / "page.html"
    done = run_cli("report", "--config", str(a.config_path), "--html", str(out), "--since", "1h")
    assert done.returncode == 0, done.stderr
    html = out.read_text()
    assert "<svg" in html and hostname in html and "gn8v.48xlarge" in html
    for secret in (PASSWORD, hashed, TOKEN):
        assert secret not in html
    done = run_cli("report", "--config", str(a.config_path), "--html", str(out), "--job", "no-such-job")
    assert done.returncode == 1 and "no GPU-seconds of job 'no-such-job'" in done.stderr
