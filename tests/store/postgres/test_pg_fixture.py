"""The test fixtures' pool of PostgreSQL databases (tests/conftest.py, ``PgPool``): a database
given back is empty for the next test, or dropped when a test changed more than its rows."""

from __future__ import annotations

import psycopg
import pytest

from tests.conftest import PgPool, pg_url

WORKFLOW = (
    "INSERT INTO workflows (id, type, machine_version, state, context, version, created_at,"
    " updated_at, state_entered_at) VALUES ('w', 't', 1, 's', '{}', 1, 0, 0, 0)"
)
TRANSITION = (
    "INSERT INTO transitions (workflow_id, version, to_state, event, payload, actor, at)"
    " VALUES ('w', %s, 's', 'e', '{}', 'a', 0) RETURNING seq"
)
INBOX = (
    "INSERT INTO inbox (workflow_id, name, payload, posted_at) VALUES ('w', 'n', '{}', 0)"
    " RETURNING id"
)
DATABASE_OID = "SELECT oid FROM pg_database WHERE datname = current_database()"


def test_a_database_given_back_is_emptied_and_renamed(pg_pool: PgPool, pg_server: str) -> None:
    if not pg_pool.reuse:
        pytest.fail("the suite's own server runs as a superuser: its databases are reused")
    name = pg_pool.take()
    url = pg_url(pg_server, name)
    with psycopg.connect(url, autocommit=True) as conn:
        oid = conn.execute(DATABASE_OID).fetchone()
        migrations = conn.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()
        assert migrations
        conn.execute(WORKFLOW)
        assert [conn.execute(TRANSITION, [v]).fetchone() for v in (1, 2)] == [(1,), (2,)]
        conn.execute("ANALYZE workflows, transitions")
        conn.execute("SELECT nextval(pg_get_serial_sequence('inbox', 'id'))")  # no row written
    left = psycopg.connect(url)  # left behind by the test, in a transaction holding a lock
    left.execute("LOCK TABLE timers")
    free = len(pg_pool.free)
    pg_pool.give_back(name)
    left.close()
    assert len(pg_pool.free) == free + 1
    again = pg_pool.take()
    assert again != name
    with pytest.raises(psycopg.OperationalError):  # the old URL leads nowhere
        psycopg.connect(url).close()
    with psycopg.connect(pg_url(pg_server, again), autocommit=True) as conn:
        assert conn.execute(DATABASE_OID).fetchone() == oid  # the same database, used again
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            " AND tablename <> 'schema_migrations'"
        ).fetchall()
        assert len(tables) > 10
        for (table,) in tables:
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
        assert conn.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall() == (
            migrations
        )
        assert conn.execute(
            "SELECT count(*) FROM pg_statistic WHERE starelid = 'workflows'::regclass"
        ).fetchone() == (0,)
        conn.execute(WORKFLOW)
        assert conn.execute(TRANSITION, [1]).fetchone() == (1,)  # identities restart
        assert conn.execute(INBOX).fetchone() == (1,)
    pg_pool.give_back(again)


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE timers ADD COLUMN extra INTEGER",
        "DROP TRIGGER transitions_append_only_truncate ON transitions",
        "DROP INDEX workflows_due",
        "CREATE TABLE extra (x INTEGER)",
        pytest.param(
            "CREATE OR REPLACE FUNCTION statewright_append_only() RETURNS trigger"
            " LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$",
            id="CREATE OR REPLACE FUNCTION statewright_append_only",
        ),
        "ALTER DATABASE {database} SET work_mem = '8MB'",
        "INSERT INTO schema_migrations SELECT version + 1000, name, applied_at"
        " FROM schema_migrations LIMIT 1",
    ],
)
def test_a_database_whose_schema_changed_is_dropped(
    pg_pool: PgPool, pg_server: str, change: str
) -> None:
    name = pg_pool.take()
    with psycopg.connect(pg_url(pg_server, name), autocommit=True) as conn:
        oid = conn.execute(DATABASE_OID).fetchone()
        conn.execute(change.replace("{database}", name))
    free = list(pg_pool.free)
    pg_pool.give_back(name)
    assert pg_pool.free == free
    with psycopg.connect(pg_server) as admin:
        assert admin.execute("SELECT FROM pg_database WHERE oid = %s", oid).fetchone() is None
