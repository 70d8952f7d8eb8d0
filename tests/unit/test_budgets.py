"""Token usage and budgets (issue 27): the usage envelope of a model step, totals and reports
summed from the step ledger, what a budget's limit means (``crossed``), how a type's budgets are
checked when declared, and a budget crossed in a handler firing its event with no further model
call."""

from __future__ import annotations

from typing import Any

import pytest

from statewright import (
    MachineBuilder,
    ManualClock,
    RetryPolicy,
    Run,
    TransientError,
    Worker,
    WorkflowType,
)
from statewright.agents import usage
from statewright.agents.usage import LLM_KEY, Usage, envelope, usage_of
from statewright.engine import llm_usage
from statewright.engine.budgets import Budget, Totals, crossed
from statewright.engine.hooks import ModelCall
from statewright.errors import BudgetExceeded, DefinitionError, InvalidInput
from statewright.testing import memory_engine
from statewright.types import StepRecord


def _machine() -> Any:
    return (
        MachineBuilder("review")
        .state("drafting", initial=True)
        .state("checking")
        .state("waiting_human")
        .state("done", terminal=True)
        .event("drafted")
        .event("checked")
        .event("over_budget")
        .event("again")
        .event("resume")
        .transition("drafted", "drafting", "checking")
        .transition("checked", "checking", "done")
        .transition("again", "checking", "drafting")
        .transition("over_budget", ["drafting", "checking"], "waiting_human")
        .transition("resume", "waiting_human", "checking")
        .build()
    )


def _totals(tokens: int = 0, cost: float = 0.0, calls: int = 0) -> Totals:
    return Totals(tokens, 0, cost, calls)


# -- crossed ----------------------------------------------------------------------------------


def test_a_budget_is_crossed_when_a_total_reaches_its_limit() -> None:
    tokens, cost, calls = (
        Budget("t", tokens=100),
        Budget("c", cost=0.5),
        Budget("n", model_calls=3),
    )
    none = _totals()
    assert crossed([tokens, cost, calls], "s", none, none) is None
    assert crossed([tokens], "s", _totals(99), none) is None
    assert crossed([tokens], "s", _totals(100), none) is tokens  # >=
    assert crossed([cost], "s", _totals(cost=0.49), none) is None
    assert crossed([cost], "s", _totals(cost=0.5), none) is cost
    assert crossed([calls], "s", _totals(calls=2), none) is None
    assert crossed([calls], "s", _totals(calls=3), none) is calls
    # tokens are input plus output
    assert crossed([tokens], "s", Totals(60, 40), none) is tokens
    # any limit of a budget with several
    both = Budget("b", tokens=1000, model_calls=2)
    assert crossed([both], "s", _totals(10, calls=2), none) is both
    # the first crossed, in declaration order
    assert crossed([tokens, calls], "s", _totals(500, calls=9), none) is tokens
    assert crossed([calls, tokens], "s", _totals(500, calls=9), none) is calls


def test_per_visit_budgets_count_the_visit_and_per_workflow_ones_the_workflow() -> None:
    visit = Budget("v", tokens=100, per="visit")
    whole = Budget("w", tokens=1000)
    assert crossed([visit, whole], "s", _totals(900), _totals(10)) is None
    assert crossed([visit, whole], "s", _totals(900), _totals(100)) is visit
    assert crossed([visit, whole], "s", _totals(1000), _totals(0)) is whole


def test_a_budget_with_states_guards_only_those() -> None:
    only = Budget("x", model_calls=1, states=("checking",))
    many = _totals(calls=5)
    assert crossed([only], "drafting", many, many) is None
    assert crossed([only], "checking", many, many) is only
    assert Budget("x", model_calls=1, states="checking").states == ("checking",)


# -- declaring budgets ------------------------------------------------------------------------


def test_a_type_checks_its_budgets() -> None:
    ok = WorkflowType(_machine(), budgets=[Budget("over_budget", cost=2.5, per="visit")])
    assert ok.budgets == (Budget("over_budget", cost=2.5, per="visit"),)
    assert WorkflowType(_machine()).budgets == ()
    one = Budget("over_budget", tokens=1)
    assert WorkflowType(_machine(), budgets=iter([one])).budgets == (one,)  # type: ignore[arg-type]
    bad = [
        Budget("nope", tokens=1),
        Budget("over_budget"),
        Budget("over_budget", tokens=0),
        Budget("over_budget", tokens=1.5),  # type: ignore[arg-type]
        Budget("over_budget", cost=-1.0),
        Budget("over_budget", cost=float("inf")),
        Budget("over_budget", model_calls=True),
        Budget("over_budget", tokens=1, per="day"),  # type: ignore[arg-type]
        Budget("over_budget", tokens=1, states=("nowhere",)),
    ]
    with pytest.raises(DefinitionError) as err:
        WorkflowType(_machine(), budgets=tuple(bad))
    codes = [p.code for p in err.value.problems]
    assert codes == ["unknown_event", *["invalid_budget"] * 7, "unknown_budget_state"]
    assert "budget event 'nope' is not declared" in err.value.message
    with pytest.raises(DefinitionError, match="sequence of Budget"):
        WorkflowType(_machine(), budgets=Budget("over_budget", tokens=1))  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="is not a Budget"):
        WorkflowType(_machine(), budgets=({"event": "over_budget"},))  # type: ignore[arg-type]


