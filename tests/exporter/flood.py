"""A bounded flood of the metrics port, one kind at a time, run as its own process by the abuse test.

    python flood.py --port P --mode slowloris|oversized|idle|burst --seconds 6 [--tls CA] [--auth U:P]

Every loop stops by itself at ``--seconds`` and at its connection budget. Prints one JSON line:
what was attempted and what the server did (statuses seen, connections it closed).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import ssl
import time
from collections import Counter

MAX_CONNECTIONS = 20_000  # per run, whatever the mode
RETRY_AFTER = 1.0  # a client the server closed comes back this much later


class Flood:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.deadline = time.monotonic() + args.seconds
        self.stats: Counter[str] = Counter()
        self.ctx: ssl.SSLContext | None = None
        if args.tls:
            self.ctx = ssl.create_default_context(cafile=args.tls)
        self.auth = ""
        if args.auth:
            self.auth = "Authorization: Basic " + base64.b64encode(args.auth.encode()).decode() + "\r\n"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        if self.stats["connections"] >= MAX_CONNECTIONS or self.left() <= 0:
            return None
        self.stats["connections"] += 1
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(
                    "127.0.0.1", self.args.port, ssl=self.ctx, server_hostname=self.ctx and "127.0.0.1"
                ),
                timeout=max(0.1, min(5.0, self.left())),
            )
        except (OSError, TimeoutError, ssl.SSLError):
            self.stats["connect_failed"] += 1
            return None

    async def status_of(self, reader: asyncio.StreamReader) -> str:
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=max(0.1, self.left() + 1))
        except (OSError, TimeoutError, ssl.SSLError):
            return "error"
        parts = line.split()
        return parts[1].decode() if len(parts) > 1 else "closed"

    # --- modes --------------------------------------------------------------------------------------

    def held(self, since: float) -> None:
        self.stats["max_held_ms"] = max(self.stats["max_held_ms"], round((time.monotonic() - since) * 1000))

    async def slowloris(self) -> None:
        """Open a request head and add one header byte every half second, for as long as allowed;
        once the server closes it, try again a second later."""
        while self.left() > 0:
            conn = await self.connect()
            if conn is None:
                await asyncio.sleep(0.05)
                continue
            reader, writer = conn
            since = time.monotonic()
            try:
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                while self.left() > 0 and not reader.at_eof():
                    await asyncio.sleep(0.5)
                    writer.write(b"a")
                    await writer.drain()
                self.stats["closed_by_server" if reader.at_eof() else "open_at_the_end"] += 1
            except (OSError, ssl.SSLError):
                self.stats["closed_by_server"] += 1
            finally:
                self.held(since)
                writer.close()
            await asyncio.sleep(RETRY_AFTER)

    async def idle(self) -> None:
        """Connect and send nothing; once closed, connect again a second later."""
        while self.left() > 0:
            conn = await self.connect()
            if conn is None:
                await asyncio.sleep(0.05)
                continue
            reader, writer = conn
            since = time.monotonic()
            try:
                await asyncio.wait_for(reader.read(1), timeout=max(0.1, self.left()))
                self.stats["closed_by_server"] += 1
            except TimeoutError:
                self.stats["open_at_the_end"] += 1
            except (OSError, ssl.SSLError):
                self.stats["closed_by_server"] += 1
            finally:
                self.held(since)
                writer.close()
            await asyncio.sleep(RETRY_AFTER)

    async def oversized(self) -> None:
        """Request lines and heads far over the limits; the server must answer 4xx and close."""
        kinds = [
            b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 60_000 + b"\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(5000)),
        ]
        n = 0
        while self.left() > 0:
            conn = await self.connect()
            if conn is None:
                await asyncio.sleep(0.05)
                continue
            reader, writer = conn
            try:
                writer.write(kinds[n % len(kinds)])
                n += 1
                await writer.drain()
            except (OSError, ssl.SSLError):
                pass
            self.stats[f"status_{await self.status_of(reader)}"] += 1
            writer.close()
            await asyncio.sleep(0.01)

    async def scraper(self, start: asyncio.Event, done: list[int]) -> None:
        """One kept-alive scraping client; scrapes whenever the burst starts."""
        conn = await self.connect()
        if conn is None:
            return
        reader, writer = conn
        request = f"GET /metrics HTTP/1.1\r\nHost: x\r\n{self.auth}\r\n".encode()
        try:
            while self.left() > 0:
                await start.wait()
                if self.left() <= 0:
                    break
                writer.write(request)
                await writer.drain()
                status = await self.status_of(reader)
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                self.stats[f"status_{status}"] += 1
                done[0] += 1
                await asyncio.sleep(0.05)  # past this burst's start
        except (OSError, TimeoutError, ssl.SSLError, asyncio.IncompleteReadError, ValueError):
            self.stats["scrape_failed"] += 1
        finally:
            writer.close()

    async def burst(self) -> None:
        """``--burst`` kept-alive clients that all scrape at once, every 250 ms."""
        start, done = asyncio.Event(), [0]
        clients = [asyncio.create_task(self.scraper(start, done)) for _ in range(self.args.burst)]
        while self.left() > 0:
            start.set()
            await asyncio.sleep(0.02)
            start.clear()
            self.stats["bursts"] += 1
            await asyncio.sleep(0.23)
        start.set()  # releases the clients waiting for a burst that will not come
        await asyncio.gather(*clients)

    async def run(self) -> None:
        workers = {"slowloris": 100, "idle": 150, "oversized": 4, "burst": 1}[self.args.mode]
        fn = getattr(self, self.args.mode)
        await asyncio.gather(*(fn() for _ in range(workers)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=["slowloris", "oversized", "idle", "burst"], required=True)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--tls", help="CA file: speak TLS")
    ap.add_argument("--auth", help="user:password for the burst scrapes")
    ap.add_argument("--burst", type=int, default=16)
    args = ap.parse_args()
    flood = Flood(args)
    asyncio.run(flood.run())
    print(json.dumps(dict(flood.stats)), flush=True)


if __name__ == "__main__":
    main()
