"""Transition records: each committed transition's observers, log line and span event carry the
time spent in the state left (``duration_ms``), the guard that chose the target, and the step
(and attempt) the handler whose outcome it is ran last; handler and step failures reach the
failure observers, classified by the type's retry policy."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from statewright import (
    Engine,
    FatalError,
    MachineBuilder,
    ManualClock,
    Next,
    RetryPolicy,
    Run,
    TransientError,
    Worker,
    WorkflowType,
)
from statewright.engine.hooks import Failure, TransitionEvent
from statewright.engine.steps import StepKey
from statewright.observability.tracing import EVENT_NAME, attach_tracing
from statewright.testing import memory_engine

BIG = "payload.amount > 100"
STEP_SECONDS = 0.25
BACKOFF = 10.0


def _machine() -> Any:
    return (
        MachineBuilder("order")
        .state("new", initial=True)
        .state("charging")
        .state("review")
        .state("done", terminal=True)
        .state("failed", terminal=True)
        .event("submit")
        .event("charged")
        .event("fail")
        .event("approve")
        .transition("submit", "new", "charging")
        .transition("charged", "charging", "review", guard=BIG)
        .transition("charged", "charging", "done")
        .transition("fail", "charging", "failed")
        .transition("approve", "review", "done")
        .build()
    )


class Charging:
    """Reserves, then charges (its first attempt fails transiently when the context says
    ``flaky``; every attempt fails fatally when it says ``declined``), each step taking
    :data:`STEP_SECONDS` on the clock; returns ``charged`` with the context's amount.
    ``fatal`` fails the handler before any step."""

    def __init__(self, clock: ManualClock, *, repeatable: bool = True) -> None:
        self.clock = clock
        self.repeatable = repeatable

    async def __call__(self, run: Run) -> Next:
        ctx = run.context
        if ctx.get("fatal"):
            raise FatalError("no card on file")

        def reserve(key: StepKey) -> str:
            self.clock.advance(STEP_SECONDS)
            return str(key)

        def charge(key: StepKey) -> int:
            self.clock.advance(STEP_SECONDS)
            if ctx.get("flaky") and key.attempt == 1:
                raise TransientError("503 from the card processor")
            if ctx.get("declined"):
                raise FatalError("card declined")
            return int(ctx["amount"])

        await run.step("reserve", reserve)
        amount = await run.step("charge", charge, safe_to_repeat=self.repeatable)
        return Next("charged", {"amount": amount})


def charging_order(clock: ManualClock, *, repeatable: bool = True, **policy: Any) -> WorkflowType:
    return WorkflowType(
        _machine(),
        {"charging": Charging(clock, repeatable=repeatable)},
        retry=RetryPolicy(**{"base_delay": BACKOFF, "jitter": 0.0, "max_attempts": 3, **policy}),
        on_transient=None,  # re-run in place after the backoff
        on_fatal="fail",
    )


async def _run(engine: Engine, clock: ManualClock, rounds: int = 4) -> None:
    worker = Worker(engine)
    for _ in range(rounds):
        await worker.run_until_idle()
        clock.advance(BACKOFF)


class Seen:
    def __init__(self, engine: Engine) -> None:
        self.transitions: list[TransitionEvent] = []
        self.failures: list[Failure] = []
        engine.observers.transition.append(self.transitions.append)
        engine.observers.failure.append(self.failures.append)

    def of(self, wid: str, event: str) -> TransitionEvent:
        (found,) = [e for e in self.transitions if e.after.id == wid and e.event == event]
        return found


async def test_a_handlers_transition_names_its_guard_its_last_step_and_the_time_in_state() -> None:
    clock = ManualClock(1_000.0)
    async with memory_engine([charging_order(clock)], clock) as engine:
        seen = Seen(engine)
        await engine.start("order", {"amount": 250, "flaky": True}, workflow_id="o1")
        clock.advance(2.5)
        await engine.send("o1", "submit")
        await _run(engine, clock)
        assert (await engine.get("o1")).state == "review"

    start = seen.of("o1", "$start")
    assert (start.duration_ms, start.guard, start.step, start.attempt) == (None, None, None, None)
    submit = seen.of("o1", "submit")  # an external event: no handler, no step; unguarded
    assert (submit.duration_ms, submit.guard, submit.step, submit.attempt) == (
        2500.0,
        None,
        None,
        None,
    )
    charged = seen.of("o1", "charged")
    assert charged.guard == BIG
    assert (charged.step, charged.attempt) == ("charge", 2)  # its first attempt failed
    # In "charging": both steps of the failed run, the backoff, the charge of the second (the
    # reservation is done: its result is taken from the ledger).
    assert charged.duration_ms == (3 * STEP_SECONDS + BACKOFF) * 1000


async def test_an_unguarded_edge_and_a_handler_without_steps_leave_guard_and_step_empty() -> None:
    clock = ManualClock(1_000.0)
    async with memory_engine([charging_order(clock)], clock) as engine:
        seen = Seen(engine)
        await engine.start("order", {"amount": 5}, workflow_id="small")
        await engine.send("small", "submit")
        await engine.start("order", {"fatal": True}, workflow_id="bad")
        await engine.send("bad", "submit")
        await _run(engine, clock)
        assert (await engine.get("small")).state == "done"
        assert (await engine.get("bad")).state == "failed"
    small = seen.of("small", "charged")
    assert (small.guard, small.step, small.attempt) == (None, "charge", 1)
    assert small.duration_ms == 2 * STEP_SECONDS * 1000
    fail = seen.of("bad", "fail")  # on_fatal, from a handler that ran no step
    assert (fail.guard, fail.step, fail.attempt) == (None, None, None)


async def test_a_failure_transition_names_the_step_that_failed() -> None:
    clock = ManualClock(1_000.0)
    async with memory_engine([charging_order(clock)], clock) as engine:
        seen = Seen(engine)
        await engine.start("order", {"amount": 5, "declined": True}, workflow_id="o")
        await engine.send("o", "submit")
        await _run(engine, clock)
        assert (await engine.get("o")).state == "failed"
    fail = seen.of("o", "fail")  # on_fatal, for the error charge's first attempt raised
    assert (fail.actor, fail.step, fail.attempt) == ("engine", "charge", 1)


async def test_the_log_line_carries_the_record(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(1_000.0)
    async with memory_engine([charging_order(clock)], clock) as engine:
        await engine.start("order", {"amount": 250}, workflow_id="o1")
        await engine.send("o1", "submit")
        with caplog.at_level(logging.INFO, logger="statewright.transitions"):
            await _run(engine, clock)
    (line,) = [r for r in caplog.records if getattr(r, "event", None) == "charged"]
    assert line.getMessage() == "transition"
    fields = vars(line)
    assert fields["action"] == "transition"
    assert (fields["from_state"], fields["to_state"]) == ("charging", "review")
    assert fields["duration_ms"] == 2 * STEP_SECONDS * 1000
    assert (fields["guard"], fields["step"], fields["attempt"]) == (BIG, "charge", 1)


async def test_observers_run_when_the_log_line_is_off(caplog: pytest.LogCaptureFixture) -> None:
    """The line's fields are built only when INFO is logged; observers are told regardless."""
    clock = ManualClock(1_000.0)
    async with memory_engine([charging_order(clock)], clock) as engine:
        seen = Seen(engine)
        with caplog.at_level(logging.WARNING, logger="statewright.transitions"):
            await engine.start("order", {"amount": 1}, workflow_id="o1")
            await engine.send("o1", "submit")
    assert [e.event for e in seen.transitions] == ["$start", "submit"]
    assert not [r for r in caplog.records if r.getMessage() == "transition"]


