from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store

BACKENDS = ["sqlite-file", "sqlite-memory", "postgres"]


def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A new store of the kind ``request.param`` names (one of :data:`BACKENDS`), not open."""
    if request.param == "sqlite-file":
        return SQLiteStore(tmp_path / "contract.db")
    if request.param == "sqlite-memory":
        return SQLiteStore(":memory:")
    return PostgresStore(request.getfixturevalue("pg_dsn"))


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """The contract suite runs against every backend: one run proves them all."""
    s = backend(request, tmp_path)
    await s.open()
    yield s
    await s.close()
