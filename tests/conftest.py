"""A real PostgreSQL for the whole session, set up by the test command itself.

The server comes from ``STATEWRIGHT_TEST_PG_DSN`` when it is set (a role that may create
databases); otherwise the session starts a throwaway one with ``pgserver`` (PostgreSQL from a
wheel, nothing to install). If neither works the PostgreSQL tests fail, never skip. Migrations
run once into a template database. A test's ``pg_dsn`` (``pg_database()``) is a copy of it
(``CREATE DATABASE ... TEMPLATE``) from a pool of such copies (``PgPool``): after the test
every connection to it is ended, and it is emptied (its rows deleted, identities restarted)
for the next test, or dropped when the test changed its schema or settings. Copying and
dropping a database for every test cost the server more CPU than most tests themselves.

The throwaway server trades durability against a crash of the machine for speed (``fsync``
off: PostgreSQL itself is never killed by a test, it stops cleanly); a server given by
``STATEWRIGHT_TEST_PG_DSN`` is used as it is.

Under pytest-xdist (``scripts/test`` runs the suite on several workers) every fixture here is
per worker: each worker process starts its own throwaway server (or uses the shared one of
``STATEWRIGHT_TEST_PG_DSN``, with a template database and a pool of its own), and has its own
temp dirs and environment; ports are always free ones. A test marked ``alone`` (it measures time or
memory) runs on the quiet worker while the others run at the lowest CPU priority: see "Parallel
runs" below.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import json
import os
import shutil
import tempfile
import time
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
from tests import torture
from tests.cli_forks import CliForkServer
from tests.xdist_zygote import Zygote, plain_popen

PG_DSN_ENV = "STATEWRIGHT_TEST_PG_DSN"
T = TypeVar("T")
THROWAWAY_SETTINGS = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"}
"""Set on the suite's own server only: a test database is worth nothing after the run, and the
suite creates and drops many (with these, in 0.1 s each instead of 0.7 s here)."""
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


FINGERPRINT = """
WITH ns AS (SELECT oid FROM pg_namespace
  WHERE nspname !~ '^pg_' AND nspname <> 'information_schema'),
rel AS (SELECT oid FROM pg_class WHERE relnamespace IN (SELECT oid FROM ns)),
parts(part) AS (
  SELECT format('schema %s %s', nspname, nspacl) FROM pg_namespace
    WHERE oid IN (SELECT oid FROM ns)
  UNION ALL SELECT format('rel %s %s %s %s %s %s', oid::regclass, relkind, relpersistence,
    reloptions, relacl, relrowsecurity) FROM pg_class WHERE oid IN (SELECT oid FROM rel)
  UNION ALL SELECT format('col %s %s %s %s %s %s %s %s', attrelid::regclass, attnum, attname,
    format_type(atttypid, atttypmod), attnotnull, attidentity, attgenerated,
    pg_get_expr(adbin, adrelid)) FROM pg_attribute LEFT JOIN pg_attrdef
    ON (adrelid, adnum) = (attrelid, attnum)
    WHERE attrelid IN (SELECT oid FROM rel) AND attnum > 0 AND NOT attisdropped
  UNION ALL SELECT format('index %s %s', pg_get_indexdef(indexrelid), indisvalid)
    FROM pg_index WHERE indrelid IN (SELECT oid FROM rel)
  UNION ALL SELECT format('constraint %s %s %s', conrelid::regclass, conname,
    pg_get_constraintdef(oid)) FROM pg_constraint WHERE connamespace IN (SELECT oid FROM ns)
  UNION ALL SELECT format('trigger %s %s', pg_get_triggerdef(oid), tgenabled) FROM pg_trigger
    WHERE tgrelid IN (SELECT oid FROM rel) AND NOT tgisinternal
  UNION ALL SELECT CASE prokind WHEN 'a' THEN oid::regprocedure::text
    ELSE pg_get_functiondef(oid) END FROM pg_proc WHERE pronamespace IN (SELECT oid FROM ns)
  UNION ALL SELECT format('type %s %s', oid::regtype, typtype) FROM pg_type
    WHERE typnamespace IN (SELECT oid FROM ns)
  UNION ALL SELECT format('enum %s %s', enumtypid::regtype, enumlabel) FROM pg_enum
  UNION ALL SELECT pg_get_ruledef(oid) FROM pg_rewrite WHERE ev_class IN (SELECT oid FROM rel)
  UNION ALL SELECT format('policy %s %s %s %s', polrelid::regclass, polname,
    pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid)) FROM pg_policy
  UNION ALL SELECT format('extension %s %s', extname, extversion) FROM pg_extension
  UNION ALL SELECT format('event trigger %s %s', evtname, evtenabled) FROM pg_event_trigger
  UNION ALL SELECT format('large objects %s', count(*)) FROM pg_largeobject_metadata
  UNION ALL SELECT format('setting %s %s', setrole, setconfig) FROM pg_db_role_setting
    WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL SELECT format('database %s %s %s', datconnlimit, datallowconn, datacl)
    FROM pg_database WHERE datname = current_database()
  {seeded}
)
SELECT md5(string_agg(part, E'\\n' ORDER BY part)) FROM parts
"""
"""What a test may change in a database besides its rows: its schema (the catalog rows of its
own schemas, by name), its settings, and the rows the migrations put in it (``{seeded}``)."""

WRITTEN = """
SELECT oid::regclass::text FROM pg_class t WHERE oid = ANY(%s::regclass[])
  AND (pg_relation_size(oid) > 0 OR EXISTS (
    SELECT FROM pg_depend JOIN pg_class s ON s.oid = objid WHERE refobjid = t.oid
      AND CASE s.relkind WHEN 'S' THEN pg_sequence_last_value(s.oid) END IS NOT NULL))
