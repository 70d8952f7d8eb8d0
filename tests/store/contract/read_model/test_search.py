"""Search attributes on every store (issue 28, item 4): written with the workflow's creation
and with the transitions that change them (never by a refused one), listed by, copied by a
fork, deleted by prune, written again by an import."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statewright import (
    Engine,
    InvalidInput,
    MachineBuilder,
    ManualClock,
    Next,
    Worker,
    WorkflowType,
)
from statewright.errors import VersionConflict
from statewright.store.protocol import FullStore as Store
from statewright.types import WorkflowFilter
from tests.store.contract.writes import move, new

DAY = 86400.0


def _ids(rows: Any) -> list[str]:
    return [r.id for r in rows]


def _by(*pairs: tuple[str, str], **kw: Any) -> WorkflowFilter:
    return WorkflowFilter(search=tuple(pairs), **kw)


async def test_created_and_transitioned_attributes_are_listed_by(store: Store) -> None:
    await store.create_workflow(new("w1", search={"order": "A-1", "customer": "c1"}))
    await store.create_workflow(new("w2", search={"order": "A-2", "customer": "c1"}))
    await store.create_workflow(new("w3"))
    assert await store.search_attributes("w1") == {"customer": "c1", "order": "A-1"}
    assert await store.search_attributes("w3") == {}
    assert _ids(await store.list_workflows(_by(("order", "A-1")))) == ["w1"]
    assert _ids(await store.list_workflows(_by(("customer", "c1")))) == ["w1", "w2"]
    both = _by(("customer", "c1"), ("order", "A-2"))
    assert _ids(await store.list_workflows(both)) == ["w2"]
    assert await store.list_workflows(_by(("order", "nope"))) == []

    # a transition changes one, removes another (None), leaves the rest
    await store.apply_transition(move("w1", 1, search={"order": "B-1", "customer": None}))
    assert await store.search_attributes("w1") == {"order": "B-1"}
    assert await store.list_workflows(_by(("order", "A-1"))) == []
    assert _ids(await store.list_workflows(_by(("order", "B-1")))) == ["w1"]
    assert _ids(await store.list_workflows(_by(("customer", "c1")))) == ["w2"]
    # one changing none leaves them
    await store.apply_transition(move("w1", 2, to="c"))
    assert await store.search_attributes("w1") == {"order": "B-1"}
    # and the other filters apply with it: state, type, terminal, paging
    assert _ids(await store.list_workflows(_by(("order", "B-1"), state="c"))) == ["w1"]
    assert await store.list_workflows(_by(("order", "B-1"), state="a")) == []
    assert await store.list_workflows(_by(("order", "B-1"), type="other")) == []
    assert _ids(await store.list_workflows(_by(("order", "B-1"), terminal=False))) == ["w1"]
    page = await store.list_workflows(_by(("customer", "c1"), limit=1))
    assert _ids(page) == ["w2"]
    after = (page[0].state_entered_at, page[0].id)
    assert await store.list_workflows(_by(("customer", "c1"), after=after)) == []


async def test_a_refused_write_writes_no_attribute(store: Store) -> None:
    await store.create_workflow(new("w1", search={"order": "A-1"}))
    with pytest.raises(VersionConflict):
        await store.apply_transition(move("w1", 5, search={"order": "X"}))
    assert await store.search_attributes("w1") == {"order": "A-1"}
    # a create of an existing id writes nothing either
    _, created = await store.create_workflow(new("w1", search={"order": "Y"}))
    assert not created
    assert await store.search_attributes("w1") == {"order": "A-1"}
    assert await store.list_workflows(_by(("order", "Y"))) == []


def _engine(store: Store) -> Engine:
    machine = (
        MachineBuilder("order")
        .state("new", initial=True)
        .state("paid")
        .state("done", terminal=True)
        .event("pay")
        .event("finish")
        .transition("pay", "new", "paid")
        .transition("finish", "paid", "done")
        .build()
    )

    async def pay(run: Any) -> Next:
        return Next("finish", context={"order_number": f"{run.context['order_number']}-paid"})

    wtype = WorkflowType(
        machine,
        handlers={"paid": pay},
        search_attributes=("order_number", "customer_id", "rush"),
    )
    return Engine(store, [wtype], clock=ManualClock())


async def test_the_engine_writes_them_with_its_transitions_forks_prune_and_import(
    store: Store, tmp_path: Path
) -> None:
    engine = _engine(store)
    await engine.start(
        "order",
        {"order_number": "A-1", "customer_id": 7, "rush": True, "note": "x"},
        workflow_id="o1",
    )
    # ints and bools as canonical text; an undeclared field is not indexed
    assert await store.search_attributes("o1") == {
        "customer_id": "7",
        "order_number": "A-1",
        "rush": "true",
    }
    assert _ids(await engine.list_workflows(_by(("customer_id", "7")))) == ["o1"]
    with pytest.raises(InvalidInput, match="unknown search attribute 'note'"):
        await engine.list_workflows(_by(("note", "x")))
    with pytest.raises(InvalidInput, match="unknown search attribute"):
        await engine.list_workflows(_by(("customer_id", "7"), type="nope"))
    await engine.send("o1", "pay")
    await Worker(engine).run_until_idle()
    row = await engine.get("o1")
    assert row.state == "done" and row.context["order_number"] == "A-1-paid"
    assert (await store.search_attributes("o1"))["order_number"] == "A-1-paid"
    assert await engine.list_workflows(_by(("order_number", "A-1"))) == []
    # a fork has its source's attributes as of the version it forks (its context's)
    fork = await engine.fork("o1", version=1, reason="again", actor="op")
    assert (await store.search_attributes(fork.id))["order_number"] == "A-1"
    # prune deletes them with the workflow
    assert isinstance(engine.clock, ManualClock)
    engine.clock.advance(40 * DAY)
    archive = tmp_path / "old.jsonl.gz"
    report = await engine.prune(30 * DAY, archive=archive)
    assert report.workflows >= 1
    assert await store.search_attributes("o1") == {}
    assert _ids(await store.list_workflows(_by(("customer_id", "7")))) == [fork.id]
    # an import writes them again, from the restored context (not from the archive)
    done = await engine.import_archive(archive)
    assert done.imported == ["o1"]
    assert await store.search_attributes("o1") == {
        "customer_id": "7",
        "order_number": "A-1-paid",
        "rush": "true",
    }
    assert _ids(await engine.list_workflows(_by(("order_number", "A-1-paid")))) == ["o1"]
