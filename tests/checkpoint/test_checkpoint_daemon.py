"""The checkpoint chain in the real daemon, driven by drills: real trainer processes, real signals,
the request and ack files, the control socket, metrics and status."""

from __future__ import annotations

import http.server
import json
import signal
import threading
import time
from pathlib import Path

from checkpoint_helpers import Trainer, cli, control, idle_process, metric, recent_events
from conftest import wait_until


def _cfg(tmp_path, *discover: str, **trainer: object) -> dict:
    return {"trainer": {"discover": list(discover), "request_file": str(_request_file(tmp_path)), **trainer}}


def _request_file(tmp_path):
    return tmp_path / "cp" / "request.json"


def test_drill_signals_the_trainer_and_records_its_ack(agent_factory, tmp_path):
    trainer = Trainer(tmp_path, "t", _request_file(tmp_path), "--keep-going", "--save-seconds", "0.3")
    try:
        agent = agent_factory(_cfg(tmp_path, f"cmdline:{trainer.marker}"))
        wait_until(
            lambda: metric(agent.metrics(), "training_node_checkpoint_targets") == 1, what="target gauge"
        )
        # the process collector follows the discovered targets too, not only the GPUs' processes
        agent.wait_for(
            lambda: (
                trainer.pid in [p["pid"] for p in agent.status()["snapshot"].get("training_processes", [])]
            ),
            what="the trainer in the process collector's snapshot",
        )
        res = cli(agent, "drill", "--deadline", "60s")
        assert res.returncode == 0, res.stdout + res.stderr + agent.log()
        out = res.stdout
        assert f"pid {trainer.pid} (python" in out and "SIGUSR1 signalled" in out
        assert "ack: via file step" in out and "verdict: SAFE" in out
        assert len(trainer.events("signal")) == 1
        [ckpt] = trainer.events("checkpoint")
        assert (trainer.dir / ckpt["path"].rsplit("/", 1)[1]).is_file()
        # the duration is the trainer's: at least the 0.3 s its save takes
        report = json.loads(cli(agent, "drill", "--deadline", "60s", "--json").stdout)
        assert report["verdict"] == "safe" and report["before_deadline"] is True
        assert 0.3 <= report["duration_seconds"] < 30
        assert [c["cloud"] for c in report["clouds"]] == ["alibaba", "aws", "gcp", "azure", "tencent"]
        assert len(trainer.events("signal")) == 2  # one per drill, never more

        m = agent.metrics()
        assert metric(m, "training_node_checkpoint_requests_total", 'drill="true"') == 2
        assert metric(m, "training_node_checkpoint_completed_total", 'drill="true"') == 2
        assert metric(m, "training_node_checkpoint_completed_total", 'drill="false"') == 0
        assert metric(m, "training_node_checkpoint_duration_seconds_count", 'drill="true"') == 2
        assert metric(m, "training_node_checkpoint_deadline_missed_total", 'drill="true"') == 0
        st = agent.status()["checkpoint"]
        assert st["targets"][0]["pid"] == trainer.pid and st["targets"][0]["handler"] == "handler"
        assert any("completed in" in line for line in st["lines"])
        phases = [e["phase"] for e in recent_events(agent)]
        assert phases == ["requested", "completed", "requested", "completed"]
        # the request file tells late-starting ranks that this one is done
        assert json.loads(_request_file(tmp_path).read_text())["state"] == "completed"
        # any user's trainer can write its ack there; nobody can remove another's file
        assert _request_file(tmp_path).parent.stat().st_mode & 0o7777 == 0o1777
    finally:
        trainer.stop()


