"""``statewright_failures_total`` on ``GET /metrics``, on SQLite and PostgreSQL: each failed
attempt of a step, and each failure of a state, by machine, state, step, kind and error; so
"which step fails most" is one query. Step labels are the names handler code declares (the
first ``MAX_STEP_NAMES`` of a machine)."""

from __future__ import annotations

import httpx

from statewright import Engine, ManualClock, Worker
from tests.http.test_metrics import scrape, value
from tests.unit.test_transition_records import BACKOFF, charging_order

FAILURES = "statewright_failures_total"


async def test_failures_are_counted_by_machine_state_step_kind_and_error(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    engine.register(charging_order(clock))
    for wid, ctx in (
        ("flaky", {"amount": 5, "flaky": True}),  # charge's first attempt: transient
        ("declined", {"amount": 5, "declined": True}),  # charge fails fatally: on_fatal
        ("bad", {"fatal": True}),  # the handler fails before any step
        ("fine", {"amount": 5}),
    ):
        await engine.start("order", ctx, workflow_id=wid)
        await engine.send(wid, "submit")
    worker = Worker(engine)
    for _ in range(4):
        await worker.run_until_idle()
        clock.advance(BACKOFF)
    assert [(await engine.get(w)).state for w in ("flaky", "declined", "bad", "fine")] == [
        "done",
        "failed",
        "failed",
        "done",
    ]

    m = await scrape(client)
    at = {"machine": "order", "state": "charging"}
    assert value(m, FAILURES, **at, step="charge", kind="step", error="transient") == 1
    assert value(m, FAILURES, **at, step="charge", kind="handler", error="transient") == 1
    assert value(m, FAILURES, **at, step="charge", kind="step", error="fatal") == 1
    assert value(m, FAILURES, **at, step="charge", kind="handler", error="fatal") == 1
    assert value(m, FAILURES, **at, step="", kind="handler", error="fatal") == 1  # "bad"
    counted = {labels for (name, labels) in m if name == FAILURES}
    assert len(counted) == 5  # "reserve" never failed; nothing else was counted