async def test_the_span_event_carries_the_record() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    clock = ManualClock(1_000.0)
    async with memory_engine([charging_order(clock)], clock) as engine:
        attach_tracing(engine, provider.get_tracer("test"))
        await engine.start("order", {"amount": 250, "flaky": True}, workflow_id="o1")
        clock.advance(1.5)
        await engine.send("o1", "submit")
        await _run(engine, clock)
    events = {
        str((e.attributes or {})["statewright.event"]): dict(e.attributes or {})
        for s in exporter.get_finished_spans()
        for e in s.events
        if e.name == EVENT_NAME
    }
    assert set(events) == {"$start", "submit", "charged"}
    # OpenTelemetry attributes cannot be None: what is not known is left out.
    assert not {"statewright.duration_ms", "statewright.guard"} & set(events["$start"])
    assert not {"statewright.step.name", "statewright.step.attempt"} & set(events["submit"])
    assert events["submit"]["statewright.duration_ms"] == 1500.0
    charged = events["charged"]
    assert charged["statewright.guard"] == BIG
    assert charged["statewright.step.name"] == "charge"
    assert charged["statewright.step.attempt"] == 2
    assert charged["statewright.duration_ms"] == (3 * STEP_SECONDS + BACKOFF) * 1000
    assert charged["statewright.from_state"] == "charging"


