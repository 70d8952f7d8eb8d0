"""PostgreSQL's ``ping``: it does not wait for a pooled connection, and its own connection,
killed by the server (as by a restart), is replaced on the next probe."""

from __future__ import annotations

import contextlib
import time

import pytest

from statewright.errors import StoreError
from statewright.store.postgres import PostgresStore
from tests.store.contract.core.test_ping import BUSY, FAST


@pytest.mark.alone
async def test_ping_does_not_wait_for_a_pooled_postgres_connection(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, max_size=3, timeout=BUSY)
    await store.open()
    try:
        async with contextlib.AsyncExitStack() as held:
            for _ in range(store.max_size):  # every pooled connection taken by readers
                await held.enter_async_context(store._connection())
            start = time.monotonic()
            await store.ping()
            assert time.monotonic() - start < FAST
            with pytest.raises(StoreError):  # what a read (the probe before) got meanwhile
                await store.get_workflow("nope")
    finally:
        await store.close()


async def test_postgres_ping_replaces_a_connection_the_server_killed(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    await store.open()
    try:
        await store.ping()
        probe = store.probe._conn
        assert probe is not None
        pid = probe.info.backend_pid
        async with store._connection() as conn:
            await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        await store.ping()  # the dead connection is replaced, the probe answers
        assert store.probe._conn is not None and store.probe._conn.info.backend_pid != pid
    finally:
        await store.close()
