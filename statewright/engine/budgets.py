"""Token and cost budgets of a workflow type (issue 27): what an agent in a state may spend.

A type declares ``WorkflowType(..., budgets=(Budget("over_budget", tokens=50_000),))``. Before
each *fresh* model call (one not already in the step ledger) the agent session sums the model
steps' usage envelopes (:mod:`statewright.agents.usage`) and asks :func:`crossed` whether a
budget's limit is reached: if so it raises :class:`~statewright.errors.BudgetExceeded` instead
of calling the model, and the handler's outcome is the budget's event (to a state that waits
for a person, say). Per workflow a budget counts every model step of the workflow; per visit
only those of the current visit of the state (``run.workflow.version``), so a ghost loop that
re-enters a state gets a fresh allowance per visit but not an unbounded one per workflow when
both are declared.

Pure: no store, no framework. :class:`Totals` lives here (the engine's side of the contract),
and :mod:`statewright.agents.usage` re-exports it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from statewright.errors import DefinitionError, Problem

if TYPE_CHECKING:
    from statewright.definition.machine import Machine

Per = Literal["workflow", "visit"]
PERS: tuple[Per, ...] = ("workflow", "visit")
LIMITS = ("tokens", "cost", "model_calls")
"""The measures a budget may limit (each against the :class:`Totals` attribute of that name)."""


@dataclass(frozen=True)
class Totals:
    """Summed usage of some model steps: tokens in and out, cost (USD), and how many calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    model_calls: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def plus(self, input_tokens: int, output_tokens: int, cost: float | None) -> Totals:
        """These totals with one more model call counted (an unknown cost adds nothing)."""
        return Totals(
            self.input_tokens + input_tokens,
            self.output_tokens + output_tokens,
            self.cost + (cost or 0.0),
            self.model_calls + 1,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape the views show: ``{input_tokens, output_tokens, tokens, cost,
        model_calls}`` (cost rounded to micro-units, so sums of floats read cleanly)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "tokens": self.tokens,
            "cost": round(self.cost, 6),
            "model_calls": self.model_calls,
        }


NO_USAGE = Totals()


@dataclass(frozen=True)
class Budget:
    """A limit on what a workflow's model calls may spend, and the event fired when it is
    reached.

    Attributes:
        event: the event the handler's outcome becomes when the budget is crossed (declared
            in the machine; the state where the model would have been called needs an edge
            for it, or the event is refused like any other illegal one and the workflow
            parks). Its payload is :func:`payload`'s ``{"budget": ..., "usage": ...}``: an
            event payload schema must accept it.
        tokens / cost / model_calls: the limits (any of them, at least one); reached when the
            totals are ``>=`` the limit. ``cost`` is in the usage's currency units (USD);
            calls whose cost is unknown add nothing to it.
        per: ``"workflow"`` (every model step of the workflow counts) or ``"visit"`` (only
            those of the current visit of the state: a state entered again starts afresh).
        states: the states whose model calls the budget guards; empty: every state.
    """

    event: str
    tokens: int | None = None
    cost: float | None = None
    model_calls: int | None = None
    per: Per = "workflow"
    states: tuple[str, ...] = ()

    def __init__(
        self,
        event: str,
        *,
        tokens: int | None = None,
        cost: float | None = None,
        model_calls: int | None = None,
        per: Per = "workflow",
        states: Iterable[str] = (),
    ) -> None:
        set_ = object.__setattr__
        set_(self, "event", event)
        set_(self, "tokens", tokens)
        set_(self, "cost", cost)
        set_(self, "model_calls", model_calls)
        set_(self, "per", per)
        set_(self, "states", (states,) if isinstance(states, str) else tuple(states))

    def applies_to(self, state: str) -> bool:
        return not self.states or state in self.states

    def reached(self, totals: Totals) -> bool:
        """Whether ``totals`` reach one of the budget's limits (``>=``)."""
        return (
            (self.tokens is not None and totals.tokens >= self.tokens)
            or (self.cost is not None and totals.cost >= self.cost)
            or (self.model_calls is not None and totals.model_calls >= self.model_calls)
        )

    def to_dict(self) -> dict[str, Any]:
        """The budget as JSON (in a :class:`~statewright.errors.BudgetExceeded`'s details, in
        the event's payload)."""
        out: dict[str, Any] = {"event": self.event, "per": self.per}
        for name in LIMITS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.states:
            out["states"] = list(self.states)
        return out


