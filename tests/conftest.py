"""A real PostgreSQL for the whole session, set up by the test command itself.

The server comes from ``STATEWRIGHT_TEST_PG_DSN`` when it is set (a role that may create
databases); otherwise the session starts a throwaway one with ``pgserver`` (PostgreSQL from a
wheel, nothing to install). If neither works the PostgreSQL tests fail, never skip. Migrations
run once into a template database, and each test gets a fresh copy of it
(``CREATE DATABASE ... TEMPLATE``: fast and isolated), dropped afterwards.

The throwaway server trades durability against a crash of the machine for speed (``fsync``
off: PostgreSQL itself is never killed by a test, it stops cleanly); a server given by
``STATEWRIGHT_TEST_PG_DSN`` is used as it is.

Under pytest-xdist (``scripts/test`` runs the suite on several workers) every fixture here is
per worker: each worker process starts its own throwaway server (or uses the shared one of
``STATEWRIGHT_TEST_PG_DSN``, with a template database of its own), and has its own temp dirs
and environment; ports are always free ones. A test marked ``alone`` (it measures time or
memory) runs while no other test does: see ``pytest_runtest_protocol`` below.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Coroutine, Generator, Iterator
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
THROWAWAY_SETTINGS = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"}
"""Set on the suite's own server only: a test database is worth nothing after the run, and each
test creates and drops one (with these, in 0.1 s instead of 0.7 s here)."""
_FILE_COPY: set[str] = set()
"""Servers (DSNs) on which test databases are copied as files: faster than WAL-logging every
page of the template once fsync is off (the suite's own server, PostgreSQL 15+)."""


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
        dsn = server.get_uri()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for name, value in THROWAWAY_SETTINGS.items():
                conn.execute(
                    sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        sql.Identifier(name), sql.Literal(value)
                    )
                )
            conn.execute("SELECT pg_reload_conf()")
        _FILE_COPY.add(dsn)
        yield dsn
    finally:
        stop_pgserver(server)
        shutil.rmtree(base, ignore_errors=True)


def _admin(dsn: str, statement: sql.Composed) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)


def create_database(dsn: str, name: str, template: str) -> None:
    """``CREATE DATABASE name TEMPLATE template`` on the server of ``dsn``."""
    statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
        sql.Identifier(name), sql.Identifier(template)
    )
    if dsn in _FILE_COPY:
        statement += sql.SQL(" STRATEGY FILE_COPY")
    _admin(dsn, statement)


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
        create_database(pg_server, name, template)
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


# -- Parallel runs (pytest-xdist) -----------------------------------------------------------
#
# A test marked ``alone`` measures time or memory against a bound: other tests running at the
# same time on this 2-core machine would make it fail for nothing. Under xdist it runs while no
# other test does: every test holds a lock file shared by the run's workers, shared by ordinary
# tests and exclusive by an ``alone`` one. A test waiting for it exclusively first takes a
# turnstile that ordinary tests pass on their way in, so that it is not starved by them.
# ``scripts/test`` also puts the ``alone`` tests on one worker (``--dist loadgroup``), one after
# the other. Without xdist every test runs alone anyway.

ALONE = "alone"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if item.get_closest_marker(ALONE) is not None:
            item.add_marker(pytest.mark.xdist_group(ALONE))


class RunLock:
    """The lock of one xdist run (its workers share the run's base temp dir)."""

    def __init__(self, folder: Path) -> None:
        self.gate = os.open(folder / "alone.gate", os.O_RDWR | os.O_CREAT, 0o600)
        self.lock = os.open(folder / "alone.lock", os.O_RDWR | os.O_CREAT, 0o600)

    @contextlib.contextmanager
    def held(self, alone: bool) -> Iterator[None]:
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(self.gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self.lock, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(self.gate, fcntl.LOCK_UN)


run_lock_key = pytest.StashKey[RunLock]()


def _run_lock(config: pytest.Config) -> RunLock | None:
    if not hasattr(config, "workerinput"):  # not an xdist worker
        return None
    lock = config.stash.get(run_lock_key, None)
    if lock is None:
        # Each worker's base temp dir is <the run's base temp dir>/popen-gwN.
        run_folder = config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
        lock = config.stash[run_lock_key] = RunLock(run_folder)
    return lock


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    lock = _run_lock(item.config)
    if lock is None:
        return (yield)
    with lock.held(item.get_closest_marker(ALONE) is not None):
        return (yield)
