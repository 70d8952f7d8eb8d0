"""Large reads on both stores cost what their caps allow, whatever the number of readers: a
page of large log entries reads from the store about as many entries as it returns (not a
chunk of 101 to keep 20), the SSE stream reads large events a batch of about 1 MiB at a
time, and however many clients read large pages at once, only ``LARGE_READS`` pages are being
read and encoded at a time. Every entry still comes once, in order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from statewright import Engine, offload
from statewright.http import pages
from tests.http.conftest import auth
from tests.http.test_stream import events_of

BLOB = 200 * 1024
ROUNDS = 20
"""block / dependency_ready rounds: 42 log entries, 40 of them of 200 KiB."""


async def _seed(engine: Engine, wid: str = "t-1") -> None:
    blob = {"blob": "x" * BLOB}
    await engine.start("agent_task", workflow_id=wid)
    await engine.send(wid, "start", {})
    for _ in range(ROUNDS):
        await engine.send(wid, "block", blob)
        await engine.send(wid, "dependency_ready", blob)


class Reads:
    """Counts what a store read method returns (in all, and at most at once), and how many
    calls run at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, store: Any, name: str) -> None:
        self.rows = 0
        self.largest = 0
        self.running = 0
        self.most = 0
        self.pause = 0.0
        read: Callable[..., Awaitable[list[Any]]] = getattr(store, name)

        async def counted(*args: Any, **kwargs: Any) -> list[Any]:
            self.running += 1
            self.most = max(self.most, self.running)
            try:
                await asyncio.sleep(self.pause)
                found = await read(*args, **kwargs)
            finally:
                self.running -= 1
            self.rows += len(found)
            self.largest = max(self.largest, len(found))
            return found

        monkeypatch.setattr(store, name, counted)


async def test_a_page_of_large_entries_reads_what_it_returns(
    client: httpx.AsyncClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _seed(engine)
    reads = Reads(monkeypatch, engine.store, "history")
    versions: list[int] = []
    after = 0
    while True:
        before = reads.rows
        r = await client.get(
            "/v1/workflows/t-1/history",
            params={"after": after, "limit": 1000},
            headers=auth("viewer"),
        )
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(r.content) < pages.PAGE_BYTES + 2 * BLOB
        versions += [item["version"] for item in page["items"]]
        # The entries it returns, and at most a few more to learn that more follow.
        assert reads.rows - before <= len(page["items"]) + 3, (reads.rows - before, len(versions))
        if page["next_cursor"] is None:
            break
        after = int(page["next_cursor"])
    assert versions == list(range(1, 2 * ROUNDS + 3))  # every entry once, in order


async def test_the_stream_reads_large_events_a_batch_of_about_a_mib_at_a_time(
    client: httpx.AsyncClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _seed(engine)
    reads = Reads(monkeypatch, engine.store, "transitions_since")
    total = 2 * ROUNDS + 2  # all of them
    r = await client.get(f"/v1/stream?limit={total}", headers=auth("viewer"))
    events = [e for e in events_of(r.text) if e.get("event") == "transition"]
    assert [int(e["id"]) for e in events] == sorted({int(e["id"]) for e in events})
    assert len(events) == total
    # A batch holds about 1 MiB of large events (6 here) and reads one more to know that more
    # follow; only the first read, before their size is known, takes more (a batch used to
    # read as many as 200, all held while they were sent).
    assert reads.largest <= pages.FIRST_CHUNK, reads.largest
    assert reads.rows <= total * 1.3 + pages.FIRST_CHUNK, reads.rows


async def test_only_a_few_large_reads_run_at_once_however_many_clients(
    client: httpx.AsyncClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    for w in range(3):
        await _seed(engine, f"t-{w}")
    reads = Reads(monkeypatch, engine.store, "history")
    reads.pause = 0.05  # each read takes a while: the clients overlap

    async def read_page(i: int) -> int:
        r = await client.get(
            f"/v1/workflows/t-{i % 3}/history", params={"limit": 1000}, headers=auth("viewer")
        )
        assert r.status_code == 200, r.text
        return len(r.json()["items"])

    counts = await asyncio.gather(*(read_page(i) for i in range(12)))
    assert all(n > 0 for n in counts)
    assert reads.most == offload.LARGE_READS
