"""The worker runtime: wake-ups, graceful stop, cancel, progress and the inbox (real SQLite)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest

from statewright import (
    Engine,
    IllegalTransition,
    InvalidInput,
    MachineBuilder,
    ManualClock,
    Next,
    Run,
    Worker,
    WorkflowType,
)
from statewright.engine.workflow_type import Handler
from statewright.errors import Cancelled
from statewright.testing import memory_engine
from statewright.types import CancelRequest

JOB = (
    MachineBuilder("job")
    .state("working", initial=True)
    .state("review")
    .state("done", terminal=True)
    .state("cancelled", terminal=True)
    .event("finish")
    .event("submit")
    .event("approve")
    .event("cancel")
    .transition("finish", "working", "done")
    .transition("submit", "working", "review")
    .transition("approve", "review", "done")
    .transition("cancel", ["working", "review"], "cancelled")
    .build()
)
PLAIN = (  # no cancel edge at all
    MachineBuilder("plain")
    .state("working", initial=True)
    .state("done", terminal=True)
    .event("finish")
    .transition("finish", "working", "done")
    .build()
)


def job(handler: Handler, machine: Any = JOB, **options: Any) -> WorkflowType:
    return WorkflowType(machine, {"working": handler}, **options)


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def in_state(engine: Engine, wid: str, state: str) -> None:
    async def check() -> bool:
        return (await engine.get(wid)).state == state

    await eventually(check)


class Running:
    """A ``Worker.run()`` in the background; leaving the block stops it and waits."""

    def __init__(self, engine: Engine, **options: Any) -> None:
        self.worker = Worker(engine, **{"poll_interval": 30.0, **options})
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Worker:
        self.task = asyncio.create_task(self.worker.run())
        await asyncio.sleep(0.02)  # recovery done, idle
        return self.worker

    async def stop(self, grace: float | None = None) -> float:
        assert self.task is not None
        started = time.monotonic()
        self.worker.stop(grace)
        await asyncio.wait_for(self.task, 5.0)
        return time.monotonic() - started

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        if not self.task.done():
            await self.stop(grace=0.0)


# -- wake-ups ----------------------------------------------------------------------------------


@pytest.mark.alone
async def test_idle_worker_wakes_on_new_work_long_before_its_poll(clock: ManualClock) -> None:
    started = asyncio.Event()

    async def handler(run: Run) -> str:
        started.set()
        return "finish"

    async with memory_engine([job(handler)], clock) as engine:
        async with Running(engine, poll_interval=30.0) as worker:
            t0 = time.monotonic()
            await engine.start("job", workflow_id="j")
            await asyncio.wait_for(started.wait(), 2.0)
            assert time.monotonic() - t0 < 0.2
            await in_state(engine, "j", "done")
            assert worker.in_flight == []
        assert await engine.store.lease_owners() == []


# -- graceful stop -----------------------------------------------------------------------------


async def test_stop_lets_the_handler_persist_and_hands_back_unstarted_claims(
    clock: ManualClock,
) -> None:
    a_started, a_gate = asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    async def handler(run: Run) -> str:
        ran.append(run.id)
        a_started.set()
        await a_gate.wait()
        return "finish"

    async with memory_engine([job(handler)], clock) as engine:
        store = engine.store
        # Hold b between its claim and its handler, where stop() finds it unstarted.
        b_held, b_gate = asyncio.Event(), asyncio.Event()
        real_timers = store.timers

        async def timers(workflow_id: str) -> Any:
            if workflow_id == "b":
                b_held.set()
                await b_gate.wait()
            return await real_timers(workflow_id)

        store.timers = timers  # type: ignore[method-assign, assignment]
        await engine.start("job", workflow_id="a")
        clock.advance(1)
        await engine.start("job", workflow_id="b")
        run = Running(engine, concurrency=2)
        async with run as worker:
            await asyncio.wait_for(asyncio.gather(a_started.wait(), b_held.wait()), 2.0)
            worker.stop()
            b_gate.set()

            async def b_released() -> bool:
                return (await engine.get("b")).lease_owner is None

            await eventually(b_released)  # at once, while a's handler still runs
            assert not run.task.done()  # type: ignore[union-attr]
            assert (await engine.get("a")).lease_owner == worker.id
            a_gate.set()
            await asyncio.wait_for(run.task, 2.0)  # type: ignore[arg-type]
        assert ran == ["a"]
        a, b = await engine.get("a"), await engine.get("b")
        assert (a.state, b.state) == ("done", "working")
        assert b.next_due_at is not None  # still due: the next worker takes it
        assert await store.lease_owners() == []


@contextlib.asynccontextmanager
async def running_step(engine: Engine, key: str) -> AsyncIterator[Running]:
    """Start workflow ``j`` and run workers until its step ``key`` is recorded executing."""

    async def executing() -> bool:
        step = await engine.store.get_step(key)
        return step is not None and step.status == "executing"

    await engine.start("job", workflow_id="j")
    run = Running(engine)
    async with run:
        await eventually(executing)
        yield run


@pytest.mark.alone
async def test_grace_expiry_cancels_the_handler_and_leaves_the_workflow_to_rerun(
    clock: ManualClock,
) -> None:
    seen: list[str] = []
    hang = True

    async def slow(key: str) -> str:
        if hang:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise
        return "ok"

    async def handler(run: Run) -> str:
        await run.step("one", lambda key: 1)
        await run.step("two", slow, safe_to_repeat=True)
        return "finish"

    async with memory_engine([job(handler)], clock) as engine:
        async with running_step(engine, "j:two") as run:
            took = await run.stop(grace=0.1)
        assert seen == ["cancelled"] and 0.1 <= took < 1.0
        row = await engine.get("j")
        assert (row.state, row.lease_owner) == ("working", None)
        assert await engine.store.lease_owners() == []
        assert [(s.step, s.status) for s in await engine.store.steps("j")] == [
            ("one", "done"),
            ("two", "executing"),
        ]
        hang = False
        await Worker(engine).run_until_idle()  # the next worker reconciles and finishes
        assert (await engine.get("j")).state == "done"


@pytest.mark.alone
async def test_a_cancelled_handler_waits_for_its_step_action_to_unwind(
    clock: ManualClock,
) -> None:
    """An ``async def`` action runs in its handler's task: cancelling the handler (here at
    the end of a shutdown's grace) lets the action's cleanup finish before the worker writes
    anything and lets go, instead of leaving it running in the background."""
    seen: list[str] = []

    async def slow(key: str) -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            await asyncio.sleep(0.05)  # cleanup that takes a while (closing a connection)
            seen.append("unwound")
            raise
        return "ok"

    async def handler(run: Run) -> str:
        await run.step("two", slow)
        return "finish"

    async with memory_engine([job(handler)], clock) as engine:
        async with running_step(engine, "j:two") as run:
            await run.stop(grace=0.1)
            assert seen == ["cancelled", "unwound"]
        assert (await engine.get("j")).lease_owner is None


async def test_a_handler_turning_shutdown_into_cancelled_does_not_cancel_the_workflow(
    clock: ManualClock,
) -> None:
    started = asyncio.Event()

    async def handler(run: Run) -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise Cancelled("interrupted") from None
        return "finish"

    async with memory_engine([job(handler)], clock) as engine:
        await engine.start("job", workflow_id="j")
        run = Running(engine)
        async with run:
            await asyncio.wait_for(started.wait(), 2.0)
            await run.stop(grace=0.0)
        row = await engine.get("j")
        assert (row.state, row.version, row.lease_owner) == ("working", 1, None)


# -- cancel ------------------------------------------------------------------------------------


async def test_cancel_of_an_idle_workflow_fires_at_once(clock: ManualClock) -> None:
    async with memory_engine([JOB], clock) as engine:  # no handlers: nobody leases it
        await engine.start("job", workflow_id="j")
        row = (await engine.cancel("j", reason="not needed", actor="ops")).row
        assert (row.state, row.terminal, row.cancel_requested) == ("cancelled", True, None)
        last = (await engine.history("j"))[-1]
        assert (last.event, last.actor, last.payload) == (
            "cancel",
            "ops",
            {"reason": "not needed"},
        )
        with pytest.raises(IllegalTransition) as info:
            await engine.cancel("j", reason="again", actor="ops")
        assert info.value.reason == "terminal state"
        with pytest.raises(InvalidInput):
            await engine.cancel("j", reason=" ", actor="ops")


async def test_a_claimed_workflow_with_a_pending_request_is_cancelled_without_running(
    clock: ManualClock,
) -> None:
    ran: list[str] = []

    async def handler(run: Run) -> str:
        ran.append(run.id)
        return "finish"

    async with memory_engine([job(handler)], clock) as engine:
        await engine.start("job", workflow_id="j")
        # As if the request landed just as a worker let go of the workflow.
        request = CancelRequest("obsolete", "erin", clock.now(), 1)
        await engine.store.request_cancel("j", request)
        assert await Worker(engine).run_until_idle() == 1
        assert ran == []
        last = (await engine.history("j"))[-1]
        assert (last.event, last.actor, last.payload) == ("cancel", "erin", {"reason": "obsolete"})


async def test_cancel_without_an_edge_is_refused_and_changes_nothing(clock: ManualClock) -> None:
    gate = asyncio.Event()

    async def handler(run: Run) -> str:
        await gate.wait()
        return "finish"

    no_event = WorkflowType(JOB, cancel_event=None)
    async with memory_engine([PLAIN, no_event], clock) as engine:
        await engine.start("plain", workflow_id="p")
        await engine.start("job", workflow_id="j")
        for wid in ("p", "j"):
            before = await engine.get(wid)
            with pytest.raises(IllegalTransition):
                await engine.cancel(wid, reason="stop", actor="ops")
            assert await engine.get(wid) == before
            assert len(await engine.history(wid)) == 1
    # Leased (a handler runs): refused as well, and no request is recorded.
    async with memory_engine([job(handler, PLAIN)], clock) as engine:
        await engine.start("plain", workflow_id="p")
        async with Running(engine):

            async def leased() -> bool:
                return (await engine.get("p")).lease_owner is not None

            await eventually(leased)
            with pytest.raises(IllegalTransition):
                await engine.cancel("p", reason="stop", actor="ops")
            assert (await engine.get("p")).cancel_requested is None
            gate.set()
            await in_state(engine, "p", "done")


async def test_cancel_reaches_the_running_handler_which_saves_partial_results(
    clock: ManualClock,
) -> None:
    halfway, gate = asyncio.Event(), asyncio.Event()
    work: list[int] = []

    def part(key: str) -> int:
        i = int(key.rpartition("part")[2])
        work.append(i)
        return i * i

    async def handler(run: Run) -> str:
        for i in range(10):
            await run.check_cancel()
            await run.step(f"part{i}", part)
            run.save_partial(parts_done=i + 1, last=i * i)
            if i == 2:
                halfway.set()
                await gate.wait()
        return "finish"

    async with memory_engine([job(handler)], clock) as engine:
        await engine.start("job", workflow_id="j", input={"order": 7})
        async with Running(engine, cancel_grace=60.0):
            await asyncio.wait_for(halfway.wait(), 2.0)
            requested = (await engine.cancel("j", reason="customer withdrew", actor="alice")).row
            assert (requested.state, requested.cancel_requested is not None) == ("working", True)
            gate.set()
            await in_state(engine, "j", "cancelled")
        assert work == [0, 1, 2]
        row = await engine.get("j")
        assert row.context == {"order": 7, "parts_done": 3, "last": 4}
        assert (row.cancel_requested, row.lease_owner) == (None, None)
        last = (await engine.history("j"))[-1]
        assert (last.event, last.actor) == ("cancel", "alice")
        assert last.payload == {"reason": "customer withdrew"}
        assert last.context_patch == {"parts_done": 3, "last": 4}  # same transaction
        assert (await engine.check("j")).state == "cancelled"  # replay agrees
        assert await engine.store.lease_owners() == []


@pytest.mark.alone
async def test_a_handler_that_ignores_the_request_is_cancelled_after_the_grace(
    clock: ManualClock,
) -> None:
    busy = asyncio.Event()

    async def handler(run: Run) -> str:
        run.save_partial(fetched=40)
        busy.set()
        await asyncio.sleep(3600)  # never checks
        return "finish"

    async with memory_engine([job(handler)], clock) as engine:
        await engine.start("job", workflow_id="j")
        async with Running(engine, cancel_grace=0.05):
            await asyncio.wait_for(busy.wait(), 2.0)
            t0 = time.monotonic()
            await engine.cancel("j", reason="too slow", actor="bob")
            await in_state(engine, "j", "cancelled")
            assert time.monotonic() - t0 < 1.0  # the request woke the heartbeat
        row = await engine.get("j")
        assert row.context == {"fetched": 40}
        last = (await engine.history("j"))[-1]
        assert (last.event, last.actor, last.payload) == ("cancel", "bob", {"reason": "too slow"})


async def test_a_request_is_delivered_after_the_handler_moves_on(clock: ManualClock) -> None:
    gate = asyncio.Event()

    async def handler(run: Run) -> str:
        await gate.wait()
        return "submit"  # to review: no handler there, nobody would claim it

    async with memory_engine([job(handler)], clock) as engine:
        await engine.start("job", workflow_id="j")
        async with Running(engine, cancel_grace=60.0):

            async def leased() -> bool:
                return (await engine.get("j")).lease_owner is not None

            await eventually(leased)
            await engine.cancel("j", reason="late", actor="carol")
            gate.set()
            await in_state(engine, "j", "cancelled")
        events = [(r.event, r.to_state, r.actor) for r in await engine.history("j")][1:]
        assert events == [("submit", "review", events[0][2]), ("cancel", "cancelled", "carol")]


async def test_a_delivered_request_does_not_cancel_the_cleanup_state_again(
    clock: ManualClock,
) -> None:
    machine = (
        MachineBuilder("job")
        .state("working", initial=True)
        .state("cleanup")
        .state("cancelled", terminal=True)
        .state("done", terminal=True)
        .event("finish")
        .event("cancel")
        .event("cleaned")
        .transition("finish", "working", "done")
        .transition("cancel", "working", "cleanup")
        .transition("cancel", "cleanup", "cancelled")  # cancel again to skip the cleanup
        .transition("cleaned", "cleanup", "cancelled")
        .build()
    )

    async def work(run: Run) -> str:
        while True:
            await run.step("tick", lambda key: None)
            await asyncio.sleep(0.01)
            await run.check_cancel()

    async def cleanup(run: Run) -> str:
        await run.step("undo", lambda key: "undone")
        return "cleaned"

    wtype = WorkflowType(machine, {"working": work, "cleanup": cleanup})
    async with memory_engine([wtype], clock) as engine:
        await engine.start("job", workflow_id="j")
        async with Running(engine):

            async def leased() -> bool:
                return (await engine.get("j")).lease_owner is not None

            await eventually(leased)
            await engine.cancel("j", reason="stop", actor="ops")
            await in_state(engine, "j", "cancelled")
        events = [r.event for r in await engine.history("j")]
        assert events == ["$start", "cancel", "cleaned"]


async def test_cancelled_without_an_edge_parks_the_workflow(clock: ManualClock) -> None:
    async def handler(run: Run) -> str:
        raise Cancelled("giving up")

    async with memory_engine([job(handler, PLAIN)], clock) as engine:
        await engine.start("plain", workflow_id="p")
        await Worker(engine).run_until_idle()
        row = await engine.get("p")
        assert (row.state, row.next_due_at, row.lease_owner) == ("working", None, None)
        assert row.last_error is not None and "giving up" in row.last_error
        assert len(await engine.history("p")) == 1


# -- progress and inbox ------------------------------------------------------------------------


async def test_progress_is_recorded_never_fails_the_step_and_clears_on_transition(
    clock: ManualClock,
) -> None:
    reported, gate = asyncio.Event(), asyncio.Event()

    async def handler(run: Run) -> str:
        await run.progress(done=3, of=10, message="fetching")
        await run.progress(bad=object())  # cannot be stored: logged, not raised
        reported.set()
        await gate.wait()
        return "submit"

    async with memory_engine([job(handler)], clock) as engine:
        await engine.start("job", workflow_id="j")
        async with Running(engine):
            await asyncio.wait_for(reported.wait(), 2.0)
            row = await engine.get("j")
            assert row.progress == {"done": 3, "of": 10, "message": "fetching"}
            gate.set()
            await in_state(engine, "j", "review")
        assert (await engine.get("j")).progress is None


@pytest.mark.alone
async def test_wait_input_returns_a_posted_input_or_none_on_timeout(clock: ManualClock) -> None:
    waiting = asyncio.Event()

    async def handler(run: Run) -> Next:
        assert await run.wait_input("note", timeout=0) is None
        waiting.set()
        # Held in the handler (``hold``): woken there by the post, not suspended.
        answer = await run.wait_input("answer", timeout=5.0, hold=5.0, poll_interval=30.0)
        note = await run.wait_input("note", timeout=0)
        return Next("finish", context={"answer": answer, "note": note})

    async with memory_engine([job(handler)], clock) as engine:
        await engine.start("job", workflow_id="j")
        async with Running(engine):
            await asyncio.wait_for(waiting.wait(), 2.0)
            await engine.post_input("j", "note", {"text": "fyi"})
            t0 = time.monotonic()
            await engine.post_input("j", "answer", {"ok": True})
            await in_state(engine, "j", "done")
            assert time.monotonic() - t0 < 0.5  # woken, not polled
        context: Mapping[str, Any] = (await engine.get("j")).context
        assert context == {"answer": {"ok": True}, "note": {"text": "fyi"}}
        assert await engine.store.next_input("j") is None  # both consumed


async def test_wait_input_ends_with_cancelled_when_a_cancel_arrives(clock: ManualClock) -> None:
    async def handler(run: Run) -> str:
        run.save_partial(asked=True)
        await run.wait_input("answer", timeout=30.0, hold=30.0, poll_interval=30.0)
        return "finish"

    async with memory_engine([job(handler)], clock) as engine:
        await engine.start("job", workflow_id="j")
        async with Running(engine, cancel_grace=60.0):

            async def leased() -> bool:
                return (await engine.get("j")).lease_owner is not None

            await eventually(leased)
            await asyncio.sleep(0.02)
            await engine.cancel("j", reason="no answer needed", actor="ops")
            await in_state(engine, "j", "cancelled")
        assert (await engine.get("j")).context == {"asked": True}
