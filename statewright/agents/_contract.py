"""A stand-in for the usage and budget modules of the shared agents contract.

Part B owns :mod:`statewright.agents.usage` and :mod:`statewright.engine.budgets`; until they
land, :mod:`statewright.agents.core` codes against this minimal copy of their contract (the
same names and shapes). Once they are in, this module only re-exports them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from statewright.errors import StatewrightError
from statewright.types import JSON

LLM_KEY = "$llm"


@dataclass(frozen=True)
class Usage:
    """One model call's usage."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None


def envelope(
    usage: Usage, *, agent: str, state: str, visit: int, response: JSON, messages: list[JSON]
) -> dict[str, Any]:
    """The stored result of a model step: its usage, response and new messages."""
    return {
        LLM_KEY: {
            "model": usage.model,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cost": usage.cost,
            "agent": agent,
            "state": state,
            "visit": visit,
        },
        "response": response,
        "messages": messages,
    }


def usage_of(result: Any) -> tuple[Usage, dict[str, Any]] | None:
    """(usage, the ``$llm`` dict) of a stored model step's result, or None."""
    if not isinstance(result, dict) or not isinstance(result.get(LLM_KEY), dict):
        return None
    llm = result[LLM_KEY]
    usage = Usage(
        str(llm.get("model", "")),
        int(llm.get("input_tokens") or 0),
        int(llm.get("output_tokens") or 0),
        llm.get("cost"),
    )
    return usage, llm


@dataclass(frozen=True)
class Totals:
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    model_calls: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


async def totals(store: Any, workflow_id: str, *, visit: int | None = None) -> Totals:
    """The sums of the workflow's done model steps (of one visit when given)."""
    inp = out = calls = 0
    cost = 0.0
    for rec in await store.steps(workflow_id):
        found = usage_of(rec.result) if rec.status == "done" else None
        if found is None or (visit is not None and found[1].get("visit") != visit):
            continue
        usage = found[0]
        inp, out, calls = inp + usage.input_tokens, out + usage.output_tokens, calls + 1
        cost += usage.cost or 0.0
    return Totals(inp, out, cost, calls)


def observe(run: Any, usage: Usage) -> None:
    """Count one fresh model call into metrics (part B's; nothing here)."""


@dataclass(frozen=True)
class Budget:
    event: str
    tokens: int | None = None
    cost: float | None = None
    model_calls: int | None = None
    per: Literal["workflow", "visit"] = "workflow"
    states: tuple[str, ...] = ()


def crossed(
    budgets: Iterable[Budget], state: str, workflow: Totals, visit: Totals
) -> Budget | None:
    """The first budget applying to ``state`` whose limit the totals have reached."""
    for budget in budgets:
        if budget.states and state not in budget.states:
            continue
        t = visit if budget.per == "visit" else workflow
        if (
            (budget.tokens is not None and t.tokens >= budget.tokens)
            or (budget.cost is not None and t.cost >= budget.cost)
            or (budget.model_calls is not None and t.model_calls >= budget.model_calls)
        ):
            return budget
    return None


class BudgetExceeded(StatewrightError):
    """A budget of the workflow's type is used up: the model is not called again."""

    code = "budget_exceeded"

    def __init__(self, budget: Budget, totals: Totals) -> None:
        self.budget = budget
        self.totals = totals
        super().__init__(f"budget for event {budget.event!r} reached: {totals}")


__all__ = [
    "LLM_KEY",
    "Budget",
    "BudgetExceeded",
    "Totals",
    "Usage",
    "crossed",
    "envelope",
    "observe",
    "totals",
    "usage_of",
]