async def test_step_and_handler_failures_reach_the_failure_observers() -> None:
    clock = ManualClock(1_000.0)
    async with memory_engine([charging_order(clock)], clock) as engine:
        seen = Seen(engine)
        await engine.start("order", {"amount": 5, "flaky": True}, workflow_id="flaky")
        await engine.send("flaky", "submit")
        await engine.start("order", {"fatal": True}, workflow_id="bad")
        await engine.send("bad", "submit")
        await _run(engine, clock)
    got = sorted((f.workflow.id, f.workflow.state, f.kind, f.error, f.step, f.attempt)
                 for f in seen.failures)  # fmt: skip
    assert got == [
        ("bad", "charging", "handler", "fatal", None, None),
        ("flaky", "charging", "handler", "transient", "charge", 1),
        ("flaky", "charging", "step", "transient", "charge", 1),
    ]


async def test_a_step_whose_outcome_is_unknown_is_a_handler_failure_named_for_it() -> None:
    """charge's first attempt failed with an outcome the ledger cannot know (a 503), it is not
    safe to repeat and no reconcile hook tells: the re-run parks the workflow, reported as the
    handler's failure ``unknown`` in that step."""
    clock = ManualClock(1_000.0)
    async with memory_engine([charging_order(clock, repeatable=False)], clock) as engine:
        seen = Seen(engine)
        await engine.start("order", {"amount": 5, "flaky": True}, workflow_id="o")
        await engine.send("o", "submit")
        await _run(engine, clock)
        assert (await engine.get("o")).parked == "step_outcome_unknown"
    got = [(f.kind, f.error, f.step, f.attempt) for f in seen.failures]
    assert got == [
        ("step", "transient", "charge", 1),
        ("handler", "transient", "charge", 1),
        ("handler", "unknown", "charge", None),
    ]


async def test_a_classifier_that_raises_reports_fatal_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(1_000.0)
    calls: list[BaseException] = []

    def classifier(exc: BaseException) -> None:
        calls.append(exc)
        if len(calls) == 1:  # the report's call; the retry policy's own comes next
            raise RuntimeError("classifier bug")

    wtype = charging_order(clock, classifier=classifier)
    async with memory_engine([wtype], clock) as engine:
        seen = Seen(engine)
        await engine.start("order", {"fatal": True}, workflow_id="bad")
        await engine.send("bad", "submit")
        with caplog.at_level(logging.WARNING):
            await _run(engine, clock)
        assert (await engine.get("bad")).state == "failed"
    assert [(f.kind, f.error) for f in seen.failures] == [("handler", "fatal")]
    assert "the retry policy's classifier raised" in caplog.text


async def test_without_failure_observers_nothing_is_classified() -> None:
    clock = ManualClock(1_000.0)
    calls: list[BaseException] = []

    def classifier(exc: BaseException) -> None:
        calls.append(exc)

    wtype = charging_order(clock, classifier=classifier)
    async with memory_engine([wtype], clock) as engine:
        await engine.start("order", {"amount": 5, "flaky": True}, workflow_id="o")
        await engine.send("o", "submit")
        await _run(engine, clock)
        assert (await engine.get("o")).state == "done"
    assert len(calls) == 1  # the retry policy's, for the handler's failure; none for reports
