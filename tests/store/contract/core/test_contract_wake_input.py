"""A suspended wait's deferral (``DeferWrite.wake_input``): due at once when the inbox
already holds an input it would take, one posted while the handler held the lease (a post
cannot wake a leased workflow); otherwise due as written."""

from __future__ import annotations

import asyncio

from statewright.store.protocol import FullStore as Store
from statewright.types import TimerSpec
from tests.store.contract.writes import T0, defer, new


async def test_a_waiting_input_makes_the_suspension_due_now(store: Store) -> None:
    await store.create_workflow(new())
    assert (await store.defer(defer("w1", 1, wake_input=("answer", ())))).next_due_at is None
    taken, _ = await store.post_input("w1", "answer", {"n": 1}, T0)
    await store.post_input("w1", "note", {}, T0)
    # The run took ``taken`` itself (it takes it again when it runs), and waits for another.
    row = await store.defer(defer("w1", 1, wake_input=("answer", (taken.id,))))
    assert row.next_due_at is None
    row = await store.defer(defer("w1", 1, next_due_at=T0 + 60, wake_input=("answer", ())))
    assert row.next_due_at == T0  # the write's own time: the input is there
    row = await store.defer(defer("w1", 1, wake_input=(None, (taken.id,))))
    assert row.next_due_at == T0  # any name: the note
    row = await store.defer(defer("w1", 1, next_due_at=T0 + 60))  # not a wait: as written
    assert row.next_due_at == T0 + 60


async def test_timers_still_count_and_consumed_inputs_do_not(store: Store) -> None:
    await store.create_workflow(new(timers=(TimerSpec(T0 + 30, "timeout"),)))
    item, _ = await store.post_input("w1", "answer", {}, T0)
    await store.defer(defer("w1", 1, consume_inbox_ids=(item.id,)))
    row = await store.defer(defer("w1", 1, next_due_at=T0 + 60, wake_input=("answer", ())))
    assert row.next_due_at == T0 + 30  # the timer; the consumed input wakes nothing


async def test_a_post_racing_the_suspension_always_wakes_it(store: Store) -> None:
    """A post while the handler holds the lease, concurrent with the suspension's write:
    whichever commits first, the workflow ends up due (never idle with the input waiting)."""
    for i in range(40):
        wid = f"race-{i}"
        await store.create_workflow(new(wid, type=f"t{i}", run_at=T0))
        [row] = await store.claim_due("w:1:a", T0, 30.0, 1, types=[f"t{i}"])
        assert row.id == wid
        suspension = defer(wid, 1, lease=row.lease, wake_input=("answer", ()))
        post = store.post_input(wid, "answer", {"i": i}, T0, wake_in_state="a")
        if i % 2:
            await asyncio.gather(post, store.defer(suspension))
        else:
            await asyncio.gather(store.defer(suspension), post)
        after = await store.get_workflow(wid)
        assert after is not None and after.lease_owner is None
        assert after.next_due_at == T0, f"{wid}: the input waits, the workflow sleeps"
