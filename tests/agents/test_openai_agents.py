"""The OpenAI Agents SDK adapter (statewright.agents.openai_agents), on both stores, with the real
SDK's ``Runner`` and a scripted offline ``Model``: model and tool calls are durable steps (a
re-run of the handler asks the model nothing it answered and repeats no tool), the state's
events are the agent's only way to move the workflow, and a budget crossed fires its event."""

from __future__ import annotations

import asyncio
import importlib
import sys
from typing import Any

import pytest
from agents import Agent, ModelSettings, RunConfig, function_tool
from agents.retry import ModelRetrySettings

from statewright import Applied, Engine, MachineBuilder, Next, Run, Worker, WorkflowType
from statewright.agents.core import NoEventChosen, current_key
from statewright.agents.openai_agents import dump_response, load_response, run_agent, tool_name
from statewright.agents.openai_items import price
from statewright.agents.usage import conversation, totals
from statewright.definition.machine import Machine
from statewright.engine.budgets import Budget
from statewright.errors import InvalidInput, RequestNotSent, StepOutcomeUnknown
from statewright.types import WorkflowRow
from tests.agents.conftest import Opener
from tests.agents.oai_models import ModelDown, ScriptedModel, response, tool


def refund_machine() -> Machine:
    b = MachineBuilder("refund")
    b.state("reviewing", initial=True).state("awaiting_approval").state("needs_person")
    b.state("rejected", terminal=True).state("paid", terminal=True)
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
    b.event("reject", roles=["agent"]).event("approve", approval=True)
    b.event("over_budget", roles=["system"]).event("done", roles=["ops"])
    b.transition(
        "request_approval", "reviewing", "awaiting_approval", guard="context.open == True"
    )
    b.transition("reject", "reviewing", "rejected")
    b.transition("over_budget", "reviewing", "needs_person")
    b.transition("approve", "awaiting_approval", "paid")
    b.transition("done", "needs_person", "rejected")
    return b.build()


class Shop:
    """The tools' world: orders to read, credits issued (an effect, counted)."""

    def __init__(self) -> None:
        self.lookups: list[str] = []
        self.credits: list[tuple[str, int]] = []

    def agent(self, model: ScriptedModel, **kwargs: Any) -> Agent[Any]:
        @function_tool
        def lookup_order(order: str) -> dict[str, Any]:
            """Read an order."""
            self.lookups.append(order)
            return {"order": order, "total": 40}

        @function_tool
        async def issue_credit(amount: int) -> str:
            """Issue a store credit (an effect: once per call)."""
            key = current_key()
            assert key is not None
            self.credits.append((str(key), key.fencing_token))
            return f"credited {amount}"

        return Agent(
            name="refunder",
            instructions="Refund what the policy allows.",
            tools=[lookup_order, issue_credit],
            model=model,
            **kwargs,
        )


SCRIPT: list[Any] = [
    tool("lookup_order", order="o-1"),
    tool("issue_credit", amount=5),
    tool("request_approval", amount=35),
]


async def claimed(engine: Engine, wid: str, **context: Any) -> WorkflowRow:
    await engine.start("refund", context, workflow_id=wid)
    [row] = await engine.store.claim_due("me", engine.clock.now(), 30.0, 1)
    return row


