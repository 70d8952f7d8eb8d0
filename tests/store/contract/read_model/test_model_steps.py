"""``model_steps``: the steps of a workflow whose result holds an agent's model-call usage
envelope (``{"$llm": {...}, ...}``), filtered by the database on SQLite and PostgreSQL: a
``"$llm"`` that is not an object, one nested deeper, or the text ``$llm`` in a string is not
one."""

from __future__ import annotations

from typing import Any

from statewright.store.protocol import FullStore as Store
from statewright.types import StepFinish
from tests.store.contract.writes import T0, new

LLM = {"$llm": {"model": "m", "input_tokens": 3}, "response": {"text": "hi"}, "messages": []}


async def test_model_steps_are_the_steps_holding_a_usage_envelope(store: Store) -> None:
    for wid in ("w1", "w2"):
        await store.create_workflow(new(wid))
    results: list[tuple[str, str, Any]] = [
        ("w1", "agent.v1.model.0", LLM),
        ("w1", "charge", {"amount": 5}),
        ("w1", "text", 'he said "$llm"'),
        ("w1", "nested", {"inner": {"$llm": {"model": "m"}}}),
        ("w1", "not_object", {"$llm": "m"}),
        ("w1", "listed", [{"$llm": {"model": "m"}}]),
        ("w1", "agent.v1.model.1", {**LLM, "response": "100% sure: it's fine"}),
        ("w2", "agent.v1.model.0", LLM),
    ]
    for i, (wid, step, result) in enumerate(results):
        key = f"{wid}:{step}"
        await store.step_begin(key, wid, step, T0 + i)
        await store.step_finish(StepFinish(key, 1, "done", result, at=T0 + i))
    await store.step_begin("w1:agent.v1.model.2", "w1", "agent.v1.model.2", T0 + 20)  # executing
    found = await store.model_steps("w1")
    assert [s.step for s in found] == ["agent.v1.model.0", "agent.v1.model.1"]
    assert found[0].result == LLM and found[0].status == "done"
    assert [s.step for s in await store.model_steps("w2")] == ["agent.v1.model.0"]
    assert await store.model_steps("nope") == []
