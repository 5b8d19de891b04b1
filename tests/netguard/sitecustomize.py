"""Test-suite network guard, loaded into every Python process the tests start (via PYTHONPATH).

Any connect() to an address outside loopback and our test range 198.18.0.0/15, and any name lookup
of a cloud metadata host, raises at once and is recorded in $TNA_NETGUARD_LOG. The suite fails if
that log is non-empty, so "no real cloud traffic" is checked, not hoped for.
"""

from __future__ import annotations

import ipaddress
import os
import sys

_ALLOWED = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("198.18.0.0/15"),
    ipaddress.ip_network("::1/128"),
)
_FORBIDDEN_NAMES = ("metadata.google.internal", "metadata.tencentyun.com", "metadata.azure.com")


def _blocked(what: str) -> None:
    path = os.environ.get("TNA_NETGUARD_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {' '.join(sys.argv[:3])}: {what}\n")
    raise ConnectionRefusedError(f"test network guard: {what} is outside loopback and 198.18.0.0/15")


def _hook(event: str, args: tuple) -> None:
    if event == "socket.connect":
        addr = args[1]
        if isinstance(addr, tuple) and addr and isinstance(addr[0], str):
            try:
                ip = ipaddress.ip_address(addr[0].split("%")[0])
            except ValueError:
                _blocked(f"connect to {addr[0]}")
                return
            if not any(ip in net for net in _ALLOWED):
                _blocked(f"connect to {addr[0]}:{addr[1]}")
    elif event == "socket.getaddrinfo":
        host = args[0]
        if isinstance(host, bytes):
            host = host.decode(errors="replace")
        if isinstance(host, str) and host.rstrip(".").lower() in _FORBIDDEN_NAMES:
            _blocked(f"lookup of {host}")


if os.environ.get("TNA_NETGUARD", "1") == "1":
    sys.addaudithook(_hook)
