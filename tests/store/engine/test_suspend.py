"""Waits that free the worker (issue 27, item 3), on both stores: ``run.sleep`` and
``run.wait_input`` suspend the workflow (lease and slot released, the state kept) and the
handler runs again from its start when the time comes or an input is posted; its completed
steps return their stored results, its inputs are taken again and consumed once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from statewright import Engine, MachineBuilder, ManualClock, Next, Run, Worker, WorkflowType
from statewright.definition.machine import Machine
from statewright.engine.syncrun import SyncRun
from statewright.errors import InvalidInput
from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store


def waiter() -> Machine:
    b = MachineBuilder("waiter")
    b.state("asking", initial=True).state("review")
    b.state("done", terminal=True).state("cancelled", terminal=True).state("failed", terminal=True)
    b.event("finish").event("to_review").event("back").event("cancel").event("fatal_error")
    b.transition("finish", "asking", "done")
    b.transition("to_review", "asking", "review")
    b.transition("back", "review", "asking")
    b.transition("cancel", ["asking", "review"], "cancelled")
    b.transition("fatal_error", ["asking", "review"], "failed")
    return b.build()


class Service:
    """An external system that does not deduplicate: it counts every call by step name."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def call(self, key: Any) -> str:
        self.calls[key.step] = self.calls.get(key.step, 0) + 1
        return str(key.step)


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "suspend.db")
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0)


@pytest.fixture
async def opened(
    make_store: Callable[[], Store], clock: ManualClock
) -> AsyncIterator[Callable[[dict[str, Any]], Engine]]:
    """Open an engine on the test's store (a new one each call: a restart) and its clock."""
    engines: list[Engine] = []

    def open_engine(handlers: dict[str, Any]) -> Engine:
        engine = Engine(make_store(), [WorkflowType(waiter(), handlers)], clock=clock)
        engines.append(engine)
        return engine

    yield open_engine
    for engine in engines:
        await engine.close()


async def suspended(engine: Engine, wid: str, state: str = "asking") -> None:
    """The workflow waits in ``state`` with no lease and no failure counted."""
    row = await engine.get(wid)
    assert (row.state, row.lease_owner, row.attempts, row.last_error) == (state, None, 0, None)
    assert row.total_attempts == 0


async def test_sleep_wakes_at_its_time_and_steps_before_it_do_not_run_again(
    opened: Callable[[dict[str, Any]], Engine], clock: ManualClock
) -> None:
    service = Service()

    async def asking(run: Run) -> Next:
        await run.step("before", service.call)
        await run.sleep(60)
        await run.step("after", service.call)
        return Next("finish")

    engine = opened({"asking": asking})
    await engine.open()
    await engine.start("waiter", workflow_id="w")
    worker = Worker(engine, concurrency=4)
    await worker.run_until_idle()
    await suspended(engine, "w")
    assert (await engine.get("w")).next_due_at == 1060.0
    clock.advance(59)
    assert await worker.run_until_idle() == 0  # not due yet
    clock.advance(1)
    await worker.run_until_idle()
    assert (await engine.get("w")).state == "done"
    assert service.calls == {"before": 1, "after": 1}


async def test_wait_input_wakes_on_a_post_and_takes_it(
    opened: Callable[[dict[str, Any]], Engine],
) -> None:
    service = Service()

    async def asking(run: Run) -> Next:
        await run.step("before", service.call)
        item = await run.wait_input("answer")
        await run.step("after", service.call)
        assert item is not None
        return Next("finish", context={"answer": item.payload})

    engine = opened({"asking": asking})
    await engine.open()
    await engine.start("waiter", workflow_id="w")
    worker = Worker(engine)
    await worker.run_until_idle()
    await suspended(engine, "w")
    assert (await engine.get("w")).next_due_at is None  # only an input wakes it
    await engine.post_input("w", "note", {"x": 1})  # not the awaited name: woken, waits again
    await worker.run_until_idle()
    await suspended(engine, "w")
    await engine.post_input("w", "answer", {"ok": True})
    await worker.run_until_idle()
    row = await engine.get("w")
    assert (row.state, row.context) == ("done", {"answer": {"ok": True}})
    assert service.calls == {"before": 1, "after": 1}
    assert (await engine.store.next_input("w", "answer")) is None  # consumed


