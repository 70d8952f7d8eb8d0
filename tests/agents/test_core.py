"""The framework-neutral agent session (statewright.agents.core), on both stores: model and
tool calls are durable steps named per visit, and the state's events are the agent's only
way to move the workflow."""

from __future__ import annotations

from typing import Any

import pytest

from statewright import Engine, MachineBuilder, Next, Run, WorkflowType
from statewright.agents.core import AgentSession, Usage, current_key
from statewright.definition.machine import Machine
from statewright.errors import InvalidInput
from statewright.types import JSON, WorkflowRow
from tests.agents.conftest import Opener


def refund_machine() -> Machine:
    b = MachineBuilder("refund")
    b.state("reviewing", initial=True).state("awaiting_approval").state("rejected", terminal=True)
    b.state("paid", terminal=True)
    b.event(
        "request_approval",
        description="Ask a person to approve the refund.",
        payload_schema={
            "type": "object",
            "properties": {"amount": {"type": "number", "minimum": 0}},
            "required": ["amount"],
        },
        roles=["agent"],
    )
    b.event("reject", roles=["agent"]).event("approve", approval=True).event(
        "ops_only", roles=["ops"]
    )
    b.event("again")
    b.transition(
        "request_approval", "reviewing", "awaiting_approval", guard="context.open == True"
    )
    b.transition("reject", "reviewing", "rejected")
    b.transition("ops_only", "reviewing", "rejected")
    b.transition("approve", "awaiting_approval", "paid")
    b.transition("again", "awaiting_approval", "reviewing")
    return b.build()


async def claimed(engine: Engine, wid: str, **context: Any) -> WorkflowRow:
    await engine.start("refund", context, workflow_id=wid)
    [row] = await engine.store.claim_due("me", engine.clock.now(), 30.0, 1)
    return row


async def test_model_and_tool_steps_replay_from_the_ledger(opened: Opener) -> None:
    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=True)
    asked: list[int] = []
    effects: list[str] = []

    def model(n: int) -> Any:
        async def call() -> tuple[JSON, list[JSON], Usage]:
            asked.append(n)
            return {"text": f"r{n}"}, [{"role": "assistant", "content": f"r{n}"}], Usage("m", 3, 4)

        return call

    async def tool(key: Any) -> JSON:
        assert current_key() == key
        effects.append(str(key))
        return {"ok": True, "fence": key.fencing_token}

    for _ in range(2):  # the second pass is a re-run of the handler: nothing is asked again
        session = AgentSession(Run(engine.runtime, wtype, row))
        assert await session.model_call(model(0)) == {"text": "r0"}
        assert await session.tool_call("lookup", "0-0", tool) == {"ok": True, "fence": row.fence}
        assert await session.model_call(model(1)) == {"text": "r1"}
    assert asked == [0, 1]
    assert effects == [f"w:agent.v{row.version}.tool.0-0.lookup"]
    steps = {s.step: s for s in await engine.store.steps("w")}
    env = steps[f"agent.v{row.version}.model.1"].result
    assert env["$llm"]["input_tokens"] == 3 and env["$llm"]["state"] == "reviewing"
    assert env["messages"] == [{"role": "assistant", "content": "r1"}]


async def test_events_offered_and_chosen(opened: Opener) -> None:
    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=False)
    session = AgentSession(Run(engine.runtime, wtype, row))
    tools = {t.name: t for t in session.event_tools()}
    assert set(tools) == {"request_approval", "reject"}  # not approve, not ops_only
    assert tools["request_approval"].parameters["required"] == ["amount"]
    assert tools["reject"].parameters == {"type": "object", "additionalProperties": True}
    refused = session.choose("request_approval", {"amount": 5})
    assert refused["accepted"] is False and refused["error"] == "illegal_transition"
    assert refused["allowed"] == ["reject"]
    assert session.choose("approve", {})["error"] == "forbidden"
    assert session.choose("ops_only", {})["error"] == "forbidden"
    assert session.choose("nope", {})["error"] == "illegal_transition"
    assert session.chosen is None
    session.run.workflow = row = await claimed(engine, "v", open=True)
    assert session.choose("request_approval", {"amount": -1})["error"] == "invalid_payload"
    assert session.choose("request_approval", {"amount": 5}) == {
        "accepted": True,
        "event": "request_approval",
    }
    assert session.chosen == Next("request_approval", {"amount": 5})
    assert session.choose("reject", {})["accepted"] is False  # one event per run


async def test_one_session_per_name_in_a_handler_run(opened: Opener) -> None:
    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    run = Run(engine.runtime, wtype, await claimed(engine, "w", open=True))
    AgentSession(run)
    with pytest.raises(InvalidInput, match="second agent session"):
        AgentSession(run)
    assert AgentSession(run, name="critic").step_name("model", 0) == "critic.v1.model.0"
    with pytest.raises(InvalidInput):
        AgentSession(run, name="a.b")


async def test_a_failed_model_call_asked_again_is_the_same_step(opened: Opener) -> None:
    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=True)
    session = AgentSession(Run(engine.runtime, wtype, row))

    async def fails() -> tuple[JSON, list[JSON], Usage]:
        raise TimeoutError("the provider did not answer")

    async def answers() -> tuple[JSON, list[JSON], Usage]:
        return {"text": "ok"}, [], Usage("m", 1, 1)

    with pytest.raises(TimeoutError):
        await session.model_call(fails)
    assert await session.model_call(answers) == {"text": "ok"}
    [step] = await engine.store.steps("w")
    assert (step.step, step.status, step.attempts) == ("agent.v1.model.0", "done", 2)
    assert session.step_name("model", 1) == "agent.v1.model.1"
