"""Token usage of an agent's model calls (the envelope a model step stores, totals, reports).

The code lives in the engine layer, :mod:`statewright.engine.llm_usage`, because the reads
below the agents use it too (views, budgets, metrics); this is its name for adapter writers.
"""

from __future__ import annotations

from statewright.engine.llm_usage import (
    LLM_KEY,
    ROLES,
    Totals,
    Usage,
    check_budgets,
    conversation,
    envelope,
    model_records,
    model_steps,
    observe,
    report,
    sum_usage,
    totals,
    usage_of,
    usage_report,
    with_pending,
)

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
    "report",
    "sum_usage",
    "totals",
    "usage_of",
    "usage_report",
    "with_pending",
]
