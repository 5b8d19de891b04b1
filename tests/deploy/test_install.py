"""install.sh into a throwaway root: the resulting tree, idempotence, config preservation, uninstall.

The agent and its dependencies come from a wheelhouse (``--wheelhouse``, the offline-node path):
our own wheel is built from this checkout, and each dependency is repacked from this venv, so the
test needs no package index.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import importlib.metadata
import os
import re
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import NETGUARD_DIR, REPO, AgentProcess, need_binary, need_root

pytestmark = pytest.mark.slow  # installs into fresh roots, about 40 s

INSTALL = REPO / "install.sh"
NAME = "training-node-agent"
PREFIX = Path("/opt") / NAME
CONF = Path("/etc") / NAME / "agent.toml"

PLACEHOLDER_CONFIG = """\
# stand-in for configs/agent.toml while the shipped default is being assembled
[agent]
interval = "1s"
"""


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repack_installed(dist: importlib.metadata.Distribution, dest: Path) -> Path:
    """A wheel made from an installed distribution's own files (per its RECORD), for an offline
    wheelhouse: pip regenerates scripts and bytecode, so those are left out."""
    files = [f for f in dist.files or [] if not str(f).startswith("..") and "__pycache__" not in str(f)]
    info = next(str(f.parent) for f in files if f.name == "METADATA" and f.parent.name.endswith(".dist-info"))
    tags = [
        ln.split(":", 1)[1].strip()
        for ln in (dist.read_text("WHEEL") or "").splitlines()
        if ln.startswith("Tag:")
    ]
    # the first tag this interpreter takes: a universal wheel lists py2-none-any first (tzdata)
    from packaging.tags import sys_tags

    supported = {str(t) for t in sys_tags()}
    tag = next((t for t in tags if t in supported), tags[0])
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    whl = dest / f"{name}-{dist.version}-{tag}.whl"
    skip = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    rows = []
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            if str(f.parent) == info and f.name in skip:
                continue
            data = Path(f.locate()).read_bytes()
            z.writestr(str(f), data)
            rows.append(f"{f},{_record_hash(data)},{len(data)}")
        rows.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(rows) + "\n")
    return whl


def runtime_closure(name: str, extras: tuple[str, ...] = ()) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``name`` with its ``extras`` needs at run time (markers honoured)."""
    from packaging.requirements import Requirement

    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = [name]
    while todo:
        wanted = ("", *extras) if todo[-1] == name else ("",)
        dist = importlib.metadata.distribution(todo.pop())
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in wanted):
                continue
            key = re.sub(r"[-_.]+", "-", req.name).lower()
            if key not in seen:
                seen[key] = importlib.metadata.distribution(req.name)
                todo.append(req.name)
    return list(seen.values())


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Everything an offline node gets handed: this checkout as a wheel, plus each runtime dependency
    repacked from this venv (the suite must not reach a package index)."""
    wh = tmp_path_factory.mktemp("wheelhouse")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    # setuptools builds in the checkout (build/lib, the egg-info): two test workers building at once
    # (make test runs files side by side) would mix each other's files into their wheels
    lock = REPO / "build" / ".wheel.lock"
    lock.parent.mkdir(exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        r = _run([*pip_wheel, "-q", "-w", str(wh), "."], cwd=REPO)
    assert r.returncode == 0, r.stderr
    for dist in runtime_closure(NAME, extras=("top",)):  # install.sh installs the live view's rich
        repack_installed(dist, wh)
    return wh


@pytest.fixture(scope="module")
def config_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shipped = REPO / "configs" / "agent.toml"
    if shipped.exists():
        return shipped
    p = tmp_path_factory.mktemp("config") / "agent.toml"
    p.write_text(PLACEHOLDER_CONFIG)
    return p


def node_env() -> dict[str, str]:
    """The environment as on a node: no checkout on PYTHONPATH (the venv's pip would take this
    tree's egg-info for an installed agent and install nothing), only the suite's network guard."""
    return {**os.environ, "PYTHONPATH": str(NETGUARD_DIR)}


def make_root(path: Path) -> Path:
    """A root with just enough of /etc for useradd --prefix: the host's users are not touched."""
    etc = path / "etc"
    etc.mkdir(parents=True)
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (etc / "group").write_text("root:x:0:\n")
    (etc / "shadow").write_text("root:*:19000:0:99999:7:::\n")
    (etc / "gshadow").write_text("root:*::\n")
    return path


class Installer:
    def __init__(self, root: Path, wheelhouse: Path | None, config: Path) -> None:
        self.root = root
        self.wheelhouse = wheelhouse
        self.config = config

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["bash", str(INSTALL), "--root", str(self.root), "--python", sys.executable]
        cmd += ["--config", str(self.config)]
        if self.wheelhouse is not None:
            cmd += ["--wheelhouse", str(self.wheelhouse)]
        r = _run([*cmd, *args], env={**node_env(), "PIP_NO_CACHE_DIR": "1"})
        if check:
            assert r.returncode == 0, f"install.sh {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
        return r

    def path(self, p: Path | str) -> Path:
        return self.root / str(p).lstrip("/")

    def passwd_entry(self) -> list[str] | None:
        for line in self.path("/etc/passwd").read_text().splitlines():
            if line.startswith(f"{NAME}:"):
                return line.split(":")
        return None


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under root with its type, mode, owner and content hash (bytecode caches aside)."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
            else:
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
                out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, digest)
    return out


