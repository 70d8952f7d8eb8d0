"""Token usage of an agent's model calls (the envelope a model step stores, totals, reports).

The code lives in the engine layer, :mod:`statewright.engine.llm_usage`, because the reads
below the agents use it too (views, budgets, metrics); this is its name for adapter writers.
"""

from __future__ import annotations

from statewright.engine import llm_usage as _impl
from statewright.engine.llm_usage import *  # noqa: F403  # the same names, listed once there

__all__ = list(_impl.__all__)
