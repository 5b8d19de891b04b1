"""The service's credentials, for commands run from a shell.

Inside the service, systemd's ``LoadCredential=`` puts each secret under ``$CREDENTIALS_DIRECTORY``
and ``secret = { file = "name" }`` is read from there. A root shell has no such directory, so
``test-alert`` and ``check-config --resolve-secrets`` would fail on a config that works. These
commands read the unit's ``LoadCredential=`` lines instead (drop-ins included) and lay out what
systemd would: a private directory of links, ``ID`` -> the source file, and for a source directory
``ID_<file>`` -> each file in it (systemd's naming), then point ``$CREDENTIALS_DIRECTORY`` at it.
Reading through the links needs the rights systemd has when it loads them: root, in practice.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from agent.config.types import Secret

UNIT_NAME = "training-node-agent.service"
UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)
CREDSTORE = ("/etc/credstore", "/run/credstore", "/usr/lib/credstore")  # for a relative source


@dataclass
class UnitCredentials:
    unit: Path | None  # the unit file read, None when none was found
    sources: list[tuple[str, Path]] = field(default_factory=list)  # (credential id, source path)
    files: dict[str, Path] = field(default_factory=dict)  # name under $CREDENTIALS_DIRECTORY -> file
    problems: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.unit is None:
            return "no installed unit found"
        given = ", ".join(f"{i} -> {p}" for i, p in self.sources) or "no LoadCredential="
        return f"{self.unit}: {given}"


def find_unit(name: str = UNIT_NAME, dirs: tuple[str, ...] | None = None) -> tuple[Path | None, list[Path]]:
    """The unit file systemd would load (the first directory that has it) and its drop-ins."""
    dirs = UNIT_DIRS if dirs is None else dirs
    unit = next((Path(d) / name for d in dirs if (Path(d) / name).is_file()), None)
    dropins: dict[str, Path] = {}
    for d in reversed(dirs):  # a drop-in in an earlier directory replaces one of the same name
        for conf in sorted((Path(d) / f"{name}.d").glob("*.conf")):
            dropins[conf.name] = conf
    return unit, [dropins[n] for n in sorted(dropins)]


def load_credential_lines(texts: list[str]) -> list[str]:
    """The values of ``LoadCredential=`` in [Service] across the unit and its drop-ins, in order; an
    empty assignment resets the list, as in systemd."""
    values: list[str] = []
    for text in texts:
        section = ""
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line
                continue
            key, sep, value = line.partition("=")
            if section == "[Service]" and sep and key.strip() == "LoadCredential":
                value = value.strip()
                if value:
                    values.append(value)
                else:
                    values.clear()
    return values


def unit_credentials(unit: Path | None = None) -> UnitCredentials:
    """What ``LoadCredential=`` of ``unit`` (default: the installed one) hands the service."""
    if unit is None:
        unit, dropins = find_unit()
    else:  # a unit file named on the command line: with the drop-ins beside it
        dropins = sorted((unit.parent / f"{unit.name}.d").glob("*.conf"))
    found = UnitCredentials(unit)
    if unit is None:
        return found
    texts = []
    for file in (unit, *dropins):
        try:
            texts.append(file.read_text())
        except OSError as e:
            found.problems.append(f"cannot read {file}: {e.strerror}")
    for value in load_credential_lines(texts):
        cred_id, _, source = value.partition(":")
        path = _source(cred_id, source)
        if path is None:
            found.problems.append(f"LoadCredential={value}: no such file in {', '.join(CREDSTORE)}")
            continue
        found.sources.append((cred_id, path))
        if path.is_dir():
            try:
                entries = sorted(p for p in path.iterdir() if p.is_file())
            except OSError as e:  # a 0700 root directory, read by someone else
                found.problems.append(f"cannot list {path} (LoadCredential={cred_id}): {e.strerror}")
                continue
            for p in entries:
                found.files[f"{cred_id}_{p.name}"] = p
        else:
            found.files[cred_id] = path
    return found


def _source(cred_id: str, source: str) -> Path | None:
    if source.startswith("/"):
        return Path(source)
    name = source or cred_id
    return next((Path(d) / name for d in CREDSTORE if (Path(d) / name).exists()), None)


@contextlib.contextmanager
def service_credentials(unit: Path | None = None) -> Iterator[UnitCredentials | None]:
    """Inside the service (``$CREDENTIALS_DIRECTORY`` set): nothing to do, yields None. Outside it:
    ``$CREDENTIALS_DIRECTORY`` points, while the block runs, at a private directory laid out as
    systemd would from the unit's ``LoadCredential=``; yields what was found."""
    if os.environ.get("CREDENTIALS_DIRECTORY"):
        yield None
        return
    found = unit_credentials(unit)
    if not found.sources:  # no unit, or one without LoadCredential=: relative files as before (cwd)
        yield found
        return
    with tempfile.TemporaryDirectory(prefix="tna-credentials-") as tmp:
        for name, path in found.files.items():
            os.symlink(path, Path(tmp) / name)
        os.environ["CREDENTIALS_DIRECTORY"] = tmp
        try:
            yield found
        finally:
            os.environ.pop("CREDENTIALS_DIRECTORY", None)


def iter_secrets(model: BaseModel, prefix: str = "") -> Iterator[tuple[str, Secret]]:
    """Every :class:`Secret` in a config tree, with its dotted place (``alerts.webhooks[0].url``)."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        where = f"{prefix}{name}"
        items = enumerate(value) if isinstance(value, list | tuple) else [(None, value)]
        for i, item in items:
            at = where if i is None else f"{where}[{i}]"
            if isinstance(item, Secret):
                yield at, item
            elif isinstance(item, BaseModel):
                yield from iter_secrets(item, f"{at}.")


def check_secrets(model: BaseModel) -> list[tuple[str, str, str | None]]:
    """(place, where it comes from, problem or None) for every secret; values are never returned."""
    out = []
    for at, secret in iter_secrets(model):
        try:
            secret.resolve()
            problem = None
        except ValueError as e:
            problem = str(e)
        out.append((at, secret.source(), problem))
    return out
