"""A model call cut by a crash is reconciled (issue 27), with both adapters, on both stores.

The model answers through a :class:`Gateway` that records each response it gives under the
step's key (``current_key()``, set while a model step runs), as a real model gateway or proxy
would by idempotency key. The first run of the handler dies (a ``BaseException`` nothing
catches: the model step is left *executing*) either after the model answered or before; the
re-run, given ``model_reconcile=gateway.lookup``, takes the recorded response as the step's
result without asking the model again, or asks again when there is none.
"""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent as OaiAgent
from agents import ModelResponse as OaiResponse
from agents import function_tool
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from statewright import Engine, Next, Run, WorkflowType
from statewright.agents import openai_agents as oai
from statewright.agents import pydantic_ai as pai
from statewright.agents.core import current_key
from statewright.engine.hooks import ModelCall
from statewright.errors import InvalidInput
from statewright.types import WorkflowRow
from tests.agents.conftest import Opener
from tests.agents.oai_models import ScriptedModel, tool
from tests.agents.test_core import refund_machine
from tests.agents.test_pydantic_ai import REFUND, Scripted


class Crash(BaseException):
    """The process dies here: nothing below the handler catches it, the step stays executing."""


class Gateway:
    """A model gateway: records the response it gives under the caller's key, and may die
    (once) before or after answering a chosen call."""

    def __init__(self, crash_at: int | None = None, *, after: bool = True) -> None:
        self.responses: dict[str, Any] = {}
        self.keys: list[str] = []
        self.crash_at, self.after = crash_at, after
        self.lookups: list[str] = []

    def answer(self, n: int, response: Any) -> Any:
        key = current_key()
        assert key is not None and ".model." in key
        self.keys.append(str(key))
        if n == self.crash_at and not self.after:
            self.crash_at = None
            raise Crash  # killed while the model thought: no response
        self.responses[str(key)] = response
        if n == self.crash_at:
            self.crash_at = None
            raise Crash  # killed after the model answered
        return response

    def lookup(self, key: str) -> Any:
        self.lookups.append(str(key))
        return self.responses.get(str(key))

    async def alookup(self, key: str) -> Any:
        return self.lookup(key)


def wrong(key: str) -> Any:
    """A hook that answers something other than the framework's response."""
    return {"parts": []}


async def claimed(engine: Engine, wid: str) -> WorkflowRow:
    await engine.start("refund", {"open": True}, workflow_id=wid)
    [row] = await engine.store.claim_due("me", engine.clock.now(), 30.0, 1)
    return row


def observed(engine: Engine) -> list[ModelCall]:
    calls: list[ModelCall] = []
    engine.runtime.observers.model_call.append(calls.append)
    return calls


# -- PydanticAI ----------------------------------------------------------------------------------


def pai_agent(model: Scripted, gateway: Gateway) -> Agent[None, str]:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        response = model(messages, info)
        return gateway.answer(model.calls[-1], response)  # type: ignore[no-any-return]

    agent: Agent[None, str] = Agent(FunctionModel(respond, model_name="scripted"))

    @agent.tool_plain
    def lookup_order(order: str) -> dict[str, Any]:
        return {"order": order, "amount": 50}

    return agent


@pytest.mark.parametrize("hook", ["sync", "async"])
async def test_pydantic_ai_a_response_given_before_the_crash_is_reconciled(
    opened: Opener, hook: str
) -> None:
    model, gateway = Scripted(REFUND), Gateway(crash_at=2)
    engine = opened([WorkflowType(refund_machine(), {})])
    await engine.open()
    seen = observed(engine)
    row = await claimed(engine, "w")
    wtype = engine.type_of("refund")
    with pytest.raises(Crash):
        await pai.run_agent(Run(engine.runtime, wtype, row), pai_agent(model, gateway), "go")
    [cut] = [s for s in await engine.store.steps("w") if s.step == "agent.v1.model.2"]
    assert cut.status == "executing"
    assert model.calls == [0, 1, 2] and len(seen) == 2
    lookup = gateway.lookup if hook == "sync" else gateway.alookup
    outcome = await pai.run_agent(
        Run(engine.runtime, wtype, row), pai_agent(model, gateway), "go", model_reconcile=lookup
    )
    assert outcome == Next("request_approval", {"amount": 50})
    assert model.calls == [0, 1, 2, 3]  # the answered call was not asked again
    assert gateway.lookups == ["w:agent.v1.model.2"]  # only the step found executing
    assert sorted(gateway.responses) == [f"w:agent.v1.model.{n}" for n in range(4)]
    # The reconciled response is the step's result, envelope and conversation as a fresh one.
    steps = {s.step: s for s in await engine.store.steps("w")}
    got = steps["agent.v1.model.2"]
    assert got.status == "done"
    assert got.result["$llm"]["model"] == "scripted"
    assert got.result["messages"][-1]["tool_calls"][0]["name"] == "approve"
    assert [m["role"] for m in got.result["messages"]] == ["tool", "assistant"]
    # Counted once: by the run that recorded it (the crashed one never did).
    assert len(seen) == 4


