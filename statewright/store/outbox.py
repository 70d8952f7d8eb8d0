"""The alert outbox part (:class:`~statewright.store.protocol.AlertOutbox`) of both SQL stores:
the ``alert_states`` and ``alert_outbox`` tables (records in :mod:`.alert_outbox`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from statewright.store.alert_outbox import (
    AlertChange,
    AlertStateRecord,
    OutboxRecord,
    enqueue_params,
    finish_query,
    state_write,
)
from statewright.store.base import Plan, SQLStore


def changes_plan(
    queries: Any,
    changes: Sequence[AlertChange],
    receivers: Sequence[str],
    at: float,
    json: Callable[[Any], str],
) -> Plan[list[AlertChange]]:
    """Record each change, and queue its notifications if it took: the changes that took."""
    took = []
    for ch in changes:
        name, params = state_write(ch, json)
        if (yield queries[name], params) != 1:
            continue  # a concurrent evaluator made it
        took.append(ch)
        for receiver in receivers:
            yield queries["alert_enqueue"], enqueue_params(ch, receiver, at, json)
    return took


class AlertOutboxSQL(SQLStore):
    """The alert outbox over a SQL dialect."""

    async def alert_states(self) -> list[AlertStateRecord]:
        rows = await self._all(self.queries["alert_states"], {})
        return [self.rows.alert_state(r) for r in rows]

    async def record_alert_changes(
        self, changes: Sequence[AlertChange], receivers: Sequence[str], at: float
    ) -> list[AlertChange]:
        took: list[AlertChange] = await self._write_plan(
            lambda: changes_plan(self.queries, changes, receivers, at, self.enc.json)
        )
        return took

    async def claim_alert_notifications(
        self, claim: str, now: float, until: float, limit: int
    ) -> list[OutboxRecord]:
        params = {"claim": claim, "now": now, "until": until, "limit": limit}
        rows = await self._all(self.queries["alert_claim"], params, write=True)
        return sorted((self.rows.outbox(r) for r in rows), key=lambda r: r.id)

    async def finish_alert_notification(
        self,
        outbox_id: int,
        claim: str,
        *,
        at: float,
        delivered: bool,
        retry_at: float | None = None,
        error: str | None = None,
    ) -> bool:
        name = finish_query(delivered, retry_at)
        params = {"nid": outbox_id, "claim": claim, "at": at, "due_at": retry_at, "message": error}
        return bool(await self._rowcount(self.queries[name], params))

    async def alert_notifications(self, after: int = 0, limit: int = 1000) -> list[OutboxRecord]:
        rows = await self._all(self.queries["alert_outbox"], {"after": after, "limit": limit})
        return [self.rows.outbox(r) for r in rows]

    async def prune_alert_notifications(
        self, before: float, *, limit: int, dry_run: bool = False
    ) -> int:
        params = {"until": before, "limit": limit}
        if dry_run:
            return await self._count(self.queries["count_old_alert_notifications"], params)
        return await self._rowcount(self.queries["prune_alert_notifications"], params)