# -- usage ------------------------------------------------------------------------------------


def test_usage_is_checked() -> None:
    assert Usage("m", 1, 2, 0.25).tokens == 3
    bads: list[dict[str, Any]] = [
        {"model": ""},
        {"model": "m", "input_tokens": -1},
        {"model": "m", "output_tokens": 1.0},
        {"model": "m", "input_tokens": True},
        {"model": "m", "cost": -0.1},
        {"model": "m", "cost": float("nan")},
    ]
    for bad in bads:
        with pytest.raises(InvalidInput):
            Usage(**bad)


def test_an_envelope_round_trips_and_anything_else_counts_nothing() -> None:
    u = Usage("gpt-x", 120, 30, 0.002)
    env = envelope(
        u,
        agent="a",
        state="s",
        visit=3,
        response={"r": 1},
        messages=[{"role": "user", "content": "hi"}],
    )
    assert env == {
        LLM_KEY: {
            "model": "gpt-x",
            "input_tokens": 120,
            "output_tokens": 30,
            "cost": 0.002,
            "agent": "a",
            "state": "s",
            "visit": 3,
        },
        "response": {"r": 1},
        "messages": [{"role": "user", "content": "hi"}],
    }
    found = usage_of(env)
    assert found is not None and found[0] == u and found[1]["visit"] == 3
    bare = usage_of(envelope(Usage("m"), agent="a", state="s", visit=1, response=0, messages=[]))
    assert bare is not None and bare[0].cost is None
    other: Any
    for other in [
        None,
        3,
        "x",
        [],
        {"a": 1},
        {LLM_KEY: "x"},
        {LLM_KEY: {"model": ""}},
        {LLM_KEY: {"model": "m", "input_tokens": -3}},
        {LLM_KEY: {"model": "m", "cost": "free"}},
    ]:
        assert usage_of(other) is None


def _record(step: str, result: Any, status: str = "done", at: float = 0.0) -> StepRecord:
    return StepRecord(f"w:{step}", "w", step, status, result, None, 1, at, at)  # type: ignore[arg-type]


def test_reports_and_the_conversation_come_from_done_model_steps() -> None:
    def model(
        state: str, visit: int, model: str, tin: int, tout: int, cost: float | None, text: str
    ) -> Any:
        return envelope(
            Usage(model, tin, tout, cost),
            agent="agent",
            state=state,
            visit=visit,
            response={"text": text},
            messages=[
                {"role": "user", "content": f"q{text}"},
                {"role": "assistant", "content": text},
            ],
        )

    records = [
        _record("agent.v1.model.0", model("drafting", 1, "big", 100, 10, 0.01, "a")),
        _record("charge", {"charged": 5}),
        _record("agent.v1.model.1", model("drafting", 1, "small", 50, 5, None, "b")),
        _record("agent.v2.model.0", model("checking", 2, "big", 10, 1, 0.001, "c")),
        _record("agent.v2.model.1", model("checking", 2, "big", 999, 999, 9.0, "x"), "failed"),
    ]
    assert usage.sum_usage(records) == Totals(160, 16, 0.011, 3)
    assert usage.sum_usage(records, visit=2) == Totals(10, 1, 0.001, 1)
    assert usage.sum_usage(records, visit=7) == Totals()
    report = usage.report(records)
    assert report is not None
    assert report["total"] == {
        "input_tokens": 160,
        "output_tokens": 16,
        "tokens": 176,
        "cost": 0.011,
        "model_calls": 3,
    }
    assert set(report["by_state"]) == {"drafting", "checking"}
    assert report["by_state"]["drafting"]["model_calls"] == 2
    assert report["by_model"]["small"] == {
        "input_tokens": 50,
        "output_tokens": 5,
        "tokens": 55,
        "cost": 0.0,
        "model_calls": 1,
    }
    assert usage.report(records[1:2]) is None
    talk = usage.conversation(records)
    assert [m["content"] for m in talk] == ["qa", "a", "qb", "b", "qc", "c"]
    assert talk[0] == {
        "step": "agent.v1.model.0",
        "agent": "agent",
        "state": "drafting",
        "visit": 1,
        "role": "user",
        "content": "qa",
    }


