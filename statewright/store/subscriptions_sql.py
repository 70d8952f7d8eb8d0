"""The subscriptions part (:class:`~statewright.store.subscriptions.Subscriptions`) of both SQL
stores: the ``subscriptions`` table, and the transition notifications of the outbox table
alerts use (``alert_outbox``, kind ``transition``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from statewright.store.base import Plan, SQLStore
from statewright.store.rows import Row
from statewright.store.subscriptions import (
    Notification,
    Subscription,
    SubscriptionFilter,
    SubscriptionRecord,
)


def enqueue_plan(
    queries: Any,
    name: str,
    old: int,
    new: int,
    notifications: Sequence[Notification],
    at: float,
    json: Any,
) -> Plan[bool]:
    """Move the cursor first (the compare-and-swap: of two pumps, the second waits for the
    first's row lock and then matches nothing), then enqueue, only if it moved."""
    moved = yield queries["subscription_advance"], {"name": name, "old": old, "new": new, "at": at}
    if moved != 1:
        return False
    for n in notifications:
        yield (
            queries["subscription_enqueue"],
            {
                "receiver": n.url,
                "workflow_id": n.workflow_id,
                "status": n.status,
                "key": n.idempotency_key,
                "body": json(dict(n.body)),
                "at": at,
                "subscription": n.subscription,
            },
        )
    return True


class SubscriptionsSQL(SQLStore):
    """Subscriptions over a SQL dialect."""

    def _subscription(self, r: Row) -> SubscriptionRecord:
        load = self.rows.load
        headers = r["headers"]
        sub = Subscription(
            name=r["name"],
            filter=SubscriptionFilter.from_json(load(r["filter"])),
            url=r["url"],
            consumer=bool(r["consumer"]),
            headers={} if headers is None else load(headers),
            secret=r["secret"],
            paused=bool(r["paused"]),
        )
        return SubscriptionRecord(sub, int(r["cursor"]), r["created_at"], r["updated_at"])

    async def put_subscription(
        self, sub: Subscription, at: float, *, cursor: int | None = None
    ) -> SubscriptionRecord:
        json = self.enc.json
        params = {
            "name": sub.name,
            "filter": json(sub.filter.to_json()),
            "url": sub.url,
            "consumer": bool(sub.consumer),
            "headers": json(dict(sub.headers)) if sub.headers else None,
            "secret": sub.secret,
            "cursor": None if cursor is None else int(cursor),
            "paused": bool(sub.paused),
            "at": float(at),
        }
        await self._rowcount(self.queries["subscription_put"], params)
        found = await self.get_subscription(sub.name)
        assert found is not None, "a subscription just written"
        return found

    async def get_subscription(self, name: str) -> SubscriptionRecord | None:
        row = await self._one(self.queries["subscription_get"], {"name": name})
        return None if row is None else self._subscription(row)

    async def list_subscriptions(self) -> list[SubscriptionRecord]:
        rows = await self._all(self.queries["subscription_list"], {})
        return [self._subscription(r) for r in rows]

    async def delete_subscription(self, name: str) -> bool:
        return bool(await self._rowcount(self.queries["subscription_delete"], {"name": name}))

    async def pause_subscription(self, name: str, paused: bool, at: float) -> bool:
        params = {"name": name, "paused": bool(paused), "at": float(at)}
        return bool(await self._rowcount(self.queries["subscription_pause"], params))

    async def enqueue_notifications(
        self, name: str, old: int, new: int, notifications: Sequence[Notification], at: float
    ) -> bool:
        moved: bool = await self._write_plan(
            lambda: enqueue_plan(self.queries, name, old, new, notifications, at, self.enc.json)
        )
        return moved

    async def advance_subscription(self, name: str, old: int, new: int, at: float) -> bool:
        params = {"name": name, "old": int(old), "new": int(new), "at": float(at)}
        return bool(await self._rowcount(self.queries["subscription_advance"], params))

    async def workflow_kinds(
        self, ids: Sequence[str]
    ) -> dict[str, tuple[str, str | None, int, bool]]:
        if not ids:
            return {}
        params = {"ids": self.enc.array(list(dict.fromkeys(ids)))}
        rows = await self._all(self.queries["workflow_kinds"], params)
        return {
            r["id"]: (r["type"], r["tenant"], int(r["version"]), bool(r["terminal"])) for r in rows
        }

    async def log_head(self) -> int:
        row = await self._one(self.queries["log_head"], {})
        return 0 if row is None else int(row["seq"])

    async def outbox_pending(self) -> dict[str, tuple[int, float | None]]:
        rows = await self._all(self.queries["outbox_pending"], {})
        return {r["kind"]: (int(r["n"]), r["oldest"]) for r in rows}
