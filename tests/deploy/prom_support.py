"""A real Prometheus and Alertmanager on loopback for the end-to-end tests, and a transcript of the run."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from conftest import REPO, free_port, need_binary, wait_until

PROM = REPO / "configs" / "prometheus"


def inventory_target(port: int, instance_id: str, instance_type: str, zone: str, job: str) -> dict[str, Any]:
    """What the fleet inventory writes for one node: its address and its instance metadata."""
    return {
        "targets": [f"127.0.0.1:{port}"],
        "labels": {
            "__meta_ecs_instance_id": instance_id,
            "__meta_ecs_instance_type": instance_type,
            "__meta_ecs_zone_id": zone,
            "__meta_ecs_tag_training_job": job,
        },
    }


class Transcript:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.t0 = time.monotonic()
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(f"[{time.monotonic() - self.t0:6.2f}s] {line}")

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("\n".join(self.lines) + "\n")
        print("\n" + "\n".join(self.lines))


class Alertmanager:
    """``prometheus-alertmanager`` on loopback, clustering off; ``config`` its configuration (default:
    one receiver that keeps alerts); ``debug``: it logs what it received and flushed."""

    def __init__(
        self, tmp: Path, log: Transcript, config_doc: dict[str, Any] | None = None, debug: bool = False
    ) -> None:
        binary = need_binary("prometheus-alertmanager", "prometheus-alertmanager")
        config = tmp / "alertmanager.yml"
        if config_doc is None:
            route = {"receiver": "keep", "group_by": ["alertname", "instance"], "group_wait": "0s"}
            config_doc = {"route": route, "receivers": [{"name": "keep"}]}
        config.write_text(yaml.safe_dump(config_doc))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "alertmanager.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.path={tmp / 'am'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
                *(["--log.level=debug"] if debug else []),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: self._get("/-/ready") is not None, 30, 0.2, "Alertmanager ready", self.log)
        log(f"alertmanager ready on {self.url}")

    def _get(self, path: str) -> Any:
        assert self.proc.poll() is None, self.log()
        try:
            with urllib.request.urlopen(self.url + path, timeout=2) as r:
                body = r.read()
        except OSError:
            return None
        return json.loads(body) if path.startswith("/api/") else body

    def alerts(self) -> list[dict[str, Any]]:
        return self._get("/api/v2/alerts") or []

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class PrometheusServer:
    """``prometheus`` on loopback with configs/prometheus/scrape.yml and rules.yml, 1 s intervals."""

    def __init__(
        self,
        tmp: Path,
        targets: list[dict[str, Any]],
        alertmanager: Alertmanager,
        log: Transcript,
        rules: Path = PROM / "rules.yml",
        host: str = "127.0.0.1",
        port: int | None = None,
    ) -> None:
        binary = need_binary("prometheus", "prometheus")
        config = yaml.safe_load((PROM / "scrape.yml").read_text())
        config["global"].update(scrape_interval="1s", evaluation_interval="1s")
        config["rule_files"] = [str(rules)]
        am = {"static_configs": [{"targets": [f"127.0.0.1:{alertmanager.port}"]}]}
        config["alerting"] = {"alertmanagers": [am]}
        (job,) = config["scrape_configs"]
        job.update(scrape_interval="1s", scrape_timeout="1s")
        # this run is about the rules and labels on a plain agent; the job's TLS and basic auth are
        # scraped for real in test_prometheus_webconfig.py
        for key in ("scheme", "tls_config", "basic_auth"):
            job.pop(key)
        (sd,) = job["file_sd_configs"]
        sd_dir = tmp / "targets"
        sd_dir.mkdir()
        sd["files"] = [str(sd_dir / "*.json")]
        (sd_dir / "gpu-nodes.json").write_text(json.dumps(targets))
        self.config_path = tmp / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.port = port or free_port()
        self.url = f"http://{host}:{self.port}"  # host: where agents in network namespaces reach it
        self.log_path = tmp / "prometheus.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        version = subprocess.run([binary, "--version"], capture_output=True, text=True)
        log(f"{(version.stdout or version.stderr).splitlines()[0]}")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address={host}:{self.port}",
                "--web.enable-lifecycle",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.wait(lambda: self._ready(), 30, "Prometheus ready")
        log(f"prometheus ready on {self.url} (scrape and evaluation interval 1s)")

    def _ready(self) -> bool:
        assert self.proc.poll() is None, self.log()
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("query", query=expr)["result"]

    def wait(self, pred, timeout: float, what: str):
        return wait_until(pred, timeout, 0.2, what, self.log)

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()
