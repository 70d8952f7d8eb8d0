"""Whether a state has work does not depend on which process wrote the row (issue 22, item 7).

A process that registers a type without its handlers (a bare Machine, a definition file given
to ``statewright --app machine.yaml serve``, a client) starts workflows, sends them events,
posts inputs, forks, moves and fires schedule ticks; a separate engine with the handlers (its
Worker) runs them to the end. A row such a writer leaves in a state without a handler is
claimed once and left until its next timer, input or event: no worker spins on it.
On every store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from statewright import (
    Engine,
    Machine,
    MachineBuilder,
    ManualClock,
    Next,
    Run,
    SQLiteStore,
    Worker,
    WorkflowType,
)
from statewright.errors import DefinitionError
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store

T0 = 1_800_000_000.0


def parcel() -> Machine:
    """received (handler) -> awaiting_approval (no handler; on_hold a day at most) -> packing
    (handler: waits for a label in the inbox) -> shipping (handler) -> shipped."""
    return (
        MachineBuilder("parcel")
        .state("received", initial=True)
        .state("awaiting_approval")
        .state("on_hold", after={3600: "release"})
        .state("packing")
        .state("shipping")
        .state("shipped", terminal=True)
        .event("checked")
        .event("approve")
        .event("hold")
        .event("release")
        .event("packed")
        .event("sent")
        .transition("checked", "received", "awaiting_approval")
        .transition("approve", "awaiting_approval", "packing")
        .transition("hold", "awaiting_approval", "on_hold")
        .transition("release", "on_hold", "awaiting_approval")
        .transition("packed", "packing", "shipping")
        .transition("sent", "shipping", "shipped")
        .build()
    )


async def check(run: Run) -> str:
    return "checked"


async def pack(run: Run) -> Next | None:
    label = await run.next_input("label")
    if label is None:
        return None  # idle: an input wakes it
    return Next("packed", context={"label": label["code"]})


async def ship(run: Run) -> str:
    return "sent"


def runner() -> WorkflowType:
    return WorkflowType(parcel(), {"received": check, "packing": pack, "shipping": ship})


@pytest.fixture(params=["sqlite", "postgres"])
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "shared.db")
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn)


@pytest.fixture
async def pair(reopen: Callable[[], Store]) -> AsyncIterator[tuple[Engine, Engine, ManualClock]]:
    """A client engine with the bare machine, and a worker's engine with the handlers, on one
    database and one clock."""
    clock = ManualClock(T0)
    async with (
        Engine(reopen(), [parcel()], clock=clock) as client,
        Engine(reopen(), [runner()], clock=clock) as served,
    ):
        yield client, served, clock


async def test_a_workflow_a_bare_client_starts_and_drives_is_run_by_the_worker(
    pair: tuple[Engine, Engine, ManualClock],
) -> None:
    client, served, _ = pair
    worker = Worker(served, concurrency=4)
    await client.start("parcel", {"n": 1}, workflow_id="p1")
    await worker.run_until_idle()
    row = await client.get("p1")
    assert row.state == "awaiting_approval" and row.next_due_at is None

    # An event into a state with a handler: run; the handler waits for its input.
    await client.send("p1", "approve", actor="maria")
    await worker.run_until_idle()
    row = await client.get("p1")
    assert row.state == "packing" and row.next_due_at is None  # idle, waiting for the label

    # The input wakes it, though the client does not know the state has a handler.
    await client.post_input("p1", "label", {"code": "L-1"})
    await worker.run_until_idle()
    row = await client.get("p1")
    assert row.state == "shipped" and row.context == {"n": 1, "label": "L-1"}
    log = [(t.event, t.actor) for t in await client.history("p1")]
    assert log == [
        ("$start", "system"),
        ("checked", worker.actor),
        ("approve", "maria"),
        ("packed", worker.actor),
        ("sent", worker.actor),
    ]


async def test_a_state_without_a_handler_is_claimed_once_then_waits_for_its_timer(
    pair: tuple[Engine, Engine, ManualClock],
) -> None:
    client, served, clock = pair
    worker = Worker(served, concurrency=4)
    await client.start("parcel", {}, workflow_id="p2")
    await worker.run_until_idle()
    held = (await client.send("p2", "hold", actor="maria")).row
    assert held.state == "on_hold" and held.next_due_at == clock.now()
    assert await worker.run_once() == 1  # claimed once: no handler here, let go
    row = await client.get("p2")
    assert row.next_due_at == clock.now() + 3600  # its timer, nothing sooner
    assert row.lease_owner is None and row.version == held.version
    assert await worker.run_once() == 0  # no spin
    clock.advance(3600)
    await worker.run_until_idle()
    assert (await client.get("p2")).state == "awaiting_approval"


async def test_an_event_from_a_bare_client_into_a_state_with_a_handler_is_run(
    pair: tuple[Engine, Engine, ManualClock],
) -> None:
    client, served, _ = pair
    worker = Worker(served)
    await served.start("parcel", {}, workflow_id="p3")
    await worker.run_until_idle()
    await served.post_input("p3", "label", {"code": "L-3"})  # waits in the inbox
    await client.send("p3", "approve", actor="maria")
    await worker.run_until_idle()
    assert (await client.get("p3")).state == "shipped"


async def test_an_input_from_a_bare_client_wakes_the_waiting_handler(
    pair: tuple[Engine, Engine, ManualClock],
) -> None:
    client, served, _ = pair
    worker = Worker(served)
    await served.start("parcel", {}, workflow_id="p4")
    await worker.run_until_idle()
    await served.send("p4", "approve")
    await worker.run_until_idle()
    idle = await client.get("p4")
    assert idle.state == "packing" and idle.next_due_at is None
    await client.post_input("p4", "label", {"code": "L-4"})
    await worker.run_until_idle()
    assert (await client.get("p4")).state == "shipped"


async def test_a_move_by_a_bare_client_is_run(pair: tuple[Engine, Engine, ManualClock]) -> None:
    client, served, _ = pair
    worker = Worker(served)
    await served.start("parcel", {}, workflow_id="p5")
    await worker.run_until_idle()
    await client.move_to("p5", "shipping", actor="root", reason="label printed by hand")
    await worker.run_until_idle()
    assert (await client.get("p5")).state == "shipped"


async def test_a_fork_by_a_bare_client_is_run(pair: tuple[Engine, Engine, ManualClock]) -> None:
    client, served, _ = pair
    worker = Worker(served)
    await served.start("parcel", {}, workflow_id="p6")
    await worker.run_until_idle()
    fork = await client.fork("p6", version=1, actor="root", reason="check again")
    assert fork.state == "received"
    await worker.run_until_idle()
    assert (await client.get(fork.id)).state == "awaiting_approval"


async def test_a_schedule_tick_a_bare_process_fires_is_run(
    pair: tuple[Engine, Engine, ManualClock],
) -> None:
    client, served, clock = pair
    await client.schedule_start("parcel", "@hourly", {"n": 9}, schedule_id="hourly")
    clock.advance(3600)
    [tick] = await client.fire_schedules()
    await Worker(served).run_until_idle()  # the tick is fired: nothing more for it to start
    assert (await client.get(tick)).state == "awaiting_approval"


async def test_the_worker_engine_still_decides_from_its_handlers(
    pair: tuple[Engine, Engine, ManualClock],
) -> None:
    """A process that has the handlers writes a state without one not due, as before: only a
    process that does not run the type leaves the decision to the worker."""
    _, served, _ = pair
    row = (await served.start("parcel", {}, workflow_id="p7")).row
    assert row.next_due_at is not None
    await Worker(served).run_until_idle()
    held = (await served.send("p7", "hold")).row
    assert held.state == "on_hold" and held.next_due_at == held.updated_at + 3600


async def test_a_type_with_no_handler_anywhere_may_say_so(reopen: Callable[[], Store]) -> None:
    """``runs_here=True``: the handlers bound (none) are all the type has, so this process
    decides: a state without a handler is not due, and no worker claims it for nothing."""
    clock = ManualClock(T0)
    async with Engine(reopen(), [WorkflowType(parcel(), runs_here=True)], clock=clock) as e:
        row = (await e.start("parcel", {}, workflow_id="p8")).row
        assert row.next_due_at is None
        assert await Worker(e).run_once() == 0
        row = await e.move_to("p8", "on_hold", actor="root", reason="no stock")
        assert row.next_due_at == T0 + 3600  # its timer alone


def test_runs_here_is_a_boolean() -> None:
    with pytest.raises(DefinitionError) as info:
        WorkflowType(parcel(), runs_here="yes")  # type: ignore[arg-type]
    assert [p.code for p in info.value.problems] == ["invalid_runs_here"]


async def test_a_backoff_planned_without_the_handlers_still_arms_its_retry_timer(
    reopen: Callable[[], Store],
) -> None:
    """A transient failure's backoff into a waiting state, planned by a process that does not
    know the handlers (recovery in a worker that registers the type bare): the state is due
    after the backoff for the worker to decide, and the retry timer that moves it on is armed
    as a process with the handlers would arm it."""
    from statewright.engine.transitions import Fire

    machine = (
        MachineBuilder("job")
        .state("working", initial=True)
        .state("waiting")
        .state("done", terminal=True)
        .event("error_transient")
        .event("retry")
        .event("finish")
        .transition("error_transient", "working", "waiting")
        .transition("retry", "waiting", "working")
        .transition("finish", "working", "done")
        .build()
    )
    clock = ManualClock(T0)
    async with Engine(reopen(), [machine], clock=clock) as bare:
        row = (await bare.start("job", {}, workflow_id="j1")).row
        fire = Fire("error_transient", {}, "engine", retry_delay=5.0)
        write = bare.transitions.plan(row, fire)
        assert write.run_at == T0 + 5.0
        assert [(t.due_at, t.event) for t in write.add_timers] == [(T0 + 5.0, "retry")]
