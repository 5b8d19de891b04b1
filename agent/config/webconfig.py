"""The file named by ``[http] web_config``: the Prometheus exporter-toolkit web-config format, so the
file that node_exporter and dcgm-exporter take with ``--web.config.file`` works here unchanged.

YAML with ``tls_server_config``, ``http_server_config``, ``basic_auth_users``, ``rate_limit`` and
``auth_excluded_paths``. Unknown keys are errors, as the toolkit's strict parsing makes them;
relative file names are relative to the web-config file's directory, as there. What Python's ssl
cannot do the toolkit's way is refused with the reason rather than silently approximated.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from agent.config.types import StrictModel, parse_duration
from agent.core.tlswords import UNVERIFIED_CLIENT_AUTH, VERIFIED_CLIENT_AUTH, ClientAuthType, TlsVersion

TLS_VERSION_ORDER = tuple(TlsVersion)

# Go's cipher suite names (what the toolkit takes) -> OpenSSL's. TLS 1.3 suites are not
# configurable in Go either.
CIPHER_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
}

# the toolkit's own list: only these headers, and for two of them only these values
EXTRA_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

# $2a$/$2b$/$2y$ (htpasswd -B writes 2y), two-digit cost, 22 salt + 31 hash characters
_BCRYPT = re.compile(r"^\$2[abxy]\$(\d\d)\$[./A-Za-z0-9]{53}$")


class TlsServerConfig(StrictModel):
    cert_file: str = ""
    key_file: str = ""
    cert: str = ""
    key: str = ""
    client_ca_file: str = ""
    client_ca: str = ""
    client_auth_type: ClientAuthType = ClientAuthType.NO_CLIENT_CERT
    client_allowed_sans: list[str] | None = None
    min_version: TlsVersion = TlsVersion.TLS12
    max_version: TlsVersion = TlsVersion.TLS13
    cipher_suites: list[str] = Field(default_factory=list)
    prefer_server_cipher_suites: bool = True
    curve_preferences: list[str] = Field(default_factory=list)

    @property
    def enabled(self) -> bool:
        """The toolkit's rule: any TLS field set turns TLS on (and then it must be complete)."""
        return bool(
            self.cert_file or self.key_file or self.cert or self.key or self.client_ca_file or self.client_ca
        ) or ("client_auth_type" in self.model_fields_set)

    @property
    def verifies_clients(self) -> bool:
        return self.client_auth_type in VERIFIED_CLIENT_AUTH

    @field_validator("cipher_suites")
    @classmethod
    def _known_ciphers(cls, v: list[str]) -> list[str]:
        unknown = [c for c in v if c not in CIPHER_SUITES]
        if unknown:
            raise ValueError(f"unknown cipher suite {unknown[0]!r}; known: {', '.join(CIPHER_SUITES)}")
        return v

    @model_validator(mode="after")
    def _coherent(self) -> TlsServerConfig:
        if not self.enabled:
            return self
        if self.cert or self.key:
            raise ValueError("inline cert/key are not supported here; put them in cert_file and key_file")
        if not self.cert_file:
            raise ValueError("missing cert_file (TLS is on because a tls_server_config field is set)")
        if not self.key_file:
            raise ValueError("missing key_file (TLS is on because a tls_server_config field is set)")
        if self.client_auth_type in UNVERIFIED_CLIENT_AUTH:
            raise ValueError(
                f"client_auth_type {self.client_auth_type} accepts unverified certificates, which "
                "Python's ssl cannot do (and the toolkit calls insecure); use RequireAndVerifyClientCert "
                "with client_ca_file"
            )
        has_ca = bool(self.client_ca_file or self.client_ca)
        if self.verifies_clients and not has_ca:
            raise ValueError(f"client_auth_type {self.client_auth_type} needs client_ca_file (or client_ca)")
        if has_ca and not self.verifies_clients:
            raise ValueError("client CA's have been configured without a Client Auth Policy")
        if (
            self.client_allowed_sans is not None
            and self.client_auth_type != ClientAuthType.REQUIRE_AND_VERIFY_CLIENT_CERT
        ):
            raise ValueError("client_allowed_sans requires client_auth_type RequireAndVerifyClientCert")
        if TLS_VERSION_ORDER.index(self.min_version) > TLS_VERSION_ORDER.index(self.max_version):
            raise ValueError(f"min_version {self.min_version} is above max_version {self.max_version}")
        if self.curve_preferences:
            raise ValueError(
                "curve_preferences is not supported here (Python's ssl takes one curve, not a preference "
                "list); remove it to get OpenSSL's defaults"
            )
        return self


