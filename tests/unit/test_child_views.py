"""What the surfaces show of a workflow's children (statewright.views), the cursor of
their pages (statewright.paging), and that a workflow that never started a child costs no
read of children."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from statewright import Engine, SQLiteStore, paging
from statewright.access import LOCAL, Access
from statewright.engine.builtin import agent_task_type
from statewright.errors import InvalidCursor
from statewright.types import WorkflowRow
from statewright.views import ChildCounts, child_view

ROW = WorkflowRow(
    id="acme:s1.0", type="parcel", machine_version=1, state="shipping", context={}, version=1,
    attempts=0, terminal=False, created_at=1.0, updated_at=1.0, state_entered_at=1.0,
    next_due_at=None, lease_owner=None, lease_expires_at=None, last_error=None,
    tenant="acme", parent="acme:s1", parent_key="0",
)  # fmt: skip


def ended(state: str) -> WorkflowRow:
    return dataclasses.replace(ROW, state=state, terminal=True)


def test_counts_and_their_text() -> None:
    assert ChildCounts.of([]).to_dict() == {
        "total": 0, "live": 0, "ended": 0, "failed": 0, "more": False,
        "text": "0 of 0 children done",
    }  # fmt: skip
    assert ChildCounts.of([ROW]).text == "0 of 1 child done"
    three = [ended("shipped"), ended("failed"), ROW]
    assert ChildCounts.of(three).text == "2 of 3 children done (1 failed)"
    cancelled = ChildCounts.of([ended("cancelled"), ended("shipped")], more=True)
    assert (cancelled.failed, cancelled.live, cancelled.text) == (
        1,
        0,
        "2 of the first 2 children done (1 failed); more children, not counted",
    )


def test_a_childs_line_holds_nothing_its_type_could_redact() -> None:
    line = child_view(ROW, lambda store_id: store_id.removeprefix("acme:"))
    assert line == {
        "id": "s1.0", "key": "0", "type": "parcel", "state": "shipping", "terminal": False,
        "succeeded": None, "parked": None, "state_entered_at": 1.0,
    }  # fmt: skip
    assert child_view(ended("shipped"), str)["succeeded"] is True
    assert child_view(ended("failed"), str)["succeeded"] is False


@pytest.mark.parametrize(
    "cursor",
    [
        paging.encode("a.b"),  # not a key: keys have no '.'
        paging.encode(""),
        paging.encode(1),
        paging.encode("a", "b"),
        "!!",
        "",
    ],
)
def test_a_children_cursor_holds_one_key(cursor: str) -> None:
    with pytest.raises(InvalidCursor):
        paging.child_after(cursor)


def test_a_children_cursor_round_trips() -> None:
    assert paging.child_after(paging.child_cursor("parcel-7")) == "parcel-7"


async def test_a_workflow_that_never_started_a_child_costs_no_read_of_children(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Engine(SQLiteStore(":memory:"), [agent_task_type()]) as engine:
        await engine.start("agent_task", workflow_id="t1")

        async def refused(*args: Any, **kwargs: Any) -> list[WorkflowRow]:
            raise AssertionError("children were read")

        monkeypatch.setattr(engine.store, "children", refused)
        access = Access(engine, LOCAL)
        row = await access.get("t1")
        assert not row.has_children
        assert await access.children("t1") == []
        counts = await access.child_counts(row)
        assert counts is not None and counts.total == 0
        view = access.view(row)
        assert (view["parent"], view["parent_key"]) == (None, None)
