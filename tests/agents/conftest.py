"""Fixtures of the agent adapters' tests: an engine on each store (SQLite, PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from statewright import Engine, ManualClock, WorkflowType
from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store

Opener = Callable[[list[WorkflowType]], Engine]


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "agents.db")
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn)


@pytest.fixture
async def opened(make_store: Callable[[], Store]) -> AsyncIterator[Opener]:
    """Open engines on the test's store (closed after the test)."""
    engines: list[Engine] = []

    def open_engine(types: list[WorkflowType]) -> Engine:
        engine = Engine(make_store(), types, clock=ManualClock(1000.0))
        engines.append(engine)
        return engine

    yield open_engine
    for engine in engines:
        await engine.close()
