"""Messages a handler emits (``run.emit``): checked when emitted, written with the run's
transition in its log entry (``transitions.messages``), so they commit with it or not at all.

Only a transition carries messages: a run that goes idle, fails, is retried, crashes or is
dropped (a lost lease, a concurrent event) emits nothing, and its re-run emits again. A
subscription (:mod:`statewright.engine.subscriptions`) delivers them, at least once, with the
transition's other data.
"""

from __future__ import annotations

import re
from typing import Any

from statewright.errors import InvalidInput
from statewright.jsonvalue import Limits

TOPIC = re.compile(r"[A-Za-z0-9_.:/-]{1,200}")
"""A topic: letters, digits and ``_ . : / -``, at most 200 of them."""
MAX_MESSAGES = 100
"""Messages one transition may carry."""


def message(limits: Limits, topic: str, body: Any, emitted: int) -> dict[str, Any]:
    """The log's form of one message (``{"topic", "body"}``), checked: a topic of
    :data:`TOPIC`'s form, a JSON body within the limits, at most :data:`MAX_MESSAGES` per
    transition (``emitted`` so far). Raises InvalidInput (or the limits' errors)."""
    if not isinstance(topic, str) or TOPIC.fullmatch(topic) is None:
        raise InvalidInput(f"message topic {topic!r}: 1-200 of letters, digits, _ . : / -")
    if emitted >= MAX_MESSAGES:
        raise InvalidInput(f"a transition carries at most {MAX_MESSAGES} messages")
    limits.check(body, f"message {topic!r}")
    return {"topic": topic, "body": body}


__all__ = ["MAX_MESSAGES", "TOPIC", "message"]
