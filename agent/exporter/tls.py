"""TLS for the metrics port from a web-config ``tls_server_config``.

The listening socket keeps one :class:`SwitchableContext` for its whole life; a reload swaps the
context it hands to each new connection, so rotated certificates, a new client CA or a new minimum
version apply from the next handshake on, as exporter-toolkit's per-connection config does, without
re-binding the port or dropping established connections.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

from agent.core.tlswords import ClientAuthType, TlsVersion

if TYPE_CHECKING:
    from agent.config.webconfig import TlsServerConfig

_VERSIONS = {
    TlsVersion.TLS10: ssl.TLSVersion.TLSv1,
    TlsVersion.TLS11: ssl.TLSVersion.TLSv1_1,
    TlsVersion.TLS12: ssl.TLSVersion.TLSv1_2,
    TlsVersion.TLS13: ssl.TLSVersion.TLSv1_3,
}
_VERIFY = {
    ClientAuthType.NO_CLIENT_CERT: ssl.CERT_NONE,
    ClientAuthType.VERIFY_CLIENT_CERT_IF_GIVEN: ssl.CERT_OPTIONAL,
    ClientAuthType.REQUIRE_AND_VERIFY_CLIENT_CERT: ssl.CERT_REQUIRED,
}


class TlsError(Exception):
    """A certificate, key or CA that cannot be used, with the file it came from."""


def _why(e: Exception) -> str:
    if isinstance(e, ssl.SSLError):
        return e.reason or e.strerror or str(e)
    if isinstance(e, OSError):
        return e.strerror or str(e)
    return str(e)


def _readable(label: str, path: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise TlsError(f"{label} {path}: {_why(e)}") from None


def build_context(tls: TlsServerConfig) -> ssl.SSLContext:
    """A server context for ``tls``; every file is read now, so a bad one fails here, not later in
    a handshake."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _VERSIONS[tls.min_version]
    ctx.maximum_version = _VERSIONS[tls.max_version]
    for label, path in (("cert_file", tls.cert_file), ("key_file", tls.key_file)):
        _readable(label, path)
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as e:
        raise TlsError(
            f"cannot use cert_file {tls.cert_file} with key_file {tls.key_file}: {_why(e)}"
        ) from None
    if tls.verifies_clients:
        ca_name = tls.client_ca_file or "(inline client_ca)"
        try:
            if tls.client_ca_file:
                _readable("client_ca_file", tls.client_ca_file)
                ctx.load_verify_locations(cafile=tls.client_ca_file)
            else:
                ctx.load_verify_locations(cadata=tls.client_ca)
        except (OSError, ssl.SSLError) as e:
            raise TlsError(f"cannot load client_ca_file {ca_name}: {_why(e)}") from None
        if not ctx.get_ca_certs():
            raise TlsError(f"client_ca_file {ca_name} holds no CA certificate")
    ctx.verify_mode = _VERIFY[tls.client_auth_type]
    if tls.cipher_suites:
        from agent.config.webconfig import CIPHER_SUITES  # loaded with the web config that asks

        ctx.set_ciphers(":".join(CIPHER_SUITES[c] for c in tls.cipher_suites))
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.options |= ssl.OP_NO_RENEGOTIATION  # a client-driven renegotiation is a cheap CPU attack
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def allowed_san(peercert: dict[str, Any] | None, allowed: list[str]) -> bool:
    """The toolkit's ``client_allowed_sans``: some DNS, IP, e-mail or URI SAN of the verified client
    certificate is in the list."""
    if not peercert:
        return False
    return any(value in allowed for _, value in peercert.get("subjectAltName", ()))


class SwitchableContext(ssl.SSLContext):
    """The context given to the listening socket. asyncio asks it for one SSL object per accepted
    connection (``wrap_bio``); it answers from whichever real context is current."""

    current: ssl.SSLContext

    def __new__(cls, initial: ssl.SSLContext) -> SwitchableContext:
        self = super().__new__(cls, ssl.PROTOCOL_TLS_SERVER)
        self.current = initial
        return self

    def __init__(self, initial: ssl.SSLContext) -> None:
        pass

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self.current.wrap_bio(
            incoming, outgoing, server_side=server_side, server_hostname=server_hostname, session=session
        )