def test_target_without_handler_is_not_signalled_and_raises_an_alert(agent_factory, tmp_path):
    bare = idle_process(f"{tmp_path}/bare-marker")
    trainer = Trainer(tmp_path, "h", _request_file(tmp_path), "--keep-going")
    try:
        agent = agent_factory(_cfg(tmp_path, f"cmdline:{tmp_path}/(bare-marker|ckpt-h)"))
        wait_until(lambda: metric(agent.metrics(), "training_node_checkpoint_targets") == 2, what="2 targets")
        assert metric(agent.metrics(), "training_node_checkpoint_targets_unsignalable") == 1
        lines = agent.status()["checkpoint"]["lines"]
        assert any(f"pid {bare.pid}" in x and "NO-HANDLER" in x for x in lines), lines
        report = json.loads(cli(agent, "drill", "--deadline", "30s", "--json").stdout)
        outcomes = {t["pid"]: t["outcome"] for t in report["targets"]}
        assert outcomes == {bare.pid: "no-handler", trainer.pid: "signalled"}
        time.sleep(0.3)
        assert bare.poll() is None, "the process without a handler was killed"
        # the trainer still got the request (signal and file) and acknowledged it
        assert report["verdict"] == "safe"
        events = recent_events(agent)
        assert [e["phase"] for e in events] == ["unreachable", "requested", "completed"]
        [alert] = [e for e in events if e["phase"] == "unreachable"]
        assert (
            alert["targets"][0].startswith(f"pid {bare.pid} (python")
            and "no SIGUSR1 handler" in alert["detail"]
        )
    finally:
        bare.kill()
        bare.wait()
        trainer.stop()


def test_deadline_missed_is_counted(agent_factory, tmp_path):
    trainer = Trainer(tmp_path, "m", _request_file(tmp_path), "--no-ack", "--keep-going")
    try:
        agent = agent_factory(_cfg(tmp_path, f"cmdline:{trainer.marker}"))
        res = cli(agent, "drill", "--deadline", "2s")
        assert res.returncode == 3, res.stdout + res.stderr
        assert "WOULD LOSE WORK" in res.stdout and "ack: none received" in res.stdout
        # it saved, but never said so: its save may land after the drill's 2 s (a busy box), and
        # the drill's verdict does not wait for it; one save, however long it took
        wait_until(lambda: trainer.events("checkpoint"), 20, what="the trainer's save")
        assert len(trainer.events("checkpoint")) == 1
        m = agent.metrics()
        assert metric(m, "training_node_checkpoint_deadline_missed_total", 'drill="true"') == 1
        assert metric(m, "training_node_checkpoint_completed_total", 'drill="true"') == 0
        assert [e["phase"] for e in recent_events(agent)] == ["requested", "missed"]
        assert json.loads(_request_file(tmp_path).read_text())["state"] == "missed"
    finally:
        trainer.stop()


def test_no_target_found(agent_factory, tmp_path):
    agent = agent_factory(_cfg(tmp_path, "cmdline:no-such-process-[x]yz", f"pidfile:{tmp_path}/none.pid"))
    res = cli(agent, "drill", "--deadline", "1s")
    assert res.returncode == 3 and "targets found: 0" in res.stdout, res.stdout
    assert f"pidfile:{tmp_path}/none.pid: not found" in res.stdout
    [ev] = [e for e in recent_events(agent) if e["phase"] == "no-target"]
    assert "none.pid" in ev["detail"]
    # the request file was still written: a trainer that only watches the file can still act
    assert json.loads(_request_file(tmp_path).read_text())["kind"] == "spot-termination"


def test_dry_run_touches_nothing(agent_factory, tmp_path):
    trainer = Trainer(tmp_path, "d", _request_file(tmp_path), "--keep-going")
    try:
        agent = agent_factory(
            _cfg(tmp_path, f"cmdline:{trainer.marker}", dry_run=True, http_url="http://127.0.0.1:9/x")
        )
        res = cli(agent, "drill", "--deadline", "30s")
        assert res.returncode == 0, res.stdout + res.stderr
        assert "DRY RUN" in res.stdout and "would send SIGUSR1" in res.stdout
        assert "would POST to http://127.0.0.1:9/x" in res.stdout
        time.sleep(0.5)  # the trainer polls the file every 0.1 s: give it the chance to see one
        assert trainer.events("signal") == [] and trainer.events("checkpoint") == []
        assert not _request_file(tmp_path).exists()
        assert metric(agent.metrics(), "training_node_checkpoint_requests_total", 'drill="true"') == 0
        assert "DRY RUN" in agent.status()["checkpoint"]["lines"][0]
    finally:
        trainer.stop()


