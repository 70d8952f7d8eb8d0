"""A connection cut after COMMIT reached PostgreSQL: the write is reported as OutcomeUnknown
(never "nothing changed"), and a retry with the same idempotency key applies it once.

A TCP proxy between the store and the server passes everything through until it is armed;
armed, it lets the next statement that appends to the log through, waits for the server's
ReadyForQuery (sent after the implicit transaction committed), and then cuts both sides
instead of passing that answer on.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest
from psycopg.conninfo import conninfo_to_dict

from statewright import Engine, MachineBuilder
from statewright.errors import OutcomeUnknown, StoreError
from statewright.store.postgres import PostgresStore

MACHINE = (
    MachineBuilder("counter")
    .state("on", initial=True)
    .state("off", terminal=True)
    .event("tick")
    .event("stop")
    .transition("tick", "on", "on")
    .transition("stop", "on", "off")
    .build()
)


class CutAfterCommit:
    """A TCP proxy in front of PostgreSQL (see the module docstring)."""

    MARKER = b"INSERT INTO transitions"

    def __init__(self, dsn: str) -> None:
        info = conninfo_to_dict(dsn)
        host = str(info.get("host") or "localhost")
        self.port_of_server = int(info.get("port") or 5432)
        self.unix = host if host.startswith("/") else None
        self.host = host
        self.armed = False
        self.cuts = 0
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.unix is not None:
            up_r, up_w = await asyncio.open_unix_connection(
                f"{self.unix}/.s.PGSQL.{self.port_of_server}"
            )
        else:
            up_r, up_w = await asyncio.open_connection(self.host, self.port_of_server)
        sent_marker = asyncio.Event()
        tasks = [
            asyncio.create_task(self._upstream(reader, up_w, sent_marker)),
            asyncio.create_task(self._downstream(up_r, writer, up_w, sent_marker)),
        ]
        self.tasks.update(tasks)
        await asyncio.gather(*tasks, return_exceptions=True)
        for w in (writer, up_w):
            w.close()

    async def _upstream(
        self, reader: asyncio.StreamReader, up: asyncio.StreamWriter, sent: asyncio.Event
    ) -> None:
        while data := await reader.read(65536):
            if self.armed and self.MARKER in data:
                self.armed = False
                sent.set()
            up.write(data)
            await up.drain()
        up.close()

    async def _downstream(
        self,
        up: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_w: asyncio.StreamWriter,
        sent: asyncio.Event,
    ) -> None:
        buffer = b""
        while data := await up.read(65536):
            if not sent.is_set():
                writer.write(data)
                await writer.drain()
                continue
            # Armed and the statement went out: read whole messages until ReadyForQuery,
            # which the server sends only after the statement's transaction committed.
            buffer += data
            while len(buffer) >= 5:
                kind = buffer[:1]
                (length,) = struct.unpack("!i", buffer[1:5])
                if len(buffer) < 1 + length:
                    break
                buffer = buffer[1 + length :]
                if kind == b"Z":
                    self.cuts += 1
                    writer.transport.abort()
                    up_w.transport.abort()
                    return


@pytest.fixture
async def proxy(pg_dsn: str) -> AsyncIterator[tuple[CutAfterCommit, str]]:
    cut = CutAfterCommit(pg_dsn)
    port = await cut.start()
    info = {k: v for k, v in conninfo_to_dict(pg_dsn).items() if v is not None}
    info.update(host="127.0.0.1", port=str(port), sslmode="disable")
    dsn = " ".join(f"{k}={v}" for k, v in info.items())
    yield cut, dsn
    await cut.close()


async def test_a_commit_whose_answer_was_lost_is_outcome_unknown_and_a_keyed_retry_applies_once(
    proxy: tuple[CutAfterCommit, str], pg_dsn: str
) -> None:
    cut, proxied = proxy
    # Statements are sent as text every time (no server-side prepare), so the proxy sees them.
    store = PostgresStore(proxied, connect_kwargs={"prepare_threshold": None}, max_size=2)
    direct = Engine(PostgresStore(pg_dsn), [MACHINE])
    async with Engine(store, [MACHINE]) as engine, direct:
        await engine.start("counter", workflow_id="c")

        cut.armed = True
        with pytest.raises(OutcomeUnknown) as info:
            await engine.send("c", "tick", {"n": 1}, idempotency_key="tick-1")
        assert cut.cuts == 1 and isinstance(info.value, StoreError)
        assert "may or may not" in info.value.message
        # It did commit: the server has the transition with its key.
        [applied] = [t for t in await direct.history("c") if t.idempotency_key == "tick-1"]
        assert (applied.version, applied.payload) == (2, {"n": 1})

        # The client retries with the same key (the pool reconnects): applied once, in all.
        sent = await engine.send("c", "tick", {"n": 1}, idempotency_key="tick-1")
        assert (sent.replayed, sent.applied_version, sent.row.version) == (True, 2, 2)
        assert [t.version for t in await direct.history("c")] == [1, 2]

        # Without a key the same cut still says "unknown", never "nothing changed".
        cut.armed = True
        with pytest.raises(OutcomeUnknown):
            await engine.send("c", "tick", {"n": 2})
        assert [t.version for t in await direct.history("c")] == [1, 2, 3]
        await direct.check("c")
        # The documented way out, as a client writes it: retry with the same key.
        for _ in range(3):
            try:
                await engine.send("c", "stop", idempotency_key="stop-1")
                break
            except OutcomeUnknown:
                continue
        assert (await direct.get("c")).state == "off"
        assert [t.event for t in await direct.history("c")].count("stop") == 1
