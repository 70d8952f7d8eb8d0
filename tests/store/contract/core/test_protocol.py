"""The store protocol in parts: the core (:class:`Store`) that running workflows needs, and the
parts a store may implement (read model, schedules, alert outbox, retention), each
``runtime_checkable``. The built-in stores implement them all; this folder's suite runs against
a store that implements the core alone (``conftest.CoreOnly``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import cast

import pytest

from statewright.store import SQLiteStore, Store
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import PARTS, FullStore, ReadModel, Schedules

CORE_MOST = 34
"""The core protocol stays under 35 methods: what a new backend writes before anything runs."""


def _methods(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


async def test_every_store_here_has_the_core(store: Store) -> None:
    assert isinstance(store, Store)


def test_the_parts_are_disjoint_and_the_core_is_small() -> None:
    seen: set[str] = set()
    for part in PARTS.values():
        methods = _methods(part)
        assert methods and not methods & seen, part
        seen |= methods
    assert len(_methods(Store)) <= CORE_MOST
    assert _methods(FullStore) == set() and all(issubclass(FullStore, p) for p in PARTS.values())


def test_the_built_in_stores_have_every_part(tmp_path: Path, pg_dsn: str) -> None:
    for store in (SQLiteStore(tmp_path / "parts.db"), PostgresStore(pg_dsn)):
        assert isinstance(store, FullStore)
        assert all(isinstance(store, part) for part in PARTS.values())


async def test_the_core_only_store_has_no_other_part(tmp_path: Path) -> None:
    from tests.store.contract.core.conftest import CoreOnly

    inner = SQLiteStore(tmp_path / "core.db")
    only = CoreOnly(inner)
    assert isinstance(only, Store)
    assert not any(isinstance(only, part) for name, part in PARTS.items() if name != "core")
    assert not isinstance(only, ReadModel) and not isinstance(only, FullStore)


async def test_a_worker_runs_workflows_on_the_core_alone_without_complaint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker on a store without the schedules part fires no schedules, and says nothing
    about it (it logged "firing schedules failed" on every round)."""
    from statewright import Engine, MachineBuilder, Next, Worker, WorkflowType
    from tests.store.contract.core.conftest import CoreOnly

    b = MachineBuilder("greeting")
    b.state("new", initial=True).state("done", terminal=True)
    b.event("greet").transition("greet", "new", "done")

    async def greet(run: object) -> Next:
        return Next("greet")

    inner = SQLiteStore(tmp_path / "core.db")
    store = CoreOnly(inner)
    assert isinstance(store, Store) and not isinstance(store, Schedules)
    # Engine is typed for a store with every part; a worker needs the core and uses the
    # parts it finds.
    async with Engine(
        cast(FullStore, store), [WorkflowType(b.build(), handlers={"new": greet})]
    ) as engine:
        await engine.start("greeting", workflow_id="g-1")
        with caplog.at_level(logging.DEBUG, logger="statewright"):
            assert await Worker(engine).run_until_idle() == 1
            await Worker(engine).run_once()
        row = await store.get_workflow("g-1")
        assert row is not None and row.state == "done"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