def test_restart_while_a_request_is_open_sends_no_second_signal(agent_factory, tmp_path):
    trainer = Trainer(tmp_path, "r", _request_file(tmp_path), "--no-ack", "--keep-going")
    try:
        agent = agent_factory(_cfg(tmp_path, f"cmdline:{trainer.marker}"))
        drill = threading.Thread(
            target=lambda: _swallow(
                lambda: control(agent, "POST", "/checkpoint/drill", {"deadline_seconds": 120})
            ),
            daemon=True,
        )
        drill.start()
        wait_until(lambda: trainer.events("checkpoint"), what="the trainer's checkpoint")
        agent.kill9()  # the worst case: no chance to save anything on the way out
        agent.start()
        active = wait_until(lambda: agent.status()["checkpoint"]["active"], what="resumed episode")
        assert active[0]["phase"] == "requested"
        time.sleep(1.0)
        assert len(trainer.events("signal")) == 1, "signalled again after the restart"
        res = cli(agent, "ack", "--step", "42", "--path", "/mnt/cpfs/ckpt-42")
        assert res.returncode == 0 and "acknowledged drill-" in res.stdout, res.stdout + res.stderr
        report = json.loads(cli(agent, "drill", "--dry-run", "--deadline", "5s", "--json").stdout)
        assert report["dry_run"]
        code, last = control(agent, "GET", f"/checkpoint/report?event_id={active[0]['event_id']}")
        assert code == 200 and last["phase"] == "completed" and last["ack"]["step"] == 42
        assert last["ack"]["via"] == "control socket"
        assert metric(agent.metrics(), "training_node_checkpoint_completed_total", 'drill="true"') == 1
    finally:
        trainer.stop()


def test_escalation_sends_a_final_sigterm(agent_factory, tmp_path):
    target = idle_process(f"{tmp_path}/esc-marker", handler="SIGUSR1")
    try:
        agent = agent_factory(_cfg(tmp_path, f"cmdline:{tmp_path}/esc-marker", escalate_before="1s"))
        res = cli(agent, "drill", "--deadline", "2s", "--json")
        report = json.loads(res.stdout)
        assert report["targets"][0]["outcome"] == "signalled"
        comm = Path(f"/proc/{target.pid}/comm").read_text().strip()
        assert f"pid {target.pid} ({comm}): signalled" in report["channels"]["escalation"]
        assert target.wait(5) == -signal.SIGTERM
        assert "escalated" in [e["phase"] for e in recent_events(agent)]
    finally:
        if target.poll() is None:
            target.kill()
        target.wait()


def test_http_channel_and_ack_over_the_control_socket(agent_factory, tmp_path):
    posts: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = idle_process(f"{tmp_path}/http-marker", handler="SIGUSR1")
    try:
        url = f"http://127.0.0.1:{server.server_port}/checkpoint"
        agent = agent_factory(_cfg(tmp_path, f"cmdline:{tmp_path}/http-marker", http_url=url))
        result: dict = {}
        t = threading.Thread(
            target=lambda: result.update(
                report=control(agent, "POST", "/checkpoint/drill", {"deadline_seconds": 60})[1]
            )
        )
        t.start()
        wait_until(lambda: posts, what="the POST")
        assert posts[0]["state"] == "requested" and posts[0]["ack_path"].endswith(".json")
        code, body = control(agent, "POST", "/checkpoint/ack", {"event_id": "nope"})
        assert code == 404
        res = cli(agent, "ack", "--step", "7", "--path", "oss://bucket/ckpt-7")
        assert res.returncode == 0, res.stdout + res.stderr
        t.join(10)
        rep = result["report"]
        assert rep["ack"]["step"] == 7 and rep["ack"]["path"] == "oss://bucket/ckpt-7"
        assert rep["channels"]["http"] == f"POST {url}: 204"
        code, body = control(agent, "POST", "/checkpoint/ack", {})
        assert code == 404 and "no checkpoint request is open" in body["error"]
    finally:
        server.shutdown()
        target.kill()
        target.wait()


def _swallow(fn):
    try:
        fn()
    except Exception:
        pass
