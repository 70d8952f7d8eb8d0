"""Budgets and usage on both stores (issue 27): an agent's model steps summed from the
database's model steps (the last one still pending, carried by the transition), a per-visit
budget crossed firing its event with no further model call, and a later visit of the state
starting afresh while a per-workflow budget keeps counting."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from statewright import Engine, ManualClock, Worker
from statewright.agents import usage
from statewright.engine.budgets import Budget
from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.unit.test_budgets import agent_type


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "sw.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    budgets = (
        Budget("over_budget", model_calls=2, per="visit", states=("checking",)),
        Budget("over_budget", tokens=1_000),
    )
    async with Engine(store, [agent_type(1, 9, budgets)], clock=ManualClock(1_000.0)) as eng:
        yield eng


async def test_visits_and_the_workflow_are_counted_apart(engine: Engine) -> None:
    worker = Worker(engine)
    await engine.start("review", {}, workflow_id="r1")
    await worker.run_until_idle()
    row = await engine.get("r1")
    assert row.state == "waiting_human"  # 1 call drafting, 2 checking: the visit's budget
    assert await usage.totals(engine.store, "r1") == usage.Totals(240, 60, 0.03, 3)
    assert (await usage.totals(engine.store, "r1", visit=2)).model_calls == 2
    for _ in range(3):  # each new visit of checking: two more calls, then over budget again
        await engine.send("r1", "resume")
        await worker.run_until_idle()
    row = await engine.get("r1")
    assert row.state == "waiting_human"
    report = await usage.usage_report(engine.store, "r1")
    # 1 + 2 + 2 + 2 + 2 calls of 100 tokens: 900, under the workflow's 1000.
    assert report["total"]["model_calls"] == 9
    assert report["by_state"]["checking"]["model_calls"] == 8
    await engine.send("r1", "resume")
    await worker.run_until_idle()
    report = await usage.usage_report(engine.store, "r1")
    # One call more (its visit's budget not reached), then the workflow's budget is.
    assert report["total"]["tokens"] == 1_000
    fired = (await engine.history("r1"))[-1]
    assert fired.event == "over_budget"
    assert fired.payload["budget"] == {"event": "over_budget", "per": "workflow", "tokens": 1000}
