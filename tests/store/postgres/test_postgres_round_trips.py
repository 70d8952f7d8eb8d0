"""Round trips per operation on PostgreSQL, counted by a proxy between the store and the server.

Latency per transition is dominated by round trips, so the hot operations must not grow any:
a transition is one statement (one round trip, its commit included); an event is two (lock and
read, then write and commit), because the plan runs in Python between them.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from statewright.store.postgres import PostgresStore
from statewright.types import InboxItem, TimerSpec, WorkflowRow
from tests.store.postgres.test_postgres import T0, new, write


class TurnCounter:
    """A byte-for-byte proxy counting request turns: client bytes after server bytes."""

    def __init__(self, target: dict[str, Any]) -> None:
        self.target = target
        self.turns = 0
        self._last = "server"
        self.handlers: set[asyncio.Task[Any]] = set()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, port = self.target.get("host") or "localhost", int(self.target.get("port") or 5432)
        if host.startswith("/"):
            return await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        return await asyncio.open_connection(host, port)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        up_reader, up_writer = await self._connect()
        await asyncio.gather(
            self._pipe(reader, up_writer, "client"),
            self._pipe(up_reader, writer, "server"),
            return_exceptions=True,
        )

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, side: str
    ) -> None:
        try:
            while data := await reader.read(65536):
                if side == "client" and self._last == "server":
                    self.turns += 1
                self._last = side
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


@pytest.fixture
async def counted(pg_dsn: str) -> AsyncIterator[tuple[PostgresStore, TurnCounter]]:
    params = conninfo_to_dict(pg_dsn)
    counter = TurnCounter(params)
    folder = tempfile.mkdtemp(prefix="sw-proxy-")
    server = await asyncio.start_unix_server(counter.handle, f"{folder}/.s.PGSQL.5432")
    proxied = make_conninfo(pg_dsn, host=folder, port="5432")
    store = PostgresStore(proxied, min_size=1, max_size=1)
    await store.open()
    yield store, counter
    await store.close()
    server.close()
    await asyncio.wait_for(asyncio.gather(*counter.handlers), 5)  # the connections ended
    shutil.rmtree(folder, ignore_errors=True)


async def test_hot_operations_take_one_round_trip_each(
    counted: tuple[PostgresStore, TurnCounter],
) -> None:
    store, counter = counted
    rows: dict[str, WorkflowRow] = {}
    items: dict[str, InboxItem] = {}

    async def create(wid: str) -> None:
        rows[wid], _ = await store.create_workflow(new(wid, run_at=T0))

    async def claim(wid: str) -> None:
        await store.claim_due(wid, T0, 30, 1)

    async def move(wid: str) -> None:
        row = rows[wid]
        rows[wid] = await store.apply_transition(write(row, row.version, "e", run_at=T0))

    async def fenced(wid: str) -> None:
        [claimed] = await store.claim_due(f"fenced-{wid}", T0, 30, 1)
        rows[wid] = await store.apply_transition(
            replace(write(claimed, claimed.version, "e", run_at=T0), lease=claimed.lease)
        )

    async def get(wid: str) -> None:
        await store.get_workflow(wid)

    async def since(wid: str) -> None:
        await store.transitions_since(0)

    async def post(wid: str) -> None:
        items[wid], _ = await store.post_input(wid, "doc", {}, T0, idempotency_key=f"k-{wid}")

    async def move_arming_timers_consuming_input(wid: str) -> None:
        row, item = rows[wid], items.pop(wid)
        w = replace(
            write(row, row.version, "e"),
            add_timers=(TimerSpec(T0 + 60, "timeout"), TimerSpec(T0 + 90, "late")),
            consume_inbox_ids=(item.id,),
            idempotency_key=f"t-{wid}",
        )
        rows[wid] = await store.apply_transition(w)

    expected: dict[Callable[[str], Awaitable[None]], int] = {
        create: 1,
        claim: 1,
        move: 1,
        fenced: 2,
        get: 1,
        since: 1,
        post: 1,
        move_arming_timers_consuming_input: 1,
    }
    # psycopg prepares a statement after its 5th use (one extra round trip, once per connection
    # and statement): count the first uses and the ones well after that.
    for i in range(10):
        got = {}
        for op in expected:
            before = counter.turns
            await op(f"w{i}")
            got[op] = counter.turns - before
        if i == 0 or i >= 7:
            assert {op.__name__: n for op, n in got.items()} == {
                op.__name__: n for op, n in expected.items()
            }, f"call {i + 1}"