class HttpServerConfig(StrictModel):
    # HTTP/2 is not served (aiohttp speaks HTTP/1.1); accepted so toolkit files load unchanged
    http2: bool = True
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("headers")
    @classmethod
    def _allowed_headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if name not in EXTRA_HEADERS:
                raise ValueError(f"HTTP header {name!r} can not be configured")
            allowed = EXTRA_HEADERS[name]
            if allowed and value not in allowed:
                raise ValueError(f"invalid value for {name}: expected one of {list(allowed)}, got {value!r}")
            if "\n" in value or "\r" in value:
                raise ValueError(f"{name}: a header value cannot contain a line break")
        return v


class RateLimit(StrictModel):
    interval: float = 0.0  # seconds between requests; 0 turns the limiter off
    burst: int = Field(0, ge=0)

    @field_validator("interval", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float:
        if v in (0, "0", "", None):
            return 0.0
        return parse_duration(v)

    @model_validator(mode="after")
    def _burst(self) -> RateLimit:
        if self.interval > 0 and self.burst < 1:
            raise ValueError("rate_limit.burst must be at least 1 when interval is set")
        return self


class WebConfig(StrictModel):
    tls_server_config: TlsServerConfig = Field(default_factory=TlsServerConfig)
    http_server_config: HttpServerConfig = Field(default_factory=HttpServerConfig)
    basic_auth_users: dict[str, str] = Field(default_factory=dict)
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    auth_excluded_paths: list[str] = Field(default_factory=list)

    @field_validator("basic_auth_users")
    @classmethod
    def _bcrypt_hashes(cls, v: dict[str, str]) -> dict[str, str]:
        for user, hashed in v.items():
            if not isinstance(hashed, str) or not (m := _BCRYPT.match(hashed)):
                # the value is never echoed: a plaintext password pasted here must not reach a log
                raise ValueError(
                    f"user {user!r}: not a bcrypt hash (make one with: htpasswd -nBC 10 '' | tr -d ':\\n', "
                    "or training-node-agent hash-password)"
                )
            if not 4 <= int(m.group(1)) <= 31:
                raise ValueError(f"user {user!r}: bcrypt cost {m.group(1)} is outside 4..31")
        return v

    @field_validator("auth_excluded_paths")
    @classmethod
    def _absolute_paths(cls, v: list[str]) -> list[str]:
        for p in v:
            if not p.startswith("/"):
                raise ValueError(f"auth_excluded_paths: {p!r} must start with /")
        return v


class WebConfigError(Exception):
    """Every problem with one web-config file, one line each (the config loader's style)."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: " + "; ".join(problems))


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc if not str(p).startswith("function-")) or "(top level)"


def parse_web_config(data: Any, path: str, base_dir: Path) -> WebConfig:
    """Validate parsed YAML; relative file names are joined with ``base_dir``."""
    if data is None:
        data = {}  # an empty file is the toolkit's "no TLS, no auth"
    if not isinstance(data, dict):
        raise WebConfigError(path, ["the file must be a YAML mapping"])
    try:
        cfg = WebConfig.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{_where(err['loc'])}: {msg}")
        raise WebConfigError(path, list(dict.fromkeys(problems))) from None
    tls = cfg.tls_server_config

    def join(name: str) -> str:
        return str(base_dir / name) if name and not Path(name).is_absolute() else name

    resolved = tls.model_copy(
        update={k: join(getattr(tls, k)) for k in ("cert_file", "key_file", "client_ca_file")}
    )
    return cfg.model_copy(update={"tls_server_config": resolved})


def load_web_config(path: str | Path) -> WebConfig:
    """Read, parse and validate; raises :class:`WebConfigError` naming the file."""
    import yaml  # here: an agent without a web config does not pay for the YAML parser

    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WebConfigError(str(p), ["file not found"]) from None
    except OSError as e:
        raise WebConfigError(str(p), [f"cannot read: {e.strerror}"]) from None
    except UnicodeDecodeError:
        raise WebConfigError(str(p), ["not UTF-8 text"]) from None
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise WebConfigError(str(p), [f"invalid YAML{where}: {getattr(e, 'problem', None) or e}"]) from None
    return parse_web_config(data, str(p), p.parent)