"""
"""The tables (of those given) that a test wrote to: the template's are empty files, and their
identity sequences unused."""


def _new_test_database_name() -> str:
    return f"statewright_test_{uuid.uuid4().hex[:10]}"


class PgPool:
    """The migrated databases of one worker's server, used again by test after test.

    Copying the template and dropping the copy costs the server 125 ms of CPU per test here,
    and every backend of a new database rebuilds its catalog caches: a test's store opens and
    closes for 204 ms of server CPU on a fresh copy, 13 ms on a database used before. So
    ``give_back`` empties a database for the next test instead, after ending every connection
    to it: every table the test wrote to (``WRITTEN``) is truncated (as a superuser, with
    ``session_replication_role = replica``: ``transitions`` refuses TRUNCATE with a trigger
    otherwise), its identities restarted, and the planner statistics of all are deleted; the
    rows the migrations insert (``schema_migrations``) stay as the template has them. A
    database whose schema, settings or migration rows are no longer the template's
    (``FINGERPRINT``) is dropped instead, and so is one whose emptying fails for any reason.
    Giving one back costs the server about 25 ms of CPU, and 4 ms more per table written.
    Each use renames it: a client a test left behind finds nothing there, as after a DROP.
    A role that is not a superuser (``STATEWRIGHT_TEST_PG_DSN``) may not empty the tables
    through their triggers: then every database is created and dropped as before.
    """

    def __init__(self, dsn: str, template: str) -> None:
        self.dsn, self.template = dsn, template
        self.free: list[str] = []
        with psycopg.connect(pg_url(dsn, template), autocommit=True) as conn:
            self.reuse = conn.execute("SHOW is_superuser").fetchone() == ("on",)
            tables = [  # names as regclass quotes them
                row[0]
                for row in conn.execute(
                    "SELECT oid::regclass::text FROM pg_class WHERE relkind IN ('r', 'p')"
                    " AND relnamespace IN (SELECT oid FROM pg_namespace"
                    "  WHERE nspname !~ '^pg_' AND nspname <> 'information_schema')"
                    " ORDER BY 1"
                )
            ]
            seeded = [
                table
                for table in tables
                if conn.execute(f"SELECT EXISTS (SELECT FROM {table})").fetchone() == (True,)
            ]
            rows = "".join(f"UNION ALL SELECT format('{t} %s', t) FROM {t} t " for t in seeded)
            self.fingerprint_sql = FINGERPRINT.format(seeded=rows)
            self.fingerprint = conn.execute(self.fingerprint_sql).fetchone()
        self.emptied = [table for table in tables if table not in seeded]

    def take(self) -> str:
        """The name of an empty, migrated database of the caller's own."""
        if self.free:
            return self.free.pop()
        name = _new_test_database_name()
        create_database(self.dsn, name, self.template)
        return name

    def give_back(self, name: str) -> None:
        """Empty the database for the next test, or drop it (see the class)."""
        fresh = _new_test_database_name()
        try:
            if not self.reuse:
                raise LookupError("not a superuser")
            with psycopg.connect(self.dsn, autocommit=True) as admin:
                # What the test left connected (a store, a killed worker's backend, autovacuum):
                # ended, and gone, as DROP DATABASE ... WITH (FORCE) would.
                deadline = time.monotonic() + 10
                while admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()",
                    [name],
                ).fetchone() != (0,):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"connections to {name} do not end")
                    time.sleep(0.005)
                # Fails if anything is still there (a prepared transaction, say).
                admin.execute(
                    sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                        sql.Identifier(name), sql.Identifier(fresh)
                    )
                )
            with psycopg.connect(pg_url(self.dsn, fresh)) as conn:
                if conn.execute(self.fingerprint_sql).fetchone() != self.fingerprint:
                    raise LookupError("not the template's schema any more")
                # Only the tables the test wrote to (truncating costs 4 ms of CPU each).
                written = [row[0] for row in conn.execute(WRITTEN, [self.emptied])]
                conn.execute("SET LOCAL session_replication_role = replica")
                if written:
                    conn.execute(f"TRUNCATE {', '.join(written)} RESTART IDENTITY")
                conn.execute(
                    "DELETE FROM pg_statistic WHERE starelid = ANY(%s::regclass[])", [self.emptied]
                )
        except (psycopg.Error, LookupError, TimeoutError):
            _drop(self.dsn, name)
            _drop(self.dsn, fresh)
            return
        self.free.append(fresh)


