from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from statewright.store import SQLiteStore, Store
from statewright.store.postgres import PostgresStore


@pytest.fixture(params=["sqlite-file", "sqlite-memory", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """The contract suite runs against every backend: one run proves them all."""
    if request.param == "sqlite-file":
        s: Store = SQLiteStore(tmp_path / "contract.db")
    elif request.param == "sqlite-memory":
        s = SQLiteStore(":memory:")
    else:
        s = PostgresStore(request.getfixturevalue("pg_dsn"))
    await s.open()
    yield s
    await s.close()
