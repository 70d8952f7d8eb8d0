"""What follows a handler run is decided by one function and written in one place.

``decide`` (engine/outcome.py) is given what happened to a real claimed workflow (on a real
SQLite store) and says which write follows; ``settle`` (engine/settle.py) is the only place
in the engine that releases a lease without a transition, and a run's pending step record is
written at two points only: before the run's own store calls, and before any outcome but the
transition that carries it. Alert delivery backs off with the workflows' backoff function.
"""

from __future__ import annotations

import ast
import random
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from statewright import Engine, MachineBuilder, ManualClock, Next, RetryPolicy, WorkflowType
from statewright.engine import outcome as outcome_module
from statewright.engine.failures import PARKED_FATAL, PARKED_REFUSED
from statewright.engine.outcome import decide
from statewright.engine.outcome_kinds import (
    Advance,
    Claim,
    Drop,
    Ended,
    Fail,
    Idle,
    Park,
    Refused,
    Release,
    Retry,
)
from statewright.engine.retry import backoff
from statewright.engine.steps import Run
from statewright.engine.transitions import Defer
from statewright.errors import (
    FatalError,
    IllegalTransition,
    LeaseLost,
    OutcomeUnknown,
    StoreError,
    TransientError,
    VersionConflict,
)
from statewright.observability.delivery import Backoff
from statewright.store import SQLiteStore

ENGINE = Path(outcome_module.__file__).parent


def machine(name: str, *, fatal_edge: bool = True) -> WorkflowType:
    b = MachineBuilder(name)
    b.state("work", initial=True).state("done", terminal=True).event("next")
    b.transition("next", "work", "done")
    if fatal_edge:
        b.state("failed", terminal=True).event("fatal_error")
        b.transition("fatal_error", "work", "failed")
    policy = RetryPolicy(max_attempts=2, base_delay=4.0, jitter=0.0)
    return WorkflowType(b.build(), {"work": lambda run: Next("next")}, retry=policy)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    types = [machine("job"), machine("bare", fatal_edge=False)]
    async with Engine(SQLiteStore(tmp_path / "o.db"), types, clock=ManualClock(1000.0)) as e:
        yield e


async def claimed(engine: Engine, type_name: str = "job") -> Claim:
    started = await engine.start(type_name)
    rows = await engine.store.claim_due("me", engine.clock.now(), 30.0, 10)
    [row] = [r for r in rows if r.id == started.row.id]
    wtype = engine.type_of(type_name)
    return Claim(engine.runtime, wtype, row, row.lease, "me", Run(engine.runtime, wtype, row))


async def test_a_result_advances_none_goes_idle(engine: Engine) -> None:
    claim = await claimed(engine)
    nxt = decide(claim, Ended("next", chain=True))
    assert isinstance(nxt, Advance) and nxt.chain
    assert (nxt.fire.event, nxt.fire.actor, nxt.fire.lease) == ("next", "me", claim.lease)
    idle = decide(claim, Ended(None))
    assert isinstance(idle, Idle) and idle.defer.attempts == 0


async def test_a_transient_failure_retries_after_the_backoff_then_fails(engine: Engine) -> None:
    claim = await claimed(engine)
    retry = decide(claim, Ended(raised=TransientError("503")))
    assert isinstance(retry, Retry) and retry.delay == 4.0
    assert isinstance(retry.change, Defer) and retry.change.next_due_at == 1004.0
    spent = replace(claim, row=replace(claim.row, attempts=2))
    failed = decide(spent, Ended(raised=TransientError("503")))
    assert isinstance(failed, Fail) and failed.fire.event == "fatal_error"
    assert "retry budget of 2 attempts spent" in str(failed.fire.last_error)


