"""Compensation, the saga pattern (issue 26, item 3), on both stores: the undos of the
completed steps run in reverse order, each once, as durable steps of the same ledger; on a
compensating transition, and on cancel or a fatal failure by the type's policy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statewright import (
    Applied,
    Engine,
    MachineBuilder,
    ManualClock,
    Next,
    NotApplied,
    Run,
    Worker,
    WorkflowType,
)
from statewright.definition.formats.document import from_dict, to_dict
from statewright.definition.machine import Machine
from statewright.engine.ledger import StepKey
from statewright.errors import (
    FatalError,
    IllegalTransition,
    InvalidInput,
    RequestNotSent,
)
from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from statewright.types import StepFinish
from statewright.views import step_view

LOG: list[str] = []
"""What the module-level effects did (the external system, as this test sees it)."""


def charge(key: StepKey) -> dict[str, Any]:
    LOG.append(f"do {key.step}")
    return {"id": f"ch-{key.step}"}


def refund(key: StepKey, result: Any) -> str:
    LOG.append(f"undo {key.step} {result['id']}")
    return "refunded"


async def refund_async(key: StepKey, result: Any) -> str:
    LOG.append(f"undo {key.step} {result['id']}")
    return "refunded"


def machine(name: str = "saga") -> Machine:
    b = MachineBuilder(name)
    b.state("booking", initial=True).state("waiting")
    b.state("done", terminal=True).state("aborted", terminal=True)
    b.state("cancelled", terminal=True).state("failed", terminal=True)
    b.event("booked").event("abort").event("cancel").event("fatal_error").event("finish")
    b.transition("booked", "booking", "waiting")
    b.transition("abort", ["booking", "waiting"], "aborted", compensate=True)
    b.transition("finish", "waiting", "done")
    b.transition("cancel", ["booking", "waiting"], "cancelled")
    b.transition("fatal_error", ["booking", "waiting"], "failed")
    return b.build()


def saga(then: str = "abort", fail_at: str | None = None, **kw: Any) -> WorkflowType:
    """Books a (compensated), b (not), c (compensated, async undo), d (compensated), then
    returns ``then`` (or fails fatally at step ``fail_at``)."""

    async def booking(run: Run) -> Next:
        for step, undo in (("a", refund), ("b", None), ("c", refund_async), ("d", refund)):
            if step == fail_at:
                await run.step(step, _fatal, compensate=undo)
            await run.step(step, charge, compensate=undo)
        return Next(then)

    return WorkflowType(machine(), {"booking": booking}, **kw)


def _fatal(key: StepKey) -> None:
    raise FatalError("card declined")


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "saga.db")
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn)


@pytest.fixture
def opened(make_store: Callable[[], Store]) -> Iterator[Callable[[list[WorkflowType]], Engine]]:
    """An engine on the store (to use in ``async with``), and the effects' log cleared."""
    LOG.clear()
    yield lambda types: Engine(make_store(), types, clock=ManualClock(1000.0))
    LOG.clear()


async def run_all(engine: Engine, rounds: int = 5) -> None:
    assert isinstance(engine.clock, ManualClock)
    for _ in range(rounds):
        await Worker(engine, concurrency=2).run_until_idle()
        engine.clock.advance(120.0)