async def test_the_agent_moves_the_workflow_by_the_event_it_chose(opened: Opener) -> None:
    shop, model = Shop(), ScriptedModel(list(SCRIPT))

    async def reviewing(run: Run) -> Next:
        return await run_agent(run, shop.agent(model), "Refund order o-1, please.")

    engine = opened([WorkflowType(refund_machine(), {"reviewing": reviewing})])
    await engine.open()
    await engine.start("refund", {"open": True}, workflow_id="w")
    await Worker(engine).run_until_idle()
    row = await engine.get("w")
    assert row.state == "awaiting_approval"
    [moved] = [t for t in await engine.history("w") if t.event == "request_approval"]
    assert moved.payload == {"amount": 35}
    assert model.asked == [0, 1, 2]
    assert shop.lookups == ["o-1"] and len(shop.credits) == 1
    steps = {s.step: s for s in await engine.store.steps("w")}
    v = row.version - 1  # the visit of reviewing: the version before its transition
    first, second = steps[f"agent.v{v}.model.0"].result, steps[f"agent.v{v}.model.1"].result
    assert first["$llm"]["model"] == "scripted-1"
    assert (first["$llm"]["input_tokens"], first["$llm"]["output_tokens"]) == (100, 10)
    assert first["$llm"]["state"] == "reviewing" and first["$llm"]["visit"] == v
    assert first["messages"] == [
        {"role": "system", "content": "Refund what the policy allows."},
        {"role": "user", "content": "Refund order o-1, please."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_0_0", "name": "lookup_order", "args": {"order": "o-1"}}],
        },
    ]
    assert second["messages"][0] == {
        "role": "tool",
        "content": "{'order': 'o-1', 'total': 40}",
        "tool_call_id": "call_0_0",
    }
    assert steps[f"agent.v{v}.tool.call_1_0.issue_credit"].result == "credited 5"
    # The conversation, in order, from the model steps; the usage summed from them.
    said = [(m["role"], m.get("tool_call_id")) for m in conversation(steps.values())]
    assert said == [
        ("system", None),
        ("user", None),
        ("assistant", None),
        ("tool", "call_0_0"),
        ("assistant", None),
        ("tool", "call_1_0"),
        ("assistant", None),
    ]
    spent = await totals(engine.store, "w")
    assert (spent.model_calls, spent.input_tokens, spent.output_tokens) == (3, 303, 33)
    # The tool got its step's key (the idempotency key), carrying the claim's fencing token.
    [(key, fence)] = shop.credits
    assert key == f"w:agent.v{v}.tool.call_1_0.issue_credit" and fence >= 1


async def test_a_rerun_asks_the_model_nothing_it_answered_and_repeats_no_tool(
    opened: Opener,
) -> None:
    shop = Shop()
    model = ScriptedModel([*SCRIPT[:2], "thinking...", *SCRIPT[2:]], fail_at={2})
    model.script[2] = tool("lookup_order", order="o-2")
    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=True)
    with pytest.raises(ModelDown):  # the crash: call 2 fails after two calls and two tools
        await run_agent(Run(engine.runtime, wtype, row), shop.agent(model), "Refund o-1.")
    assert model.asked == [0, 1, 2] and len(shop.credits) == 1
    chosen = await run_agent(Run(engine.runtime, wtype, row), shop.agent(model), "Refund o-1.")
    assert chosen == Next("request_approval", {"amount": 35})
    assert model.asked == [0, 1, 2, 2, 3]  # only the call cut short is asked again
    assert shop.lookups == ["o-1", "o-2"] and len(shop.credits) == 1
    # The replayed run gave the model the same history: the same input as the first run.
    assert model.inputs[2] == model.inputs[3]
    # A third run of the same visit (say the transition's commit was lost) replays it all.
    again = await run_agent(Run(engine.runtime, wtype, row), shop.agent(model), "Refund o-1.")
    assert again == chosen and model.asked == [0, 1, 2, 2, 3] and len(shop.credits) == 1


async def test_an_illegal_choice_is_refused_and_the_model_recovers(opened: Opener) -> None:
    shop = Shop()
    model = ScriptedModel(
        [
            tool("approve"),  # not offered: an unknown tool to the SDK
            tool("request_approval", amount=-3),  # a payload its schema refuses
            tool("request_approval", amount=35),  # refused by the guard (open is False)
            tool("reject"),
        ]
    )
    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=False)
    chosen = await run_agent(Run(engine.runtime, wtype, row), shop.agent(model), "Refund o-1.")
    assert chosen == Next("reject", {})
    assert model.asked == [0, 1, 2, 3]
    outputs = [
        item["output"]
        for item in model.inputs[3]
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    assert "not found" in outputs[0]
    assert '"error": "invalid_payload"' in outputs[1]
    assert '"error": "illegal_transition"' in outputs[2] and '"allowed": ["reject"]' in outputs[2]


async def test_events_offered_are_the_states_and_the_roles(opened: Opener) -> None:
    seen: list[Any] = []

    class Peek(ScriptedModel):
        """Keeps the tools the SDK hands the model: the agent's plus the offered events."""

        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            seen.extend(args[3])
            return await super().get_response(*args, **kwargs)

    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=True)
    await run_agent(
        Run(engine.runtime, wtype, row), Agent(name="a", model=Peek([tool("reject")])), "hi"
    )
    tools = {t.name: t for t in seen}
    assert set(tools) == {"request_approval", "reject"}  # not approve, over_budget, done
    assert tools["request_approval"].params_json_schema["required"] == ["amount"]
    assert "Ask a person to approve the refund." in tools["request_approval"].description


