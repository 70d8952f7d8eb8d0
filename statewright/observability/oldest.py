"""``statewright_workflow_oldest_age_seconds``: how long the oldest live workflow of each
machine and state has been in it, read from the store at scrape time.

It makes the age rules of :mod:`statewright.observability.alerts` (running_too_long,
paused_abandoned, blocked_too_long) expressible in Prometheus (see
:mod:`statewright.observability.prom_rules`): a count per state cannot tell a workflow stuck
for a day from a busy queue. One read per live (machine, state) group: the first row of that
group's listing by time entered, the start of an index range.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from statewright.clock import Clock
from statewright.store.protocol import ReadModel
from statewright.types import WorkflowFilter

NAME = "statewright_workflow_oldest_age_seconds"


class OldestAges(Collector):
    """The gauge, from the last :meth:`refresh` (empty when that failed)."""

    def __init__(self) -> None:
        self.ages: Sequence[tuple[str, str, float]] = ()

    async def refresh(self, store: ReadModel, clock: Clock) -> None:
        self.ages = ()
        now = clock.now()
        groups = [(t, s) for t, s, n in await store.count_by_state(terminal=False) if n > 0]
        # Concurrent: on PostgreSQL each read takes a pooled connection of its own.
        firsts = await asyncio.gather(
            *(
                store.list_workflows(WorkflowFilter(type=t, state=s, terminal=False, limit=1))
                for t, s in groups
            )
        )
        self.ages = [
            (t, s, max(0.0, now - rows[0].state_entered_at))
            for (t, s), rows in zip(groups, firsts, strict=True)
            if rows
        ]

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily(
            NAME,
            "Seconds the oldest live workflow of each machine and state has been in it, read "
            "from the store at scrape time.",
            labels=["machine", "state"],
        )
        for machine, state, age in self.ages:
            gauge.add_metric([machine, state], age)
        yield gauge

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(NAME, "", labels=["machine", "state"])]


__all__ = ["NAME", "OldestAges"]
