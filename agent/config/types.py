"""Value types shared by every config section: durations, sizes, secrets, listen addresses."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, PlainValidator, model_validator

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """``"500ms"``, ``"1s"``, ``"5m"``, ``"1.5h"`` -> seconds. Bare numbers are refused on purpose:
    ``interval = 1`` is ambiguous between seconds and milliseconds."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(f'expected a duration string like "500ms", "1s" or "5m", got {value!r}')
    m = _DURATION.match(value)
    if not m:
        raise ValueError(f'expected a duration like "500ms", "1s", "5m", "2h" or "1d", got {value!r}')
    return float(m.group(1)) * _UNITS[m.group(2)]


def format_duration(seconds: float) -> str:
    if seconds and seconds < 1:
        return f"{round(seconds * 1000)}ms"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


Duration = Annotated[
    float, BeforeValidator(parse_duration), PlainSerializer(format_duration, return_type=str)
]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?(?:/s)?\s*$", re.I)
_SIZE_UNITS = {
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_bytes(value: Any) -> float:
    """``"1.2GB"``, ``"800MiB"``, ``"25GB/s"`` or a plain number of bytes."""
    if isinstance(value, bool):
        raise ValueError('expected a size like "1.2GB" or a number of bytes')
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return float(value)
    if isinstance(value, str) and (m := _SIZE.match(value)):
        return float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "b").lower()]
    raise ValueError(f'expected a size like "1.2GB", "800MiB" or "25GB/s", got {value!r}')


# bytes per second ("/s" optional). Not pydantic's ByteSize: that one gives ints and reads past the
# unit, so "25GB/min" would pass as 25 GB/s; this one refuses it (tests/test_config.py compares them)
ByteRate = Annotated[float, BeforeValidator(parse_bytes)]


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo must never silently fall back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class Secret(StrictModel):
    """A secret from the file itself, an environment variable, or a file (systemd ``LoadCredential=``
    puts credentials under ``$CREDENTIALS_DIRECTORY``; a relative ``file`` is looked up there).

    In TOML: ``secret = "abc"``, ``secret = { env = "DINGTALK_SECRET" }`` or
    ``secret = { file = "dingtalk-secret" }``. ``repr`` and ``str`` never show the value.
    """

    value: str | None = None
    env: str | None = None
    file: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"value": data}
        return data

    @model_validator(mode="after")
    def _one_source(self) -> Secret:
        if sum(x is not None for x in (self.value, self.env, self.file)) != 1:
            raise ValueError("give exactly one of a string, { env = NAME } or { file = PATH }")
        return self

    def resolve(self) -> str:
        """The secret's text; raises ``ValueError`` naming the source (never the value) if unreadable."""
        if self.value is not None:
            return self.value
        if self.env is not None:
            v = os.environ.get(self.env)
            if v is None:
                raise ValueError(f"environment variable {self.env} is not set")
            return v.strip()
        assert self.file is not None
        path = Path(self.file)
        if not path.is_absolute():
            path = Path(os.environ.get("CREDENTIALS_DIRECTORY", ".")) / path
        try:
            return path.read_text().strip()
        except OSError as e:
            # a credential laid out from the unit (see credentials.py) is named by its source file
            shown = f"{os.readlink(path)} ({path.name})" if path.is_symlink() else str(path)
            raise ValueError(f"cannot read secret file {shown}: {e.strerror}") from None

    def source(self) -> str:
        """Where the value comes from, in words (never the value)."""
        if self.env is not None:
            return f"env {self.env}"
        return f"file {self.file}" if self.file is not None else "inline"

    def __repr__(self) -> str:
        src = f"env={self.env}" if self.env else f"file={self.file}" if self.file else "inline"
        return f"Secret({src}, ***)"

    __str__ = __repr__


def parse_listen(value: Any) -> str:
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(f'expected "HOST:PORT" like "0.0.0.0:9477", got {value!r}')
    _host, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"port must be 0-65535, got {port!r}")
    return value


ListenAddress = Annotated[str, BeforeValidator(parse_listen)]


def split_listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


E = TypeVar("E", bound=StrEnum)
T = TypeVar("T", bound=str)


def choice_of(choices: Sequence[E]) -> BeforeValidator:
    """Exactly these members, from their strings; otherwise one line that names every choice (a
    union of enums, e.g. a cloud or ``auto``, would get one line per enum). For a field that takes
    only some of an enum's members, or members of more than one."""
    return BeforeValidator(_picker(lambda: choices))


def choice_from(choices: Callable[[], Sequence[str]]) -> PlainValidator:
    """:func:`choice_of` for a list read when a value is checked (the declared clouds): the value
    becomes the listed object itself (a ``StrEnum`` member where the list has one)."""
    return PlainValidator(_picker(choices))


def _picker(choices: Callable[[], Sequence[T]]) -> Callable[[object], T]:
    def pick(value: object) -> T:
        listed = choices()
        for choice in listed:
            if value == choice:
                return choice
        shown = ", ".join(f"'{c}'" for c in listed[:-1]) + f" or '{listed[-1]}'"
        raise ValueError(f"Input should be {shown} (got {value!r})")

    return pick
