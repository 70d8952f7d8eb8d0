"""The store's tenant contract, on every backend: a workflow's tenant is stored, filtered on
and kept by every write; ``None`` means every tenant."""

from __future__ import annotations

from typing import Any

import pytest

from statewright.errors import InvalidInput
from statewright.store.protocol import FullStore as Store
from statewright.types import (
    CancelRequest,
    DeferWrite,
    NewWorkflow,
    TransitionWrite,
    WorkflowFilter,
    WorkflowRow,
)

T0 = 1_800_000_000.0


def new(wid: str, tenant: str | None = None, type_: str = "t", state: str = "a") -> NewWorkflow:
    extra: dict[str, Any] = {} if tenant is None else {"tenant": tenant}
    return NewWorkflow(
        id=wid,
        type=type_,
        machine_version=1,
        state=state,
        context={"id": wid},
        actor="tester",
        at=T0,
        **extra,
    )


def move(row: WorkflowRow, to: str = "b", terminal: bool = False) -> TransitionWrite:
    return TransitionWrite(
        workflow_id=row.id,
        expected_version=row.version,
        from_state=row.state,
        to_state=to,
        event="go",
        payload={},
        actor="tester",
        at=T0 + row.version,
        context=row.context,
        terminal=terminal,
    )


async def seed(store: Store) -> None:
    """acme: a1 (a), a2 (b), a3 (done); globex: g1 (a), g2 (b); default: d1 (a)."""
    for wid, tenant in (("a1", "acme"), ("g1", "globex"), ("a2", "acme"), ("g2", "globex")):
        await store.create_workflow(new(wid, tenant))
    await store.create_workflow(new("a3", "acme", type_="u"))
    await store.create_workflow(new("d1"))
    for wid in ("a2", "g2"):
        row = await store.get_workflow(wid)
        assert row is not None
        await store.apply_transition(move(row))
    row = await store.get_workflow("a3")
    assert row is not None
    await store.apply_transition(move(row, "done", terminal=True))


async def ids(store: Store, **where: Any) -> set[str]:
    return {r.id for r in await store.list_workflows(WorkflowFilter(**where))}


async def test_the_default_tenant_is_default(store: Store) -> None:
    row, created = await store.create_workflow(new("d1"))
    assert created and row.tenant == "default"
    got = await store.get_workflow("d1")
    assert got is not None and got.tenant == "default"
    assert await ids(store, tenant="default") == {"d1"}


async def test_list_workflows_by_tenant(store: Store) -> None:
    await seed(store)
    assert await ids(store) == {"a1", "a2", "a3", "g1", "g2", "d1"}
    assert await ids(store, tenant="acme") == {"a1", "a2", "a3"}
    assert await ids(store, tenant="globex") == {"g1", "g2"}
    assert await ids(store, tenant="nobody") == set()
    assert await ids(store, tenant="acme", state="b") == {"a2"}
    assert await ids(store, tenant="acme", type="u") == {"a3"}
    assert await ids(store, tenant="acme", terminal=False) == {"a1", "a2"}
    assert await ids(store, tenant="globex", entered_before=T0 + 0.5) == {"g1"}
    rows = await store.list_workflows(WorkflowFilter(tenant="acme", limit=2))
    more = await store.list_workflows(WorkflowFilter(tenant="acme", limit=2, offset=2))
    assert len(rows) == 2 and {r.id for r in rows + more} == {"a1", "a2", "a3"}
    assert {r.tenant for r in rows + more} == {"acme"}


async def test_count_by_state_by_tenant(store: Store) -> None:
    await seed(store)
    assert await store.count_by_state(tenant="acme") == [
        ("t", "a", 1),
        ("t", "b", 1),
        ("u", "done", 1),
    ]
    assert await store.count_by_state(tenant="globex") == [("t", "a", 1), ("t", "b", 1)]
    assert await store.count_by_state(terminal=False, tenant="acme") == [
        ("t", "a", 1),
        ("t", "b", 1),
    ]
    assert await store.count_by_state(terminal=True, tenant="globex") == []
    assert await store.count_by_state(tenant="nobody") == []
    assert await store.count_by_state() == [("t", "a", 3), ("t", "b", 2), ("u", "done", 1)]


async def test_transitions_since_by_tenant(store: Store) -> None:
    await seed(store)
    everything = await store.transitions_since(0)
    assert len(everything) == 9
    acme = await store.transitions_since(0, tenant="acme")
    assert [(t.workflow_id, t.version) for t in acme] == [
        ("a1", 1),
        ("a2", 1),
        ("a3", 1),
        ("a2", 2),
        ("a3", 2),
    ]
    assert acme == [t for t in everything if t.workflow_id.startswith("a")]
    globex = await store.transitions_since(0, tenant="globex")
    assert [t.workflow_id for t in globex] == ["g1", "g2", "g2"]
    assert [t.workflow_id for t in await store.transitions_since(0, tenant="default")] == ["d1"]
    assert await store.transitions_since(0, tenant="nobody") == []
    # Paging one tenant: the cursor is the global seq, and the other tenants' entries between
    # two pages are skipped, never returned.
    pages: list[str] = []
    cursor = 0
    while page := await store.transitions_since(cursor, limit=2, tenant="acme"):
        assert len(page) <= 2
        pages += [f"{t.workflow_id}@{t.version}" for t in page]
        cursor = page[-1].seq
    assert pages == ["a1@1", "a2@1", "a3@1", "a2@2", "a3@2"]


async def test_tenant_survives_every_write(store: Store) -> None:
    row, _ = await store.create_workflow(new("w", "acme"))
    assert row.tenant == "acme"
    again, created = await store.create_workflow(new("w", "globex"))  # the id is taken
    assert not created and again.tenant == "acme"
    row = await store.apply_transition(move(row))
    assert row.tenant == "acme"

    after = await store.apply_transition(move(row, "c"))
    assert after.tenant == "acme"
    row = await store.request_cancel("w", CancelRequest("stop", at=T0 + 5))
    assert row.tenant == "acme"
    row = await store.defer(
        DeferWrite("w", row.version, T0 + 6, attempts=1, next_due_at=T0, last_error="boom")
    )
    assert row.tenant == "acme"
    [claimed] = await store.claim_due("worker-1", T0 + 7, 30.0, 10)
    assert (claimed.id, claimed.tenant) == ("w", "acme")
    [held] = await store.leased_by("worker-1")
    assert held.tenant == "acme"
    stored = await store.get_workflow("w")
    assert stored is not None and stored.tenant == "acme"
    assert await ids(store, tenant="acme") == {"w"}
    assert await ids(store, tenant="globex") == set()


async def test_lone_surrogates_are_refused_and_change_nothing(store: Store) -> None:
    new = NewWorkflow(
        id="sur", type="t", machine_version=1, state="a", context={"x": "\ud800"},
        actor="x", at=1.0,
    )  # fmt: skip
    with pytest.raises(InvalidInput):
        await store.create_workflow(new)
    assert await store.get_workflow("sur") is None
