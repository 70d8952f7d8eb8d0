"""Who may do what: API tokens, roles per event, tenant scoping.

The surfaces (HTTP, MCP) authenticate a caller into a :class:`Principal` and then use the
engine only through :class:`Access`, which

- hides other tenants' workflows (reading one is ``workflow_not_found``, so ids do not leak),
- lets a caller fire only the events its roles may fire (the machine declares them per event;
  approval events need the ``approver`` role or a role the event names), and
- records the caller as the actor of every transition it causes.

Roles are the machine's own strings (``agent``, ``system``, ``operator``...) plus some with a
fixed meaning (:mod:`statewright.access.principal`): ``admin`` may fire every event that is
not an approval, ``approver`` may fire approval events, ``viewer`` alone may only read,
``operator`` may resolve steps and resume parked workflows, and ``ops`` may read ``/metrics``
when the service runs with ``--metrics-auth`` (and otherwise only read, like ``viewer``).

Workflow ids are scoped per tenant (:mod:`statewright.ids`): a caller bound to a tenant names
its workflows by their ids in that tenant, and sees them so.

The parts: :mod:`~statewright.access.principal` (callers, roles, tokens),
:mod:`~statewright.access.reads` (what a caller may read, redacted for it),
:mod:`~statewright.access.guard` (the rules every command applies, one way),
:mod:`~statewright.access.core` (:class:`Access`: the reads and the commands) and
:mod:`~statewright.access.schedules` (who may see and change schedules).
"""

from __future__ import annotations

from statewright.access.core import Access
from statewright.access.principal import (
    ADMIN,
    AGENT,
    ALL_TENANTS,
    APPROVER,
    DEFAULT_TENANT,
    LOCAL,
    LOCAL_AGENT,
    OPERATOR,
    OPS,
    READ_ONLY_ROLES,
    VIEWER,
    Principal,
    TokenEntry,
    TokenRegistry,
    digest,
    public_error,
)

__all__ = [
    "ADMIN",
    "AGENT",
    "ALL_TENANTS",
    "APPROVER",
    "DEFAULT_TENANT",
    "LOCAL",
    "LOCAL_AGENT",
    "OPERATOR",
    "OPS",
    "READ_ONLY_ROLES",
    "VIEWER",
    "Access",
    "Principal",
    "TokenEntry",
    "TokenRegistry",
    "digest",
    "public_error",
]