async def test_a_compensating_transition_undoes_the_done_steps_newest_first(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    async with opened([saga()]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        row = await engine.get("s1")
        assert row.state == "aborted"
        assert LOG == [
            "do a",
            "do b",
            "do c",
            "do d",
            "undo undo.d ch-d",
            "undo undo.c ch-c",
            "undo undo.a ch-a",
        ]
        last = (await engine.history("s1"))[-1]
        assert last.event == "abort" and last.payload == {"compensated": ["d", "c", "a"]}
        steps = {s.step: s for s in await engine.steps("s1")}
        assert steps["a"].compensation == "tests.store.engine.test_compensation:refund"
        assert steps["b"].compensation is None
        assert steps["c"].compensation == "tests.store.engine.test_compensation:refund_async"
        for undone in ("a", "c", "d"):
            rec = steps[f"undo.{undone}"]
            assert rec.status == "done" and rec.result == "refunded" and rec.attempts == 1
        assert "undo.b" not in steps
        replayed = await engine.replay("s1")
        assert replayed.state == row.state and replayed.context == row.context


async def test_no_compensation_without_a_compensating_transition(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    async with opened([saga(then="booked")]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        await engine.send("s1", "finish", {})
        assert (await engine.get("s1")).state == "done"
        assert LOG == ["do a", "do b", "do c", "do d"]


async def test_a_fatal_failure_compensates_by_policy_only_the_done_steps(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    # c failed (a FatalError does not prove the call never went out): its reconciler says
    # it never applied, so only a is undone.
    types = [
        saga(fail_at="c", compensate_on=("fatal",), reconcilers={"c": lambda key: NotApplied()})
    ]
    async with opened(types) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        assert (await engine.get("s1")).state == "failed"
        assert LOG[:2] == ["do a", "do b"]
        assert "undo undo.a ch-a" in LOG
        assert not any(line.startswith("undo undo.c") for line in LOG)
        last = (await engine.history("s1"))[-1]
        assert last.event == "fatal_error" and last.payload["compensated"] == ["a"]


async def test_without_the_policy_a_fatal_failure_or_cancel_compensates_nothing(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    idle = WorkflowType(machine("idle"), saga(then="booked").handlers)
    async with opened([saga(fail_at="c"), idle]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        assert (await engine.get("s1")).state == "failed"
        await engine.start("idle", {}, workflow_id="s2")
        await run_all(engine)
        await engine.cancel("s2", reason="stop")
        assert (await engine.get("s2")).state == "cancelled"
        assert not any(line.startswith("undo") for line in LOG)


async def test_a_cancel_compensates_by_policy_through_a_worker(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    async with opened([saga(then="booked", compensate_on=("cancel",))]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        assert (await engine.get("s1")).state == "waiting"  # no handler: nobody holds it
        reason = "customer changed their mind"
        done = await engine.cancel("s1", reason=reason, actor="ann", idempotency_key="k1")
        # Handed to a worker: the undos run in the process that runs the type's code.
        assert done.row.state == "waiting" and not any(x.startswith("undo") for x in LOG)
        await run_all(engine)
        row = await engine.get("s1")
        assert row.state == "cancelled" and row.cancel is None
        assert [x for x in LOG if x.startswith("undo")] == [
            "undo undo.d ch-d",
            "undo undo.c ch-c",
            "undo undo.a ch-a",
        ]
        last = (await engine.history("s1"))[-1]
        assert last.event == "cancel" and last.actor == "ann"
        assert last.payload == {
            "reason": "customer changed their mind",
            "compensated": ["d", "c", "a"],
        }
        # A retried cancel is this one (its payload compared without what was undone).
        again = await engine.cancel("s1", reason=reason, actor="ann", idempotency_key="k1")
        assert again.replayed and again.row.state == "cancelled"


async def test_a_cancel_with_nothing_to_undo_fires_at_once(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    wtype = WorkflowType(machine(), {}, compensate_on=("cancel",), runs_here=True)
    async with opened([wtype]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        done = await engine.cancel("s1", reason="stop", idempotency_key="k")
        assert done.row.state == "cancelled"
        last = (await engine.history("s1"))[-1]
        assert last.payload == {"reason": "stop", "compensated": []}
        assert (await engine.cancel("s1", reason="stop", idempotency_key="k")).replayed


async def test_a_compensating_edge_is_not_sent_from_outside(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    async with opened([saga(then="booked")]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        with pytest.raises(IllegalTransition, match="compensating transition"):
            await engine.send("s1", "abort", {})
        assert (await engine.get("s1")).state == "waiting"


async def test_a_compensation_that_fails_transiently_is_retried(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    failures = [RequestNotSent("refund service down")]

    def flaky_refund(key: StepKey, result: Any) -> str:
        if failures:
            raise failures.pop()
        LOG.append(f"undo {key.step}")
        return "refunded"

    async def booking(run: Run) -> Next:
        await run.step("a", charge, compensate=flaky_refund)
        return Next("abort")

    wtype = WorkflowType(
        machine(), {"booking": booking}, compensations={"flaky": flaky_refund}, on_transient=None
    )
    async with opened([wtype]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        assert (await engine.get("s1")).state == "aborted"
        assert LOG == ["do a", "undo undo.a"]
        [undo] = [s for s in await engine.steps("s1") if s.step == "undo.a"]
        assert undo.status == "done" and undo.attempts == 2
        assert (await engine.steps("s1"))[0].compensation == "flaky"


async def test_a_compensation_of_unknown_outcome_is_reconciled_or_parks(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    calls: list[str] = []

    def lost_refund(key: StepKey, result: Any) -> str:
        calls.append(str(key))
        raise TimeoutError("no answer")  # may have refunded: unknown

    async def booking(run: Run) -> Next:
        await run.step("a", charge, compensate=lost_refund)
        return Next("abort")

    parks = WorkflowType(
        machine(), {"booking": booking}, compensations={"lost": lost_refund}, on_transient=None
    )
    async with opened([parks]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        row = await engine.get("s1")
        assert row.state == "booking" and row.parked == "step_outcome_unknown"
        assert len(calls) == 1  # never called again blindly
        # An operator answers; resumed, the workflow goes on without calling it again.
        await engine.resolve_step("s1", "undo.a", Applied("refunded"), actor="op", reason="ok")
        await engine.resume("s1", actor="op", reason="resolved")
        await run_all(engine)
        assert (await engine.get("s1")).state == "aborted" and len(calls) == 1


async def test_a_compensation_reconcile_hook_decides(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    calls: list[str] = []

    def lost_refund(key: StepKey, result: Any) -> str:
        calls.append(str(key))
        raise TimeoutError("no answer")

    async def booking(run: Run) -> Next:
        await run.step("a", charge, compensate=lost_refund)
        return Next("abort")

    wtype = WorkflowType(
        machine(),
        {"booking": booking},
        compensations={"lost": lost_refund},
        reconcilers={"undo.a": lambda key: Applied("refunded by the bank")},
        on_transient=None,
    )
    async with opened([wtype]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        assert (await engine.get("s1")).state == "aborted" and len(calls) == 1
        [undo] = [s for s in await engine.steps("s1") if s.step == "undo.a"]
        assert undo.result == "refunded by the bank"


async def test_a_step_left_executing_is_reconciled_before_its_undo(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    """A crash between the charge and its done record: the cancel reconciles it (applied:
    it is undone) and a step that never applied is not undone."""
    wtype = WorkflowType(
        machine(),
        {},
        compensate_on=("cancel",),
        reconcilers={
            "a": lambda key: Applied({"id": "ch-a"}),
            "b": lambda key: NotApplied(),
        },
        runs_here=True,
    )
    engine = opened([wtype])
    async with engine:
        await engine.start("saga", {}, workflow_id="s1")
        name = "tests.store.engine.test_compensation:refund"
        for step in ("a", "b"):
            await engine.store.step_begin(f"s1:{step}", "s1", step, 1000.0, None, name)
        await engine.cancel("s1", reason="stop")
        await run_all(engine)
        assert (await engine.get("s1")).state == "cancelled"
        assert LOG == ["undo undo.a ch-a"]
        steps = {s.step: s for s in await engine.steps("s1")}
        assert steps["a"].status == "done"
        assert steps["b"].status == "failed" and steps["b"].outcome == "not_applied"


async def test_an_unresolvable_compensation_parks_the_workflow(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    wtype = WorkflowType(machine(), {}, compensate_on=("cancel",), runs_here=True)
    async with opened([wtype]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        rec = await engine.store.step_begin("s1:a", "s1", "a", 1000.0, None, "nowhere:gone")
        await engine.store.step_finish(StepFinish("s1:a", rec.attempts, "done", {}, at=1000.0))
        await engine.cancel("s1", reason="stop")
        await run_all(engine)
        row = await engine.get("s1")
        assert row.state == "booking"
        assert row.parked == "fatal_error" and row.last_error is not None
        assert "nowhere:gone" in row.last_error and "CompensationNotFound" in row.last_error


async def test_a_step_needs_a_compensation_another_process_can_find(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    seen: list[Any] = []

    async def booking(run: Run) -> Next:
        try:
            await run.step("a", charge, compensate=lambda key, result: None)
        except InvalidInput as exc:
            seen.append(exc)
        try:
            await run.step("undo.x", charge)
        except InvalidInput as exc:
            seen.append(exc)
        return Next("booked")

    async with opened([WorkflowType(machine(), {"booking": booking})]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        assert len(seen) == 2 and "module-level" in str(seen[0]) and "undo." in str(seen[1])
        assert await engine.steps("s1") == []


async def test_a_fork_inherits_no_compensation(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    async with opened([saga(then="booked", compensate_on=("cancel",))]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        fork = await engine.fork("s1", actor="op", reason="try again", new_id="s2")
        assert {s.compensation for s in await engine.steps(fork.id)} == {None}
        await engine.cancel("s2", reason="stop")
        await run_all(engine)
        assert (await engine.get("s2")).state == "cancelled"
        assert not any(x.startswith("undo") for x in LOG)  # the original's to undo


def test_a_compensating_edge_is_saved_in_files() -> None:
    doc = to_dict(machine())
    [abort] = [t for t in doc["transitions"] if t["event"] == "abort"]
    assert abort["compensate"] is True
    assert from_dict(doc).transitions_from("waiting", "abort")[0].compensate
    assert all("compensate" not in t for t in doc["transitions"] if t["event"] != "abort")


async def test_the_views_show_compensations(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    async with opened([saga()]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        views = {v["step"]: v for v in map(step_view, await engine.steps("s1"))}
        assert views["a"]["compensation"].endswith(":refund") and views["a"]["compensates"] is None
        assert views["undo.a"]["compensates"] == "a" and views["undo.a"]["compensation"] is None
        assert views["b"]["compensation"] is None


def test_a_compensating_edge_is_labelled_in_diagrams() -> None:
    from statewright.definition.render.mermaid import to_mermaid

    lines = [ln for ln in to_mermaid(machine()).splitlines() if ": abort" in ln]
    assert lines and all("abort (compensates)" in ln for ln in lines)
    assert not any(
        "compensates" in ln for ln in to_mermaid(machine()).splitlines() if "finish" in ln
    )


async def test_an_event_that_compensates_by_policy_is_not_sent_from_outside(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    async with opened([saga(then="booked", compensate_on=("cancel", "fatal"))]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        for event, payload in (("cancel", {"reason": "x"}), ("fatal_error", {})):
            with pytest.raises(IllegalTransition, match=r"Engine\.cancel"):
                await engine.send("s1", event, payload)
        assert (await engine.get("s1")).state == "waiting" and "undo" not in " ".join(LOG)


async def test_a_synchronous_handler_declares_undos_too(
    opened: Callable[[list[WorkflowType]], Engine],
) -> None:
    def booking(run: Any) -> Next:  # gets a SyncRun
        run.step("a", charge, compensate=refund)
        return Next("abort")

    async with opened([WorkflowType(machine(), {"booking": booking})]) as engine:
        await engine.start("saga", {}, workflow_id="s1")
        await run_all(engine)
        assert (await engine.get("s1")).state == "aborted"
        assert LOG == ["do a", "undo undo.a ch-a"]


def test_an_undo_is_found_by_import_in_another_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from statewright.engine import compensation_names
    from statewright.engine.compensation import resolve
    from statewright.errors import CompensationNotFound

    monkeypatch.setattr(compensation_names, "SEEN", {})
    monkeypatch.setattr("statewright.engine.compensation.SEEN", compensation_names.SEEN)
    wtype = WorkflowType(machine())
    assert resolve(wtype, "a", "tests.store.engine.test_compensation:refund") is refund
    with pytest.raises(CompensationNotFound, match="nowhere"):
        resolve(wtype, "a", "tests.store.engine.nowhere:refund")
    with pytest.raises(CompensationNotFound):
        resolve(wtype, "a", "tests.store.engine.test_compensation:LOG.nothing")


def test_the_policy_and_the_names_are_checked() -> None:
    from statewright.errors import DefinitionError

    with pytest.raises(DefinitionError, match="compensate_on"):
        WorkflowType(machine(), compensate_on=("abort",))  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="needs a name"):
        WorkflowType(machine(), compensations=[lambda key, result: None])
    named = WorkflowType(machine(), compensations={"undo": refund}, compensate_on=("fatal",))
    assert named.compensators == {"undo": refund}
    assert named.compensating_events == {"fatal_error"} and named.compensates
    assert not WorkflowType(machine("plain_" + "x")).compensating_events


def test_a_bound_method_needs_a_name() -> None:
    from statewright.engine.compensation_names import name_for

    class Payments:
        def refund(self, key: StepKey, result: Any) -> None: ...

    payments = Payments()
    with pytest.raises(InvalidInput, match="compensations"):
        name_for({}, payments.refund)
    named = {"payments.refund": payments.refund}
    assert name_for(named, payments.refund) == "payments.refund"  # another bound object
    assert name_for({}, refund) == "tests.store.engine.test_compensation:refund"
