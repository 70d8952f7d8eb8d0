"""A workflow's log, a page at a time, on every backend (the core's ``history``)."""

from __future__ import annotations

from statewright.store import Store
from tests.store.contract.writes import move, new


async def test_history_pages_by_version(store: Store) -> None:
    await store.create_workflow(new())
    for v in range(1, 12):
        await store.apply_transition(
            move("w1", v, to="b" if v % 2 else "a", from_state="a" if v % 2 else "b")
        )
    seen, after = [], 0
    while True:
        page = await store.history("w1", after_version=after, limit=5)
        seen += [e.version for e in page]
        if len(page) < 5:
            break
        after = page[-1].version
    assert seen == list(range(1, 13))
