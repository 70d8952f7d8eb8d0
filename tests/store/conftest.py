from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from statewright.store import SQLiteStore, Store


@pytest.fixture(params=["sqlite-file", "sqlite-memory"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """The contract suite runs against every backend (PostgreSQL joins in issue #4)."""
    if request.param == "sqlite-file":
        s: Store = SQLiteStore(tmp_path / "contract.db")
    else:
        s = SQLiteStore(":memory:")
    await s.open()
    yield s
    await s.close()
