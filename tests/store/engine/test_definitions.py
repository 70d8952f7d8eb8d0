"""A machine version's definition cannot drift silently, on every store: the engine records
each registered version's fingerprint, refuses to open when one changed (naming the machine),
and with allow_compatible_changes accepts an edit that only adds (issue 14, item 1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from statewright import Engine, Machine, MachineBuilder, ManualClock, SQLiteStore
from statewright.errors import DefinitionChanged
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store


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


def shop(version: int) -> Machine:
    """v1: new -> done; v2 renamed "new" to "received" and gave it a reminder timer."""
    first = "new" if version == 1 else "received"
    after = {} if version == 1 else {3600: "remind"}
    b = (
        MachineBuilder("shop", version=version)
        .state(first, initial=True, after=after)
        .state("done", terminal=True)
        .event("finish")
        .transition("finish", first, "done")
    )
    if version == 2:
        b = b.event("remind").transition("remind", first, first)
    return b.build()


async def test_migrate_moves_live_workflows_as_logged_transitions_that_replay(
    reopen: Callable[[], Store],
) -> None:
    from statewright.errors import UnknownState

    async with Engine(reopen(), [shop(1)], clock=ManualClock()) as old:
        for i in range(3):
            await old.start("shop", {"n": i}, workflow_id=f"s{i}")
        await old.send("s2", "finish")  # a finished one stays where it is
    async with Engine(reopen(), [shop(1), shop(2)], clock=ManualClock()) as engine:
        with pytest.raises(UnknownState, match="'new'") as info:
            await engine.migrate("shop", 1, 2, {}, actor="ops", reason="rename")
        assert info.value.details["state"] == "new"
        assert (await engine.get("s0")).machine_version == 1  # the bad map changed nothing
        planned = await engine.migrate(
            "shop", 1, 2, {"new": "received"}, actor="ops", reason="rename", dry_run=True
        )
        assert sorted(planned.plan) == [("s0", "new", "received"), ("s1", "new", "received")]
        assert (await engine.get("s0")).version == 1  # a dry run changes nothing
        done = await engine.migrate(
            "shop", 1, 2, {"new": "received"}, actor="ops", reason="rename"
        )
        assert sorted(done.moved) == ["s0", "s1"] and done.busy == []
        row = await engine.get("s0")
        assert (row.machine_version, row.state, row.version) == (2, "received", 2)
        assert [t.event for t in await engine.timers("s0")] == ["remind"]  # v2's timers
        last = (await engine.history("s0"))[-1]
        assert (last.event, last.actor, last.from_state, last.to_state) == (
            "$migrate",
            "ops",
            "new",
            "received",
        )
        assert last.payload["map"] == {"new": "received"}
        await engine.check("s0")  # v1's step checked against v1, the rest against v2
        assert (await engine.get("s2")).machine_version == 1
        await engine.send("s1", "finish")
        await engine.check("s1")
    # With only v2 registered, the migrated logs still replay (v1's steps: order only).
    async with Engine(reopen(), [shop(2)], clock=ManualClock()) as engine:
        await engine.check("s0")


async def test_engines_opening_at_once_all_record_and_agree(reopen: Callable[[], Store]) -> None:
    """Workers start together: each records (or finds) the definition; none fails. (On
    PostgreSQL an INSERT that waited for another opener's commit sees its row only in a new
    statement: this once crashed a worker at start-up.)"""
    import asyncio

    async def open_once() -> None:
        async with Engine(reopen(), [order()], clock=ManualClock()):
            pass

    await asyncio.gather(*(open_once() for _ in range(8)))
