"""The hardened unit: systemd's own verifier and exposure analysis, and the settings the agent relies on."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, need_binary

from agent.config import Config

UNIT = REPO / "systemd" / "training-node-agent.service"
# 1.9 before the kernel log: reading /dev/kmsg costs ProtectKernelLogs (0.2); CAP_SYSLOG scores nothing more
MAX_EXPOSURE = 2.1


def unit_settings(text: str) -> dict[str, list[str]]:
    """``Key=value`` lines of a unit file (comments and continuation-free), every value of each key."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def runnable_copy(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at a binary that exists here (verify checks it is executable);
    every other line is the shipped one."""
    exe = Path(sys.executable).with_name("training-node-agent")
    assert exe.exists(), f"{exe} missing: is the package installed in this venv?"
    text = UNIT.read_text()
    shipped = "ExecStart=/opt/training-node-agent/bin/training-node-agent "
    assert shipped in text
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace(shipped, f"ExecStart={exe} "))
    return copy


@pytest.fixture(scope="module")
def settings() -> dict[str, list[str]]:
    return unit_settings(UNIT.read_text())


def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    analyze = need_binary("systemd-analyze", "systemd")
    unit = runnable_copy(tmp_path)
    r = subprocess.run([analyze, "verify", unit.name], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # verify reports unknown keys and bad values as warnings with exit 0: none may mention our unit
    noise = [ln for ln in (r.stdout + r.stderr).splitlines() if UNIT.name in ln]
    assert noise == [], "\n".join(noise)


def test_systemd_analyze_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    """The check above can fail: a typo'd directive is reported (with exit 0, hence the noise check),
    and a missing ExecStart binary fails verify."""
    analyze = need_binary("systemd-analyze", "systemd")
    bad = runnable_copy(tmp_path)
    bad.write_text(bad.read_text().replace("ProtectClock=yes", "ProtectClok=yes"))
    r = subprocess.run([analyze, "verify", bad.name], cwd=tmp_path, capture_output=True, text=True)
    assert "Unknown key 'ProtectClok'" in r.stdout + r.stderr
    missing = UNIT.read_text().replace("ExecStart=/opt/", f"ExecStart={tmp_path}/absent/")
    bad.write_text(missing)
    r = subprocess.run([analyze, "verify", bad.name], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode != 0 and "is not executable" in r.stdout + r.stderr


def exposure(analyze: str, unit: Path) -> float:
    r = subprocess.run(
        [analyze, "security", "--offline=true", "--no-pager", str(unit)],
        cwd=unit.parent,
        capture_output=True,
        text=True,
    )
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", r.stdout)
    assert m, r.stdout + r.stderr
    return float(m.group(1))


def test_exposure_score_at_most_2_1(tmp_path: Path) -> None:
    analyze = need_binary("systemd-analyze", "systemd")
    unit = runnable_copy(tmp_path)
    score = exposure(analyze, unit)
    peers = {
        name: exposure(analyze, p)
        for name, p in (
            ("Debian prometheus-node-exporter", Path("/lib/systemd/system/prometheus-node-exporter.service")),
            ("Debian prometheus", Path("/lib/systemd/system/prometheus.service")),
        )
        if p.exists()
    }
    print(f"\nexposure: training-node-agent {score}; " + "; ".join(f"{k} {v}" for k, v in peers.items()))
    assert score <= MAX_EXPOSURE
    # the same gate through systemd's own threshold option (exposure x10 as an integer)
    r = subprocess.run(
        [analyze, "security", "--offline=true", f"--threshold={int(MAX_EXPOSURE * 10)}", unit.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-2000:]


def test_exposure_check_can_fail(tmp_path: Path) -> None:
    """Dropping the hardening block raises the score over the limit, so the gate above is real."""
    analyze = need_binary("systemd-analyze", "systemd")
    text = runnable_copy(tmp_path).read_text()
    weak = "\n".join(
        ln for ln in text.splitlines() if not ln.startswith(("Protect", "Private", "SystemCall", "Restrict"))
    )
    (tmp_path / "weak.service").write_text(weak)
    assert exposure(analyze, tmp_path / "weak.service") > MAX_EXPOSURE


def test_service_type_watchdog_restart(settings: dict[str, list[str]]) -> None:
    assert settings["Type"] == ["notify"]
    assert settings["NotifyAccess"] == ["main"]  # only the daemon itself may report READY/WATCHDOG
    assert settings["Restart"] == ["on-failure"]
    watchdog = settings["WatchdogSec"][0]
    assert re.fullmatch(r"\d+s", watchdog) and int(watchdog[:-1]) >= 10
    assert "kill -HUP $MAINPID" in settings["ExecReload"][0]  # SIGHUP reloads the config


def test_only_cap_kill_and_syslog_and_a_dedicated_user(settings: dict[str, list[str]]) -> None:
    assert settings["User"] == ["training-node-agent"]
    assert settings["CapabilityBoundingSet"] == ["CAP_KILL CAP_SYSLOG"]
    assert settings["AmbientCapabilities"] == ["CAP_KILL CAP_SYSLOG"]
    assert settings["NoNewPrivileges"] == ["yes"]


def test_nvidia_devices_only(settings: dict[str, list[str]]) -> None:
    assert settings["DevicePolicy"] == ["closed"]
    allowed = {v.split()[0]: v.split()[1] for v in settings["DeviceAllow"]}
    # both driver generations: "nvidia-frontend" (proprietary, older open) and "nvidia"+"nvidiactl"
    assert allowed["char-nvidia-frontend"] == "rw"
    assert allowed["char-nvidia"] == "rw"
    assert allowed["char-nvidiactl"] == "rw"
    assert allowed.pop("/dev/kmsg") == "r"  # the driver's Xid lines, read only
    assert all(k.startswith("char-nvidia") for k in allowed)


def test_settings_that_break_the_agent_are_absent(settings: dict[str, list[str]]) -> None:
    for key, bad in (
        ("ProtectProc", {"invisible", "noaccess", "ptraceable"}),
        ("ProcSubset", {"pid"}),
        ("PrivateUsers", {"yes", "true", "1"}),
        ("PrivateDevices", {"yes", "true", "1"}),
        ("PrivateNetwork", {"yes", "true", "1"}),
        ("ProtectKernelLogs", {"yes", "true", "1"}),
    ):
        assert not bad & set(settings.get(key, [])), key
    text = UNIT.read_text()
    explained = ("ProtectProc=invisible", "ProcSubset=pid", "PrivateUsers", "PrivateDevices")
    for key in (*explained, "ProtectKernelLogs"):
        assert re.search(rf"^#\s+{key}", text, re.M), f"the comment explaining why {key} breaks the agent"


def test_hardening_directives(settings: dict[str, list[str]]) -> None:
    want_yes = [
        "PrivateTmp",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectControlGroups",
        "ProtectClock",
        "ProtectHostname",
        "RestrictNamespaces",
        "RestrictRealtime",
        "RestrictSUIDSGID",
        "LockPersonality",
        "MemoryDenyWriteExecute",
    ]
    for key in want_yes:
        assert settings.get(key) == ["yes"], key
    assert settings["ProtectSystem"] == ["strict"]
    assert settings["ProtectHome"] in (["yes"], ["read-only"], ["tmpfs"])
    assert settings["SystemCallArchitectures"] == ["native"]
    assert settings["SystemCallFilter"][0] == "@system-service"
    assert set(settings["RestrictAddressFamilies"][0].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert settings["UMask"] == ["0077"]


def test_directories_match_the_config_defaults(settings: dict[str, list[str]]) -> None:
    """systemd creates exactly the directories the agent uses by default, so ProtectSystem=strict
    leaves them writable and nothing else."""
    cfg = Config()
    assert f"/run/{settings['RuntimeDirectory'][0]}" == cfg.agent.runtime_dir
    assert Path(cfg.http.control_socket).parent == Path(cfg.agent.runtime_dir)
    assert f"/var/lib/{settings['StateDirectory'][0]}" == cfg.agent.state_dir
    assert settings["ConfigurationDirectory"] == ["training-node-agent"]
    exec_start = settings["ExecStart"][0].split()
    assert exec_start[1:] == ["run", "--config", "/etc/training-node-agent/agent.toml"]
    # trainers of any user read checkpoint/request.json under it; the socket guards itself (0660)
    assert settings["RuntimeDirectoryMode"] == ["0755"]


def test_webhook_secrets_come_from_credentials(settings: dict[str, list[str]]) -> None:
    cred = settings["LoadCredential"][0]
    name, _, path = cred.partition(":")
    assert name and path == "/etc/training-node-agent/credentials"
