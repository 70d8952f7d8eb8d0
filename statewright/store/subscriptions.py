"""Subscriptions (issue 26): who is told about which transitions of the log, and the store
part that keeps them (:class:`Subscriptions`; both SQL stores': :mod:`.subscriptions_sql`).

A subscription is a filter of the log (:class:`SubscriptionFilter`), a target (a webhook URL,
or a named Python consumer) and a durable cursor: the log ``seq`` up to which it was handed
on. A webhook's pump (:mod:`statewright.engine.subscriptions`) enqueues the matching entries
into the outbox it shares with alerts and moves the cursor in one transaction, with a
compare-and-swap on the old cursor; a consumer moves it when it acknowledges.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from statewright.errors import InvalidSubscription

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
"""A subscription's name: a letter or digit, then up to 99 of letters, digits, ``_ . -``."""
MAX_ITEMS = 100
"""Names one criterion of a filter may list."""
NotificationStatus = Literal["transition", "message"]


def _names(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise InvalidSubscription(f"subscription filter {what}: expected a list of names")
    out = tuple(dict.fromkeys(value))
    if len(out) > MAX_ITEMS or not all(isinstance(v, str) and 0 < len(v) <= 200 for v in out):
        raise InvalidSubscription(f"subscription filter {what}: up to {MAX_ITEMS} non-empty names")
    return out


@dataclass(frozen=True)
class SubscriptionFilter:
    """Which log entries a subscription takes: each criterion given must hold (one of its
    names), those left empty hold always.

    ``types``: the workflow's type; ``states``: the state entered; ``events``: the event;
    ``terminal``: only transitions into a terminal state; ``tenant``: only that tenant's
    workflows; ``topics``: only the messages the transition's handler emitted under those
    topics, each delivered on its own (without ``topics`` each matching transition is one
    notification, its messages in it)."""

    types: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    terminal: bool = False
    topics: tuple[str, ...] = ()
    tenant: str | None = None

    def __post_init__(self) -> None:
        for name in ("types", "states", "events", "topics"):
            object.__setattr__(self, name, _names(getattr(self, name), name))
        if not isinstance(self.terminal, bool):
            raise InvalidSubscription("subscription filter terminal: expected true or false")
        if self.tenant is not None and not isinstance(self.tenant, str):
            raise InvalidSubscription("subscription filter tenant: expected a string")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: list(getattr(self, k))
            for k in ("types", "states", "events", "topics")
            if getattr(self, k)
        }
        if self.terminal:
            out["terminal"] = True
        if self.tenant is not None:
            out["tenant"] = self.tenant
        return out

    @classmethod
    def from_json(cls, value: Any) -> SubscriptionFilter:
        """A filter from its JSON form (``to_json``'s); InvalidInput when it is not one."""
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise InvalidSubscription("subscription filter: expected an object")
        unknown = set(value) - {"types", "states", "events", "terminal", "topics", "tenant"}
        if unknown:
            raise InvalidSubscription(
                f"subscription filter: unknown key(s) {', '.join(sorted(unknown))}"
            )
        return cls(
            types=value.get("types", ()),
            states=value.get("states", ()),
            events=value.get("events", ()),
            terminal=value.get("terminal", False),
            topics=value.get("topics", ()),
            tenant=value.get("tenant"),
        )


@dataclass(frozen=True)
class Subscription:
    """A subscription as declared: its name, filter and target, a webhook ``url`` (with
    extra request ``headers`` and a ``secret`` that signs each body: the
    ``X-Statewright-Signature`` header, ``sha256=<hex HMAC>``) or, with ``consumer``, a
    Python consumer (:class:`~statewright.engine.subscriptions.Consumer`) reading it."""

    name: str
    filter: SubscriptionFilter = field(default_factory=SubscriptionFilter)
    url: str | None = None
    consumer: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    secret: str | None = None
    paused: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or NAME.fullmatch(self.name) is None:
            raise InvalidSubscription(f"subscription name {self.name!r}: letters, digits, _ . -")
        if isinstance(self.filter, Mapping):
            object.__setattr__(self, "filter", SubscriptionFilter.from_json(self.filter))
        if not isinstance(self.filter, SubscriptionFilter):
            raise InvalidSubscription("subscription filter: expected a SubscriptionFilter")
        if self.consumer == (self.url is not None):
            raise InvalidSubscription(f"subscription {self.name!r}: either a url or consumer=True")
        if self.url is not None:
            low = self.url.lower() if isinstance(self.url, str) else ""
            if not low.startswith(("http://", "https://")) or len(self.url) > 2000:
                raise InvalidSubscription(f"subscription {self.name!r}: url must be http(s)://")
        if not isinstance(self.headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.headers.items()
        ):
            raise InvalidSubscription(f"subscription {self.name!r}: headers map names to strings")
        object.__setattr__(self, "headers", dict(self.headers))
        if self.secret is not None and not isinstance(self.secret, str):
            raise InvalidSubscription(f"subscription {self.name!r}: secret must be a string")


