"""A real Prometheus (Debian's 2.42) scrapes the agent's secured port: TLS with basic auth gets
up == 1, a wrong password up == 0 (and a 401 in the agent's log without the password), mutual TLS
lets in only the job with a client certificate, and gzip is negotiated while Prometheus still
parses every sample. The transcript goes to bench/out/prometheus_webconfig.txt."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from conftest import REPO, free_port, need_binary, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "exporter"))
from webtls import bcrypt_hash, make_pki

TRANSCRIPT = REPO / "bench" / "out" / "prometheus_webconfig.txt"
PASSWORD = "scrape-Secret-42"
WRONG = "not-the-Password-7"
GZIP_SCRAPES = 'training_node_http_scrapes_total{encoding="gzip"} > 2'


def query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def by_job(port: int, expr: str) -> dict[str, float]:
    return {r["metric"]["job"]: float(r["value"][1]) for r in query(port, expr)}


def test_prometheus_scrapes_the_secured_port(agent_factory, tmp_path):
    binary = need_binary("prometheus", "prometheus")
    lines: list[str] = []
    t0 = time.monotonic()

    def log(line: str) -> None:
        lines.append(f"[{time.monotonic() - t0:6.2f}s] {line}")

    pki = make_pki(tmp_path / "pki")
    hashed = bcrypt_hash(PASSWORD, cost=10)
    tls = f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
    (tmp_path / "basic.yml").write_text(tls + f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    mtls = tls + f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"
    (tmp_path / "mtls.yml").write_text(mtls)
    basic = agent_factory({"http": {"web_config": str(tmp_path / "basic.yml")}}, name="basic", start=False)
    mutual = agent_factory({"http": {"web_config": str(tmp_path / "mtls.yml")}}, name="mtls", start=False)
    for a in (basic, mutual):
        a.start(wait=False)
        a.wait_for(lambda a=a: "metrics port ready" in a.log(), timeout=30, what="agent up")
    log(f"agent with TLS + basic auth on 127.0.0.1:{basic.port}, agent with mutual TLS on {mutual.port}")

    (tmp_path / "password").write_text(PASSWORD)
    (tmp_path / "wrong").write_text(WRONG)
    ca = {"ca_file": str(pki.ca)}
    client = {**ca, "cert_file": str(pki.client_cert), "key_file": str(pki.client_key)}

    def job(name: str, port: int, tls_config: dict[str, str], password_file: str | None = None) -> dict:
        j: dict[str, Any] = {
            "job_name": name,
            "scheme": "https",
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "tls_config": tls_config,
            "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
        }
        if password_file:
            j["basic_auth"] = {"username": "prometheus", "password_file": str(tmp_path / password_file)}
        return j

    # the shipped example's job, as it is, with this run's files and target
    shipped = yaml.safe_load((REPO / "configs" / "prometheus" / "scrape.yml").read_text())["scrape_configs"][
        0
    ]
    assert shipped["scheme"] == "https" and shipped["basic_auth"]["username"] == "prometheus"
    example = job("basic-auth", basic.port, {**shipped["tls_config"], **ca}, "password")
    example["basic_auth"] = {**shipped["basic_auth"], "password_file": str(tmp_path / "password")}
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            example,
            job("wrong-password", basic.port, ca, "wrong"),
            job("mtls-with-cert", mutual.port, client),
            job("mtls-no-cert", mutual.port, ca),
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True)
    log((version.stdout or version.stderr).splitlines()[0])
    with open(tmp_path / "prometheus.log", "wb") as plog:
        prom = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=plog,
            stderr=subprocess.STDOUT,
        )
        try:
            want = {"basic-auth": 1.0, "wrong-password": 0.0, "mtls-with-cert": 1.0, "mtls-no-cert": 0.0}
            ups = wait_until(
                lambda: (u := _quiet(lambda: by_job(port, "up"))) and len(u) == 4 and u == want and u,
                60,
                0.5,
                "up per job",
                lambda: (tmp_path / "prometheus.log").read_text()[-3000:],
            )
            for name, v in sorted(ups.items()):
                log(f"up{{job={name!r}}} = {v:g}")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=10) as r:
                targets = json.loads(r.read())["data"]["activeTargets"]
            for t in sorted(targets, key=lambda t: t["labels"]["job"]):
                log(f"target {t['labels']['job']}: health {t['health']}, lastError {t['lastError']!r}")
            errors = query(port, "up == 0")
            assert {r["metric"]["job"] for r in errors} == {"wrong-password", "mtls-no-cert"}
            # gzip: Prometheus asked for it, and the samples it stored came from gzipped bodies
            gz = wait_until(
                lambda: (g := _quiet(lambda: by_job(port, GZIP_SCRAPES))) and len(g) == 2 and g,
                30,
                0.5,
                "gzip scrapes recorded",
            )
            ident = by_job(port, 'training_node_http_scrapes_total{encoding="identity"}')
            sizes = by_job(port, "scrape_samples_scraped")
            log(f"gzip scrapes seen by Prometheus {gz}, identity {ident}, samples per scrape {sizes}")
            assert set(gz) == {"basic-auth", "mtls-with-cert"} and all(v == 0 for v in ident.values())
            assert sizes["basic-auth"] > 50 and sizes["wrong-password"] == 0
            sent = by_job(port, 'training_node_http_scrape_bytes_total{encoding="gzip"}')
            log(f"gzip bytes sent so far {sent}")
        finally:
            prom.terminate()
            prom.wait(15)

    # the agent logged the wrong password's 401, without the password
    refused = [e for e in basic.log_lines() if e.get("event") == "http request refused"]
    assert refused and refused[0]["status"] == 401 and refused[0]["reason"] == "wrong password"
    assert refused[0]["user"] == "prometheus"
    assert WRONG not in basic.log() and PASSWORD not in basic.log()
    log(f"agent log: {json.dumps(refused[0])}")
    assert not [e for e in mutual.log_lines() if e.get("event") == "http request refused"]
    TRANSCRIPT.parent.mkdir(parents=True, exist_ok=True)
    TRANSCRIPT.write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))


def _quiet(fn):
    try:
        return fn()
    except OSError:
        return None