@pytest.fixture(scope="session")
def pg_pool(pg_server: str, pg_template: str) -> Iterator[PgPool]:
    """This worker's migrated databases, emptied between tests (see ``PgPool``)."""
    pool = PgPool(pg_server, pg_template)
    yield pool
    for name in pool.free:
        _drop(pg_server, name)


@pytest.fixture
def pg_database(pg_server: str, pg_pool: PgPool) -> Iterator[Callable[..., str]]:
    """Databases for one test: ``pg_database()`` an empty, migrated one from the pool (given
    back after the test), ``pg_database(template="template0")`` an empty one without
    migrations, created for the test and dropped after it. Returns their URLs; any connection
    the test left open to them is ended after it."""
    taken: list[str] = []
    created: list[str] = []

    def create(template: str = pg_pool.template) -> str:
        if template == pg_pool.template:
            taken.append(pg_pool.take())
            return pg_url(pg_server, taken[-1])
        created.append(_new_test_database_name())
        create_database(pg_server, created[-1], template)
        return pg_url(pg_server, created[-1])

    yield create
    for name in taken:
        pg_pool.give_back(name)
    for name in created:
        _drop(pg_server, name)


@pytest.fixture
def pg_dsn(pg_database: Callable[..., str]) -> str:
    """URL of an empty, migrated PostgreSQL database of this test's own."""
    return pg_database()


