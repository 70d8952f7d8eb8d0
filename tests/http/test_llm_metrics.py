"""The agents' model-call counters on ``GET /metrics``, on SQLite and PostgreSQL:
``statewright_llm_tokens_total{type,state,model,kind}``, ``statewright_llm_cost_total`` and
``statewright_llm_calls_total``, each fresh model call counted once (a call a re-run handler
finds in the ledger is not counted again), labels bounded by what the types declare."""

from __future__ import annotations

import httpx

from statewright import Engine, ManualClock, Worker
from tests.http.test_metrics import scrape, value
from tests.unit.test_budgets import agent_type

TOKENS = "statewright_llm_tokens_total"
COST = "statewright_llm_cost_total"
CALLS = "statewright_llm_calls_total"


async def test_model_calls_are_counted_by_type_state_model_and_kind(
    client: httpx.AsyncClient, engine: Engine, clock: ManualClock
) -> None:
    engine.register(agent_type(2, 3, model="small", flaky=True))
    await engine.start("review", {}, workflow_id="r1")
    worker = Worker(engine)
    for _ in range(3):
        await worker.run_until_idle()
        clock.advance(1.0)
    assert (await engine.get("r1")).state == "done"

    m = await scrape(client)
    drafting = {"type": "review", "state": "drafting", "model": "small"}
    checking = {"type": "review", "state": "checking", "model": "fake"}
    # drafting's first run failed after its 2 calls; the re-run found them in the ledger
    assert value(m, CALLS, **drafting) == 2
    assert value(m, TOKENS, **drafting, kind="input") == 160
    assert value(m, TOKENS, **drafting, kind="output") == 40
    assert abs(value(m, COST, **drafting) - 0.02) < 1e-9
    assert value(m, CALLS, **checking) == 3
    assert value(m, TOKENS, **checking, kind="input") == 240
    counted = [(name, labels) for (name, labels) in m if name in (TOKENS, COST, CALLS)]
    assert len(counted) == 2 * 4  # per state: calls, cost, input and output tokens
