"""A workflow's children as the surfaces show them (see :mod:`statewright.engine.children`):
one line per child, and counts that say what a parent waits for ("2 of 3 children done").

The reads themselves are :class:`~statewright.access.reads.Reads`'s (``children``,
``child_counts``): scoped to the caller's tenant, the children named by the ids the caller
knows them by. A child's line holds nothing its type redacts (no context, no result, no
error), so it is the same for every reader.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from statewright.engine.workflow_type import FAILED_STATES
from statewright.types import WorkflowRow

COUNTED = 100
"""Children the count summary reads at most (one page, in id order): a parent with more is
said to have more (``more``), never scanned whole on a read."""


def succeeded(child: WorkflowRow) -> bool | None:
    """Whether an ended child succeeded, as the engine tells its parent (``child_failed`` for
    an end in ``failed`` or ``cancelled``, ``child_done`` otherwise); None while it runs."""
    if not child.terminal:
        return None
    return child.state not in FAILED_STATES


def child_view(child: WorkflowRow, public_id: Callable[[str], str]) -> dict[str, Any]:
    """One child's line: ``public_id`` names it as the caller knows it."""
    return {
        "id": public_id(child.id),
        "key": child.parent_key,
        "type": child.type,
        "state": child.state,
        "terminal": child.terminal,
        "succeeded": succeeded(child),
        "parked": child.parked,
        "state_entered_at": child.state_entered_at,
    }


@dataclass(frozen=True)
class ChildCounts:
    """How many children a workflow has, and how many ended (counted over the first
    :data:`COUNTED` of them by id: ``more`` says there are others, not counted)."""

    total: int
    live: int
    ended: int
    failed: int
    """Of the ended ones, those that did not succeed (:func:`succeeded`)."""
    more: bool = False

    @classmethod
    def of(cls, children: Sequence[WorkflowRow], more: bool = False) -> ChildCounts:
        ended = [c for c in children if c.terminal]
        return cls(
            total=len(children),
            live=len(children) - len(ended),
            ended=len(ended),
            failed=sum(1 for c in ended if not succeeded(c)),
            more=more,
        )

    @property
    def text(self) -> str:
        """What a parent waits for, in a few words: ``2 of 3 children done (1 failed)``."""
        of = f"the first {self.total}" if self.more else str(self.total)
        noun = "child" if self.total == 1 and not self.more else "children"
        text = f"{self.ended} of {of} {noun} done"
        if self.failed:
            text += f" ({self.failed} failed)"
        if self.more:
            text += "; more children, not counted"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "live": self.live,
            "ended": self.ended,
            "failed": self.failed,
            "more": self.more,
            "text": self.text,
        }
