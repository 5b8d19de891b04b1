"""Secrets outside the service: from a root shell, ``test-alert`` and ``check-config
--resolve-secrets`` read the files the unit's ``LoadCredential=`` hands the service (a directory:
``ID_<file>``; a file: ``ID``), and ``check-config`` reports a secret it cannot read.

Real files, modes and users: the credentials are root's (0600 in a 0700 directory, as install.sh
makes them); the unprivileged run is a subprocess under another uid (setpriv).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import REPO, need_binary, need_root, write_toml
from fake_chat import FakeChat
from other_user import UNPRIVILEGED_UID, need_checkout_readable_by

from agent.config.credentials import load_credential_lines, unit_credentials

OTHER_UID = UNPRIVILEGED_UID


def _cli(*args: str, uid: int | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "agent", *args]
    if uid is not None:
        cmd = [
            need_binary("setpriv", "util-linux"),
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            *cmd,
        ]
    env = {k: v for k, v in os.environ.items() if k != "CREDENTIALS_DIRECTORY"}  # a shell, not the service
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def installed():
    """A unit with LoadCredential= of a directory (like the shipped one) and of a single file, its
    drop-in, the root-only credential files, and a config that names them relatively; in a
    directory another uid can reach (pytest's own tmp_path is root's alone)."""
    need_root("root-owned credential files read from a root shell, refused to another uid")
    tmp_path = Path(tempfile.mkdtemp(prefix="tna-secrets-"))
    os.chmod(tmp_path, 0o755)
    creds = tmp_path / "credentials"
    creds.mkdir(mode=0o700)
    single = tmp_path / "signing-key"
    unit = tmp_path / "training-node-agent.service"
    unit.write_text(
        "[Unit]\nDescription=x\n[Service]\nExecStart=/bin/true\n"
        f"LoadCredential=webhooks:{creds}\n# LoadCredential=commented:/nope\n"
    )
    dropin = tmp_path / "training-node-agent.service.d"
    dropin.mkdir()
    (dropin / "signing.conf").write_text(f"[Service]\nLoadCredential=dingtalk-secret:{single}\n")
    yield tmp_path, creds, single, unit
    shutil.rmtree(tmp_path)


def _config(tmp_path: Path, url_file: str, secret_file: str) -> Path:
    path = write_toml(
        tmp_path / "agent.toml",
        {
            "alerts": {
                "webhooks": [
                    {
                        "name": "oncall",
                        "type": "dingtalk",
                        "url": {"file": url_file},
                        "secret": {"file": secret_file},
                    }
                ]
            }
        },
    )
    os.chmod(path, 0o644)
    return path


def _secret_file(path: Path, text: str) -> None:
    path.write_text(text + "\n")
    os.chmod(path, 0o600)


def test_root_shell_reads_the_units_credentials(installed, monkeypatch):
    tmp_path, creds, single, unit = installed
    with FakeChat() as fake:
        bot = fake.add("dingtalk", secret="SECsigned-by-the-credential")
        _secret_file(creds / "dingtalk-url", bot.url)
        _secret_file(single, "SECsigned-by-the-credential")
        config = _config(tmp_path, "webhooks_dingtalk-url", "dingtalk-secret")
        # the drop-in is found next to the unit, as systemd finds it
        monkeypatch.setattr("agent.config.credentials.UNIT_DIRS", (str(tmp_path),))
        found = unit_credentials(None)
        assert found.unit == unit
        assert found.files == {"webhooks_dingtalk-url": creds / "dingtalk-url", "dingtalk-secret": single}

        sent = _cli("test-alert", "--config", str(config), "--unit", str(unit))
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert "=> delivered" in sent.stdout and len(bot.accepted) == 1  # signed with the file's key
        assert bot.token not in sent.stdout + sent.stderr and "SECsigned" not in sent.stdout + sent.stderr
        assert f"webhooks -> {creds}" in sent.stderr

        ok = _cli("check-config", "--resolve-secrets", "--config", str(config), "--unit", str(unit))
        assert ok.returncode == 0, ok.stderr
        assert "secret alerts.webhooks[0].url (file webhooks_dingtalk-url): ok" in ok.stderr
        assert "secret alerts.webhooks[0].secret (file dingtalk-secret): ok" in ok.stderr
        assert bot.token not in ok.stdout + ok.stderr


def test_unreadable_secret_is_reported(installed):
    tmp_path, creds, single, unit = installed
    _secret_file(creds / "dingtalk-url", "https://oapi.dingtalk.com/robot/send?access_token=abc")
    _secret_file(single, "SECx")
    config = _config(tmp_path, "webhooks_dingtalk-url", "no-such-credential")
    out = _cli("check-config", "--resolve-secrets", "--config", str(config), "--unit", str(unit))
    assert out.returncode == 2
    assert "secret alerts.webhooks[0].url (file webhooks_dingtalk-url): ok" in out.stderr
    assert (
        "secret alerts.webhooks[0].secret (file no-such-credential): ERROR: cannot read secret file"
        in out.stderr
    )
    # without --resolve-secrets the config itself is valid: reported, not failed
    out = _cli("check-config", "--config", str(config), "--unit", str(unit))
    assert out.returncode == 0 and "(file no-such-credential): WARNING: cannot read" in out.stderr

    # another user cannot read root's credentials, and says so (the service gets them from systemd)
    need_checkout_readable_by(OTHER_UID)
    config = _config(tmp_path, "webhooks_dingtalk-url", "dingtalk-secret")
    out = _cli(
        "check-config", "--resolve-secrets", "--config", str(config), "--unit", str(unit), uid=OTHER_UID
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"cannot list {creds} (LoadCredential=webhooks): Permission denied" in out.stderr


def test_inside_the_service_the_credentials_directory_is_used(tmp_path, monkeypatch):
    d = tmp_path / "creds"
    d.mkdir()
    (d / "webhooks_url").write_text("https://example.invalid/hook\n")
    config = _config(tmp_path, "webhooks_url", "webhooks_url")
    env = {**os.environ, "CREDENTIALS_DIRECTORY": str(d)}
    out = subprocess.run(
        [sys.executable, "-m", "agent", "check-config", "--resolve-secrets", "--config", str(config),
         "--unit", str(tmp_path / "absent.service")],
        cwd=REPO, capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "secrets: outside the service" not in out.stderr and out.stderr.count(": ok") == 2


def test_load_credential_lines_follow_systemds_rules():
    unit = "[Service]\nLoadCredential=a:/x\nLoadCredential = b:/y\n[Install]\nLoadCredential=c:/z\n"
    assert load_credential_lines([unit]) == ["a:/x", "b:/y"]
    assert load_credential_lines([unit, "[Service]\nLoadCredential=\nLoadCredential=d:/w\n"]) == ["d:/w"]