@pytest.fixture(scope="session")
def cli_forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliForkServer]:
    """This worker's fork server of ``statewright`` command lines (tests/cli_forks.py):
    ``cli_forks.popen(argv, log, env=..., cwd=...)`` and ``cli_forks.run(argv, folder, ...)``
    instead of ``python -m statewright.cli`` in a new process, for a twentieth of the CPU."""
    with CliForkServer(tmp_path_factory.mktemp("cli-forks") / "server.log") as server:
        yield server


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
# ``scripts/test`` runs the suite on several worker processes (``-n``, ``--dist loadgroup``).
#
# A test marked ``alone`` measures time against a bound (or memory, or the latency of a probe):
# other tests competing with it for the CPU of a 2-core machine would make it fail for nothing.
# The run's first worker, ``gw0``, the quiet one, runs these tests first, one after the other,
# and meanwhile every other worker runs at the lowest CPU priority, and so does what it starts
# (``_lowest_priority``: nice 19, and a cgroup of the lowest weight where the machine lets us
# make one, see ``_background_cgroup``). The quiet worker's tests get the CPU as soon as they
# want it; the rest of the run gets what they leave, which is most of it, as they mostly
# wait. Once the ``alone`` tests are done, the quiet worker lowers its own priority and takes
# ordinary tests like the others. Before, such a test held a lock that kept every other test
# out while it ran: the last 35 s of a run went by on one busy core, the alone tests in turn.
#
# A module marked ``one_worker`` sets up something costly once for all its tests (a server, a
# filled store, in a module-scoped fixture): its tests run on one worker, which sets it up
# once instead of once per worker. ``xdist_group`` marks group tests as pytest-xdist documents.
#
# pytest-xdist's own ``loadgroup`` cannot group under pytest 9.2 (it renames the items'
# ``_nodeid``, which pytest no longer reads), so the run's controller schedules by the groups
# (and the ``alone`` tests) its workers wrote down while collecting (``GroupScheduling``).

ALONE = "alone"
ONE_WORKER = "one_worker"
QUIET_WORKER = "gw0"
RUN_DIR = "statewright_run_dir"
"""Key, in ``workerinput``, of the folder the controller and the workers of one run share."""
QUIET = "statewright_quiet"
"""Key, in ``workerinput``: whether the worker is the quiet one (absent: no quiet worker, as
when the run is not scheduled by ``GroupScheduling``)."""
BACKGROUND = "statewright_background"
"""Key, in ``workerinput``: the run's background cgroup, or None (``_background_cgroup``)."""
LOWEST_PRIORITY = 19
CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")
run_dir_key = pytest.StashKey[Path]()
cgroup_key = pytest.StashKey[str | None]()


def _distributing(config: pytest.Config) -> bool:
    """This process is the controller of a pytest-xdist run that ``GroupScheduling`` schedules."""
    return (
        config.pluginmanager.hasplugin("xdist")
        and not hasattr(config, "workerinput")
        and config.getoption("dist", "no") in ("load", "loadgroup")
    )


def _background_cgroup(config: pytest.Config) -> str | None:
    """A CPU cgroup (v1) of the lowest weight for the run's background work, where the machine
    lets us make one (root, a writable ``cpu`` hierarchy); removed at the end of the run.

    Needed as well as nice values: Linux schedules by groups first (one per session, when
    ``kernel.sched_autogroup_enabled`` is on, the default of most distributions), and a nice
    value only counts against the processes of the same group. PostgreSQL's backends each start
    a session of their own (``setsid``), so do Chromium's processes: at nice 19 they still had
    a whole group's share each, and a quiet test's 100 ms bound failed once. A cgroup holds
    whatever its processes start, sessions or not, and groups outside the root cgroup are not
    autogrouped.
    """
    folder = CPU_CGROUPS / f"statewright-test-{os.getpid()}"
    try:
        folder.mkdir()
        (folder / "cpu.shares").write_text("2")
    except OSError:
        with contextlib.suppress(OSError):
            folder.rmdir()
        return None
    config.add_cleanup(lambda: _remove_cgroup(folder))
    return str(folder)


