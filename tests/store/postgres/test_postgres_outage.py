"""PostgreSQL stopped and started under a running store: it fails closed, resumes, loses nothing.

Runs its own server (the session's may be shared), stops it with ``pg_ctl stop -m fast`` while a
writer is busy, and starts it again on the same data directory.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from statewright.errors import StoreError
from statewright.store.postgres import PostgresStore
from tests.conftest import start_pgserver, stop_pgserver
from tests.store.postgres.test_postgres import new, write


@pytest.fixture
async def server(pgserver_env: None) -> AsyncIterator[Any]:
    base = Path(tempfile.mkdtemp(prefix="statewright-pg-outage-"))
    server = await asyncio.to_thread(start_pgserver, base / "data")
    yield server
    await asyncio.to_thread(stop_pgserver, server)
    shutil.rmtree(base, ignore_errors=True)


def stop(server: Any) -> None:
    from pgserver._commands import POSTGRES_BIN_PATH

    subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(server.pgdata), "-w", "-m", "fast", "stop"],
        user=server.system_user,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )


class Writer:
    """Sends one transition after another to one workflow, like a busy engine would."""

    def __init__(self, store: PostgresStore, wid: str) -> None:
        self.store, self.wid = store, wid
        self.acked: set[int] = set()
        self.in_doubt: set[int] = set()  # the call failed: committed or not, nobody knows
        self.errors: list[StoreError] = []
        self.running = True

    async def run(self) -> None:
        while self.running:
            try:
                row = await self.store.get_workflow(self.wid)
                assert row is not None
                try:
                    after = await self.store.apply_transition(write(row, row.version, "busy"))
                    self.acked.add(after.version)
                except StoreError:
                    self.in_doubt.add(row.version + 1)
                    raise
            except StoreError as exc:
                self.errors.append(exc)
            await asyncio.sleep(0.01)

    async def until(self, n: int) -> None:
        async with asyncio.timeout(20):
            while len(self.acked) < n:
                await asyncio.sleep(0.01)


async def test_postgres_stopped_and_started_during_a_run(server: Any) -> None:
    # timeout: how long an operation waits for a connection while the server is down
    store = PostgresStore(server.get_uri(), min_size=2, max_size=4, timeout=0.5)
    await store.open()
    try:
        row, _ = await store.create_workflow(new("steady"))
        for version in (1, 2, 3):
            row = await store.apply_transition(write(row, version, f"e{version}"))
        await store.create_workflow(new("busy"))
        writer = Writer(store, "busy")
        task = asyncio.create_task(writer.run())
        await writer.until(5)

        await asyncio.to_thread(stop, server)
        # Down: every operation fails closed with a StoreError saying what happened.
        for attempt in (store.get_workflow("steady"), store.apply_transition(write(row, 4, "e4"))):
            with pytest.raises(StoreError, match="PostgreSQL") as info:
                await attempt
            assert isinstance(info.value.__cause__, psycopg.Error)
        assert writer.errors

        loop = asyncio.get_running_loop()
        await asyncio.to_thread(server.ensure_postgres_running)
        restarted = loop.time()
        async with asyncio.timeout(10):  # the pool reconnects by itself
            while True:
                try:
                    again = await store.get_workflow("steady")
                    break
                except StoreError:
                    await asyncio.sleep(0.05)
        recovered = loop.time() - restarted
        assert recovered < 5, f"the pool took {recovered:.1f}s to reconnect"
        acked_before = len(writer.acked)
        await writer.until(acked_before + 5)  # the busy writer resumed too
        writer.running = False
        await task

        # Nothing acknowledged was lost: the steady log is exactly what was acknowledged.
        assert again == row
        log = await store.history("steady")
        assert [(t.version, t.payload["event_id"]) for t in log[1:]] == [
            (2, "e1"),
            (3, "e2"),
            (4, "e3"),
        ]
        # The busy log holds every acknowledged transition, nothing twice, no gaps; a call that
        # failed mid-flight may or may not have committed (the client could not know).
        busy = [t.version for t in await store.history("busy")]
        assert busy == list(range(1, len(busy) + 1))
        assert writer.acked <= set(busy) <= writer.acked | writer.in_doubt | {1}
        # and it works as before
        row = await store.apply_transition(write(row, 4, "e4"))
        assert row.version == 5
    finally:
        await store.close()
