"""Retry policy: bounded exponential backoff with jitter and error classification."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from statewright.errors import FatalError, TransientError

Classification = Literal["transient", "fatal"]

TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


def _status_of(exc: BaseException) -> int | None:
    for attr in ("status_code", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None


def retry_after_of(exc: BaseException) -> float | None:
    """A server's ``Retry-After`` (seconds) carried by the exception, if any."""
    value = getattr(exc, "retry_after", None)
    if value is None:
        headers = getattr(getattr(exc, "response", None), "headers", None) or getattr(
            exc, "headers", None
        )
        if headers is not None:
            value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return None if value is None else max(0.0, float(value))
    except (TypeError, ValueError):
        return None  # an HTTP-date Retry-After is not supported; fall back to backoff


def classify(exc: BaseException) -> Classification:
    """Transient: timeouts, connection errors, 408/425/429/5xx. Fatal: everything else."""
    if isinstance(exc, TransientError):
        return "transient"
    if isinstance(exc, FatalError):
        return "fatal"
    if isinstance(exc, TimeoutError | ConnectionError):
        return "transient"
    status = _status_of(exc)
    if status is not None:
        return "transient" if status in TRANSIENT_STATUS else "fatal"
    return "fatal"


@dataclass(frozen=True)
class RetryPolicy:
    """Per workflow type.

    Attributes:
        max_attempts: transient failures allowed in one state before the workflow fails.
        base_delay: the first backoff, in seconds.
        max_delay: the cap on any backoff (a Retry-After beyond it is honoured, capped at
            ``max_retry_after``).
        multiplier: growth per attempt.
        jitter: fraction of the delay drawn at random ("equal jitter"): 0 disables it.
    """

    max_attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 300.0
    multiplier: float = 2.0
    jitter: float = 0.5
    max_retry_after: float = 3600.0

    def delay(
        self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        raw = min(self.max_delay, self.base_delay * self.multiplier ** max(0, attempt - 1))
        spread = raw * self.jitter
        return raw - spread + (rng or random).random() * spread

    def classify(self, exc: BaseException) -> Classification:
        return classify(exc)