def crossed(
    budgets: Sequence[Budget], state: str, workflow: Totals, visit: Totals
) -> Budget | None:
    """The first budget of ``budgets`` that applies to ``state`` and whose limit the totals
    have reached (``workflow``'s for a per-workflow budget, ``visit``'s for a per-visit one),
    or None: the model may be called."""
    for budget in budgets:
        if budget.applies_to(state) and budget.reached(
            visit if budget.per == "visit" else workflow
        ):
            return budget
    return None


def payload(budget: Budget, totals: Totals) -> dict[str, Any]:
    """The payload of a crossed budget's event: ``{"budget": ..., "usage": ...}`` (the totals
    the budget counted)."""
    return {"budget": budget.to_dict(), "usage": totals.to_dict()}


FILE_KEYS = frozenset({"event", "tokens", "cost", "model_calls", "per", "states"})
"""The keys of a budget in a definition file's ``budgets:`` list."""


def budgets_from_json(items: Any) -> tuple[Budget, ...]:
    """The budgets of a definition file's ``budgets:`` key (a list of ``{event, tokens?,
    cost?, model_calls?, per?, states?}``); their values are checked with the type
    (:func:`budget_problems`). Raises DefinitionError for a shape that is no list of them."""
    if not isinstance(items, list):
        raise DefinitionError(
            "'budgets' must be a list of {event, tokens, cost, model_calls, per, states}"
        )
    out: list[Budget] = []
    problems: list[Problem] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("event"), str):
            problems.append(
                Problem("invalid_budget", f"budgets[{i}]: not an object with an event")
            )
            continue
        unknown = sorted(set(item) - FILE_KEYS)
        states = item.get("states", ())
        if unknown or not isinstance(states, list | tuple):
            why = f"unknown keys {unknown}" if unknown else "states must be a list"
            problems.append(Problem("invalid_budget", f"budgets[{i}]: {why}"))
            continue
        rest = {k: v for k, v in item.items() if k not in ("event", "states")}
        out.append(Budget(item["event"], states=tuple(states), **rest))
    if problems:
        raise DefinitionError(problems)
    return tuple(out)


def _limit_problem(name: str, value: Any, integral: bool) -> str | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (integral and not isinstance(value, int))
    ):
        kind = "an integer" if integral else "a number"
        return f"{name} must be {kind}, not {value!r}"
    if not (value > 0 and math.isfinite(value)):
        return f"{name} must be positive, not {value!r}"
    return None


def budget_problems(machine: Machine, budgets: object) -> list[Problem]:
    """What is wrong with a type's ``budgets`` for ``machine``: not Budgets, an unknown event
    or state, no limit or a limit that is not positive, ``per`` not workflow/visit."""
    if isinstance(budgets, Budget | Mapping | str) or not isinstance(budgets, Iterable):
        return [Problem("invalid_budget", "budgets must be a sequence of Budget")]
    problems: list[Problem] = []
    for b in budgets:
        if not isinstance(b, Budget):
            problems.append(Problem("invalid_budget", f"budget {b!r} is not a Budget"))
            continue
        if b.event not in machine.events:
            problems.append(
                Problem(
                    "unknown_event", f"budget event {b.event!r} is not declared", event=b.event
                )
            )
        if all(getattr(b, name) is None for name in LIMITS):
            problems.append(
                Problem(
                    "invalid_budget",
                    f"budget for {b.event!r} limits nothing: give tokens, cost or model_calls",
                    event=b.event,
                )
            )
        for name in LIMITS:
            why = _limit_problem(name, getattr(b, name), integral=name != "cost")
            if why is not None:
                problems.append(
                    Problem("invalid_budget", f"budget for {b.event!r}: {why}", event=b.event)
                )
        if b.per not in PERS:
            problems.append(
                Problem(
                    "invalid_budget",
                    f"budget for {b.event!r}: per must be 'workflow' or 'visit', not {b.per!r}",
                    event=b.event,
                )
            )
        problems += [
            Problem(
                "unknown_budget_state",
                f"budget for {b.event!r} names unknown state {s!r}",
                state=s if isinstance(s, str) else None,
                event=b.event,
            )
            for s in b.states
            if not isinstance(s, str) or s not in machine.states
        ]
    return problems


__all__ = [
    "LIMITS",
    "NO_USAGE",
    "PERS",
    "Budget",
    "Per",
    "Totals",
    "budget_problems",
    "budgets_from_json",
    "crossed",
    "payload",
]
