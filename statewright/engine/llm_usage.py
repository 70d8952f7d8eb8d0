"""Token usage of an agent's model calls: recorded with each model step, summed for views and
budgets, counted in metrics (issue 27).

A model call made through an agent session is a durable step whose stored result is an
*envelope* (:func:`envelope`): the usage under :data:`LLM_KEY`, the framework's serialised
response, and the call's new messages in a neutral form. Nothing else records usage: totals
(:func:`totals`, :func:`usage_report`) are sums over the workflow's done steps, so they survive
crashes and replays exactly as the steps do, and a replayed call (its result read from the
ledger) is neither counted twice nor observed twice (:func:`observe` is for fresh calls only).

Pure of any agent framework: the adapters (:mod:`statewright.agents.core` and the ones on it)
build :class:`Usage` from their framework's own usage objects.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statewright.engine.budgets import NO_USAGE, Totals, crossed
from statewright.errors import BudgetExceeded, InvalidInput
from statewright.types import StepFinish, StepRecord

if TYPE_CHECKING:
    from statewright.store.protocol import Store

JSON = Any

LLM_KEY = "$llm"
"""The key of a model step's result that holds its usage (see :func:`envelope`)."""

ROLES = ("user", "assistant", "tool", "system")
"""The roles of the neutral messages."""


