"""Headless Chromium for the report tests, and the page's elements as the browser parsed them."""

from __future__ import annotations

import subprocess
from html.parser import HTMLParser
from pathlib import Path

from conftest import need_binary

WINDOW = (1200, 2000)


def chromium(tmp: Path, *args: str) -> str:
    """Debian's ``chromium`` headless (skipped with the reason where it is missing, failed in CI)."""
    exe = need_binary("chromium", "chromium")
    cmd = [
        exe,
        "--headless",
        "--no-sandbox",  # the suite runs as root in CI
        "--disable-gpu",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        "--proxy-server=127.0.0.1:9",  # a page that fetched anything would fetch nothing
        "--disable-background-networking",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Elements(HTMLParser):
    """Every element's tag and attributes, in document order."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, {k: v or "" for k, v in attrs}))

    def of(self, cls: str) -> list[dict[str, str]]:
        return [a for _, a in self.found if cls in a.get("class", "").split()]

    def columns(self) -> list[tuple[dict[str, str], list[dict[str, str]]]]:
        """The timeline's columns, each with its bands."""
        out: list[tuple[dict[str, str], list[dict[str, str]]]] = []
        for tag, a in self.found:
            if tag == "g" and "col" in a.get("class", "").split():
                out.append((a, []))
            elif tag == "rect" and "band" in a.get("class", "").split():
                out[-1][1].append(a)
        return out

    def svg(self, label: str) -> dict[str, str]:
        return next(a for tag, a in self.found if tag == "svg" and a.get("aria-label") == label)


def largest(bands: list[dict[str, str]]) -> str:
    """The bucket holding most of a column's GPU-seconds."""
    return max(bands, key=lambda a: float(a["data-gpu-seconds"]))["data-bucket"]
