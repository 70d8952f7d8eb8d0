"""The PydanticAI adapter (statewright.agents.pydantic_ai) with PydanticAI's offline
``FunctionModel``, on both stores: model requests and tool calls are durable steps (a re-run
replays them from the ledger), and the state's events are the agent's only way out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from statewright import Engine, Next, Run, Worker, WorkflowType
from statewright.agents.core import NoEventChosen, current_key
from statewright.agents.pydantic_ai import StatewrightAgent, ToolOptions, run_agent, tool_name
from statewright.engine.budgets import Budget
from statewright.types import WorkflowRow
from tests.agents.conftest import Opener
from tests.agents.test_core import refund_machine

Script = list[list[tuple[str, dict[str, Any]] | str]]


class Scripted:
    """A scripted model: response ``n`` is ``script[n]`` (tool calls, or a text); every call
    is recorded with the messages it was given."""

    def __init__(self, script: Script, crash_at: int | None = None) -> None:
        self.script = script
        self.calls: list[int] = []
        self.seen: list[list[ModelMessage]] = []
        self.crash_at = crash_at

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        self.calls.append(n)
        self.seen.append(list(messages))
        if n == self.crash_at:
            self.crash_at = None
            raise RuntimeError("the worker died mid-thought")
        parts: list[Any] = []
        for i, item in enumerate(self.script[n]):
            if isinstance(item, str):
                parts.append(TextPart(item))
            else:
                parts.append(ToolCallPart(item[0], item[1], tool_call_id=f"c{n}-{i}"))
        return ModelResponse(parts=parts, model_name="scripted")


REFUND: Script = [
    [("lookup_order", {"order": "A1"})],
    [("request_approval", {"amount": -5})],  # refused: invalid payload
    [("approve", {})],  # not offered: PydanticAI's unknown-tool retry
    [("request_approval", {"amount": 50})],  # accepted
    ["never asked"],
]


def make_agent(model: Scripted, effects: list[str]) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(FunctionModel(model, model_name="scripted"))

    @agent.tool_plain
    def lookup_order(order: str) -> dict[str, Any]:
        key = current_key()
        assert key is not None
        effects.append(str(key))
        return {"order": order, "amount": 50, "fence": key.fencing_token}

    return agent


def refund_type(handler: Callable[[Run], Any]) -> WorkflowType:
    return WorkflowType(refund_machine(), {"reviewing": handler})


async def claimed(engine: Engine, wid: str) -> WorkflowRow:
    await engine.start("refund", {"open": True}, workflow_id=wid)
    [row] = await engine.store.claim_due("me", engine.clock.now(), 30.0, 1)
    return row


async def test_the_chosen_event_moves_the_workflow(opened: Opener) -> None:
    model, effects = Scripted(REFUND), list[str]()
    reviewer = StatewrightAgent(make_agent(model, effects))

    async def reviewing(run: Run) -> Next:
        return await reviewer.run(run, "Review refund A1")

    engine = opened([refund_type(reviewing)])
    await engine.open()
    await engine.start("refund", {"open": True}, workflow_id="w")
    await Worker(engine, concurrency=1).run_until_idle()
    row = await engine.get("w")
    assert row.state == "awaiting_approval"
    assert row.context == {"open": True}
    assert model.calls == [0, 1, 2, 3]  # the accepted event ends the run: no 5th call
    assert effects == ["w:agent.v1.tool.0-0.lookup_order"]
    [history] = [t for t in await engine.store.history("w") if t.event == "request_approval"]
    assert history.payload == {"amount": 50}
    # The refusal went back to the model as the tool's result, the unknown tool as a retry.
    refusal: Any = model.seen[2][-1].parts[0]
    assert refusal.part_kind == "tool-return"
    assert refusal.content["error"] == "invalid_payload"
    assert refusal.content["allowed"] == ["request_approval", "reject"]
    retry: Any = model.seen[3][-1].parts[0]
    assert retry.tool_name == "approve" and retry.outcome == "retried"
    assert "Unknown tool name: 'approve'" in retry.content
    steps = {s.step: s for s in await engine.store.steps("w")}
    assert sorted(steps) == [
        "agent.v1.model.0",
        "agent.v1.model.1",
        "agent.v1.model.2",
        "agent.v1.model.3",
        "agent.v1.tool.0-0.lookup_order",
    ]
    first = steps["agent.v1.model.0"].result
    assert first["$llm"]["model"] == "scripted" and first["$llm"]["agent"] == "agent"
    assert [m["role"] for m in first["messages"]] == ["user", "assistant"]
    assert first["messages"][1]["tool_calls"][0]["name"] == "lookup_order"
    second = steps["agent.v1.model.1"].result["messages"]
    assert [m["role"] for m in second] == ["tool", "assistant"]


async def test_a_rerun_replays_responses_and_tool_results(opened: Opener) -> None:
    model, effects = Scripted(REFUND, crash_at=3), list[str]()
    engine = opened([refund_type(lambda run: None)])
    await engine.open()
    row = await claimed(engine, "w")
    wtype = engine.type_of("refund")
    with pytest.raises(RuntimeError, match="mid-thought"):
        await run_agent(Run(engine.runtime, wtype, row), make_agent(model, effects), "go")
    assert model.calls == [0, 1, 2, 3]
    outcome = await run_agent(Run(engine.runtime, wtype, row), make_agent(model, effects), "go")
    assert outcome == Next("request_approval", {"amount": 50})
    assert model.calls == [0, 1, 2, 3, 3]  # only the call the crash cut was asked again
    assert effects == ["w:agent.v1.tool.0-0.lookup_order"]
    # The replayed conversation is the one the model saw the first time.
    assert [type(m).__name__ for m in model.seen[4]] == [type(m).__name__ for m in model.seen[3]]


async def test_no_event_chosen(opened: Opener) -> None:
    engine = opened([refund_type(lambda run: None)])
    await engine.open()
    row = await claimed(engine, "w")
    wtype = engine.type_of("refund")
    with pytest.raises(NoEventChosen):
        await run_agent(Run(engine.runtime, wtype, row), make_agent(Scripted([["hm"]]), []), "go")
    outcome = await run_agent(
        Run(engine.runtime, wtype, row),
        make_agent(Scripted([["hm"]]), []),
        "go",
        name="second",
        on_no_event="reject",
    )
    assert outcome == Next("reject", {"output": "hm"})


async def test_model_retry_from_a_tool_is_kept(opened: Opener) -> None:
    engine = opened([refund_type(lambda run: None)])
    await engine.open()
    row = await claimed(engine, "w")
    wtype = engine.type_of("refund")
    tries: list[int] = []
    script: Script = [[("flaky", {})], [("flaky", {})], [("reject", {})]]

    def build(model: Scripted) -> Agent[None, str]:
        agent: Agent[None, str] = Agent(FunctionModel(model))

        @agent.tool_plain
        def flaky() -> str:
            tries.append(1)
            if len(tries) == 1:
                raise ModelRetry("try again")
            return "fine"

        return agent

    for _ in range(2):
        model = Scripted(script)
        agent = StatewrightAgent(build(model), tools={"flaky": ToolOptions(safe_to_repeat=True)})
        assert await agent.run(Run(engine.runtime, wtype, row), "go") == Next("reject", {})
    assert len(tries) == 2  # the retry and the success, each once
    assert model.calls == []  # the replay asked nothing


def test_without_pydantic_ai_the_import_names_the_extra() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['pydantic_ai'] = None\n"
        "import statewright.agents.core\n"
        "try:\n    import statewright.agents.pydantic_ai\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "statewright[pydantic-ai]" in done.stdout


async def test_a_crossed_budget_fires_its_event_without_a_model_call(opened: Opener) -> None:
    model, effects = Scripted(REFUND), list[str]()
    reviewer = StatewrightAgent(make_agent(model, effects))

    async def reviewing(run: Run) -> Next:
        return await reviewer.run(run, "Review refund A1")

    wtype = WorkflowType(
        refund_machine(), {"reviewing": reviewing}, budgets=(Budget("reject", model_calls=2),)
    )
    engine = opened([wtype])
    await engine.open()
    await engine.start("refund", {"open": True}, workflow_id="w")
    await Worker(engine, concurrency=1).run_until_idle()
    row = await engine.get("w")
    assert row.state == "rejected"
    assert model.calls == [0, 1]  # the third call was never made
    [fired] = [t for t in await engine.store.history("w") if t.event == "reject"]
    assert fired.payload["usage"]["model_calls"] == 2
    assert fired.payload["budget"]["model_calls"] == 2
    assert effects == ["w:agent.v1.tool.0-0.lookup_order"]


def test_tool_names_providers_accept() -> None:
    assert tool_name("request_approval") == "request_approval"
    assert tool_name("order.ship") == "order_ship"
    assert tool_name("order.ship", {"order_ship"}) == "order_ship_2"
    assert len(tool_name("e" * 128)) == 64


async def test_a_new_visit_of_the_state_asks_afresh(opened: Opener) -> None:
    model, effects = Scripted([[("lookup_order", {"order": "A1"})], REFUND[3]]), list[str]()
    reviewer = StatewrightAgent(make_agent(model, effects))

    async def reviewing(run: Run) -> Next:
        return await reviewer.run(run, "Review refund A1")

    engine = opened([refund_type(reviewing)])
    await engine.open()
    await engine.start("refund", {"open": True}, workflow_id="w")
    await Worker(engine, concurrency=1).run_until_idle()
    await engine.send("w", "again")  # back to reviewing: a second visit (version 3)
    await Worker(engine, concurrency=1).run_until_idle()
    assert (await engine.get("w")).state == "awaiting_approval"
    assert model.calls == [0, 1, 0, 1]
    assert effects == ["w:agent.v1.tool.0-0.lookup_order", "w:agent.v3.tool.0-0.lookup_order"]
