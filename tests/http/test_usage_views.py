"""Usage and the conversation over HTTP, on both stores: ``GET /v1/workflows/{id}`` carries
``usage`` (total, by state, by model) for a workflow whose agents called a model and nothing
for one without; ``GET /v1/workflows/{id}/conversation`` has the agents' messages in order,
what the type redacts masked for callers without the operator or admin role."""

from __future__ import annotations

import httpx

from statewright import Engine, Worker
from tests.agents_app import CARD, agent_type
from tests.http.conftest import auth


async def _ran(engine: Engine) -> None:
    engine.register(agent_type())
    await engine.start("triage", {"card": CARD}, workflow_id="t1")
    await engine.start("agent_task", workflow_id="plain")
    await Worker(engine).run_until_idle()
    assert (await engine.get("t1")).state == "done"


async def test_the_workflow_view_carries_usage_when_agents_called_a_model(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await _ran(engine)
    r = await client.get("/v1/workflows/t1", headers=auth("agent"))
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["total"] == {
        "input_tokens": 160,
        "output_tokens": 40,
        "tokens": 200,
        "cost": 0.004,
        "model_calls": 2,
    }
    assert usage["by_state"]["reading"]["model_calls"] == 2
    assert usage["by_model"]["small"]["cost"] == 0.0
    assert usage["by_model"]["big"]["tokens"] == 150
    plain = await client.get("/v1/workflows/plain", headers=auth("agent"))
    assert plain.status_code == 200 and "usage" not in plain.json()


async def test_the_conversation_is_redacted_like_step_results(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await _ran(engine)
    r = await client.get("/v1/workflows/t1/conversation", headers=auth("agent"))
    assert r.status_code == 200, r.text
    messages = r.json()["messages"]
    assert [(m["step"], m["role"]) for m in messages] == [
        ("triage.v1.model.0", "user"),
        ("triage.v1.model.0", "assistant"),
        ("triage.v1.model.1", "user"),
        ("triage.v1.model.1", "assistant"),
    ]
    assert (messages[1]["agent"], messages[1]["state"], messages[1]["visit"]) == (
        "triage",
        "reading",
        1,
    )
    assert CARD not in r.text  # masked in texts and in the tool call's arguments
    assert messages[1]["tool_calls"][0]["name"] == "lookup"
    seen = await client.get("/v1/workflows/t1/conversation", headers=auth("boss"))
    assert seen.json()["messages"][1]["content"] == f"the card is {CARD}"
    none = await client.get("/v1/workflows/plain/conversation", headers=auth("agent"))
    assert none.status_code == 200 and none.json() == {"messages": []}
    gone = await client.get("/v1/workflows/nope/conversation", headers=auth("agent"))
    assert gone.status_code == 404
    other = await client.get("/v1/workflows/t1/conversation", headers=auth("other"))
    assert other.status_code == 404  # another tenant's