# -- in a handler -----------------------------------------------------------------------------


class Agent:
    """A fake agent: each run makes model calls (steps storing envelopes of 80+20 tokens and
    0.01 USD each, of model ``model``) until ``calls`` are made in this visit, checking the
    type's budgets before each; counts the calls it really made. With ``flaky``, its first run
    fails transiently after its calls (the re-run finds them in the ledger)."""

    counted = False
    """Report each recorded step (``usage.recorded``), as the agent session does, so the
    budgets read the model steps once per run."""

    def __init__(self, calls: int, then: str, model: str = "fake", flaky: bool = False) -> None:
        self.calls, self.then, self.model, self.made = calls, then, model, 0
        self.flaky = flaky

    async def __call__(self, run: Run) -> str:
        visit = run.workflow.version
        for i in range(self.calls):
            await usage.check_budgets(run, counted=self.counted)

            def call(key: Any, i: int = i) -> Any:
                self.made += 1
                u = Usage(self.model, 80, 20, 0.01)
                usage.observe(run, u)
                messages = [
                    {"role": "user", "content": f"say {i}"},
                    {"role": "assistant", "content": str(i)},
                ]
                return envelope(
                    u,
                    agent="agent",
                    state=run.state,
                    visit=visit,
                    response={"i": i},
                    messages=messages,
                )

            result = await run.step(f"agent.v{visit}.model.{i}", call)
            if self.counted:
                usage.recorded(run, result)
        if self.flaky:
            self.flaky = False
            raise TransientError("the tool's API said 503")
        return self.then


def agent_type(
    drafting: int = 2, checking: int = 3, budgets: tuple[Budget, ...] = (), **agent: Any
) -> WorkflowType:
    """The review type with :class:`Agent` handlers (``drafting`` and ``checking`` calls),
    re-running in place after a transient failure at once."""
    return WorkflowType(
        _machine(),
        {"drafting": Agent(drafting, "drafted", **agent), "checking": Agent(checking, "checked")},
        budgets=budgets,
        on_transient=None,
        retry=RetryPolicy(base_delay=0.0, jitter=0.0),
    )


async def _drive(budgets: tuple[Budget, ...], drafting: int, checking: int) -> tuple[Any, ...]:
    clock = ManualClock(1_000.0)
    wtype = agent_type(drafting, checking, budgets)
    draft, check = wtype.handlers["drafting"], wtype.handlers["checking"]
    assert isinstance(draft, Agent) and isinstance(check, Agent)
    async with memory_engine([wtype], clock) as engine:
        seen: list[ModelCall] = []
        engine.observers.model_call.append(seen.append)
        await engine.start("review", {}, workflow_id="r1")
        await Worker(engine).run_until_idle()
        row = await engine.get("r1")
        report = await usage.usage_report(engine.runtime.store, "r1")
        log = await engine.history("r1")
    return row, draft.made + check.made, seen, report, log


async def test_without_a_budget_crossed_the_agent_runs_to_its_end() -> None:
    row, made, seen, report, _ = await _drive((Budget("over_budget", model_calls=10),), 2, 3)
    assert row.state == "done"
    assert made == len(seen) == 5
    assert seen[0].workflow.id == "r1" and (seen[0].model, seen[0].input_tokens) == ("fake", 80)
    assert report["total"]["model_calls"] == 5
    assert report["by_state"]["checking"]["tokens"] == 300


@pytest.mark.parametrize(("counted", "reads"), [(True, 3), (False, 8)])
async def test_the_budgets_read_the_model_steps_once_per_handler_run_when_counted(
    monkeypatch: pytest.MonkeyPatch, counted: bool, reads: int
) -> None:
    # Two handler runs (drafting: 2 calls; checking: 4, then the budget of 6 is reached), and
    # the report _drive reads. Counted on as each call is recorded (the agent session), the
    # ledger is read once per run; checked alone, before each of the 7 checks. Both stop at
    # the budget.
    seen: list[str] = []
    real = usage.model_records

    async def reading(store: Any, workflow_id: str) -> Any:
        seen.append(workflow_id)
        return await real(store, workflow_id)

    monkeypatch.setattr(llm_usage, "model_records", reading)
    monkeypatch.setattr(Agent, "counted", counted)
    row, made, *_ = await _drive((Budget("over_budget", model_calls=6),), 2, 6)
    assert row.state == "waiting_human"
    assert made == 6
    assert len(seen) == reads


