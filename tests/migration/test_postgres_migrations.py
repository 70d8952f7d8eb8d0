"""PostgreSQL: all migrations from zero give exactly schema.sql; reopening applies none again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg

from statewright.store.postgres import PostgresStore
from statewright.store.queries import migrations, schema

CATALOG: dict[str, str] = {
    "columns": """
        SELECT table_name, column_name, ordinal_position, data_type, is_nullable,
               column_default, is_identity, identity_generation
          FROM information_schema.columns
         WHERE table_schema = 'public' AND table_name <> 'schema_migrations'
         ORDER BY table_name, ordinal_position""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
         WHERE schemaname = 'public' AND tablename <> 'schema_migrations'
         ORDER BY tablename, indexname""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
          FROM pg_constraint
         WHERE connamespace = 'public'::regnamespace
           AND conrelid <> 'schema_migrations'::regclass
         ORDER BY 1, 2""",
    "triggers": """
        SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger
         WHERE NOT tgisinternal ORDER BY 1, 2""",
    "functions": """
        SELECT proname, pg_get_functiondef(oid) FROM pg_proc
         WHERE pronamespace = 'public'::regnamespace ORDER BY 1""",
}


def _catalog(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as conn:
        return {name: conn.execute(query).fetchall() for name, query in CATALOG.items()}


async def _open_close(dsn: str) -> None:
    store = PostgresStore(dsn, min_size=1, max_size=1)
    await store.open()
    await store.close()


async def test_migrations_from_zero_equal_schema(pg_database: Callable[..., str]) -> None:
    migrated, reference = pg_database(template="template0"), pg_database(template="template0")
    await _open_close(migrated)
    with psycopg.connect(reference, autocommit=True) as conn:
        conn.execute(schema("postgres").encode())
        conn.execute(  # what the migrator creates for its own bookkeeping
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at DOUBLE PRECISION NOT NULL)"
        )
    got, want = _catalog(migrated), _catalog(reference)
    assert all(want.values()), want  # the comparison compares something
    assert got == want
    with psycopg.connect(migrated) as conn:
        applied = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
    assert applied == [n for n, _, _ in migrations("postgres")]


async def test_reopening_and_racing_openers_apply_nothing_twice(
    pg_database: Callable[..., str],
) -> None:
    dsn = pg_database(template="template0")
    # Four processes starting at once: the advisory lock lets one migrate, the others wait.
    await asyncio.gather(*(_open_close(dsn) for _ in range(4)))
    await _open_close(dsn)
    with psycopg.connect(dsn) as conn:
        query = "SELECT version, count(*) FROM schema_migrations GROUP BY 1 ORDER BY 1"
        rows = conn.execute(query).fetchall()
    assert rows == [(n, 1) for n, _, _ in migrations("postgres")]


def test_postgres_migration_numbers_are_contiguous() -> None:
    numbers = [n for n, _, _ in migrations("postgres")]
    assert numbers == list(range(1, len(numbers) + 1))