async def test_a_budget_crossed_fires_its_event_without_asking_the_model(
    opened: Opener,
) -> None:
    shop = Shop()
    model = ScriptedModel(list(SCRIPT))

    async def reviewing(run: Run) -> Next:
        return await run_agent(run, shop.agent(model), "Refund o-1.")

    budget = Budget("over_budget", model_calls=2, per="visit")
    wtype = WorkflowType(refund_machine(), {"reviewing": reviewing}, budgets=(budget,))
    engine = opened([wtype])
    await engine.open()
    await engine.start("refund", {"open": True}, workflow_id="w")
    await Worker(engine).run_until_idle()
    assert (await engine.get("w")).state == "needs_person"
    assert model.asked == [0, 1]  # the third call was never made
    assert len(shop.credits) == 1


async def test_no_event_chosen(opened: Opener) -> None:
    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=True)
    agent = Agent(name="a", model=ScriptedModel(["I am not sure."]))
    with pytest.raises(NoEventChosen):
        await run_agent(Run(engine.runtime, wtype, row), agent, "hi")
    agent = Agent(name="a", model=ScriptedModel(["I am not sure."]))
    chosen = await run_agent(
        Run(engine.runtime, wtype, row), agent, "hi", name="second", on_no_event="reject"
    )
    assert chosen == Next("reject", {"output": "I am not sure."})


async def test_what_cannot_be_durable_is_refused(opened: Opener) -> None:
    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=True)
    run = Run(engine.runtime, wtype, row)
    model = ScriptedModel([tool("reject")])
    other = Agent(name="other", model=model)
    with pytest.raises(InvalidInput, match="handoffs"):
        await run_agent(run, Agent(name="a", model=model, handoffs=[other]), "hi")

    @function_tool
    def reject() -> str:
        """Shadows the event."""
        return "no"

    with pytest.raises(InvalidInput, match="named like the state's events"):
        await run_agent(run, Agent(name="a", model=model, tools=[reject]), "hi")

    @function_tool(needs_approval=True)
    def pay() -> str:
        """Waits for a person inside the run."""
        return "paid"

    with pytest.raises(InvalidInput, match="needs approval"):
        await run_agent(run, Agent(name="a", model=model, tools=[pay]), "hi")
    assert model.asked == []


def test_the_cost_of_a_known_model_and_none_for_an_unknown_one() -> None:
    assert price("gpt-4o", 1000, 100) == pytest.approx(0.0035)
    assert price("scripted-1", 1000, 100) is None


def test_a_model_response_round_trips_through_json() -> None:
    for turn, n in ((tool("lookup_order", order="o-1"), 0), ("done", 1)):
        original = response(turn, n)
        data = dump_response(original)
        assert load_response(data) == original
        assert dump_response(load_response(data)) == data


async def test_the_run_config_model_is_the_one_wrapped(opened: Opener) -> None:
    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=True)
    used = ScriptedModel([tool("reject")], model="override-2")
    agent = Agent(name="a", model=ScriptedModel([]))
    chosen = await run_agent(
        Run(engine.runtime, wtype, row), agent, "hi", run_config=RunConfig(model=used)
    )
    assert chosen == Next("reject", {}) and used.asked == [0]
    [step] = [s for s in await engine.store.steps("w") if ".model." in s.step]
    assert step.result["$llm"]["model"] == "override-2"


