"""The agents' model-call counters (issue 27): tokens, cost and calls by type, state and model.

Fed by the engine's model-call observers (:class:`~statewright.engine.hooks.ModelCall`, told by
:func:`statewright.agents.usage.observe` once per *fresh* model call: a response read back from
the step ledger after a crash is not counted again), so a replayed agent does not inflate the
bill. Created by :class:`~statewright.observability.metrics.EngineMetrics` in its registry.

Label values stay bounded like the other metrics': the type and state labels are names the
registered types declare (else ``_unknown``), and the model label keeps the first
:data:`MAX_MODEL_NAMES` model names seen per type (later ones count as ``_unknown``): model
names come from the adapters, not from callers, but a misconfigured agent must not grow the
exposition without end.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter

from statewright.engine.hooks import ModelCall
from statewright.types import WorkflowRow

UNKNOWN = "_unknown"
MAX_MODEL_NAMES = 50
"""Distinct model labels kept per type."""


class Names(Protocol):
    """The bounded label values of :class:`~statewright.observability.metrics.EngineMetrics`."""

    def machine(self, row: WorkflowRow | None) -> str: ...

    def state(self, row: WorkflowRow, state: str | None = None) -> str: ...


class LlmMetrics:
    """``statewright_llm_tokens_total{type,state,model,kind}`` (kind ``input`` or ``output``),
    ``statewright_llm_cost_total{type,state,model}`` (USD; calls of unknown cost add nothing)
    and ``statewright_llm_calls_total{type,state,model}``."""

    def __init__(self, names: Names, registry: CollectorRegistry) -> None:
        self.names = names
        self._models: defaultdict[str, set[str]] = defaultdict(set)
        self.tokens = Counter(
            "statewright_llm_tokens",
            "Tokens of agents' model calls by workflow type, state, model and kind (input or "
            "output); each fresh call counted once (not a response replayed from the ledger).",
            ["type", "state", "model", "kind"],
            registry=registry,
        )
        self.cost = Counter(
            "statewright_llm_cost",
            "Cost (USD) of agents' model calls by workflow type, state and model; calls whose "
            "cost is unknown add nothing.",
            ["type", "state", "model"],
            registry=registry,
        )
        self.calls = Counter(
            "statewright_llm_calls",
            "Agents' model calls by workflow type, state and model (fresh calls only).",
            ["type", "state", "model"],
            registry=registry,
        )

    def model(self, type_label: str, model: str) -> str:
        if type_label == UNKNOWN:
            return UNKNOWN
        seen = self._models[type_label]
        if model not in seen:
            if len(seen) >= MAX_MODEL_NAMES:
                return UNKNOWN
            seen.add(model)
        return model

    def on_model_call(self, call: ModelCall) -> None:
        row = call.workflow
        kind = self.names.machine(row)
        state = self.names.state(row)
        model = self.model(kind, call.model)
        self.calls.labels(kind, state, model).inc()
        if call.input_tokens:
            self.tokens.labels(kind, state, model, "input").inc(call.input_tokens)
        if call.output_tokens:
            self.tokens.labels(kind, state, model, "output").inc(call.output_tokens)
        if call.cost:
            self.cost.labels(kind, state, model).inc(call.cost)
