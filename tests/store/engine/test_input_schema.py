"""A type's ``input_schema`` on every store: a start whose input fails it is refused with the
schema's errors (path and message) and writes nothing (no row, no log entry), whoever starts
it: ``engine.start``, a parent's ``run.start_child``, a schedule (as it is declared, and at a
tick of a schedule declared before the type had its schema). A schema that is not one is a
DefinitionError when the type is built; a type without one takes any object."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from statewright import Engine, MachineBuilder, ManualClock, Next, Worker, WorkflowType
from statewright.errors import DefinitionError, InputNotAccepted, InvalidInput, WorkflowNotFound
from statewright.store.protocol import FullStore as Store
from statewright.types import WorkflowFilter

T0 = datetime(2027, 1, 15, 8, 3, tzinfo=UTC).timestamp()

SCHEMA = {
    "type": "object",
    "properties": {
        "order_number": {"type": "string", "pattern": "^ORD-[0-9]+$"},
        "amount": {"type": "number", "minimum": 0},
        "lines": {"type": "array", "items": {"type": "object", "required": ["sku"]}},
    },
    "required": ["order_number", "amount"],
}


def order_machine(name: str = "order") -> Any:
    b = MachineBuilder(name).state("new", initial=True).state("done", terminal=True)
    return b.event("finish").transition("finish", "new", "done").build()


def order_type(**options: Any) -> WorkflowType:
    return WorkflowType(order_machine(), input_schema=SCHEMA, **options)


@pytest.fixture
async def engine(store: Store) -> Engine:
    return Engine(store, [order_type()], clock=ManualClock(T0))


async def nothing_written(engine: Engine, workflow_id: str) -> None:
    with pytest.raises(WorkflowNotFound):
        await engine.get(workflow_id)
    assert await engine.store.history(workflow_id) == []


async def test_a_bad_start_is_refused_with_the_schemas_errors_and_writes_nothing(
    engine: Engine,
) -> None:
    bad = {"order_number": "nope", "amount": -1, "lines": [{}]}
    with pytest.raises(InputNotAccepted) as caught:
        await engine.start("order", bad, workflow_id="o1")
    exc = caught.value
    assert isinstance(exc, InvalidInput) and exc.code == "input_not_accepted"
    assert exc.workflow_type == "order"
    assert sorted((e["path"], e["message"]) for e in exc.errors) == [
        ("amount", "-1 is less than the minimum of 0"),
        ("lines/0", "'sku' is a required property"),
        ("order_number", "'nope' does not match '^ORD-[0-9]+$'"),
    ]
    assert exc.to_dict()["errors"] == exc.errors
    assert "input of workflow type 'order' is invalid at " in exc.message
    assert "(and 2 more)" in exc.message
    await nothing_written(engine, "o1")
    # Nothing at all, and no input is not a way around it.
    with pytest.raises(InputNotAccepted) as caught:
        await engine.start("order", None, workflow_id="o1")
    assert sorted(e["message"] for e in caught.value.errors) == [
        "'amount' is a required property",
        "'order_number' is a required property",
    ]
    assert {e["path"] for e in caught.value.errors} == {""}
    await nothing_written(engine, "o1")
    # With an idempotency key: refused as well, nothing kept under the key.
    with pytest.raises(InputNotAccepted):
        await engine.start("order", {"amount": 1}, idempotency_key="k1")
    assert await engine.store.list_workflows(WorkflowFilter()) == []

    good = {"order_number": "ORD-1", "amount": 12.5}
    started = await engine.start("order", good, workflow_id="o1")
    assert started.created and started.row.context == good


async def test_types_without_a_schema_take_any_object(store: Store) -> None:
    engine = Engine(store, [WorkflowType(order_machine())], clock=ManualClock(T0))
    assert engine.type_of("order").input_validator is None
    await engine.start("order", {"anything": [1, 2]}, workflow_id="o1")


def test_a_schema_that_is_not_one_is_a_definition_error() -> None:
    with pytest.raises(DefinitionError) as caught:
        WorkflowType(order_machine(), input_schema={"type": "objekt"})
    [problem] = caught.value.problems
    assert problem.code == "invalid_input_schema"
    assert "input_schema is invalid at type" in problem.message
    with pytest.raises(DefinitionError) as caught:
        WorkflowType(order_machine(), input_schema=["not", "an", "object"])  # type: ignore[arg-type]
    assert caught.value.problems[0].code == "invalid_input_schema"
    # Compiled once, with the type.
    assert order_type().input_validator is not None


async def test_a_child_with_bad_input_is_refused_to_its_parent(store: Store) -> None:
    b = MachineBuilder("batch").state("spawning", initial=True).state("done", terminal=True)
    b.state("refused", terminal=True).event("spawned").event("refused")
    b.event("child_done").event("child_failed")
    b.transition("spawned", "spawning", "done").transition("refused", "spawning", "refused")

    async def spawning(run: Any) -> Next:
        try:
            await run.start_child("order", "o", {"order_number": 7})
        except InputNotAccepted as exc:
            return Next("refused", context={"errors": exc.errors})
        return Next("spawned")

    parent = WorkflowType(b.build(), handlers={"spawning": spawning})
    engine = Engine(store, [order_type(), parent], clock=ManualClock(T0))
    await engine.start("batch", {}, workflow_id="b1")
    await Worker(engine).run_until_idle()
    row = await engine.get("b1")
    assert row.state == "refused"
    assert {e["path"] for e in row.context["errors"]} == {"", "order_number"}
    assert [r.id for r in await engine.store.list_workflows(WorkflowFilter())] == ["b1"]


async def test_schedules_are_checked_as_declared_and_at_each_tick(
    engine: Engine, store: Store
) -> None:
    with pytest.raises(InputNotAccepted):
        await engine.schedule_start("order", "*/5 * * * *", {"amount": 1}, schedule_id="s1")
    assert await engine.schedules() == []
    # Declared by a process whose type had no schema yet; this one's refuses its ticks.
    before = Engine(store, [WorkflowType(order_machine())], clock=engine.runtime.clock)
    await before.schedule_start("order", "*/5 * * * *", {"amount": 1}, schedule_id="s2")
    clock = engine.runtime.clock
    assert isinstance(clock, ManualClock)
    clock.set(T0 + 180)  # 08:06
    assert await engine.fire_schedules() == []
    assert await engine.store.list_workflows(WorkflowFilter()) == []
    schedule = await engine.get_schedule("s2")
    assert schedule.last_error is not None
    assert "'order_number' is a required property" in schedule.last_error