def _remove_cgroup(folder: Path) -> None:
    """Remove the run's cgroup, moving to the root group whatever still runs in it."""
    for _ in range(100):
        with contextlib.suppress(OSError):
            for pid in (folder / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (CPU_CGROUPS / "cgroup.procs").write_text(pid)
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # a process on its way out: still counted
            time.sleep(0.05)


def _lowest_priority(workerinput: dict[str, Any]) -> None:
    """Put this process, and what it starts from now on, at the lowest CPU priority: into the
    run's background cgroup if there is one (see ``_background_cgroup``), and at nice 19, which
    needs no privilege (where it is refused, the process keeps its priority)."""
    cgroup = workerinput.get(BACKGROUND)
    if cgroup:
        with contextlib.suppress(OSError):
            (Path(cgroup) / "cgroup.procs").write_text(str(os.getpid()))
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, LOWEST_PRIORITY)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    workerinput: dict[str, Any] | None = getattr(item.config, "workerinput", None)
    if workerinput is None or workerinput.get(QUIET) is not True or _alone(item):
        return
    if os.getpriority(os.PRIO_PROCESS, 0) != LOWEST_PRIORITY:
        # The quiet worker's ``alone`` tests are done: it takes ordinary ones, as the others do.
        _lowest_priority(workerinput)


def pytest_configure(config: pytest.Config) -> None:
    # The hypothesis profile of the run: the property tests' full counts under --torture only
    # (tests/torture.py); loaded before any test module (and its @settings) is imported.
    torture.configure(config)
    if _distributing(config):
        folder = Path(tempfile.mkdtemp(prefix="statewright-xdist-"))
        config.stash[run_dir_key] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
        config.stash[cgroup_key] = _background_cgroup(config)
        _fork_workers(config, folder)
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None and workerinput.get(QUIET) is False:
        _lowest_priority(workerinput)


def _fork_workers(config: pytest.Config, folder: Path) -> None:
    """The workers of ``-n N`` forked from a zygote that has imported their libraries once
    (tests/xdist_zygote.py): 4.3 instead of 8.8 CPU-s each before its first test. xdist has
    made ``-n N`` into N ``popen`` specs already (``--tx``, read when the workers start); a
    ``--tx`` of the user's own is left alone, and so is ``STATEWRIGHT_TEST_ZYGOTE=0``."""
    tx: list[str] = config.getoption("tx")
    if not config.getoption("numprocesses") or not plain_popen(tx):
        return
    if os.environ.get("STATEWRIGHT_TEST_ZYGOTE") == "0":
        return
    # The modules pytest rewrites the asserts of by name (``-p``): not for the zygote to import.
    marked = sorted(getattr(config.pluginmanager.rewrite_hook, "_must_rewrite", ()))
    try:
        zygote = Zygote(folder, marked)
    except OSError:  # no unix socket here (or its path too long): fresh workers
        return
    config.add_cleanup(zygote.stop)
    config.option.tx = zygote.specs(len(tx))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    if run_dir_key in node.config.stash:
        node.workerinput[RUN_DIR] = str(node.config.stash[run_dir_key])
        node.workerinput[QUIET] = node.gateway.id == QUIET_WORKER
        node.workerinput[BACKGROUND] = node.config.stash[cgroup_key]


def _group(item: pytest.Item) -> str | None:
    names = {
        str(m.args[0] if m.args else m.kwargs.get("name", "default"))
        for m in item.iter_markers("xdist_group")
    }
    if names:
        return "_".join(sorted(names))
    if item.get_closest_marker(ONE_WORKER) is not None:
        return item.nodeid.split("::")[0]
    return None


def _alone(item: pytest.Item) -> bool:
    return item.get_closest_marker(ALONE) is not None


def _run_order(item: pytest.Item) -> int:
    if _alone(item):
        return 2
    return 1 if _group(item) is None else 0


