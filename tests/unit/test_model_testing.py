"""statewright.testing: paths, the transition cover, check_machine, the pytest fixtures.

Also runs them on our own machines: every example's workflow type and the built-in agent
task, and on a planted bug that only one sequence of events reaches.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statewright import Engine, Machine, MachineBuilder, ManualClock, Next, Run, WorkflowType
from statewright.definition.machine import Event, State, Transition
from statewright.engine import agent_task_type
from statewright.testing import (
    ModelCheckFailure,
    Step,
    check_cover,
    check_machine,
    format_path,
    legal_events,
    payloads,
    simple_paths,
    transition_cover,
)
from statewright.testing.schema import from_schema
from statewright.types import WorkflowRow
from tests.torture import examples

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FAST = settings(max_examples=25, derandomize=True, database=None, deadline=None)
EXAMPLE_RUNS = settings(FAST, max_examples=examples(25, 15))
"""The example workflows' random runs: 15 by default, 25 under ``--torture`` (tests/torture.py).
The 15 runs (derandomized) resolve the same (state, event, target) edges as the 25 do (13 of
refund_approval with the approver's events, 12 with everyone's, 11 of order_fulfilment), in
60% of the CPU. The agent task keeps its 25 (``FAST``): with 22 or fewer its runs resolve 18
or fewer of its edges instead of 21."""


# -- paths and cover ------------------------------------------------------------------------------


def review_machine() -> Machine:
    """A branch (approve/reject), a loop (edit), a self-transition (comment), a wildcard."""
    return (
        MachineBuilder("review")
        .state("draft", initial=True)
        .state("review")
        .state("approved", terminal=True)
        .state("rejected", terminal=True)
        .event("submit")
        .event("approve")
        .event("reject")
        .event("edit")
        .event("comment")
        .event("cancel")
        .transition("submit", "draft", "review")
        .transition("approve", "review", "approved")
        .transition("reject", "review", "rejected")
        .transition("edit", "review", "draft")
        .transition("comment", "review", "review")
        .transition("cancel", "*", "rejected")
        .build()
    )


def test_simple_paths_visit_no_state_twice_and_end_in_a_terminal_state() -> None:
    found = [format_path(p) for p in simple_paths(review_machine())]
    assert found == [
        "draft --submit--> review --approve--> approved",
        "draft --submit--> review --reject--> rejected",
        "draft --submit--> review --cancel--> rejected",
        "draft --cancel--> rejected",
    ]
    [short] = simple_paths(review_machine(), max_length=1)
    assert short == (Step("draft", "cancel", "rejected"),)
    assert short[0][:3] == ("draft", "cancel", "rejected")


def test_transition_cover_takes_every_edge_loops_and_wildcards_included() -> None:
    machine = review_machine()
    cover = transition_cover(machine)
    every = {(s, t.event, t.target) for t in machine.transitions for s in t.sources}
    assert len(every) == 7  # "*" expanded to draft and review
    assert {s[:3] for s in cover.covered} == every
    assert cover.unreachable == ()
    for seq in cover:
        assert seq[0].source == "draft"
        assert all(a.target == b.source for a, b in itertools.pairwise(seq))
        assert machine.is_terminal(seq[-1].target)
    assert len(cover) <= 4
    assert cover.events()[0][0] == "submit"
    assert "review --comment--> review" in " / ".join(format_path(s) for s in cover)


def test_transition_cover_reports_unreachable_edges_and_keeps_guarded_edges_apart() -> None:
    # Built without validation (which refuses unreachable states) to show the report.
    states = [
        State("start", initial=True),
        State("limbo"),
        State("done", terminal=True),
    ]
    events = [Event("go"), Event("leave")]
    transitions = (
        Transition(("start",), "go", "done", guard=_guard("payload.fast")),
        Transition(("start",), "go", "done"),
        Transition(("limbo",), "leave", "done"),
    )
    machine = Machine(
        "odd",
        1,
        MappingProxyType({s.name: s for s in states}),
        MappingProxyType({e.name: e for e in events}),
        transitions,
    )
    cover = transition_cover(machine)
    assert cover.unreachable == (Step("limbo", "leave", "done"),)
    assert cover.covered == {
        Step("start", "go", "done"),
        Step("start", "go", "done", "payload.fast"),
    }
    assert cover.to_dict()["unreachable"][0]["source"] == "limbo"


def _guard(expr: str) -> Any:
    from statewright.definition.machine import make_guard

    return make_guard(expr, {})


# -- strategies -----------------------------------------------------------------------------------


@given(data=st.data())
@settings(
    max_examples=examples(30, 10), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
def test_schema_payloads_fit_their_schema(data: st.DataObject) -> None:
    """Random payloads (a new draw each run): 10 by default, 30 under ``--torture``."""
    from jsonschema import Draft202012Validator

    schema = {
        "type": "object",
        "required": ["n", "name", "tags"],
        "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 9},
            "x": {"type": "number", "exclusiveMinimum": 0},
            "name": {"type": "string", "minLength": 2, "maxLength": 4},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
            "kind": {"anyOf": [{"const": "k"}, {"type": "null"}]},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        },
    }
    value = data.draw(from_schema(schema))
    assert Draft202012Validator(schema).is_valid(value)


@given(data=st.data())
@settings(max_examples=examples(30, 10), deadline=None)
def test_legal_events_are_taken_by_the_machine(data: st.DataObject) -> None:
    """Random legal events (a new draw each run): 10 by default (``running`` has 7 kinds of
    event), 30 under ``--torture``."""
    machine = agent_task_type().machine
    event, payload = data.draw(legal_events(machine, "running"))
    target = machine.resolve("running", event, {}, payload).target
    assert target in machine.states
    assert data.draw(payloads(machine, "start")) == {}


# -- check_machine and check_cover on our own machines --------------------------------------------


def load_example(name: str) -> ModuleType:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))  # examples import their sibling fake_services
    module_name = f"_model_example_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def refund_paid_only_when_allowed(row: WorkflowRow) -> None:
    # With the system's events left to the handlers, money goes out only for a valid
    # request within the hard limit, and a paid refund is never rejected afterwards.
    if row.state in ("notifying", "done"):
        assert "payout_id" in row.context, row
        assert 0 < row.context["amount_cents"] <= 100_000, row
    if row.state == "rejected":
        assert "payout_id" not in row.context, row


def order_never_cancelled_after_charging(row: WorkflowRow) -> None:
    # Holds whoever sends what: no edge cancels an order once the capture handler ran.
    if row.state == "cancelled":
        assert "charge_id" not in row.context, row


def refund_agent_pays_only_after_approval(row: WorkflowRow) -> None:
    # The agent may only request approval; the payout runs in `running` only after a
    # request, and `paused` goes back to `running` only on an approver's grant.
    if "payout_id" in row.context:
        assert "approval_requested" in row.context, row
    if row.state == "done":
        assert "payout_id" in row.context, row


# (example, type factory, sample inputs, roles that send external events (None: every
# event, webhooks and operators included), invariant)
ExampleCase = tuple[str, str, str, tuple[str, ...] | None, Callable[[WorkflowRow], None]]
EXAMPLE_CASES: list[ExampleCase] = [
    (
        "refund_approval",
        "refund_type",
        "SAMPLE_REFUNDS",
        ("approver",),
        refund_paid_only_when_allowed,
    ),
    (
        "order_fulfilment",
        "order_type",
        "SAMPLE_ORDERS",
        None,
        order_never_cancelled_after_charging,
    ),
    (
        "refund_agent",
        "refund_agent_type",
        "SAMPLE_REQUESTS",
        ("approver",),
        refund_agent_pays_only_after_approval,
    ),
]


def test_every_example_machine_is_model_checked() -> None:
    checked = {getattr(load_example(m), factory)().name for m, factory, *_ in EXAMPLE_CASES}
    for path in EXAMPLES.glob("*.py"):
        module = load_example(path.stem)
        for wtype in getattr(module, "TYPES", []):
            assert wtype.name in checked, f"add {path.stem} to EXAMPLE_CASES"


@pytest.mark.parametrize("case", EXAMPLE_CASES, ids=lambda c: c[0])
def test_example_workflows_hold_under_random_events(case: ExampleCase) -> None:
    module_name, factory_name, samples_name, roles, invariant = case
    module = load_example(module_name)
    factory = getattr(module, factory_name)
    samples: Mapping[str, Mapping[str, Any]] = getattr(module, samples_name)
    # A fresh type per example: its fake services start empty each time.
    check_machine(
        factory,
        inputs=st.sampled_from(list(samples.values())),
        invariants=[invariant],
        roles=roles,
        settings=EXAMPLE_RUNS,
    )
    if roles is not None:
        # Every event from anyone (webhooks, operators): the engine's own checks still hold.
        check_machine(
            factory, inputs=next(iter(samples.values())), settings=EXAMPLE_RUNS, max_steps=12
        )
    cover = check_cover(factory(), inputs=next(iter(samples.values())))
    assert cover.covered == set(transition_cover(factory().machine).covered)


def test_agent_task_holds_under_random_events_and_its_cover_runs() -> None:
    check_machine(agent_task_type(), settings=FAST)
    # The bare machine (no handlers), only what an agent may send.
    check_machine(
        agent_task_type().machine,
        roles=["agent"],
        settings=settings(FAST, max_examples=10),
        max_steps=10,
    )
    cover = check_cover(agent_task_type())
    assert len(cover) >= 5


async def test_check_machine_works_from_an_async_test() -> None:
    check_machine(review_machine(), settings=settings(FAST, max_examples=5))


# -- a planted bug --------------------------------------------------------------------------------


def buggy_refund_type() -> WorkflowType:
    """Pays out once per visit to ``paying``: a ``retry`` after the money went out, then a
    second ``approve``, pays the customer twice."""
    machine = (
        MachineBuilder("buggy_refund")
        .state("requested", initial=True)
        .state("paying")
        .state("confirming")
        .state("done", terminal=True)
        .state("rejected", terminal=True)
        .event("approve")
        .event("deny")
        .event("sent")
        .event("confirmed")
        .event("retry", "The bank has not confirmed yet: ask for approval again.")
        .transition("approve", "requested", "paying")
        .transition("deny", "requested", "rejected")
        .transition("sent", "paying", "confirming")
        .transition("confirmed", "confirming", "done")
        .transition("retry", "confirming", "requested")
        .build()
    )

    def pay_out(run: Run) -> Next:
        # The bug: it never looks at the payouts already made.
        payouts = [*run.context.get("payouts", []), run.context["amount"]]
        return Next("sent", context={"payouts": payouts})

    return WorkflowType(machine, handlers={"paying": pay_out})


def paid_at_most_once(row: WorkflowRow) -> bool:
    return len(row.context.get("payouts", [])) <= 1


def test_check_machine_finds_the_planted_double_payout_and_shows_the_events() -> None:
    with pytest.raises(ModelCheckFailure) as caught:
        check_machine(
            buggy_refund_type,
            inputs={"amount": 100},
            invariants=[paid_at_most_once],
            settings=settings(FAST, max_examples=200),
        )
    message = str(caught.value)
    assert "invariant paid_at_most_once returned False" in message
    events = [s.split()[1] for s in caught.value.steps if s.startswith("send ")]
    assert events == ["approve", "retry", "approve"], message
    assert sum(s.startswith("run handlers in paying") for s in caught.value.steps) == 2
    assert "send retry {}   # confirming -> requested" in message


def test_check_cover_names_the_step_it_cannot_take() -> None:
    machine = (
        MachineBuilder("gated")
        .state("a", initial=True)
        .state("b", terminal=True)
        .event("go")
        .transition("go", "a", "b", guard="context.ready == True")
        .build()
    )
    with pytest.raises(ModelCheckFailure, match="found no payload that takes a --go"):
        check_cover(machine, search=5)
    assert len(check_cover(machine, inputs={"ready": True})) == 1


# -- the pytest plugin ----------------------------------------------------------------------------


@pytest.fixture
def review_type() -> WorkflowType:
    return WorkflowType(review_machine())


async def test_plugin_fixtures_give_an_open_engine_on_the_manual_clock(
    statewright_engine: Engine, statewright_clock: ManualClock, review_type: WorkflowType
) -> None:
    assert statewright_engine.clock is statewright_clock
    statewright_engine.register(review_type)
    row = (await statewright_engine.start("review", workflow_id="r1")).row
    assert row.created_at == statewright_clock.now()
    await statewright_engine.send("r1", "submit")
    await statewright_engine.check("r1")


async def test_plugin_sqlite_fixture_uses_a_file_in_tmp_path(
    statewright_sqlite_engine: Engine, tmp_path: Path
) -> None:
    statewright_sqlite_engine.register(review_machine())
    await statewright_sqlite_engine.start("review", workflow_id="r1")
    assert (tmp_path / "statewright.db").exists()


def test_the_readme_fixture_example_passes_under_pytest_with_the_installed_plugin(
    tmp_path: Path,
) -> None:
    import re
    import subprocess
    from importlib.metadata import entry_points

    page = Path(__file__).resolve().parents[2] / "docs" / "guides" / "testing.md"
    [block] = [
        b
        for b in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL)
        if "statewright_engine" in b
    ]
    (tmp_path / "test_readme_fixtures.py").write_text(block)
    # A user's project: strict asyncio mode, the plugin found through its entry point only.
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = strict\n")
    # The plugins of this repository's own test tools (hypothesis, schemathesis, xdist...) are
    # not the user's: blocked, they cost the run 1.3 CPU-s instead of 3 (pytest rewrites the
    # asserts of every module of an autoloaded plugin's distribution).
    others = sorted(
        {ep.name for ep in entry_points(group="pytest11")} - {"statewright", "asyncio"}
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
        + [arg for name in others for arg in ("-p", f"no:{name}")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_without_hypothesis_the_error_names_the_extra(tmp_path: Path) -> None:
    """Without hypothesis installed, the pure helpers still import, and ``check_machine``
    says which extra brings it (a fresh interpreter: this one has imported hypothesis)."""
    import subprocess

    code = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "from statewright.testing import transition_cover, memory_engine\n"
        "try:\n"
        "    from statewright.testing import check_machine\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name, exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "hypothesis statewright.testing.check_machine needs hypothesis: "
        "pip install 'statewright[testing]'"
    )
