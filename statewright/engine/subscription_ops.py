"""Declaring subscriptions (the engine's ``subscribe``, ``subscriptions``, ``subscription``,
``unsubscribe``, ``pause_subscription``, ``resume_subscription``): what the Python API, the
type's file, the CLI and HTTP share. See :mod:`statewright.engine.subscriptions` for what a
subscription does."""

from __future__ import annotations

import os
from pathlib import Path

from statewright.engine.runtime import Runtime
from statewright.errors import InvalidInput, SubscriptionNotFound
from statewright.store.subscriptions import Subscription, SubscriptionFilter, SubscriptionRecord


async def subscribe(
    rt: Runtime, subscription: Subscription, *, start: int | None = None
) -> SubscriptionRecord:
    """Declare a subscription, or change one (its cursor kept): a new one hands on what
    happens from now, or from after the log seq ``start`` (0: the whole log)."""
    if start is not None and (not isinstance(start, int) or start < 0):
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


def in_file(path: str | os.PathLike[str]) -> list[Subscription]:
    """The subscriptions a type's file declares (its ``subscriptions:`` key, checked by the
    machine schema with the rest of the file): each filter's ``types`` default to the
    machine's name, a ``secret_env`` names the environment variable holding the secret.
    Raises DefinitionError (a bad file), InvalidInput (a bad subscription, an unset secret
    variable)."""
    import json

    from statewright.definition.formats.files import load_path

    machine = load_path(path)  # the whole file checked, the subscriptions' shape with it
    text = Path(path).read_text(encoding="utf-8")
    if Path(path).suffix.lower() == ".json":
        data = json.loads(text)
    else:
        import yaml

        data = yaml.safe_load(text)
    out = []
    for item in data.get("subscriptions", []):
        spec = dict(item.get("filter", {}))
        spec.setdefault("types", [machine.name])
        secret = None
        if "secret_env" in item:
            secret = os.environ.get(item["secret_env"])
            if not secret:
                raise InvalidInput(
                    f"subscription {item['name']!r}: ${item['secret_env']} is not set"
                )
        out.append(
            Subscription(
                item["name"],
                SubscriptionFilter.from_json(spec),
                url=item.get("url"),
                consumer=item.get("consumer", False),
                headers=item.get("headers", {}),
                secret=secret,
                paused=item.get("paused", False),
            )
        )
    return out


__all__ = ["get", "in_file", "listing", "pause", "remove", "resume", "subscribe"]