def _interleaved(items: list[pytest.Item]) -> list[pytest.Item]:
    """The modules of each test folder (tests/acceptance, tests/unit, ...) taken in turn, each
    module's tests together: in collection order, the folders' tests came one folder at a
    time, and while the acceptance tests' processes waited (a lease to lapse, a window in which
    nothing may happen) every worker waited with them, the cores idle."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    folders: dict[str, list[list[pytest.Item]]] = {}
    for module, tests in modules.items():
        folders.setdefault(module.split("/")[1] if "/" in module else "", []).append(tests)
    queues = list(folders.values())
    ordered: list[pytest.Item] = []
    while queues:
        for queue in queues:
            ordered += queue.pop(0)
        queues = [queue for queue in queues if queue]
    return ordered


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is None or RUN_DIR not in workerinput:
        return
    # Every worker collects, and orders, the same way: the groups (one unit of work each, the
    # longest ones) first, then the modules of the test folders taken in turn (see
    # ``_interleaved``); the ``alone`` ones (the quiet worker's) last.
    items.sort(key=_run_order)
    plain = [i for i, item in enumerate(items) if _run_order(item) == 1]
    if plain:
        items[plain[0] : plain[-1] + 1] = _interleaved(items[plain[0] : plain[-1] + 1])
    written = {
        "groups": {item.nodeid: group for item in items if (group := _group(item)) is not None},
        "alone": [item.nodeid for item in items if _alone(item)],
    }
    folder = Path(workerinput[RUN_DIR])
    done = folder / f"collected-{workerinput['workerid']}.json"
    writing = done.with_suffix(".tmp")
    writing.write_text(json.dumps(written))
    writing.replace(done)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The garbage collector cost a tenth of a worker's CPU, mostly in full collections that
    walked again and again what lives until the end: everything alive once the tests are
    collected (modules, test items, the libraries' tables: some 275,000 objects) is moved out
    of its sight (``gc.freeze``), and it runs after 20,000 allocations instead of 700 (as
    mypy does for itself), when most of a test's objects are gone already. Tests that need a
    collection at a given point call ``gc.collect()``."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if run_dir_key not in config.stash:
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """A group's tests are one unit of work, handed to one worker; every other test is a
        unit of its own. The units go out in the order of the collection (see
        ``pytest_collection_modifyitems``), the ``alone`` ones to the quiet worker only, before
        any other; the others to any worker, the quiet one once it has no ``alone`` one left.
        When the quiet worker is gone (it crashed and was replaced), any worker takes them."""

        def __init__(self, config: pytest.Config, log: Any, folder: Path) -> None:
            config.option.loadscopereorder = False  # not the largest groups first
            super().__init__(config, log)
            self.folder = folder
            self.groups: dict[str, str] | None = None
            self.alone: set[str] = set()
            self.alone_units: list[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # every worker has collected (and written) by now
                self.groups = {}
                for written in sorted(self.folder.glob("collected-*.json")):
                    collected = json.loads(written.read_text())
                    self.groups.update(collected["groups"])
                    self.alone.update(collected["alone"])
            return self.groups.get(nodeid, nodeid)

        def _quiet(self, node: Any) -> bool:
            return bool(node.workerinput.get(QUIET))

        def _unit_for(self, node: Any) -> str | None:
            """The first unit of work ``node`` may take, if any."""
            if self.alone_units is None:  # the queue is complete by now (``schedule``)
                self.alone_units = [
                    scope
                    for scope, unit in self.workqueue.items()
                    if not self.alone.isdisjoint(unit)
                ]
            if self._quiet(node) or not any(self._quiet(n) for n in self.nodes):
                for scope in self.alone_units:
                    if scope in self.workqueue:
                        return str(scope)
            for scope in self.workqueue:  # the ``alone`` units come last: found at once
                if scope not in self.alone_units:
                    return str(scope)
            return None

        def _assign_work_unit(self, node: Any) -> None:
            scope = self._unit_for(node)
            if scope is None:
                node.shutdown()  # none of its kind left: none will come
                return
            unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = unit
            collection = self.registered_collections[node]
            node.send_runtest_some(
                [collection.index(nodeid) for nodeid, done in unit.items() if not done]
            )

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if self._unit_for(node) is None:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 2:
                return
            self._assign_work_unit(node)

    return GroupScheduling(config, log, config.stash[run_dir_key])