@dataclass(frozen=True)
class Usage:
    """What one model call used: the model's name, tokens in and out, and its cost in the
    currency units of the type (USD), None when unknown (it then adds nothing to cost totals
    and budgets)."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise InvalidInput("usage: model must be a non-empty string", field="model")
        for name in ("input_tokens", "output_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput(
                    f"usage: {name} must be a non-negative integer, not {value!r}", field=name
                )
        cost = self.cost
        if cost is not None and (
            isinstance(cost, bool)
            or not isinstance(cost, int | float)
            or not math.isfinite(cost)
            or cost < 0
        ):
            raise InvalidInput(
                f"usage: cost must be a non-negative number or None, not {cost!r}", field="cost"
            )

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def envelope(
    usage: Usage,
    *,
    agent: str,
    state: str,
    visit: int,
    response: JSON,
    messages: list[JSON],
) -> dict[str, Any]:
    """The stored result of a model step: ``{"$llm": {model, input_tokens, output_tokens,
    cost, agent, state, visit}, "response": <the framework's serialised response>,
    "messages": [<this call's new messages>]}``.

    ``messages`` are neutral: ``{"role": "user"|"assistant"|"tool"|"system", "content": str,
    "tool_calls"?: [{"id", "name", "args"}], "tool_call_id"?: str}``; they make the
    workflow's conversation view (:func:`conversation`).
    """
    return {
        LLM_KEY: {
            "model": usage.model,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cost": None if usage.cost is None else float(usage.cost),
            "agent": agent,
            "state": state,
            "visit": visit,
        },
        "response": response,
        "messages": list(messages),
    }


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def usage_of(result: Any) -> tuple[Usage, dict[str, Any]] | None:
    """The usage of a stored step result and its ``"$llm"`` dict, or None: not a model
    step's envelope (any other step, or one whose envelope is malformed: it counts nothing
    rather than failing a view)."""
    if not isinstance(result, dict):
        return None
    llm = result.get(LLM_KEY)
    if not isinstance(llm, dict):
        return None
    model = llm.get("model")
    tokens_in, tokens_out = _count(llm.get("input_tokens", 0)), _count(llm.get("output_tokens", 0))
    cost = llm.get("cost")
    if (
        not isinstance(model, str)
        or not model
        or tokens_in is None
        or tokens_out is None
        or not (
            cost is None
            or (
                not isinstance(cost, bool)
                and isinstance(cost, int | float)
                and math.isfinite(cost)
                and cost >= 0
            )
        )
    ):
        return None
    return Usage(model, tokens_in, tokens_out, None if cost is None else float(cost)), llm


def model_steps(records: Iterable[StepRecord]) -> list[tuple[StepRecord, Usage, dict[str, Any]]]:
    """The done model steps of a ledger, in its order, each with its usage and ``"$llm"``."""
    out = []
    for record in records:
        if record.status == "done":
            found = usage_of(record.result)
            if found is not None:
                out.append((record, *found))
    return out


def sum_usage(records: Iterable[StepRecord], *, visit: int | None = None) -> Totals:
    """The totals of the done model steps of ``records`` (of one visit when given)."""
    total = NO_USAGE
    for _, usage, llm in model_steps(records):
        if visit is None or llm.get("visit") == visit:
            total = total.plus(usage.input_tokens, usage.output_tokens, usage.cost)
    return total


async def model_records(store: Any, workflow_id: str) -> list[StepRecord]:
    """The workflow's model steps (any status: :func:`model_steps` keeps the done ones):
    filtered by the database when ``store`` has the read
    model (the built-in stores), else from the whole ledger (a store with the core alone)."""
    read = getattr(store, "model_steps", None)
    found: list[StepRecord] = await (
        read(workflow_id) if read is not None else store.steps(workflow_id)
    )
    return found


async def totals(store: Store, workflow_id: str, *, visit: int | None = None) -> Totals:
    """Sums the ``"$llm"`` envelopes of the workflow's done steps (of one visit when given)."""
    return sum_usage(await model_records(store, workflow_id), visit=visit)


def report(records: Iterable[StepRecord]) -> dict[str, Any] | None:
    """``{"total": {...}, "by_state": {state: {...}}, "by_model": {model: {...}}}`` of the
    done model steps of ``records`` (each a :meth:`Totals.to_dict`), or None when there is
    none (the views then show no ``usage``)."""
    found = model_steps(records)
    if not found:
        return None
    total = NO_USAGE
    by_state: dict[str, Totals] = {}
    by_model: dict[str, Totals] = {}
    for _, usage, llm in found:
        args = (usage.input_tokens, usage.output_tokens, usage.cost)
        total = total.plus(*args)
        state = str(llm.get("state") or "")
        by_state[state] = by_state.get(state, NO_USAGE).plus(*args)
        by_model[usage.model] = by_model.get(usage.model, NO_USAGE).plus(*args)
    return {
        "total": total.to_dict(),
        "by_state": {k: v.to_dict() for k, v in by_state.items()},
        "by_model": {k: v.to_dict() for k, v in by_model.items()},
    }


async def usage_report(store: Store, workflow_id: str) -> dict[str, Any]:
    """The workflow's usage: ``{"total", "by_state", "by_model"}`` (zero totals and empty
    maps when it made no model call)."""
    return report(await model_records(store, workflow_id)) or {
        "total": NO_USAGE.to_dict(),
        "by_state": {},
        "by_model": {},
    }


def conversation(records: Iterable[StepRecord]) -> list[dict[str, Any]]:
    """The neutral messages of the done model steps of ``records``, in ledger order, each
    with the step, agent, state and visit it came from (``{"step", "agent", "state",
    "visit", "role", "content", ...}``). Messages that are not objects are skipped."""
    out: list[dict[str, Any]] = []
    for record, _, llm in model_steps(records):
        messages = record.result.get("messages")
        if not isinstance(messages, list):
            continue
        where = {
            "step": record.step,
            "agent": llm.get("agent"),
            "state": llm.get("state"),
            "visit": llm.get("visit"),
        }
        out.extend({**where, **m} for m in messages if isinstance(m, Mapping))
    return out


def observe(run: Any, usage: Usage) -> None:
    """Counts ONE fresh model call of ``run`` (a :class:`~statewright.engine.steps.Run` or
    :class:`~statewright.engine.syncrun.SyncRun`) into the observers (the
    ``statewright_llm_*`` metrics). Never call it for a response read from the ledger."""
    rt = getattr(run, "rt", None) or getattr(getattr(run, "run", None), "rt", None)
    if rt is None:
        return
    observers = rt.observers
    if observers.model_call:
        observers.model_called(
            run.workflow, usage.model, usage.input_tokens, usage.output_tokens, usage.cost
        )


def with_pending(records: list[StepRecord], finish: StepFinish | None) -> list[StepRecord]:
    """``records`` with the run's pending *done* record applied: the last step's, kept for
    the handler's transition to carry (still *executing*, without its result, in the store;
    done for the handler)."""
    if finish is None or finish.status != "done" or usage_of(finish.result) is None:
        return records
    workflow_id, _, step = finish.key.rpartition(":")
    done = StepRecord(
        finish.key,
        workflow_id,
        step,
        "done",
        finish.result,
        None,
        finish.attempt,
        finish.at,
        finish.at,
    )
    return [*(r for r in records if r.key != finish.key), done]


_RUN_TOTALS: weakref.WeakKeyDictionary[Any, tuple[Totals, Totals]] = weakref.WeakKeyDictionary()
"""Each handler run's usage so far, of the workflow and of this visit: read from the ledger at
its first fresh model call, then counted on as its model steps are recorded (one handler runs
a workflow at a time, under its lease), so a run of n calls reads the model steps once, not
n times."""


async def check_budgets(run: Any, *, counted: bool = False) -> None:
    """Raises :class:`~statewright.errors.BudgetExceeded` when a budget of ``run``'s type
    that applies to its state is reached by the workflow's recorded usage (of this visit for
    a per-visit budget); nothing to read when the type declares none. Called before a fresh
    model call.

    ``counted``: the caller reports every model step it records with :func:`recorded` (the
    agent session does), so the model steps are read at the run's first check only and
    counted on from there; otherwise they are read at every check."""
    budgets = run.type.budgets
    if not budgets:
        return
    row = run.workflow
    known = _RUN_TOTALS.get(run) if counted else None
    if known is None:
        records = with_pending(await model_records(run.rt.store, row.id), run.pending_finish)
        known = (sum_usage(records), sum_usage(records, visit=row.version))
        if counted:
            _RUN_TOTALS[run] = known
    workflow, visit = known
    budget = crossed(budgets, row.state, workflow, visit)
    if budget is not None:
        raise BudgetExceeded(budget, visit if budget.per == "visit" else workflow, row.state)


def recorded(run: Any, result: Any) -> None:
    """Count a model step ``run`` has just recorded (a fresh call's envelope, or one
    reconciled) into its totals, once :func:`check_budgets` has read them with
    ``counted=True``."""
    known = _RUN_TOTALS.get(run)
    found = usage_of(result)
    if known is None or found is None:
        return
    used, llm = found
    workflow, visit = known
    add = (used.input_tokens, used.output_tokens, used.cost)
    if llm.get("visit") == run.workflow.version:
        visit = visit.plus(*add)
    _RUN_TOTALS[run] = (workflow.plus(*add), visit)


__all__ = [
    "LLM_KEY",
    "ROLES",
    "Totals",
    "Usage",
    "check_budgets",
    "conversation",
    "envelope",
    "model_records",
    "model_steps",
    "observe",
    "recorded",
    "report",
    "sum_usage",
    "totals",
    "usage_of",
    "usage_report",
    "with_pending",
]
