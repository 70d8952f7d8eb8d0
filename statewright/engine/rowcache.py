"""The last rows this process saw of the workflows it touched: a starting guess for planning
an external event (see :class:`RowCache`)."""

from __future__ import annotations

from collections import OrderedDict

from statewright.types import WorkflowRow


class RowCache:
    """The last row this process saw of recently touched workflows (bounded, LRU).

    Only a starting guess for planning an external event: the compare-and-swap refuses a
    stale one, and a refusal (or an illegal event) is always confirmed on a fresh read. It
    saves a read per event for a process that drives its own workflows.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._rows: OrderedDict[str, WorkflowRow] = OrderedDict()

    def get(self, workflow_id: str) -> WorkflowRow | None:
        row = self._rows.get(workflow_id)
        if row is not None:
            self._rows.move_to_end(workflow_id)
        return row

    def put(self, row: WorkflowRow) -> None:
        if self.size <= 0:
            return
        known = self._rows.get(row.id)
        if known is not None and known.version > row.version:
            return  # never replace a newer row with an older one
        self._rows[row.id] = row
        self._rows.move_to_end(row.id)
        while len(self._rows) > self.size:
            self._rows.popitem(last=False)

    def drop(self, workflow_id: str) -> None:
        self._rows.pop(workflow_id, None)
