"""All migrations from zero give exactly schema.sql, and reopening applies none again."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from statewright.store import SQLiteStore
from statewright.store.queries import migrations, schema


def _objects(conn: sqlite3.Connection) -> list[tuple[str, str, object]]:
    """Tables by their columns (ALTER TABLE rewrites CREATE text), the rest by their SQL."""
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
        "AND name != 'schema_migrations' ORDER BY type, name"
    ).fetchall()
    out: list[tuple[str, str, object]] = []
    for kind, name, sql in rows:
        if kind == "table":
            out.append((kind, name, conn.execute(f"PRAGMA table_info({name})").fetchall()))
        else:
            out.append((kind, name, " ".join((sql or "").split())))
    return out


async def test_migrations_from_zero_equal_schema(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    await store.open()
    await store.close()
    migrated = sqlite3.connect(tmp_path / "m.db")
    reference = sqlite3.connect(":memory:")
    reference.executescript(schema("sqlite"))
    assert _objects(migrated) == _objects(reference)
    applied = [r[0] for r in migrated.execute("SELECT version FROM schema_migrations")]
    assert applied == [n for n, _, _ in migrations("sqlite")]
    migrated.close()
    reference.close()


async def test_reopening_applies_nothing_twice(tmp_path: Path) -> None:
    for _ in range(3):
        store = SQLiteStore(tmp_path / "m.db")
        await store.open()
        await store.close()
    conn = sqlite3.connect(tmp_path / "m.db")
    count = conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0]
    conn.close()
    assert count == len(migrations("sqlite"))


def test_migration_numbers_are_contiguous() -> None:
    numbers = [n for n, _, _ in migrations("sqlite")]
    assert numbers == list(range(1, len(numbers) + 1))