async def test_the_stores_own_failure_under_a_handler_spends_no_retry_budget(
    engine: Engine,
) -> None:
    # A step's record on a full disk: the handler is run again after the first backoff, with
    # its budget as it was (a full disk that outlasts the budget failed workflows before).
    spent = replace((c := await claimed(engine)), row=replace(c.row, attempts=2))
    for raised in (StoreError("SQLite failed: database or disk is full"), OutcomeUnknown("x")):
        retry = decide(spent, Ended(raised=raised))
        assert isinstance(retry, Retry) and retry.delay == 4.0, raised
        assert isinstance(retry.change, Defer) and retry.change.attempts == 2
        assert retry.change.total_attempts == spent.row.total_attempts
        assert retry.change.next_due_at == 1004.0


async def test_a_fatal_error_without_an_edge_parks(engine: Engine) -> None:
    claim = await claimed(engine, "bare")
    parked = decide(claim, Ended(raised=FatalError("no")))
    assert isinstance(parked, Park) and parked.defer.parked == PARKED_FATAL


async def test_refusals_release_drop_or_fail(engine: Engine) -> None:
    claim = await claimed(engine)
    nxt = decide(claim, Ended("next"))
    conflict = VersionConflict(claim.row.id, claim.row.version, claim.row.version + 1)
    assert isinstance(decide(claim, Refused(nxt, conflict)), Release)
    assert decide(claim, Refused(nxt, LeaseLost(claim.row.id))) == Drop(logged=True)
    refused = IllegalTransition("work", "next", [], "a guard", claim.row.id)
    assert isinstance(decide(claim, Refused(nxt, refused)), Fail)
    failed = decide(claim, Ended(raised=FatalError("no")))
    # A failure's write that loses its race writes nothing more (and releases nothing).
    assert decide(claim, Refused(failed, conflict)) == Drop()
    parked = decide(claim, Refused(failed, refused))
    assert isinstance(parked, Park) and parked.defer.parked == PARKED_REFUSED


async def test_a_stopped_handler_drops_releases_or_fails(engine: Engine) -> None:
    claim = await claimed(engine)
    assert decide(claim, Ended(stopped=True, lost=True)) == Drop(logged=True)
    assert isinstance(decide(claim, Ended(stopped=True, abandoned=True)), Release)
    deadline = decide(claim, Ended(stopped=True, timed_out=True))
    assert isinstance(deadline, Retry)  # DeadlineExceeded is transient
    assert "ran past its deadline" in str(deadline.change.last_error)
    assert decide(claim, Ended(raised=LeaseLost(claim.row.id))) == Drop(logged=True)


def _calls(name: str) -> list[tuple[str, int]]:
    """Where the engine calls ``<something>.name(...)``: (file, line)."""
    found = []
    for path in sorted(ENGINE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == name
            ):
                found.append((path.name, node.lineno))
    return found


def test_a_lease_is_released_without_a_transition_at_one_point() -> None:
    assert [f for f, _ in _calls("release_lease")] == ["settle.py"]


def test_the_pending_step_record_is_written_at_two_points() -> None:
    # The run's own next store call (Run._ready) and every outcome but the transition that
    # carries it (settle._write_pending); nothing else flushes a run.
    flushes = [(f, n) for f, n in _calls("flush") if f != "retention.py"]  # a file's flush
    assert sorted(f for f, _ in flushes) == ["settle.py", "steps.py"]


def test_alert_delivery_backs_off_with_the_workflows_backoff() -> None:
    from statewright.observability import delivery

    assert delivery.backoff is backoff  # type: ignore[attr-defined]  # the module uses this very function
    for n in (1, 2, 5, 12):
        alerts = Backoff(initial=2.0, factor=3.0, maximum=50.0, jitter=0.3)
        mine = backoff(
            n, initial=2.0, factor=3.0, maximum=50.0, jitter=0.3, rng=random.Random(n), around=True
        )
        assert alerts.delay(n, random.Random(n)) == mine
        policy = RetryPolicy(base_delay=2.0, multiplier=3.0, max_delay=50.0, jitter=0.3)
        theirs = backoff(
            n, initial=2.0, factor=3.0, maximum=50.0, jitter=0.3, rng=random.Random(n)
        )
        assert policy.delay(n, None, random.Random(n)) == theirs
