"""What the acceptance tests share: the store each runs on, once per store."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store to run on, as ``--db`` takes it: a fresh SQLite file, or a fresh PostgreSQL
    database (``pg_dsn``; a test fails, never skips, without PostgreSQL)."""
    if request.param == "sqlite":
        return str(tmp_path / "statewright.db")
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn
