"""The store contract for child workflows (every backend): a child is created only under a
live parent held by the lease given; its terminal transition arms its end on the parent in
the same transaction, exactly once; a parent's children and an ended parent's live children
are read back."""

from __future__ import annotations

import asyncio

import pytest

from statewright.errors import LeaseLost, VersionConflict, WorkflowFinished, WorkflowNotFound
from statewright.store.protocol import FullStore as Store
from statewright.types import Lease, ParentLink, TimerSpec
from tests.store.contract.writes import T0, move, new


def notice(key: str = "k1", at: float = T0 + 5) -> TimerSpec:
    payload = {"child": f"p.{key}", "key": key, "state": "done", "result": {"ok": True}}
    return TimerSpec(at, "child_done", payload, key=f"child:{key}", keep=True)


async def _parent_held(store: Store) -> Lease:
    """A parent ``p`` claimed by worker ``wk``: its lease."""
    await store.create_workflow(new("p", run_at=T0))
    [row] = await store.claim_due("wk", T0, 30.0, 10)
    assert row.lease is not None
    return row.lease


async def test_a_child_is_created_with_its_link_and_listed(store: Store) -> None:
    lease = await _parent_held(store)
    fresh = await store.get_workflow("p")
    assert fresh is not None and not fresh.has_children
    for key in ("b", "a"):
        row, created = await store.create_workflow(
            new(f"p.{key}", parent=ParentLink("p", key, lease))
        )
        assert created and (row.parent, row.parent_key) == ("p", key)
    again, created = await store.create_workflow(new("p.a", parent=ParentLink("p", "a", lease)))
    assert not created and again.parent == "p"
    assert [c.id for c in await store.children("p")] == ["p.a", "p.b"]
    assert [c.id for c in await store.children("p", after="p.a")] == ["p.b"]
    assert [c.id for c in await store.children("p", limit=1)] == ["p.a"]
    assert await store.children("p.a") == []
    fetched = await store.get_workflow("p.b")
    assert fetched is not None and (fetched.parent, fetched.parent_key) == ("p", "b")
    parent = await store.get_workflow("p")
    assert parent is not None and parent.has_children and not fetched.has_children
    assert parent.version == 1 and parent.lease == lease  # marked, not moved nor released
    ended = await store.apply_transition(move("p", 1, "end", terminal=True, lease=lease))
    assert ended.has_children  # what tells the engine to cancel the live ones


async def test_a_child_is_refused_under_a_missing_ended_or_lost_parent(store: Store) -> None:
    with pytest.raises(WorkflowNotFound):
        await store.create_workflow(new("x.k", parent=ParentLink("x", "k")))
    lease = await _parent_held(store)
    with pytest.raises(LeaseLost):
        await store.create_workflow(new("p.k", parent=ParentLink("p", "k", Lease("wk", 99))))
    with pytest.raises(LeaseLost):
        await store.create_workflow(new("p.k", parent=ParentLink("p", "k", Lease("other", 1))))
    await store.apply_transition(move("p", 1, "end", terminal=True, lease=lease))
    with pytest.raises(WorkflowFinished):
        await store.create_workflow(new("p.k", parent=ParentLink("p", "k")))
    assert await store.get_workflow("p.k") is None and await store.get_workflow("x.k") is None
    assert await store.children("p") == []


async def test_a_child_s_end_is_armed_on_its_parent_with_the_transition(store: Store) -> None:
    await store.create_workflow(new("p"))  # waits: not due
    await store.create_workflow(new("p.k1", parent=ParentLink("p", "k1")))
    before = await store.get_workflow("p")
    assert before is not None and before.next_due_at is None
    after = await store.apply_transition(move("p.k1", 1, "done", terminal=True, notice=notice()))
    assert after.terminal and after.parent == "p"
    [timer] = await store.timers("p")
    assert (timer.event, timer.key, timer.keep, timer.due_at, timer.every) == (
        "child_done",
        "child:k1",
        True,
        T0 + 5,
        None,
    )
    assert timer.payload == {"child": "p.k1", "key": "k1", "state": "done", "result": {"ok": True}}
    assert timer.scheduled_by == "child p.k1"
    parent = await store.get_workflow("p")
    assert parent is not None and parent.next_due_at == T0 + 5
    assert parent.version == before.version  # armed, not a transition of the parent


async def test_a_refused_end_arms_nothing(store: Store) -> None:
    await store.create_workflow(new("p"))
    await store.create_workflow(new("p.k1", parent=ParentLink("p", "k1")))
    with pytest.raises(VersionConflict):
        await store.apply_transition(move("p.k1", 7, "done", terminal=True, notice=notice()))
    assert await store.timers("p") == []
    parent = await store.get_workflow("p")
    assert parent is not None and parent.next_due_at is None


async def test_an_ended_or_missing_parent_gets_no_notice(store: Store) -> None:
    await store.create_workflow(new("p"))
    await store.create_workflow(new("p.k1", parent=ParentLink("p", "k1")))
    await store.apply_transition(move("p", 1, "end", terminal=True))
    after = await store.apply_transition(move("p.k1", 1, "done", terminal=True, notice=notice()))
    assert after.terminal  # the child ends all the same
    assert await store.timers("p") == []


async def test_a_parent_with_a_due_run_stays_due_then(store: Store) -> None:
    await store.create_workflow(new("p", run_at=T0 + 1))
    await store.create_workflow(new("p.k1", parent=ParentLink("p", "k1")))
    await store.apply_transition(move("p.k1", 1, "done", terminal=True, notice=notice()))
    parent = await store.get_workflow("p")
    assert parent is not None and parent.next_due_at == T0 + 1  # the earlier of the two


async def test_orphans_are_the_live_children_of_ended_parents(store: Store) -> None:
    await store.create_workflow(new("p"))
    await store.create_workflow(new("q"))
    for wid, parent, key in (("p.a", "p", "a"), ("p.b", "p", "b"), ("q.a", "q", "a")):
        await store.create_workflow(new(wid, parent=ParentLink(parent, key)))
    assert await store.orphans() == []
    await store.apply_transition(move("p.a", 1, "done", terminal=True))
    await store.apply_transition(move("p", 1, "end", terminal=True))
    assert [o.id for o in await store.orphans()] == ["p.b"]  # p.a ended, q is live


async def test_a_parent_is_not_deleted_while_a_child_of_it_lives(store: Store) -> None:
    await store.create_workflow(new("p"))
    await store.create_workflow(new("p.k1", parent=ParentLink("p", "k1")))
    ended = await store.apply_transition(move("p", 1, "end", terminal=True))
    deleted, counts = await store.delete_workflows([("p", ended.version)], at=T0)
    assert deleted == [] and counts["workflows"] == 0
    await store.apply_transition(move("p.k1", 1, "done", terminal=True))
    deleted, counts = await store.delete_workflows([("p", ended.version)], at=T0)
    assert deleted == ["p"] and counts["workflows"] == 1


async def test_concurrent_first_children_are_all_created(store: Store) -> None:
    lease = await _parent_held(store)
    made = await asyncio.gather(
        *(
            store.create_workflow(new(f"p.{i}", parent=ParentLink("p", str(i), lease)))
            for i in range(6)
        )
    )
    assert all(created for _, created in made)
    assert len(await store.children("p")) == 6


async def test_orphans_are_read_a_page_at_a_time_in_index_order(store: Store) -> None:
    for parent in ("p", "q"):
        await store.create_workflow(new(parent))
        for key in ("b", "a"):
            await store.create_workflow(new(f"{parent}.{key}", parent=ParentLink(parent, key)))
        await store.apply_transition(move(parent, 1, "end", terminal=True))
    first = await store.orphans(limit=3)
    assert [o.id for o in first] == ["p.a", "p.b", "q.a"]
    rest = await store.orphans(limit=3, after=("q", "q.a"))
    assert [o.id for o in rest] == ["q.b"]
