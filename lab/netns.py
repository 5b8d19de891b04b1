"""The peer's network (the gradient peer, or the object store a streaming job reads): another network
namespace behind a veth pair, shaped with tc tbf in both directions, addresses from 198.18.0.0/15.
Created and deleted by the lab.

Both shapers sit inside the peer's namespace (its egress on its veth end, its ingress through an ifb
there), out of sight of the agent on the host: like a cloud's cap in the hypervisor, the agent can
only infer this one from the traffic. A shaper on the node's own NIC it reads (qdisc.py)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")
    return out


_COUNT = itertools.count()


def _tag() -> str:
    """A fresh link per scenario (a new NIC name has no learned ceiling), unique within this lab and
    not in use on the machine: a namespace or link a killed run left behind keeps its name (a CI run
    failed on "ip netns add classifier836: File exists", left there hours before)."""
    for _ in range(1000):
        tag = str((os.getpid() * 7 + next(_COUNT)) % 1000)
        taken = Path(f"/run/netns/classifier{tag}"), Path(f"/sys/class/net/classifier{tag}h")
        if not any(p.exists() for p in taken):
            return tag
    raise RuntimeError("every lab link name classifier0..999 is in use: remove stale ones (ip netns list)")


@dataclass
class PeerNetwork:
    rate_mbit: int = 80
    tag: str = field(default_factory=_tag)
    port: int = 29500  # torch.distributed's default, for the look of it

    def __post_init__(self) -> None:
        self.ns = f"classifier{self.tag}"
        self.host_if = f"classifier{self.tag}h"  # at most 14 characters of IFNAMSIZ's 15
        self.peer_if = f"classifier{self.tag}p"
        octet = 4 * (int(self.tag) % 64)  # a /30 of our own inside 198.19.0.0/16
        self.host_ip = f"198.19.{100 + int(self.tag) // 64}.{octet + 1}"
        self.peer_ip = f"198.19.{100 + int(self.tag) // 64}.{octet + 2}"
        self.peer: subprocess.Popen[bytes] | None = None

    @property
    def rate_bytes(self) -> int:
        return self.rate_mbit * 1_000_000 // 8

    def up(self) -> PeerNetwork:
        ip("netns", "add", self.ns)
        ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.peer_if, "netns", self.ns)
        ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        ip("link", "set", self.host_if, "up")
        ip("-n", self.ns, "addr", "add", f"{self.peer_ip}/30", "dev", self.peer_if)
        ip("-n", self.ns, "link", "set", self.peer_if, "up")
        ip("-n", self.ns, "link", "set", "lo", "up")
        shape = ["root", "tbf", "rate", f"{self.rate_mbit}mbit", "burst", "32kb", "latency", "50ms"]
        ifb = f"classifier{self.tag}i"
        tc = ["ip", "netns", "exec", self.ns, "tc"]
        redirect = ["action", "mirred", "egress", "redirect", "dev", ifb]
        for cmd in (
            ["ip", "-n", self.ns, "link", "add", ifb, "type", "ifb"],
            ["ip", "-n", self.ns, "link", "set", ifb, "up"],
            [*tc, "qdisc", "add", "dev", self.peer_if, *shape],  # the peer's sending
            [*tc, "qdisc", "add", "dev", self.peer_if, "handle", "ffff:", "ingress"],  # and receiving
            [
                *tc,
                "filter",
                "add",
                "dev",
                self.peer_if,
                "parent",
                "ffff:",
                "u32",
                "match",
                "u32",
                "0",
                "0",
                *redirect,
            ],
            [*tc, "qdisc", "add", "dev", ifb, *shape],
        ):
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
        return self

    def start_peer(self, seconds: float, server: str = "lab.peer", *args: str) -> None:
        """The peer process inside the namespace (``lab.peer``, the gradient echo, or
        ``lab.objserver``, the object store a streaming job reads); it ends by itself after ``seconds``."""
        self.peer = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.ns,
                sys.executable,
                "-m",
                server,
                "--listen",
                f"{self.peer_ip}:{self.port}",
                "--seconds",
                str(seconds),
                *args,
            ],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            probe = subprocess.run(
                ["ip", "netns", "exec", self.ns, "ss", "-ltn", f"sport = :{self.port}"],
                capture_output=True,
                text=True,
            )
            if f":{self.port}" in probe.stdout:
                return
            if self.peer.poll() is not None:
                raise RuntimeError(f"the peer {server} exited with {self.peer.returncode}")
            time.sleep(0.05)
        raise RuntimeError(f"the peer {server} did not start listening")

    def down(self) -> None:
        if self.peer is not None and self.peer.poll() is None:
            self.peer.terminate()
            try:
                self.peer.wait(5)
            except subprocess.TimeoutExpired:
                self.peer.kill()
                self.peer.wait()
        ip("netns", "del", self.ns, check=False)  # takes the peer end, and so the pair, with it
        ip("link", "del", self.host_if, check=False)
