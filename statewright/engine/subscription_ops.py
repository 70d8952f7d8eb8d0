"""Declaring subscriptions (the engine's ``subscribe``, ``subscriptions``, ``subscription``,
``unsubscribe``, ``pause_subscription``, ``resume_subscription``): what the Python API, the
type's file, the CLI and HTTP share. See :mod:`statewright.engine.subscriptions` for what a
subscription does."""

from __future__ import annotations

from statewright.engine.runtime import Runtime
from statewright.errors import SubscriptionNotFound
from statewright.store.subscriptions import Subscription, SubscriptionRecord


async def subscribe(
    rt: Runtime, subscription: Subscription, *, start: int | None = None
) -> SubscriptionRecord:
    """Declare a subscription, or change one (its cursor kept): a new one hands on what
    happens from now, or from after the log seq ``start`` (0: the whole log)."""
    if start is not None and (not isinstance(start, int) or start < 0):
        from statewright.errors import InvalidInput

        raise InvalidInput("start: a log seq (0 or more)")
    return await rt.store.put_subscription(subscription, rt.clock.now(), cursor=start)


async def listing(rt: Runtime) -> list[SubscriptionRecord]:
    """Every subscription, by name."""
    return await rt.store.list_subscriptions()


async def get(rt: Runtime, name: str) -> SubscriptionRecord:
    """One subscription; raises SubscriptionNotFound."""
    found = await rt.store.get_subscription(name)
    if found is None:
        raise SubscriptionNotFound(name)
    return found


async def remove(rt: Runtime, name: str) -> None:
    """Forget a subscription (its notifications still queued are dead-lettered when their
    turn comes); raises SubscriptionNotFound."""
    if not await rt.store.delete_subscription(name):
        raise SubscriptionNotFound(name)


async def pause(rt: Runtime, name: str) -> SubscriptionRecord:
    """Stop handing on new log entries (they wait: the cursor stays); raises
    SubscriptionNotFound."""
    if not await rt.store.pause_subscription(name, True, rt.clock.now()):
        raise SubscriptionNotFound(name)
    return await get(rt, name)


async def resume(rt: Runtime, name: str) -> SubscriptionRecord:
    """Hand on again, from where it paused; raises SubscriptionNotFound."""
    if not await rt.store.pause_subscription(name, False, rt.clock.now()):
        raise SubscriptionNotFound(name)
    return await get(rt, name)


__all__ = ["get", "listing", "pause", "remove", "resume", "subscribe"]
