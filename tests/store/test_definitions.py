"""A machine version's definition cannot drift silently, on every store: the engine records
each registered version's fingerprint, refuses to open when one changed (naming the machine),
and with allow_compatible_changes accepts an edit that only adds (issue 14, item 1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from statewright import Engine, Machine, MachineBuilder, ManualClock, SQLiteStore
from statewright.errors import DefinitionChanged
from statewright.store import Store
from statewright.store.postgres import PostgresStore


def order(*, rename: bool = False, extra: bool = False) -> Machine:
    first = "received" if rename else "new"
    b = (
        MachineBuilder("order", version=1)
        .state(first, initial=True)
        .state("done", terminal=True)
        .event("finish")
        .transition("finish", first, "done")
    )
    if extra:
        b = b.state("held").event("hold").event("release")
        b = b.transition("hold", first, "held").transition("release", "held", first)
    return b.build()


@pytest.fixture(params=["sqlite", "postgres"])
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "defs.db")
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn)


async def test_an_edited_definition_is_refused_at_start_up_with_its_name(
    reopen: Callable[[], Store],
) -> None:
    async with Engine(reopen(), [order()], clock=ManualClock()) as engine:
        await engine.start("order", {}, workflow_id="o1")
    async with Engine(reopen(), [order()], clock=ManualClock()):
        pass  # the same definition opens again
    with pytest.raises(DefinitionChanged) as info:
        async with Engine(reopen(), [order(rename=True)], clock=ManualClock()):
            pass
    assert info.value.machine == "order" and info.value.version == 1
    assert "state 'new' was removed or renamed" in str(info.value)
    # Allowing compatible changes does not allow this one.
    with pytest.raises(DefinitionChanged):
        async with Engine(
            reopen(), [order(rename=True)], clock=ManualClock(), allow_compatible_changes=True
        ):
            pass


async def test_an_edit_that_only_adds_needs_the_explicit_option(
    reopen: Callable[[], Store],
) -> None:
    async with Engine(reopen(), [order()], clock=ManualClock()):
        pass
    with pytest.raises(DefinitionChanged, match="only adds"):
        async with Engine(reopen(), [order(extra=True)], clock=ManualClock()):
            pass
    async with Engine(
        reopen(), [order(extra=True)], clock=ManualClock(), allow_compatible_changes=True
    ) as engine:
        await engine.start("order", {}, workflow_id="o2")
    # The extended one is what the store holds now: it opens without the option.
    async with Engine(reopen(), [order(extra=True)], clock=ManualClock()):
        pass
