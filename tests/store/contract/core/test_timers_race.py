"""A timer scheduled on its own never survives into a state it was not meant for, on every
store: not after a plain read-schedule-send sequence (scheduling does not change the version,
so a row read or cached before it does not show the timer), and not under real concurrency
(on PostgreSQL the schedule and the transition run on separate connections at once)."""

from __future__ import annotations

import asyncio
from typing import cast

from statewright import Engine, Machine, MachineBuilder, ManualClock, Run, WorkflowType
from statewright.store import Store
from statewright.store.protocol import FullStore


def machine() -> Machine:
    return (
        MachineBuilder("race")
        .state("a", initial=True)
        .state("b")
        .state("z", terminal=True)
        .event("go")
        .event("ping")
        .event("end")
        .transition("go", "a", "b")
        .transition("ping", ["a", "b"], "z")
        .transition("end", "b", "z")
        .build()
    )


async def _idle(run: Run) -> None:
    return None


def runs_here() -> WorkflowType:
    """The machine with a handler in "a": a process that runs the type writes "b" (no handler
    there) not due, so ``next_due_at`` shows its timers alone (a process without any handler
    would make it due for a worker to decide)."""
    return WorkflowType(machine(), {"a": _idle})


async def test_a_row_read_before_a_schedule_still_clears_its_timer(store: Store) -> None:
    engine = Engine(cast(FullStore, store), [runs_here()], clock=ManualClock())
    await engine.start("race", {}, workflow_id="w1")
    await engine.get("w1")  # this process has now seen the row without timers
    await engine.schedule("w1", "ping", after=100)
    assert [t.key for t in await engine.timers("w1")] == ["ping"]
    await engine.send("w1", "go")  # planned on the cached row: same version, no timers
    assert await engine.timers("w1") == []
    row = await engine.get("w1")
    assert row.next_due_at is None


async def test_schedule_racing_transitions_never_leaks_a_timer(store: Store) -> None:
    engine = Engine(cast(FullStore, store), [machine()], clock=ManualClock())
    n = 40
    for i in range(n):
        await engine.start("race", {}, workflow_id=f"r{i}")
    visits = {}
    for i in range(n):
        row = await engine.get(f"r{i}")
        visits[row.id] = (row.state, row.state_entered_at)
    engine.clock.advance(1)  # type: ignore[attr-defined]

    async def arm(wid: str) -> bool:
        state, entered = visits[wid]
        from statewright.types import TimerSpec

        rec = await store.schedule_timer(
            wid,
            TimerSpec(engine.clock.now() + 100, "ping", key="ping"),
            state=state,
            entered_at=entered,
            at=engine.clock.now(),
        )
        return rec is not None

    async def move(wid: str) -> None:
        await engine.send(wid, "go")

    results = await asyncio.gather(
        *(arm(f"r{i}") for i in range(n)), *(move(f"r{i}") for i in range(n))
    )
    armed = results[:n]
    for i in range(n):
        wid = f"r{i}"
        row = await engine.get(wid)
        assert row.state == "b"
        # Armed in visit "a" or refused: either way nothing may be pending in "b".
        assert await engine.timers(wid) == [], (wid, armed[i])
        assert row.next_due_at is None or row.next_due_at >= engine.clock.now()


async def test_postgres_transition_waiting_on_a_schedules_lock_clears_its_timer(
    pg_dsn: str,
) -> None:
    """Deterministic interleaving on PostgreSQL: a schedule's transaction holds the row lock
    and has inserted its timer when a transition's statement starts (its snapshot cannot see
    the uncommitted timer) and waits on the lock; the schedule commits; the transition must
    not keep the timer it did not see (the store runs it again on a fresh snapshot)."""
    import psycopg

    from statewright.store.postgres import PostgresStore, Q

    store = PostgresStore(pg_dsn)
    engine = Engine(cast(FullStore, store), [runs_here()], clock=ManualClock())
    async with engine:
        row = (await engine.start("race", {}, workflow_id="p1")).row
        params = {
            "id": "p1",
            "due_at": engine.clock.now() + 100,
            "event": "ping",
            "payload": "{}",
            "key": "ping",
            "every": None,
            "keep": False,
            "scheduled_by": None,
        }
        async with await psycopg.AsyncConnection.connect(pg_dsn) as other:
            async with other.transaction():
                await other.execute(Q["timer_visit"], params)
                await other.execute(Q["insert_timer"], params)
                await other.execute(
                    Q["set_next_due"], {"id": "p1", "next_due_at": params["due_at"]}
                )
                send = asyncio.ensure_future(engine.send("p1", "go", expected_version=row.version))
                await asyncio.sleep(0.3)
                assert not send.done()  # waiting on the row lock
            after = (await send).row
        assert after.state == "b"
        assert await engine.timers("p1") == []
        assert (await engine.get("p1")).next_due_at is None
