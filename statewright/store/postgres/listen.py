"""Wake-ups for idle workers over LISTEN/NOTIFY: one listening connection per store.

Transactions that may make work due send ``NOTIFY statewright_work`` (``pg_notify`` inside the
transaction, so it is delivered on commit, and only then). Every waiter of the store shares one
dedicated connection outside the pool, opened by the first wait. When that connection breaks,
waiters fall back to sleeping their timeout (polling) and the next wait reconnects; a wake-up
is a hint, so a lost one costs latency, never correctness.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import psycopg

log = logging.getLogger(__name__)

CHANNEL = "statewright_work"


class Listener:
    """The store's ``wait_for_work``: in-process wake-ups plus NOTIFY from other processes."""

    def __init__(self, dsn: str, connect_kwargs: dict[str, Any] | None = None) -> None:
        self.dsn = dsn
        self.connect_kwargs = dict(connect_kwargs or {})
        self._waiters: set[asyncio.Event] = set()
        self._task: asyncio.Task[None] | None = None
        self._healthy: bool | None = None  # None: never connected yet
        self.listening = asyncio.Event()
        """Set while the LISTEN is active (tests wait for it)."""

    def wake(self) -> None:
        """Wake every waiter of this store now."""
        for event in self._waiters:
            event.set()

    async def wait(self, timeout: float) -> None:
        event = asyncio.Event()
        # Subscribe before the first await: a caller that starts waiting, then looks for work,
        # then awaits, must not miss a wake-up sent while it was looking.
        self._waiters.add(event)
        try:
            if self._task is None or self._task.done():
                self._task = asyncio.create_task(self._run(), name="statewright-listen")
            await asyncio.wait_for(event.wait(), max(0.0, timeout))
        except TimeoutError:
            pass
        finally:
            self._waiters.discard(event)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, **self.connect_kwargs
            )
        except psycopg.Error as exc:
            self._broken(exc)
            return
        try:
            await conn.execute(f"LISTEN {CHANNEL}")
            if self._healthy is False:
                # Notifications sent while we were not listening are lost: look again now.
                log.info("listening for work again", extra={"action": "listen_restored"})
                self.wake()
            self._healthy = True
            self.listening.set()
            async for _ in conn.notifies():
                self.wake()
        except psycopg.Error as exc:
            self._broken(exc)
        finally:
            self.listening.clear()
            with contextlib.suppress(psycopg.Error):
                await conn.close()

    def _broken(self, exc: psycopg.Error) -> None:
        if self._healthy is not False:  # once per outage, not once per poll
            log.warning(
                "cannot listen for work notifications; polling until it reconnects: %s",
                exc,
                extra={"action": "listen_failed", "error": str(exc)},
            )
        self._healthy = False
