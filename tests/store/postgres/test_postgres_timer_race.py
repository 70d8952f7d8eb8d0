"""A timer armed on its own while a write of the workflow waits for its row lock (a child's
end armed on its parent while the parent's handler goes idle, say): the write's due time must
count it. It sets ``next_due_at`` from the timers its statement's snapshot shows, and the
snapshot was taken before the timer committed; written as is, the timer would stay pending on
a row no worker ever claims (found by the children's SIGKILL suite as a stalled parent)."""

from __future__ import annotations

import asyncio

import psycopg

from statewright.store.postgres import PostgresStore
from statewright.types import DeferWrite, TimerSpec
from tests.store.contract.writes import T0, new


async def test_an_idle_write_waiting_on_a_timer_armed_meanwhile_keeps_it_due(
    pg_dsn: str,
) -> None:
    store = PostgresStore(pg_dsn)
    await store.open()
    try:
        await store.create_workflow(new("p", run_at=T0))
        [row] = await store.claim_due("wk", T0, 30.0, 10)
        other = await psycopg.AsyncConnection.connect(pg_dsn)
        # Another transaction arms a timer on its own, as schedule_timer does: the row locked,
        # the timer inserted, next_due_at moved; not committed yet.
        await other.execute("SELECT 1 FROM workflows WHERE id = 'p' FOR NO KEY UPDATE")
        await other.execute(
            "INSERT INTO timers (workflow_id, due_at, event, payload, keep) "
            "VALUES ('p', %s, 'child_done', '{}', true)",
            (T0 + 1,),
        )
        await other.execute("UPDATE workflows SET next_due_at = %s WHERE id = 'p'", (T0 + 1,))
        # The handler goes idle meanwhile: its write waits for the row.
        idle = DeferWrite("p", row.version, T0 + 0.5, attempts=0, lease=row.lease)
        deferring = asyncio.create_task(store.defer(idle))
        await asyncio.sleep(0.3)
        assert not deferring.done()  # blocked on the row lock
        await other.commit()
        await other.close()
        after = await deferring
        assert after.next_due_at == T0 + 1  # the timer armed meanwhile is still due
        [timer] = await store.timers("p")
        assert timer.due_at == T0 + 1
    finally:
        await store.close()


async def test_a_self_transition_waiting_on_a_timer_armed_meanwhile_keeps_it_due(
    pg_dsn: str,
) -> None:
    from tests.store.contract.writes import move

    store = PostgresStore(pg_dsn)
    await store.open()
    try:
        await store.create_workflow(new("p"))
        other = await psycopg.AsyncConnection.connect(pg_dsn)
        await other.execute("SELECT 1 FROM workflows WHERE id = 'p' FOR NO KEY UPDATE")
        await other.execute(
            "INSERT INTO timers (workflow_id, due_at, event, payload, keep) "
            "VALUES ('p', %s, 'child_done', '{}', true)",
            (T0 + 1,),
        )
        await other.execute("UPDATE workflows SET next_due_at = %s WHERE id = 'p'", (T0 + 1,))
        staying = move("p", 1, "a", clear_timers=False, add_timers=(TimerSpec(T0 + 9, "x"),))
        moving = asyncio.create_task(store.apply_transition(staying))
        await asyncio.sleep(0.3)
        await other.commit()
        await other.close()
        after = await moving
        assert after.next_due_at == T0 + 1
    finally:
        await store.close()