async def test_pydantic_ai_a_call_cut_before_it_answered_is_asked_again(opened: Opener) -> None:
    model, gateway = Scripted(REFUND), Gateway(crash_at=1, after=False)
    engine = opened([WorkflowType(refund_machine(), {})])
    await engine.open()
    row = await claimed(engine, "w")
    wtype = engine.type_of("refund")
    with pytest.raises(Crash):
        await pai.run_agent(Run(engine.runtime, wtype, row), pai_agent(model, gateway), "go")
    reviewer = pai.StatewrightAgent(pai_agent(model, gateway), model_reconcile=gateway.lookup)
    outcome = await reviewer.run(Run(engine.runtime, wtype, row), "go")
    assert outcome == Next("request_approval", {"amount": 50})
    assert model.calls == [0, 1, 1, 2, 3]  # nothing recorded: asked again
    assert gateway.lookups == ["w:agent.v1.model.1"]
    assert gateway.keys.count("w:agent.v1.model.1") == 2


async def test_pydantic_ai_a_hook_of_the_wrong_kind_is_refused(opened: Opener) -> None:
    model, gateway = Scripted(REFUND), Gateway(crash_at=0)
    engine = opened([WorkflowType(refund_machine(), {})])
    await engine.open()
    row = await claimed(engine, "w")
    wtype = engine.type_of("refund")
    with pytest.raises(Crash):
        await pai.run_agent(Run(engine.runtime, wtype, row), pai_agent(model, gateway), "go")
    with pytest.raises(InvalidInput, match=r"not a pydantic_ai ModelResponse"):
        await pai.run_agent(
            Run(engine.runtime, wtype, row),
            pai_agent(model, gateway),
            "go",
            model_reconcile=wrong,
        )
    [step] = await engine.store.steps("w")
    assert step.status == "executing" and model.calls == [0]  # nothing changed


# -- OpenAI Agents SDK ---------------------------------------------------------------------------


class GatewayModel(ScriptedModel):
    """The scripted model behind a :class:`Gateway`."""

    gateway: Gateway | None = None

    async def get_response(self, *args: Any, **kwargs: Any) -> OaiResponse:
        response = await super().get_response(*args, **kwargs)
        assert self.gateway is not None
        return self.gateway.answer(self.asked[-1], response)  # type: ignore[no-any-return]


OAI_SCRIPT: list[Any] = [
    tool("lookup_order", order="o-1"),
    tool("approve"),  # never offered
    tool("request_approval", amount=35),
]


def oai_agent(model: GatewayModel) -> OaiAgent[Any]:
    @function_tool
    def lookup_order(order: str) -> dict[str, Any]:
        """Read an order."""
        return {"order": order, "total": 40}

    return OaiAgent(name="refunder", tools=[lookup_order], model=model)


def gateway_model(gateway: Gateway) -> GatewayModel:
    model = GatewayModel(list(OAI_SCRIPT))
    model.gateway = gateway
    return model


@pytest.mark.parametrize("hook", ["sync", "async"])
async def test_openai_agents_a_response_given_before_the_crash_is_reconciled(
    opened: Opener, hook: str
) -> None:
    gateway = Gateway(crash_at=1)
    model = gateway_model(gateway)
    engine = opened([WorkflowType(refund_machine(), {})])
    await engine.open()
    seen = observed(engine)
    row = await claimed(engine, "w")
    wtype = engine.type_of("refund")
    with pytest.raises(Crash):
        await oai.run_agent(Run(engine.runtime, wtype, row), oai_agent(model), "hi")
    assert model.asked == [0, 1] and len(seen) == 1
    lookup = gateway.lookup if hook == "sync" else gateway.alookup
    chosen = await oai.run_agent(
        Run(engine.runtime, wtype, row), oai_agent(model), "hi", model_reconcile=lookup
    )
    assert chosen == Next("request_approval", {"amount": 35})
    assert model.asked == [0, 1, 2]  # the answered call was not asked again
    assert gateway.lookups == ["w:agent.v1.model.1"]
    steps = {s.step: s for s in await engine.store.steps("w")}
    got = steps["agent.v1.model.1"]
    assert got.status == "done" and got.result["$llm"]["input_tokens"] == 101
    assert got.result["messages"][-1]["tool_calls"][0]["name"] == "approve"
    assert len(seen) == 3  # the reconciled response counted once, by the run recording it


async def test_openai_agents_a_call_cut_before_it_answered_is_asked_again(
    opened: Opener,
) -> None:
    gateway = Gateway(crash_at=0, after=False)
    model = gateway_model(gateway)
    engine = opened([WorkflowType(refund_machine(), {})])
    await engine.open()
    row = await claimed(engine, "w")
    wtype = engine.type_of("refund")
    with pytest.raises(Crash):
        await oai.run_agent(Run(engine.runtime, wtype, row), oai_agent(model), "hi")
    chosen = await oai.run_agent(
        Run(engine.runtime, wtype, row), oai_agent(model), "hi", model_reconcile=gateway.lookup
    )
    assert chosen == Next("request_approval", {"amount": 35})
    assert model.asked == [0, 0, 1, 2]
    assert gateway.lookups == ["w:agent.v1.model.0"]


async def test_openai_agents_a_hook_of_the_wrong_kind_is_refused(opened: Opener) -> None:
    gateway = Gateway(crash_at=0)
    model = gateway_model(gateway)
    engine = opened([WorkflowType(refund_machine(), {})])
    await engine.open()
    row = await claimed(engine, "w")
    wtype = engine.type_of("refund")
    with pytest.raises(Crash):
        await oai.run_agent(Run(engine.runtime, wtype, row), oai_agent(model), "hi")
    with pytest.raises(InvalidInput, match=r"not an agents\.ModelResponse"):
        await oai.run_agent(
            Run(engine.runtime, wtype, row), oai_agent(model), "hi", model_reconcile=wrong
        )
    assert model.asked == [0]
