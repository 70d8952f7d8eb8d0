"""SQLite's ``ping``: it does not wait behind the store's busy connection thread, and it sees
the file as it is now (deleted under the service: it fails, and creates nothing)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from statewright.errors import StoreError
from statewright.store import SQLiteStore
from tests.store.contract.core.test_ping import FAST


@pytest.mark.alone
async def test_ping_does_not_wait_behind_a_busy_sqlite_connection(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "busy.db")
    await store.open()
    try:
        # A read that holds the store's connection thread (as a queue of large pages does)
        # until the probe is done.
        release = threading.Event()
        busy = asyncio.create_task(store.conn.read(lambda c: release.wait(10)))
        await asyncio.sleep(0.1)
        start = time.monotonic()
        try:
            await store.ping()
            assert time.monotonic() - start < FAST
            assert not busy.done()
        finally:
            release.set()
        assert await busy
    finally:
        await store.close()


async def test_sqlite_ping_fails_when_the_file_is_gone_and_creates_none(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    store = SQLiteStore(path)
    await store.open()
    try:
        await store.ping()
        for leftover in tmp_path.glob("gone.db*"):
            leftover.unlink()
        with pytest.raises(StoreError):
            await store.ping()
        assert not path.exists()
    finally:
        await store.close()
