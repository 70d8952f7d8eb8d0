"""Subscriptions at work (issue 26): which log entries a subscription takes, what it is told
(the body, the ``Idempotency-Key``), the pump that hands a webhook subscription's entries to
the outbox, and the Python :class:`Consumer` that reads its own from a durable cursor.

Committed with the transition by construction: the transition log is written in the
transition's transaction (with the messages its handler emitted: :mod:`.emit`), and
``transitions_since`` never skips a seq (on PostgreSQL it reads up to the log horizon). So a
subscription is a cursor over the log, nothing more is written on the hot path, and a
subscription that is never declared costs nothing.

The pump (:func:`pump`) reads the log after a webhook subscription's cursor, and in one
transaction enqueues an outbox row per matching entry (or message) and moves the cursor, with
a compare-and-swap on the old cursor: two pumps (two ``serve`` processes) never enqueue one
entry twice, and a pump killed before its commit leaves the cursor where it was. The outbox
is the alerts' (:mod:`statewright.observability.delivery` delivers both): claims, retries
with backoff and jitter, dead letters and pruning are the same; a subscription's rows of one
workflow go out in log order (the claim holds back a row while an earlier one of its
subscription and workflow is due or claimed).

The ``Idempotency-Key`` of a notification is ``<subscription>:<workflow id>:<version>`` (with
``:<message index>`` for a message): the same on every attempt and every re-enqueue, so a
receiver dedupes by it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statewright.clock import Clock, SystemClock
from statewright.engine.registry import Registry
from statewright.errors import InvalidInput, SubscriptionGone
from statewright.store.protocol import FullStore
from statewright.store.subscriptions import (
    Notification,
    Subscription,
    SubscriptionFilter,
    SubscriptionRecord,
)
from statewright.types import TransitionRecord

PUMP_BATCH = 500
"""Log entries one pump step reads."""


@dataclass(frozen=True)
class Kind:
    """What the log entry does not say of its workflow: its type and tenant (None: the
    workflow is gone, pruned), and whether the entry entered a terminal state."""

    type: str | None
    tenant: str | None
    terminal: bool


def _terminal(registry: Registry | None, type_name: str | None, state: str) -> bool | None:
    """Whether ``state`` of the type is terminal by the registered machine (None: unknown)."""
    if registry is None or type_name is None:
        return None
    versions = registry.versions().get(type_name)
    if not versions:
        return None
    machine = versions[max(versions)].machine
    found = machine.states.get(state)
    return None if found is None else bool(found.terminal)


async def kinds(
    store: FullStore, registry: Registry | None, records: Sequence[TransitionRecord]
) -> dict[int, Kind]:
    """Each record's :class:`Kind` by seq: type and tenant from the workflow's row; terminal
    by the registered machine, else (a type this process does not know) by the row (the
    entry is terminal when it is the row's last and the row is terminal)."""
    if not records:
        return {}
    ids = list(dict.fromkeys(r.workflow_id for r in records))
    found = await store.workflow_kinds(ids)
    out = {}
    for r in records:
        row = found.get(r.workflow_id)
        if row is None:  # pruned since: neither type nor tenant is known
            out[r.seq] = Kind(None, None, False)
            continue
        type_name, tenant, version, ended = row
        terminal = _terminal(registry, type_name, r.to_state)
        if terminal is None:
            terminal = ended and version == r.version
        out[r.seq] = Kind(type_name, tenant, terminal)
    return out


def matches(f: SubscriptionFilter, r: TransitionRecord, kind: Kind) -> bool:
    """Whether entry ``r`` passes the filter (its topics aside: see :func:`bodies`)."""
    if f.types and kind.type not in f.types:
        return False
    if f.tenant is not None and kind.tenant != f.tenant:
        return False
    if f.states and r.to_state not in f.states:
        return False
    if f.events and r.event not in f.events:
        return False
    return not (f.terminal and not kind.terminal)


def _messages(r: TransitionRecord) -> list[Mapping[str, Any]]:
    return [m for m in (r.messages or []) if isinstance(m, Mapping)]


def idempotency_key(name: str, workflow_id: str, version: int, index: int | None = None) -> str:
    """The same for every attempt of one notification, different for each notification."""
    key = f"{name}:{workflow_id}:{version}"
    return key if index is None else f"{key}:{index}"


def body(name: str, r: TransitionRecord, kind: Kind) -> dict[str, Any]:
    """What a subscription is told of one log entry (its messages in it)."""
    return {
        "subscription": name,
        "kind": "transition",
        "workflow_id": r.workflow_id,
        "type": kind.type,
        "tenant": kind.tenant,
        "from_state": r.from_state,
        "to_state": r.to_state,
        "event": r.event,
        "actor": r.actor,
        "version": r.version,
        "seq": r.seq,
        "at": r.at,
        "terminal": kind.terminal,
        "payload": r.payload,
        "messages": [dict(m) for m in _messages(r)],
    }


def bodies(sub: Subscription, r: TransitionRecord, kind: Kind) -> list[tuple[str, dict[str, Any]]]:
    """``(idempotency key, body)`` of each notification entry ``r`` makes for ``sub``: none
    when it does not match; one for the transition, or (a filter with topics) one per
    emitted message of those topics (``kind`` ``message``, the message under ``message``,
    its place among the entry's messages under ``index``)."""
    f = sub.filter
    if not matches(f, r, kind):
        return []
    whole = body(sub.name, r, kind)
    if not f.topics:
        return [(idempotency_key(sub.name, r.workflow_id, r.version), whole)]
    out = []
    for i, m in enumerate(_messages(r)):
        if m.get("topic") in f.topics:
            one = {**whole, "kind": "message", "message": dict(m), "index": i}
            out.append((idempotency_key(sub.name, r.workflow_id, r.version, i), one))
    return out


async def pump(
    store: FullStore,
    record: SubscriptionRecord,
    *,
    registry: Registry | None = None,
    clock: Clock | None = None,
    batch: int = PUMP_BATCH,
) -> tuple[int, int]:
    """One step of a webhook subscription: read up to ``batch`` log entries after its cursor
    and enqueue the matching ones, moving the cursor (one transaction, compare-and-swap).
    Returns ``(entries read, notifications enqueued)``; ``(0, 0)`` when caught up or when
    another pump moved the cursor first."""
    sub = record.subscription
    if sub.url is None or sub.paused:
        return 0, 0
    records = await store.transitions_since(record.cursor, batch)
    if not records:
        return 0, 0
    found = await kinds(store, registry, records)
    notes = [
        Notification(sub.name, sub.url, r.workflow_id, str(b["kind"]), key, b)  # type: ignore[arg-type]
        for r in records
        for key, b in bodies(sub, r, found[r.seq])
    ]
    now = (clock or SystemClock()).now()
    moved = await store.enqueue_notifications(sub.name, record.cursor, records[-1].seq, notes, now)
    return (len(records), len(notes)) if moved else (0, 0)


async def pump_all(
    store: FullStore,
    *,
    registry: Registry | None = None,
    clock: Clock | None = None,
    batch: int = PUMP_BATCH,
    rounds: int = 10,
) -> int:
    """Pump every webhook subscription until caught up (at most ``rounds`` steps each);
    returns the notifications enqueued."""
    enqueued = 0
    for record in await store.list_subscriptions():
        for _ in range(rounds):
            read, made = await pump(store, record, registry=registry, clock=clock, batch=batch)
            enqueued += made
            if read < batch:
                break
            fresh = await store.get_subscription(record.name)
            if fresh is None:
                break
            record = fresh
    return enqueued


@dataclass(frozen=True)
class Delivery:
    """One notification a :class:`Consumer` hands out: the body a webhook would get."""

    idempotency_key: str
    body: Mapping[str, Any]
    seq: int


@dataclass(frozen=True)
class Batch:
    """What :meth:`Consumer.batch` read: the matching notifications, and the seq to
    acknowledge once they are handled (past entries that did not match, too)."""

    deliveries: list[Delivery]
    upto: int


class Consumer:
    """A Python consumer of a subscription, reading from its durable cursor, at least once.

    ``batch()`` reads the matching notifications after the cursor (the same bodies and keys as
    a webhook's); ``ack(b.upto)`` moves the cursor past them (a compare-and-swap: of two
    consumers of one name, one moves it). Nothing is acknowledged by reading: a consumer that
    dies before its ``ack`` gets the same notifications again (dedupe by ``idempotency_key``).
    ``async for d in consumer`` yields them one by one, acknowledging each batch when the next
    is asked for.

    The subscription is declared on :meth:`open` (``consumer=True``, the filter given), from
    the end of the log when it is new (``start``: a seq to start after instead, 0: the whole
    log); an existing one keeps its cursor, and its filter when none is given.
    """

    def __init__(
        self,
        store: FullStore,
        name: str,
        filter: SubscriptionFilter | None = None,
        *,
        registry: Registry | None = None,
        clock: Clock | None = None,
        batch: int = 100,
        poll: float = 0.5,
        start: int | None = None,
    ) -> None:
        if batch < 1 or poll <= 0:
            raise InvalidInput("consumer: batch at least 1, poll positive")
        self.store = store
        self.subscription = Subscription(name, filter or SubscriptionFilter(), consumer=True)
        self._keep_filter = filter is None
        self.registry = registry
        self.clock = clock or SystemClock()
        self.size = batch
        self.poll = poll
        self.start = start
        self.cursor: int | None = None
        self._stop = asyncio.Event()

    async def open(self) -> Consumer:
        """Declare the subscription (if new) and read its cursor."""
        found = await self.store.get_subscription(self.subscription.name)
        if found is not None and not found.subscription.consumer:
            raise SubscriptionGone(f"subscription {self.subscription.name!r} is a webhook's")
        if found is not None and self._keep_filter:
            self.subscription = found.subscription  # no filter given: the stored one
        elif found is None or found.subscription.filter != self.subscription.filter:
            found = await self.store.put_subscription(
                self.subscription, self.clock.now(), cursor=self.start
            )
        self.cursor = found.cursor
        return self

    async def batch(self) -> Batch:
        """The next notifications after the cursor (none: caught up)."""
        if self.cursor is None:
            await self.open()
        assert self.cursor is not None
        cursor = self.cursor
        while True:
            records = await self.store.transitions_since(cursor, self.size)
            if not records:
                return Batch([], cursor)
            found = await kinds(self.store, self.registry, records)
            out = [
                Delivery(key, b, r.seq)
                for r in records
                for key, b in bodies(self.subscription, r, found[r.seq])
            ]
            cursor = records[-1].seq
            if out or len(records) < self.size:
                return Batch(out, cursor)

    async def ack(self, upto: int) -> None:
        """Move the durable cursor to ``upto`` (a :class:`Batch`'s). Raises SubscriptionGone
        when the subscription was deleted; another consumer of the same name having moved it
        first leaves this one at that cursor."""
        assert self.cursor is not None, "open() or batch() first"
        if upto <= self.cursor:
            return
        name = self.subscription.name
        if await self.store.advance_subscription(name, self.cursor, upto, self.clock.now()):
            self.cursor = upto
            return
        found = await self.store.get_subscription(name)
        if found is None:
            raise SubscriptionGone(f"subscription {name!r} was deleted")
        self.cursor = found.cursor

    def stop(self) -> None:
        """End ``async for`` after the notification being handled."""
        self._stop.set()

    async def __aiter__(self) -> AsyncIterator[Delivery]:
        while not self._stop.is_set():
            got = await self.batch()
            for d in got.deliveries:
                yield d
                if self._stop.is_set():
                    return  # the rest of this batch is handed out again next time
            if got.upto != self.cursor:
                await self.ack(got.upto)
            if not got.deliveries:
                try:
                    await asyncio.wait_for(self._stop.wait(), self.poll)
                except TimeoutError:
                    pass


__all__ = [
    "Batch",
    "Consumer",
    "Delivery",
    "Kind",
    "SubscriptionGone",
    "bodies",
    "body",
    "idempotency_key",
    "kinds",
    "matches",
    "pump",
    "pump_all",
]
