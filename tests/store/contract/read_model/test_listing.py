"""The read model's listings and counts over what the core wrote, on every backend."""

from __future__ import annotations

from statewright.store.protocol import FullStore as Store
from statewright.types import WorkflowFilter
from tests.store.contract.writes import T0, move, new


async def test_listing_and_counts(store: Store) -> None:
    for i in range(5):
        await store.create_workflow(new(f"w{i}", at=T0 + i))
    await store.apply_transition(move("w0", 1))
    rows = await store.list_workflows(WorkflowFilter(state="a", entered_before=T0 + 3))
    assert [r.id for r in rows] == ["w1", "w2"]
    assert await store.count_by_state() == [("t", "a", 4), ("t", "b", 1)]
    since = await store.transitions_since(0)
    assert len(since) == 6 and [e.seq for e in since] == sorted(e.seq for e in since)
    assert await store.transitions_since(since[-1].seq) == []