def test_without_the_sdk_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "agents", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "statewright.agents.openai_agents")
    with pytest.raises(ImportError, match=r"statewright\[openai-agents\]"):
        importlib.import_module("statewright.agents.openai_agents")


class Crash(BaseException):
    """The process dies here (nothing below the handler may catch it)."""


async def test_a_tool_cut_short_is_reconciled_or_parks_never_run_blindly(opened: Opener) -> None:
    shop = Shop()
    crashing = {"on": True}

    @function_tool
    async def refund_card(amount: int) -> str:
        """Refund to the card (an effect; the first run dies inside it, after it applied)."""
        shop.credits.append((str(current_key()), amount))
        if crashing["on"]:
            raise Crash
        return "refunded"

    def agent() -> Agent[Any]:
        script: list[Any] = [tool("refund_card", amount=7), tool("reject")]
        return Agent(name="a", tools=[refund_card], model=ScriptedModel(script))

    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=True)
    with pytest.raises(Crash):
        await run_agent(Run(engine.runtime, wtype, row), agent(), "hi")
    crashing["on"] = False
    # Found executing, no hook, not safe to repeat: the handler's error is the engine's own
    # (the worker parks the workflow for an operator), not the SDK's wrapping of it.
    with pytest.raises(StepOutcomeUnknown):
        await run_agent(Run(engine.runtime, wtype, row), agent(), "hi")
    assert len(shop.credits) == 1
    # With a reconcile hook that finds the refund applied, the run goes on without a second.
    chosen = await run_agent(
        Run(engine.runtime, wtype, row),
        agent(),
        "hi",
        reconcilers={"refund_card": lambda key: Applied("refunded (found)")},
    )
    assert chosen == Next("reject", {}) and len(shop.credits) == 1
    [step] = [s for s in await engine.store.steps("w") if s.step.endswith(".refund_card")]
    assert (step.status, step.result) == ("done", "refunded (found)")


async def test_parallel_tool_calls_in_one_response_are_each_a_step(opened: Opener) -> None:
    shop = Shop()
    both: list[Any] = [
        ("tool", "lookup_order", {"order": "o-1"}),
        ("tool", "issue_credit", {"amount": 2}),
    ]
    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=True)
    for _ in range(2):
        model = ScriptedModel([both, tool("reject")])
        chosen = await run_agent(Run(engine.runtime, wtype, row), shop.agent(model), "hi")
        assert chosen == Next("reject", {})
    assert shop.lookups == ["o-1"] and len(shop.credits) == 1
    names = sorted(s.step for s in await engine.store.steps("w") if ".tool." in s.step)
    v = row.version
    assert names == [
        f"agent.v{v}.tool.call_0_0.lookup_order",
        f"agent.v{v}.tool.call_0_1.issue_credit",
    ]