async def test_a_timeout_returns_none_after_the_durable_deadline_across_a_restart(
    opened: Callable[[dict[str, Any]], Engine], clock: ManualClock
) -> None:
    async def asking(run: Run) -> Next:
        item = await run.wait_input("answer", timeout=100)
        return Next("finish", context={"answer": None if item is None else item.payload})

    first = opened({"asking": asking})
    await first.open()
    await first.start("waiter", workflow_id="w")
    await Worker(first).run_until_idle()
    await suspended(first, "w")
    assert (await first.get("w")).next_due_at == 1100.0
    await first.close()
    clock.advance(60)
    second = opened({"asking": asking})  # a new process: the deadline comes from the ledger
    await second.open()
    await second.post_input("w", "other", {})  # a wake before the deadline: it waits again
    await Worker(second).run_until_idle()
    await suspended(second, "w")
    assert (await second.get("w")).next_due_at == 1100.0
    clock.advance(40)
    await Worker(second).run_until_idle()
    row = await second.get("w")
    assert (row.state, row.context) == ("done", {"answer": None})


async def test_inputs_taken_before_a_second_wait_are_taken_again_and_consumed_once(
    opened: Callable[[dict[str, Any]], Engine],
) -> None:
    service = Service()
    seen: list[int] = []

    async def asking(run: Run) -> Next:
        first = await run.wait_input("a")
        assert first is not None
        seen.append(first.id)
        await run.step("between", service.call)
        second = await run.wait_input("b")
        assert second is not None
        return Next("finish", context={"a": first.payload, "b": second.payload})

    engine = opened({"asking": asking})
    await engine.open()
    await engine.start("waiter", workflow_id="w")
    await engine.post_input("w", "a", {"n": 1})
    worker = Worker(engine)
    await worker.run_until_idle()
    await suspended(engine, "w")
    taken = await engine.store.next_input("w", "a")
    assert taken is not None  # not consumed by the suspension: the inbox keeps it
    await engine.post_input("w", "b", {"n": 2})
    await worker.run_until_idle()
    row = await engine.get("w")
    assert (row.state, row.context) == ("done", {"a": {"n": 1}, "b": {"n": 2}})
    assert seen == [taken.id, taken.id]  # the same input, taken again by the re-run
    assert service.calls == {"between": 1}
    assert await engine.store.next_input("w") is None  # both consumed, with the transition


async def test_a_suspended_workflow_can_be_cancelled(
    opened: Callable[[dict[str, Any]], Engine],
) -> None:
    async def asking(run: Run) -> Next:
        run.save_partial(asked=True)
        await run.wait_input("answer", timeout=3600)
        return Next("finish")

    engine = opened({"asking": asking})
    await engine.open()
    await engine.start("waiter", workflow_id="w")
    worker = Worker(engine)
    await worker.run_until_idle()
    await suspended(engine, "w")
    await engine.cancel("w", reason="not needed", actor="ops")
    await worker.run_until_idle()
    assert (await engine.get("w")).state == "cancelled"


async def test_a_second_visit_of_the_state_waits_again(
    opened: Callable[[dict[str, Any]], Engine], clock: ManualClock
) -> None:
    async def asking(run: Run) -> Next:
        item = await run.wait_input("answer", timeout=50)
        n = run.context.get("n", 0) + 1
        got = [*run.context.get("got", []), None if item is None else item.payload]
        return Next("finish" if n >= 2 else "to_review", context={"n": n, "got": got})

    async def review(run: Run) -> str:
        return "back"

    engine = opened({"asking": asking, "review": review})
    await engine.open()
    await engine.start("waiter", workflow_id="w")
    worker = Worker(engine)
    await worker.run_until_idle()
    assert (await engine.get("w")).next_due_at == 1050.0
    clock.advance(40)
    await engine.post_input("w", "answer", {"visit": 1})
    await worker.run_until_idle()
    # Back in "asking": a new visit, so a new deadline (not the first one's, 1050).
    await suspended(engine, "w")
    assert (await engine.get("w")).next_due_at == 1090.0
    clock.advance(20)
    await worker.run_until_idle()
    await suspended(engine, "w")
    await engine.post_input("w", "answer", {"visit": 2})
    await worker.run_until_idle()
    row = await engine.get("w")
    assert (row.state, row.context["got"]) == ("done", [{"visit": 1}, {"visit": 2}])


