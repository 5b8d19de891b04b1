"""The on-disk queue of undelivered alerts: one sqlite3 file under state_dir.

sqlite's journal makes every insert and delete atomic and durable, so an alert accepted here survives
``kill -9`` and power loss, and one that was delivered is not delivered again after a restart. A row
is marked ``inflight`` while its request is out; a row still marked at a start belongs to a process
that died before the answer came, so nobody knows whether the service took it (``in_flight``; the
channel decides, see ``Delivery.recover``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from agent.alerts.message import Message

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    enqueued REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL,
    inflight INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS queue_order ON queue (channel, priority DESC, id);
"""


@dataclass(frozen=True, slots=True)
class Row:
    id: int
    channel: str
    priority: bool
    enqueued: float
    attempts: int
    message: Message


class Spool:
    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        # the event loop is the only user; autocommit keeps each statement its own transaction
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(queue)")}
        if "inflight" not in columns:  # a spool from before the mark
            self._db.execute("ALTER TABLE queue ADD COLUMN inflight INTEGER NOT NULL DEFAULT 0")

    def add(self, channel: str, message: Message) -> int:
        cur = self._db.execute(
            "INSERT INTO queue (channel, priority, enqueued, message) VALUES (?, ?, ?, ?)",
            (channel, int(message.priority), time.time(), json.dumps(message.to_dict(), ensure_ascii=False)),
        )
        return int(cur.lastrowid or 0)

    def peek(self, channel: str, limit: int) -> list[Row]:
        """Oldest first, priority rows before all others."""
        return self._rows(
            "SELECT id, channel, priority, enqueued, attempts, message FROM queue WHERE channel = ? "
            "ORDER BY priority DESC, id LIMIT ?",
            (channel, limit),
        )

    def in_flight(self, channel: str) -> list[Row]:
        """Rows whose request was out when the process that sent them died."""
        return self._rows(
            "SELECT id, channel, priority, enqueued, attempts, message FROM queue "
            "WHERE channel = ? AND inflight = 1 ORDER BY id",
            (channel,),
        )

    def _rows(self, sql: str, args: tuple[object, ...]) -> list[Row]:
        rows = self._db.execute(sql, args).fetchall()
        out = []
        for rid, ch, prio, enq, att, text in rows:
            try:
                msg = Message.from_dict(json.loads(text))
            except (ValueError, KeyError, TypeError):
                msg = None  # a row from an incompatible version: the caller drops it, counted
            out.append(Row(rid, ch, bool(prio), enq, att, msg))  # type: ignore[arg-type]
        return out

    def delete(self, ids: list[int]) -> None:
        if ids:
            self._db.executemany("DELETE FROM queue WHERE id = ?", [(i,) for i in ids])

    def sending(self, ids: list[int]) -> None:
        """Mark the rows whose request goes out now (durably, before it does)."""
        if ids:
            # one statement, one transaction: a digest's rows are marked together
            marks = ",".join("?" * len(ids))
            self._db.execute(f"UPDATE queue SET inflight = 1 WHERE id IN ({marks})", ids)

    def attempted(self, ids: list[int]) -> None:
        """The request failed (or is to be made again): counted, no longer in flight."""
        if ids:
            self._db.executemany(
                "UPDATE queue SET attempts = attempts + 1, inflight = 0 WHERE id = ?", [(i,) for i in ids]
            )

    def depth(self, channel: str) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM queue WHERE channel = ?", (channel,)).fetchone()[0])

    def channels(self) -> dict[str, int]:
        return dict(self._db.execute("SELECT channel, COUNT(*) FROM queue GROUP BY channel").fetchall())

    def drop_oldest(self, channel: str, keep_priority: bool = True) -> int | None:
        """Remove the oldest ordinary row (a priority row only when nothing else is left)."""
        order = "priority ASC, id" if keep_priority else "id"
        row = self._db.execute(
            f"SELECT id FROM queue WHERE channel = ? ORDER BY {order} LIMIT 1", (channel,)
        ).fetchone()
        if row is None:
            return None
        self._db.execute("DELETE FROM queue WHERE id = ?", (row[0],))
        return int(row[0])

    def drop_channel(self, channel: str) -> int:
        return self._db.execute("DELETE FROM queue WHERE channel = ?", (channel,)).rowcount

    def close(self) -> None:
        self._db.close()
