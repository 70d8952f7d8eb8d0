"""Per-type limits: how many workflows of a type run at once, and how many start per second,
across every worker process.

Declared on the type (``WorkflowType(machine, max_concurrent=2, max_per_second=10.0)``) and
enforced where work is handed out, in the store's claim (:mod:`statewright.store.core`):
the claims of a limited type are serialized (a row lock on PostgreSQL, the single writer on
SQLite), each counts the type's live leases and takes tokens from the type's durable token
bucket before leasing. A workflow counts against ``max_concurrent`` while a worker holds its
lease, from the claim until its handler's result is written (chained handlers included); a
lease that lapsed (its worker froze or died) stops counting when it expires, so it never
holds the budget for good. Every worker should declare the same limits: a claim applies the
claiming worker's.
"""

from __future__ import annotations

import math
from typing import Any

from statewright.errors import Problem


def limit_problems(max_concurrent: Any, max_per_second: Any, burst: Any) -> list[Problem]:
    """What is wrong with a type's limits (nothing: an empty list)."""
    problems = []
    if max_concurrent is not None and (
        isinstance(max_concurrent, bool)
        or not isinstance(max_concurrent, int)
        or max_concurrent < 1
    ):
        problems.append(
            Problem(
                "invalid_limit",
                f"max_concurrent must be a positive integer, not {max_concurrent!r}",
            )
        )
    for name, value in (("max_per_second", max_per_second), ("burst", burst)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            problems.append(
                Problem("invalid_limit", f"{name} must be a positive number, not {value!r}")
            )
    if burst is not None and max_per_second is None:
        problems.append(Problem("invalid_limit", "burst needs max_per_second"))
    elif isinstance(burst, int | float) and not isinstance(burst, bool) and 0 < burst < 1:
        problems.append(Problem("invalid_limit", f"burst must be at least 1, not {burst!r}"))
    return problems