async def test_an_input_posted_while_the_handler_held_the_lease_wakes_it(
    opened: Callable[[dict[str, Any]], Engine],
) -> None:
    """The post could not make the leased workflow due: the suspension's write does."""

    async def asking(run: Run) -> Next:
        item = await run.wait_input("answer")
        assert item is not None
        return Next("finish", context={"answer": item.payload})

    engine = opened({"asking": asking})
    await engine.open()
    await engine.start("waiter", workflow_id="w")
    store = engine.store
    real = store.next_input
    posted: list[int] = []

    async def racing(workflow_id: str, name: str | None = None, skip: Any = ()) -> Any:
        found = await real(workflow_id, name, skip)
        if found is None and not posted:  # the post lands between the look and the write
            posted.append((await engine.post_input("w", "answer", {"ok": 1})).item.id)
        return found

    store.next_input = racing  # type: ignore[method-assign]
    worker = Worker(engine)
    await worker.run_until_idle()
    row = await engine.get("w")
    assert posted and (row.state, row.context) == ("done", {"answer": {"ok": 1}})


async def test_a_sync_handler_sleeps_and_waits(
    opened: Callable[[dict[str, Any]], Engine], clock: ManualClock
) -> None:
    def asking(run: SyncRun) -> Next:
        run.sleep(10)
        item = run.wait_input("answer")
        assert item is not None
        return Next("finish", context={"answer": item.payload})

    engine = opened({"asking": asking})
    await engine.open()
    await engine.start("waiter", workflow_id="w")
    worker = Worker(engine)
    await worker.run_until_idle()
    await suspended(engine, "w")
    clock.advance(10)
    await worker.run_until_idle()
    await suspended(engine, "w")
    await engine.post_input("w", "answer", {"ok": True})
    await worker.run_until_idle()
    assert (await engine.get("w")).state == "done"


async def test_bad_waits_and_reserved_step_names_are_refused(
    opened: Callable[[dict[str, Any]], Engine],
) -> None:
    errors: list[str] = []

    async def asking(run: Run) -> Next:
        for call in (
            lambda: run.sleep(-1),
            lambda: run.wait_input(timeout="soon"),  # type: ignore[arg-type]
            lambda: run.step("$wait.v1.0", lambda key: 1),
        ):
            try:
                await call()
            except InvalidInput as exc:
                errors.append(exc.message)
        return Next("finish")

    engine = opened({"asking": asking})
    await engine.open()
    await engine.start("waiter", workflow_id="w")
    await Worker(engine).run_until_idle()
    assert (await engine.get("w")).state == "done"
    assert len(errors) == 3


async def test_a_suspension_is_no_failure_even_under_except_exception(
    opened: Callable[[dict[str, Any]], Engine],
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``Suspended`` is a BaseException: a handler's ``except Exception`` does not swallow it,
    and nothing reports a failure, a retry or a warning for it."""
    swallowed: list[BaseException] = []

    async def asking(run: Run) -> Next:
        try:
            await run.sleep(5)
        except Exception as exc:  # must not catch the suspension
            swallowed.append(exc)
        return Next("finish")

    engine = opened({"asking": asking})
    failures: list[Any] = []
    retries: list[Any] = []
    engine.observers.failure.append(failures.append)
    engine.observers.retry.append(lambda *a: retries.append(a))
    await engine.open()
    await engine.start("waiter", workflow_id="w")
    worker = Worker(engine)
    with caplog.at_level("INFO", logger="statewright"):
        await worker.run_until_idle()
    await suspended(engine, "w")
    assert [r.levelname for r in caplog.records if r.levelno >= 30] == []
    assert any(getattr(r, "action", None) == "handler_suspended" for r in caplog.records)
    clock.advance(5)
    await worker.run_until_idle()
    assert (await engine.get("w")).state == "done"
    assert (swallowed, failures, retries) == ([], [], [])