async def test_a_tool_error_goes_to_the_model_only_when_nothing_was_applied(
    opened: Opener,
) -> None:
    calls: list[str] = []
    errors: dict[str, Exception | None] = {"card": ValueError("gateway said something odd")}

    @function_tool
    async def refund_card(amount: int) -> str:
        """Refund to the card; fails (how is up to the test)."""
        calls.append(f"card {amount}")
        if errors["card"] is not None:
            raise errors["card"]
        return "refunded"

    def agent(script: list[Any]) -> Agent[Any]:
        return Agent(name="a", tools=[refund_card], model=ScriptedModel(script))

    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    # Arguments the tool refuses before it runs: the SDK's message, and the loop goes on.
    row = await claimed(engine, "w1", open=True)
    model = ScriptedModel([tool("refund_card", amount="lots"), tool("reject")])
    chosen = await run_agent(
        Run(engine.runtime, wtype, row), Agent(name="a", tools=[refund_card], model=model), "hi"
    )
    assert chosen == Next("reject", {}) and calls == []
    [told] = [i["output"] for i in model.inputs[1] if i.get("type") == "function_call_output"]
    assert "error occurred while running the tool" in told
    # An error that proves the request never left: the model is told; stored as the result.
    errors["card"] = RequestNotSent("connection refused")
    row = await claimed(engine, "w2", open=True)
    script = [tool("refund_card", amount=3), tool("reject")]
    for _ in range(2):  # the re-run replays the message; the tool is not called again
        assert await run_agent(Run(engine.runtime, wtype, row), agent(script), "hi") == Next(
            "reject", {}
        )
    assert calls == ["card 3"]
    [step] = [s for s in await engine.store.steps("w2") if ".tool." in s.step]
    assert step.status == "done" and "error occurred while running the tool" in step.result
    # Any other error may have applied: the step fails (outcome unknown) and so does the
    # handler, with the tool's own error; the re-run reconciles before anything runs again.
    errors["card"] = ValueError("gateway said something odd")
    row = await claimed(engine, "w3", open=True)
    with pytest.raises(ValueError, match="something odd"):
        await run_agent(Run(engine.runtime, wtype, row), agent(script), "hi")
    chosen = await run_agent(
        Run(engine.runtime, wtype, row),
        agent(script),
        "hi",
        reconcilers={"refund_card": lambda key: Applied("refunded (found)")},
    )
    assert chosen == Next("reject", {}) and calls == ["card 3", "card 3"]


async def test_a_tools_timeout_bounds_the_call_inside_its_step(opened: Opener) -> None:
    @function_tool(timeout=0.05)
    async def slow_refund(amount: int) -> str:
        """Never answers in time."""
        await asyncio.sleep(5)
        return "late"

    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=True)
    model = ScriptedModel([tool("slow_refund", amount=1), tool("reject")])
    agent = Agent(name="a", tools=[slow_refund], model=model)
    with pytest.raises(TimeoutError):  # its outcome unknown: not a message for the model
        await run_agent(Run(engine.runtime, wtype, row), agent, "hi")
    assert model.asked == [0]
    [step] = [s for s in await engine.store.steps("w") if ".tool." in s.step]
    assert step.status == "failed"


async def test_an_event_whose_name_a_provider_refuses_is_offered_under_a_tool_name(
    opened: Opener,
) -> None:
    b = MachineBuilder("triage")
    b.state("open", initial=True).state("escalated", terminal=True)
    b.event("escalate.now", roles=["agent"]).transition("escalate.now", "open", "escalated")
    wtype = WorkflowType(b.build(), {})
    engine = opened([wtype])
    await engine.open()
    await engine.start("triage", {}, workflow_id="t")
    [row] = await engine.store.claim_due("me", engine.clock.now(), 30.0, 1)
    model = ScriptedModel([tool("escalate_now")])
    chosen = await run_agent(Run(engine.runtime, wtype, row), Agent(name="a", model=model), "hi")
    assert chosen == Next("escalate.now", {})
    assert tool_name("escalate.now", {"escalate_now"}) == "escalate_now_2"


async def test_the_sdks_model_retry_asks_the_same_step_again(opened: Opener) -> None:
    always = ModelRetrySettings(max_retries=2, policy=lambda context: True)
    wtype = WorkflowType(refund_machine(), {})
    engine = opened([wtype])
    await engine.open()
    row = await claimed(engine, "w", open=True)
    shop = Shop()
    for first in (True, False):  # the second run replays: nothing is asked again
        model = ScriptedModel(list(SCRIPT), fail_at={1})
        agent = shop.agent(model, model_settings=ModelSettings(retry=always))
        chosen = await run_agent(Run(engine.runtime, wtype, row), agent, "hi")
        assert chosen == Next("request_approval", {"amount": 35})
        if first:
            assert model.asked == [0, 1, 1, 2]  # call 1 failed once, asked again by the SDK
    assert model.asked == []
    steps = {s.step: s for s in await engine.store.steps("w") if ".model." in s.step}
    v = row.version
    assert sorted(steps) == [f"agent.v{v}.model.{n}" for n in range(3)]
    assert steps[f"agent.v{v}.model.1"].attempts == 2
    assert len(shop.credits) == 1