@dataclass(frozen=True)
class SubscriptionRecord:
    """A stored subscription, with its cursor."""

    subscription: Subscription
    cursor: int
    """The log seq up to which the log was enqueued (webhook) or acknowledged (consumer)."""
    created_at: float
    updated_at: float

    @property
    def name(self) -> str:
        return self.subscription.name

    def to_json(self) -> dict[str, Any]:
        """Its JSON view (the CLI's, HTTP's): the secret never shown, only whether it is set;
        header values hidden likewise (they often carry credentials)."""
        sub = self.subscription
        return {
            "name": sub.name,
            "filter": sub.filter.to_json(),
            "url": sub.url,
            "consumer": sub.consumer,
            "headers": sorted(sub.headers),
            "signed": sub.secret is not None,
            "paused": sub.paused,
            "cursor": self.cursor,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True)
class Notification:
    """One outbox row a pump enqueues for a webhook subscription."""

    subscription: str
    url: str
    workflow_id: str
    """The ordering key: a subscription's notifications of one workflow go out in order."""
    status: NotificationStatus
    idempotency_key: str
    body: Mapping[str, Any]


@runtime_checkable
class Subscriptions(Protocol):
    """Subscriptions and their cursors, and the enqueueing of their notifications into the
    outbox (:class:`~statewright.store.protocol.AlertOutbox`'s table, kind ``transition``)."""

    async def put_subscription(
        self, sub: Subscription, at: float, *, cursor: int | None = None
    ) -> SubscriptionRecord:
        """Declare a subscription, or change one (its cursor kept). A new one starts at
        ``cursor``, or (None) at the end of the log: it hands on what happens from now."""

    async def get_subscription(self, name: str) -> SubscriptionRecord | None: ...

    async def list_subscriptions(self) -> list[SubscriptionRecord]:
        """Every subscription, by name."""

    async def delete_subscription(self, name: str) -> bool:
        """Forget a subscription (its notifications still due are dead-lettered when
        claimed); False when there was none."""

    async def pause_subscription(self, name: str, paused: bool, at: float) -> bool:
        """Pause (nothing enqueued, nothing read) or resume; False when there is none."""

    async def enqueue_notifications(
        self, name: str, old: int, new: int, notifications: Sequence[Notification], at: float
    ) -> bool:
        """In one transaction: move the cursor from ``old`` to ``new`` (compare-and-swap)
        and, only if it moved, enqueue ``notifications`` (a row already enqueued under the
        same key is left alone). False (nothing written) when the cursor was not ``old``."""

    async def advance_subscription(self, name: str, old: int, new: int, at: float) -> bool:
        """Move the cursor from ``old`` to ``new`` (a consumer's acknowledgement); False when
        it was not at ``old``."""

    async def workflow_kinds(
        self, ids: Sequence[str]
    ) -> dict[str, tuple[str, str | None, int, bool]]:
        """``(type, tenant, version, terminal)`` of each workflow of ``ids`` still stored."""

    async def log_head(self) -> int:
        """The log's last seq (0: empty)."""

    async def outbox_pending(self) -> dict[str, tuple[int, float | None]]:
        """Per outbox kind (``alert``, ``transition``): rows still due or claimed, and the
        creation time of the oldest."""


__all__ = [
    "NAME",
    "Notification",
    "NotificationStatus",
    "Subscription",
    "SubscriptionFilter",
    "SubscriptionRecord",
    "Subscriptions",
]