@pytest.fixture(scope="module")
def fresh(
    tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path, config_src: Path
) -> tuple[Installer, subprocess.CompletedProcess[str], bytes]:
    """One fresh install shared by the tests below (building a venv is the slow part); each test
    leaves the tree as installed, and the uninstall test comes last."""
    need_root("useradd into the staged root and chown to the service user")
    need_binary("useradd", "passwd")
    host_passwd = Path("/etc/passwd").read_bytes()
    ins = Installer(make_root(tmp_path_factory.mktemp("staged") / "root"), wheelhouse, config_src)
    return ins, ins(), host_passwd


@pytest.fixture
def installer(fresh: tuple[Installer, subprocess.CompletedProcess[str], bytes]) -> Installer:
    return fresh[0]


def test_fresh_install_tree(fresh: tuple[Installer, subprocess.CompletedProcess[str], bytes]) -> None:
    installer, r, host_passwd = fresh
    ins = installer.path

    # the service user, in the staged root only
    entry = installer.passwd_entry()
    assert entry is not None, r.stdout
    uid, gid = int(entry[2]), int(entry[3])
    assert 0 < uid < 1000 and entry[5] == "/var/lib/training-node-agent" and entry[6].endswith("nologin")
    assert f"{NAME}:x:{gid}:" in ins("/etc/group").read_text()
    assert Path("/etc/passwd").read_bytes() == host_passwd

    # a working venv, with the live view's extra
    assert "venv: the [top] extra (rich, for training-node-agent top) installed" in r.stdout, (
        r.stdout + r.stderr
    )
    exe = ins(PREFIX / "bin" / NAME)
    v = _run([str(exe), "version"])
    assert v.returncode == 0 and v.stdout.startswith(f"{NAME} "), v.stdout + v.stderr
    cc = _run([str(exe), "check-config", "--config", str(ins(CONF))])
    assert cc.returncode == 0, cc.stdout + cc.stderr

    # config: the default, readable by the service group only
    conf = ins(CONF)
    assert conf.read_bytes() == installer.config.read_bytes()
    st = conf.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_gid == gid
    assert not ins(f"{CONF}.new").exists()
    cred = ins(f"/etc/{NAME}/credentials").stat()
    assert stat.S_ISDIR(cred.st_mode) and stat.S_IMODE(cred.st_mode) == 0o700

    # state directory owned by the service user
    state = ins(f"/var/lib/{NAME}").stat()
    assert (state.st_uid, state.st_gid, stat.S_IMODE(state.st_mode)) == (uid, gid, 0o750)

    # the unit, pointing at the venv, enabled (offline: no systemd in a staged root)
    unit = ins(f"/etc/systemd/system/{NAME}.service").read_text()
    assert f"ExecStart={PREFIX}/bin/{NAME} run --config {CONF}\n" in unit
    assert unit == (REPO / "systemd" / f"{NAME}.service").read_text()
    if subprocess.run(["which", "systemctl"], capture_output=True).returncode == 0:
        wants = ins(f"/etc/systemd/system/multi-user.target.wants/{NAME}.service")
        assert wants.is_symlink() and os.readlink(wants) == f"/etc/systemd/system/{NAME}.service"

    # no systemd to start it: says how instead of failing
    assert "systemd is not managing this system" in r.stdout
    assert f"{PREFIX}/bin/{NAME} run --config {CONF}" in r.stdout


def test_second_run_changes_nothing(installer: Installer) -> None:
    before = snapshot(installer.root)
    r = installer("--no-start")
    assert snapshot(installer.root) == before
    assert "user: training-node-agent exists" in r.stdout
    assert "is the current default" in r.stdout
    assert "is current" in r.stdout
    assert "how to start" not in r.stdout.lower() and "systemd is not managing" not in r.stdout


