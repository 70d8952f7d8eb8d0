"""A real PostgreSQL for the whole session, set up by the test command itself.

The server comes from ``STATEWRIGHT_TEST_PG_DSN`` when it is set (a role that may create
databases); otherwise the session starts a throwaway one with ``pgserver`` (PostgreSQL from a
wheel, nothing to install). If neither works the PostgreSQL tests fail, never skip. Migrations
run once into a template database, and each test gets a fresh copy of it
(``CREATE DATABASE ... TEMPLATE``: fast and isolated), dropped afterwards.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from statewright.store.postgres import PostgresStore

PG_DSN_ENV = "STATEWRIGHT_TEST_PG_DSN"
T = TypeVar("T")


def pg_url(dsn: str, dbname: str) -> str:
    """``dsn`` pointed at another database, as a ``postgresql://`` URL (``store_from_url``)."""
    params = {k: v for k, v in conninfo_to_dict(dsn).items() if k != "dbname" and v is not None}
    return f"postgresql:///{quote(dbname)}?{urlencode(params)}"


def run_async(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from sync code, even inside a running event loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, fn()).result()


@pytest.fixture(scope="session")
def pgserver_env() -> Iterator[None]:
    """A private XDG_RUNTIME_DIR while pgserver is used, when the environment has none.

    pgserver keeps its lock file there, and platformdirs warns without one (an error under
    ``filterwarnings = error``) as soon as pgserver is imported.
    """
    if os.environ.get("XDG_RUNTIME_DIR"):
        yield
        return
    path = tempfile.mkdtemp(prefix="statewright-xdg-")
    os.environ["XDG_RUNTIME_DIR"] = path
    try:
        yield
    finally:
        del os.environ["XDG_RUNTIME_DIR"]
        shutil.rmtree(path, ignore_errors=True)


def start_pgserver(pgdata: Path) -> Any:
    """Start a PostgreSQL server on ``pgdata`` (created if missing); needs ``pgserver_env``."""
    from pgserver.postgres_server import get_server

    return get_server(pgdata, cleanup_mode="stop")


def stop_pgserver(server: Any) -> None:
    server.cleanup()
    # Stopped already: at exit pgserver would only take its lock again (re-creating the file).
    atexit.unregister(server._cleanup)


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """DSN of a PostgreSQL server for this session, with the right to create databases."""
    dsn = os.environ.get(PG_DSN_ENV)
    if dsn:
        yield dsn
        return
    request.getfixturevalue("pgserver_env")
    # Not under pytest's basetemp: pgserver opens the path to its server user (when run as
    # root), and another pytest session would close it again.
    base = Path(tempfile.mkdtemp(prefix="statewright-pg-"))
    try:
        server = start_pgserver(base / "data")
    except Exception as exc:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(
            f"could not start a throwaway PostgreSQL with pgserver: {exc!r}; "
            f"install the test extra or set {PG_DSN_ENV} to a server's DSN",
            pytrace=False,
        )
    try:
        yield server.get_uri()
    finally:
        stop_pgserver(server)
        shutil.rmtree(base, ignore_errors=True)


def _admin(dsn: str, statement: sql.Composed) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)


def _drop(dsn: str, name: str) -> None:
    """Drop a database, ending any connection a test left open to it."""
    _admin(dsn, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def pg_template(pg_server: str) -> Iterator[str]:
    """A database with every migration applied, copied for each test."""
    name = f"statewright_tmpl_{uuid.uuid4().hex[:10]}"
    _admin(pg_server, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    async def migrate() -> None:
        store = PostgresStore(pg_url(pg_server, name), min_size=1, max_size=1)
        await store.open()
        await store.close()

    run_async(migrate)
    yield name
    _drop(pg_server, name)


@pytest.fixture
def pg_database(pg_server: str, pg_template: str) -> Iterator[Callable[..., str]]:
    """Creates databases for one test: ``pg_database()`` a migrated copy of the template,
    ``pg_database(template="template0")`` an empty one. Returns their URLs; all are dropped
    after the test (with any connection a test left open)."""
    names: list[str] = []

    def create(template: str = pg_template) -> str:
        name = f"statewright_test_{uuid.uuid4().hex[:10]}"
        _admin(
            pg_server,
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            ),
        )
        names.append(name)
        return pg_url(pg_server, name)

    yield create
    for name in names:
        _drop(pg_server, name)


@pytest.fixture
def pg_dsn(pg_database: Callable[..., str]) -> str:
    """URL of a fresh, migrated PostgreSQL database of this test's own."""
    return pg_database()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--torture",
        action="store_true",
        default=False,
        help="run the long SIGKILL torture of tests/acceptance (hundreds of kills per run); "
        "also enabled by STATEWRIGHT_TORTURE=1",
    )
