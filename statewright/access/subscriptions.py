"""Who may see and change subscriptions (for the HTTP surface): the operator or admin role,
with a token that sees every tenant. A subscription reads the whole log (its filter may name
a tenant), so a tenant-bound token may not declare one, nor see them (a subscription's URL
and filter would tell about other tenants)."""

from __future__ import annotations

from statewright.access.core import OPERATORS, Access
from statewright.engine import subscription_ops as ops
from statewright.errors import Forbidden
from statewright.store.subscriptions import Subscription, SubscriptionRecord


def may_manage(access: Access) -> None:
    """Raise Forbidden unless the caller may declare subscriptions (checked before the
    declaration itself is, so a caller without the right learns nothing from it)."""
    _operator(access, "manage subscriptions")


def _operator(access: Access, what: str) -> None:
    access.principal.check_role(what, *OPERATORS)
    if access.principal.scope is not None:
        raise Forbidden(f"{access.principal.actor!r} is bound to a tenant: may not {what}")


async def declare(access: Access, sub: Subscription, start: int | None) -> SubscriptionRecord:
    _operator(access, "manage subscriptions")
    return await ops.subscribe(access.runtime, sub, start=start)


async def listing(access: Access) -> list[SubscriptionRecord]:
    _operator(access, "see subscriptions")
    return await ops.listing(access.runtime)


async def get(access: Access, name: str) -> SubscriptionRecord:
    _operator(access, "see subscriptions")
    return await ops.get(access.runtime, name)


async def remove(access: Access, name: str) -> None:
    _operator(access, "manage subscriptions")
    await ops.remove(access.runtime, name)


async def set_paused(access: Access, name: str, paused: bool) -> SubscriptionRecord:
    _operator(access, "manage subscriptions")
    rt = access.runtime
    return await (ops.pause(rt, name) if paused else ops.resume(rt, name))
