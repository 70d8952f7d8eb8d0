"""The agent crash tests' model gateway: what a real deployment puts between its workers and
the model provider so that a model call cut by a crash is not asked (and billed) twice.

The fake models answer through it: each response the model GIVES is recorded under the model
step's key (``current_key()``, the idempotency key the call carries) in one short transaction
when it answers, so a call killed before it answered left nothing, and one killed after left
exactly its response. The agents' ``model_reconcile`` hook asks it by that key. It does not
deduplicate (a :class:`~tests.acceptance.crash.app.Service` in ``count`` mode): a second answer
under one key would be a second row, which the tests count.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from statewright import Applied
from tests.acceptance.crash.app import Service


class ModelGateway:
    """Responses given, by step key (see the module docstring). ``journal``: a file where every
    lookup appends ``key verdict`` (``Applied``: a response was found, the call reconciled)."""

    def __init__(self, path: str | Path, journal: str | Path | None = None) -> None:
        self.service = Service(path, journal, mode="count")

    def answer(self, key: str, response: Any) -> None:
        """Record the response the model gives for ``key`` (one transaction: all or nothing)."""
        self.service.apply(str(key), {"response": response})

    def recorded(self, key: str) -> Any:
        """The response recorded for ``key`` (its JSON form), or None."""
        verdict = self.service.lookup(str(key))
        return verdict.result["response"] if isinstance(verdict, Applied) else None

    def responses(self) -> Counter[str]:
        """How many responses were given for each key."""
        return Counter(str(e["key"]) for e in self.service.effects())

    def close(self) -> None:
        self.service.close()


def reconciled(journal: Path) -> int:
    """The model steps a lookup of the journal found a response for (each a call cut after it
    answered, reconciled; a step asked twice, a kill cutting its reconcile, counts once)."""
    if not journal.exists():
        return 0
    lines = journal.read_text().splitlines()
    return len({line.split()[0] for line in lines if line.endswith(" Applied")})