async def test_a_crossed_budget_fires_its_event_with_no_further_model_call() -> None:
    row, made, seen, report, log = await _drive((Budget("over_budget", tokens=400),), 2, 5)
    assert row.state == "waiting_human"
    assert made == len(seen) == 4  # 2 in drafting, 2 in checking: 400 tokens, then no call
    assert report["total"]["tokens"] == 400
    assert row.context == {}
    fired = log[-1]
    assert (fired.event, fired.from_state) == ("over_budget", "checking")
    assert fired.payload == {
        "budget": {"event": "over_budget", "per": "workflow", "tokens": 400},
        "usage": {
            "input_tokens": 320,
            "output_tokens": 80,
            "tokens": 400,
            "cost": 0.04,
            "model_calls": 4,
        },
    }


async def test_a_per_visit_budget_of_one_state() -> None:
    budget = Budget("over_budget", cost=0.03, per="visit", states=("checking",))
    row, made, _, report, _ = await _drive((budget,), 5, 9)
    assert row.state == "waiting_human"
    assert made == 5 + 3
    assert report["by_state"] == {
        "drafting": {
            "input_tokens": 400,
            "output_tokens": 100,
            "tokens": 500,
            "cost": 0.05,
            "model_calls": 5,
        },
        "checking": {
            "input_tokens": 240,
            "output_tokens": 60,
            "tokens": 300,
            "cost": 0.03,
            "model_calls": 3,
        },
    }


def test_budget_exceeded_says_what_was_reached() -> None:
    exc = BudgetExceeded(Budget("over_budget", tokens=10, per="visit"), Totals(8, 4, 0.0, 2), "s")
    assert exc.event == "over_budget"
    assert exc.to_dict() == {
        "code": "budget_exceeded",
        "message": exc.message,
        "budget": {"event": "over_budget", "per": "visit", "tokens": 10},
        "usage": {
            "input_tokens": 8,
            "output_tokens": 4,
            "tokens": 12,
            "cost": 0.0,
            "model_calls": 2,
        },
        "state": "s",
    }
    assert "12 tokens" in exc.message


async def test_a_replayed_model_call_is_neither_made_nor_observed_again() -> None:
    clock = ManualClock(1_000.0)
    wtype = agent_type(2, 1, flaky=True)
    async with memory_engine([wtype], clock) as engine:
        seen: list[ModelCall] = []
        engine.observers.model_call.append(seen.append)
        await engine.start("review", {}, workflow_id="r1")
        worker = Worker(engine)
        for _ in range(3):
            await worker.run_until_idle()
            clock.advance(1.0)
        assert (await engine.get("r1")).state == "done"
        report = await usage.usage_report(engine.runtime.store, "r1")
    assert len(seen) == 3 and report["total"]["model_calls"] == 3


async def test_a_budget_event_the_state_does_not_allow_is_refused_like_any_other() -> None:
    """A budget crossed in a state without an edge for its event: the handler's outcome is
    refused as a handler returning that event would be (the workflow parks for an operator:
    nothing can fire), and the model is not called again."""
    machine = (
        MachineBuilder("narrow")
        .state("drafting", initial=True)
        .state("done", terminal=True)
        .event("drafted")
        .event("over_budget")
        .transition("drafted", "drafting", "done")
        .build()
    )
    agent = Agent(3, "drafted")
    wtype = WorkflowType(
        machine,
        {"drafting": agent},
        budgets=(Budget("over_budget", model_calls=1),),
        on_fatal=None,
    )
    async with memory_engine([wtype], ManualClock(1_000.0)) as engine:
        await engine.start("narrow", {}, workflow_id="n1")
        await Worker(engine).run_until_idle()
        row = await engine.get("n1")
    assert (row.state, row.parked) == ("drafting", "fatal_error")
    assert "'over_budget' is not allowed in state 'drafting'" in (row.last_error or "")
    assert agent.made == 1


async def test_a_sync_handler_observes_its_model_calls_too() -> None:
    machine = (
        MachineBuilder("plain")
        .state("thinking", initial=True)
        .state("done", terminal=True)
        .event("thought")
        .transition("thought", "thinking", "done")
        .build()
    )

    def thinking(run: Any) -> str:  # a SyncRun: in the worker's thread pool
        u = Usage("sync-model", 5, 5)

        def call(key: Any) -> Any:
            usage.observe(run, u)
            return envelope(u, agent="a", state=run.state, visit=1, response=None, messages=[])

        run.step("a.v1.model.0", call)
        return "thought"

    async with memory_engine([WorkflowType(machine, {"thinking": thinking})]) as engine:
        seen: list[ModelCall] = []
        engine.observers.model_call.append(seen.append)
        await engine.start("plain", {}, workflow_id="s1")
        await Worker(engine).run_until_idle()
        assert (await engine.get("s1")).state == "done"
        assert (await usage.totals(engine.store, "s1")) == Totals(5, 5, 0.0, 1)
    assert [(c.model, c.workflow.state) for c in seen] == [("sync-model", "thinking")]