def test_top_draws_a_frame_from_the_installed_venv(installer: Installer, tmp_path: Path) -> None:
    """`training-node-agent top --once` as an operator runs it on a node installed the documented
    way: the venv's own agent and rich (not this checkout's), against the installed agent running."""
    venv = installer.path(PREFIX)
    env = {**node_env(), "COLUMNS": "100"}  # the venv's packages only
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import agent, rich; print(agent.__file__, rich.__file__)"],
        env=env,
        cwd=tmp_path,
    )
    assert where.returncode == 0 and all(p.startswith(str(venv)) for p in where.stdout.split()), where
    agent = AgentProcess(tmp_path, {})
    with open(agent.log_path, "ab") as log:
        agent.proc = subprocess.Popen(
            [str(venv / "bin" / NAME), "run", "--config", str(agent.config_path)],
            env=env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        agent.wait_ready()
        agent.wait_for(lambda: agent.status()["snapshot"]["seq"] > 0, what="a first tick")
        top = _run(
            [str(venv / "bin" / NAME), "top", "--once", "--config", str(agent.config_path)],
            env=env,
            cwd=tmp_path,
        )
    finally:
        agent.stop()
    assert top.returncode == 0, top.stderr
    frame = top.stdout
    assert frame.startswith(f"{NAME} top") and frame.count(f"{NAME} top") == 1, frame
    assert "unreachable" not in frame and "\x1b" not in frame, frame
    assert len(frame.splitlines()) > 5 and max(len(line) for line in frame.splitlines()) <= 100, frame


def test_edited_config_survives_and_new_default_lands_beside_it(installer: Installer) -> None:
    conf = installer.path(CONF)
    edited = conf.read_text() + "\n# local edit: keep me\n"
    conf.write_text(edited)
    r = installer("--no-start")
    assert "has local edits" in r.stdout
    assert conf.read_text() == edited
    assert installer.path(f"{CONF}.new").read_bytes() == installer.config.read_bytes()

    # putting the default back clears the .new
    conf.write_bytes(installer.config.read_bytes())
    installer("--no-start")
    assert not installer.path(f"{CONF}.new").exists()


def test_unedited_config_follows_a_new_default(installer: Installer, tmp_path: Path) -> None:
    original = installer.config
    newer = tmp_path / "agent-v2.toml"
    newer.write_text(original.read_text() + "\n# v2 default\n")
    installer.config = newer
    try:
        r = installer("--no-start")
    finally:
        installer.config = original
    assert "was the previous default" in r.stdout
    assert installer.path(CONF).read_text() == newer.read_text()
    assert not installer.path(f"{CONF}.new").exists()
    installer("--no-start")  # back to the current default, the same way
    assert installer.path(CONF).read_bytes() == original.read_bytes()


def test_invalid_edited_config_is_reported(installer: Installer) -> None:
    conf = installer.path(CONF)
    good = conf.read_bytes()
    conf.write_text(conf.read_text() + "\n[agent_typo]\nfoo = 1\n")
    r = installer("--no-start", check=False)
    assert r.returncode != 0
    assert "agent_typo" in r.stderr and "not valid for this version" in r.stderr
    assert "agent_typo" in conf.read_text()  # still the operator's file
    conf.write_bytes(good)
    installer("--no-start")
    assert not installer.path(f"{CONF}.new").exists()


def test_web_config_certificate_user_and_scrape_config(installer: Installer) -> None:
    import bcrypt
    import yaml

    need_binary("openssl", "openssl")
    conf = installer.path(CONF)
    default = conf.read_bytes()
    r = installer("--no-start", "--web-config", "--web-user", "scraper")
    web = installer.path(f"/etc/{NAME}/web.yml")
    d = installer.path(f"/etc/{NAME}/web")
    gid = int(installer.passwd_entry()[3])
    # key and web.yml for the service group only, the password for root only
    modes = {p.name: (stat.S_IMODE(p.stat().st_mode), p.stat().st_gid) for p in (web, *d.iterdir())}
    assert modes["web.yml"] == (0o640, gid) and modes["agent.key"] == (0o640, gid)
    assert modes["scraper.password"][0] == 0o600 and modes["agent.crt"][0] == 0o644
    assert stat.S_IMODE(d.stat().st_mode) == 0o750
    # agent.toml points at it, and the agent accepts it: https with one user
    assert f'web_config = "/etc/{NAME}/web.yml"' in conf.read_text()
    exe = installer.path(PREFIX / "bin" / NAME)
    staged = conf.with_name("staged.toml")  # the config names the live path; check the staged file
    staged.write_text(conf.read_text().replace(f"/etc/{NAME}/web.yml", str(web)))
    cc = _run([str(exe), "check-config", "--config", str(staged)])
    staged.unlink()
    assert cc.returncode == 0, cc.stderr
    assert "(https, 1 basic auth user)" in cc.stdout.splitlines()[0]
    # the password in the file is the one the hash accepts
    cfg = yaml.safe_load(web.read_text())
    password = (d / "scraper.password").read_text().strip()
    assert len(password) >= 20 and password not in r.stdout and password not in web.read_text()
    assert bcrypt.checkpw(password.encode(), cfg["basic_auth_users"]["scraper"].encode())
    # a certificate for this node, with loopback among its names
    text = _run(["openssl", "x509", "-in", str(d / "agent.crt"), "-noout", "-text"]).stdout
    assert "IP Address:127.0.0.1" in text and "prime256v1" in text
    # the printed scrape_config is valid YAML in the secured form
    block = r.stdout[r.stdout.index("scrape_configs:") :]
    printed = yaml.safe_load(block[: block.index("\n\n")])
    (job,) = printed["scrape_configs"]
    assert job["scheme"] == "https" and job["basic_auth"]["username"] == "scraper"
    assert "password_file" in job["basic_auth"] and "ca_file" in job["tls_config"]

    # again: nothing is regenerated (agent.toml is now an edited config, so as for any edited
    # config the new default lands beside it)
    before = snapshot(installer.root)
    r2 = installer("--no-start", "--web-config", "--web-user", "scraper")
    after = snapshot(installer.root)
    assert "exists; kept" in r2.stdout and password in d.joinpath("scraper.password").read_text()
    assert {k: v for k, v in after.items() if not k.endswith("agent.toml.new")} == before
    # back to the default config for the tests after this one
    conf.write_bytes(default)
    installer("--no-start")
    assert not installer.path(f"{CONF}.new").exists()


def test_uninstall_keeps_config_purge_removes_everything(installer: Installer) -> None:
    conf = installer.path(CONF)
    conf.write_text(conf.read_text() + "\n# operator's edit\n")
    installer.path(f"/var/lib/{NAME}/seen-events.json").write_text("{}")

    r = installer("--uninstall")
    assert not installer.path(PREFIX).exists()
    assert not installer.path(f"/etc/systemd/system/{NAME}.service").exists()
    assert not installer.path(f"/etc/systemd/system/multi-user.target.wants/{NAME}.service").exists()
    assert "operator's edit" in conf.read_text()
    assert installer.path(f"/var/lib/{NAME}/seen-events.json").exists()
    assert installer.passwd_entry() is not None
    assert "kept" in r.stdout

    # reinstalling over the kept config keeps it
    installer("--no-start")
    assert "operator's edit" in conf.read_text()

    installer("--uninstall", "--purge")
    assert not installer.path(f"/etc/{NAME}").exists()
    assert not installer.path(f"/var/lib/{NAME}").exists()
    assert not installer.path(PREFIX).exists()
    assert installer.passwd_entry() is None
    assert f"{NAME}:" not in installer.path("/etc/group").read_text()


def test_too_old_python_gets_exact_instructions(tmp_path: Path, config_src: Path) -> None:
    # a real interpreter that reports 3.9 to the version gate
    fake = tmp_path / "python3.9"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -c ]; then shift; code="$1"; shift\n'
        f'  exec {sys.executable} -c "import sys; sys.version_info = (3, 9, 18, \'final\', 0)\n$code" "$@"\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    root = tmp_path / "root"
    root.mkdir()
    r = _run(["bash", str(INSTALL), "--root", str(root), "--python", str(fake), "--config", str(config_src)])
    assert r.returncode != 0
    assert "3.11+ is required" in r.stderr
    for distro in ("Alibaba Cloud Linux 3", "Ubuntu 22.04", "Rocky"):
        assert distro in r.stderr
    assert (
        "dnf install -y python3.11" in r.stderr
        and "apt-get install -y python3.11 python3.11-venv" in r.stderr
    )
    assert list(root.iterdir()) == []  # nothing was written


def test_bad_options_are_refused(tmp_path: Path) -> None:
    r = _run(["bash", str(INSTALL), "--root", str(tmp_path), "--purge"])
    assert r.returncode != 0 and "--purge goes with --uninstall" in r.stderr
    r = _run(["bash", str(INSTALL), "--frobnicate"])
    assert r.returncode != 0 and "unknown option: --frobnicate" in r.stderr
    r = _run(["bash", str(INSTALL), "--root", str(tmp_path / "absent")])
    assert r.returncode != 0 and "--root directory does not exist" in r.stderr


def test_shellcheck_clean() -> None:
    shellcheck = need_binary("shellcheck", "shellcheck")
    r = _run([shellcheck, str(INSTALL)])
    assert r.returncode == 0, r.stdout
