"""Probes on both stores: /livez, /ready, /health answer without a token, and at once while
the store's reads hold it up; /health/workflows turns 503 (counts by type and state, never
ids) while a workflow sits in a state longer than its threshold, and back to 200 once it moves
on."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import httpx
import pytest

from statewright import Engine, ManualClock, SQLiteStore
from statewright.store.postgres import PostgresStore
from tests.http.test_api import in_state, start


async def test_probes_answer_without_a_token(client: httpx.AsyncClient) -> None:
    for path in ("/livez", "/ready", "/health"):
        r = await client.get(path)
        assert r.status_code == 200, (path, r.text)
        assert r.json()["status"] == "ok"
    assert (await client.get("/ready")).json() == {"status": "ok", "store": "ok"}
    assert (await client.get("/health")).json() == {"status": "ok", "store": "ok"}  # no worker
    r = await client.get("/health/workflows")
    assert r.status_code == 200
    assert r.json() == {
        "status": "ok",
        "stuck": 0,
        "by_state": [],
        "parked": 0,
        "parked_by_state": [],
        "unregistered": 0,
        "unregistered_by_version": [],
    }


async def test_workflows_health_is_503_while_one_is_stuck(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    await in_state(engine, client, "t-1", "running")  # running: stuck after an hour
    await in_state(engine, client, "t-2", "planned")  # planned: the default, a day
    await start(client, "other", wid="g-1")
    await engine.send("globex:g-1", "start", actor="setup")  # another tenant's: counted too
    clock.advance(3000)
    await in_state(engine, client, "t-3", "running")
    r = await client.get("/health/workflows")
    assert r.status_code == 200 and r.json()["stuck"] == 0

    clock.advance(601)  # t-1 and g-1 are 3601 s in running, t-3 only 601 s
    r = await client.get("/health/workflows")
    assert r.status_code == 503, r.text
    assert r.json() == {
        "status": "stuck",
        "stuck": 2,
        "by_state": [{"type": "agent_task", "state": "running", "count": 2, "oldest_age": 3601}],
        "parked": 0,
        "parked_by_state": [],
        "unregistered": 0,
        "unregistered_by_version": [],
    }
    assert "t-1" not in r.text and "g-1" not in r.text  # counts only, no ids
    assert (await client.get("/livez")).status_code == 200  # the process is fine
    assert (await client.get("/ready")).status_code == 200

    # They move on (paused: a day's threshold): healthy again.
    await engine.send("t-1", "request_approval", actor="setup")
    r = await client.get("/health/workflows")
    assert r.status_code == 503 and r.json()["stuck"] == 1
    await engine.send("globex:g-1", "complete", actor="setup")
    r = await client.get("/health/workflows")
    assert r.status_code == 200, r.text
    assert r.json()["stuck"] == 0 and r.json()["by_state"] == []


async def test_ready_is_503_when_the_store_is_gone(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await engine.store.close()
    try:
        r = await client.get("/ready")
        assert r.status_code == 503, r.text
        assert r.json()["status"] == "unavailable" and r.json()["store"] != "ok"
        r = await client.get("/health")
        assert r.status_code == 503 and r.json()["status"] == "unavailable"
        r = await client.get("/health/workflows")
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_error"
        assert (await client.get("/livez")).status_code == 200
    finally:
        await engine.store.open()


@pytest.mark.alone
async def test_ready_answers_at_once_while_the_stores_reads_hold_it_up(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    # The store busy with reads until the probes are done (SQLite: its connection's thread;
    # PostgreSQL: every pooled connection). /ready used to queue behind them (and answer 503
    # after 5 s on PostgreSQL): now it asks the store's ping, on a path of its own.
    store = engine.store
    async with contextlib.AsyncExitStack() as held:
        if isinstance(store, SQLiteStore):
            release = threading.Event()
            busy = asyncio.create_task(store.conn.read(lambda c: release.wait(10)))
            held.push_async_callback(lambda: busy)
            held.callback(release.set)
        else:
            assert isinstance(store, PostgresStore)
            for _ in range(store.max_size):
                await held.enter_async_context(store._connection())
        await asyncio.sleep(0.1)
        for path in ("/ready", "/health"):
            start = time.monotonic()
            r = await client.get(path)
            assert r.status_code == 200, r.text
            # The reads hold the store for up to 10 s: a probe that queued behind them would
            # take that long; 3 s leaves room for a loaded machine (1.2 s seen under xdist).
            assert time.monotonic() - start < 3.0, path
