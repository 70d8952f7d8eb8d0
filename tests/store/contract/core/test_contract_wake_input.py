"""A suspended wait's deferral (``DeferWrite.wake_input``): due at once when the inbox
already holds an input it would take, one posted while the handler held the lease (a post
cannot wake a leased workflow); otherwise due as written."""

from __future__ import annotations

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
