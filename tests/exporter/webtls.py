"""Test PKI and clients for the secured metrics port: a CA, a server certificate for 127.0.0.1, a
client certificate from the same CA and one from a stranger CA, all made with the openssl CLI
(.ci/run installs it); bcrypt users; an HTTPS client that can present a client certificate."""

from __future__ import annotations

import base64
import http.client
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import bcrypt
from conftest import need_binary


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    stranger_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
        cwd=d,
    )  # fmt: skip


def _leaf(d: Path, name: str, ca: str, ext: str) -> None:
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d,
    )  # fmt: skip
    (d / f"{name}.ext").write_text(ext)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d,
    )  # fmt: skip


def make_pki(d: Path) -> Pki:
    need_binary("openssl", "openssl")
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _ca(d, "stranger-ca")
    _leaf(d, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _leaf(d, "client", "ca", "subjectAltName=DNS:prometheus.example\nextendedKeyUsage=clientAuth\n")
    _leaf(
        d, "stranger", "stranger-ca", "subjectAltName=DNS:prometheus.example\nextendedKeyUsage=clientAuth\n"
    )
    return Pki(
        d,
        d / "ca.crt",
        d / "server.crt",
        d / "server.key",
        d / "client.crt",
        d / "client.key",
        d / "stranger.crt",
        d / "stranger.key",
    )


def bcrypt_hash(password: str, cost: int = 4) -> str:
    """Cost 4 keeps tests quick; the cost is the file's business, not the agent's."""
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def client_context(pki: Pki, cert: str | None = None) -> ssl.SSLContext:
    """Verifies the agent against the test CA; ``cert`` "client" or "stranger" presents that one."""
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert:
        ctx.load_cert_chain(pki.dir / f"{cert}.crt", pki.dir / f"{cert}.key")
    return ctx


def https_get(
    port: int,
    path: str,
    ctx: ssl.SSLContext,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()
