"""Who the caller is: roles, principals, and the API tokens that name them.

Roles are the machine's own strings (``agent``, ``system``, ``operator``...) plus some with a
fixed meaning: ``admin`` may fire every event that is not an approval (and is the only one
who may fire a child's end, ``child_done`` or ``child_failed``, by hand when the machine gives
it no roles), ``approver`` may fire approval events, ``viewer`` alone may only read,
``operator`` may resolve steps and resume parked workflows, and ``ops`` may read
``/metrics`` when the service runs with ``--metrics-auth`` (and otherwise only read, like
``viewer``: a scraper's token must not start workflows or post inputs).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from statewright import ids
from statewright.definition.joins import CHILD_DONE, CHILD_FAILED
from statewright.definition.machine import Event
from statewright.engine.bulk import ACTIONS as BULK_ACTIONS
from statewright.errors import (
    Forbidden,
    InvalidInput,
    StatewrightError,
    Unauthorized,
    WorkflowNotFound,
)
from statewright.types import WorkflowRow

CHILD_EVENTS = frozenset({CHILD_DONE, CHILD_FAILED})
"""The events a child's end sends its parent (:mod:`statewright.engine.children`): declared
without roles, only ``admin`` may fire them by hand (an operator's correction)."""
ADMIN = "admin"
APPROVER = "approver"
OPERATOR = "operator"
"""May resolve steps whose outcome is unknown and resume parked workflows (admin may too)."""
VIEWER = "viewer"
OPS = "ops"
"""May read ``/metrics`` (with ``--metrics-auth``); otherwise read-only, like viewer."""
READ_ONLY_ROLES = frozenset({VIEWER, OPS})
"""Roles that only read: a caller with no other role writes nothing."""
ALL_TENANTS = "*"
"""A token whose tenant is ``*`` sees every tenant (operators, the local open mode)."""
DEFAULT_TENANT = ids.DEFAULT_TENANT


@dataclass(frozen=True)
class Principal:
    """An authenticated caller."""

    actor: str
    roles: frozenset[str]
    tenant: str = DEFAULT_TENANT

    @property
    def read_only(self) -> bool:
        return self.roles <= READ_ONLY_ROLES

    def sees(self, row: WorkflowRow) -> bool:
        return self.tenant in (ALL_TENANTS, row.tenant)

    def may_fire(self, event: Event) -> bool:
        if self.read_only:
            return False
        named = bool(self.roles & set(event.roles))
        if event.approval:
            return APPROVER in self.roles or named
        if event.name in CHILD_EVENTS and not event.roles:
            # A child's end is the child's to send (its notice), not anyone's: an agent
            # must not tell a parent a child finished with a result it made up.
            return ADMIN in self.roles
        return not event.roles or named or ADMIN in self.roles

    @property
    def scope(self) -> str | None:
        """The tenant filter for listings (None: every tenant)."""
        return None if self.tenant == ALL_TENANTS else self.tenant

    def check_writer(self, what: str) -> None:
        """Forbidden for a caller that only reads."""
        if self.read_only:
            raise Forbidden(f"{self.actor!r} is read-only and may not {what}")

    def bulk_actions(self) -> tuple[str, ...]:
        """The bulk actions this caller may take: every one for an admin, all but ``move``
        for an operator, none for anyone else (what :meth:`Access.bulk` enforces, and what
        ``GET /v1/me`` and the MCP tool offer)."""
        if ADMIN in self.roles:
            return BULK_ACTIONS
        if OPERATOR in self.roles:
            return tuple(a for a in BULK_ACTIONS if a != "move")
        return ()

    def check_role(self, what: str, *roles: str) -> None:
        """Forbidden unless the caller has one of ``roles``."""
        if not self.roles & set(roles):
            needs = " or ".join(roles)
            raise Forbidden(f"{self.actor!r} may not {what} (needs the {needs} role)")


LOCAL = Principal("local", frozenset({ADMIN, APPROVER}), ALL_TENANTS)
"""The caller of the HTTP API and dashboard in open mode (no tokens configured; the service
then only listens locally): the person at this machine."""
AGENT = "agent"
LOCAL_AGENT = Principal("local-agent", frozenset({AGENT}), DEFAULT_TENANT)
"""The caller of MCP without credentials (stdio without ``--tokens``, ``/mcp`` in open mode):
the model on the other end, so the ``agent`` role only (no approval, no admin) in the
default tenant, where the workflows started on this machine without a tenant live. More only
when granted explicitly (a token, or ``statewright mcp --role``)."""


@dataclass(frozen=True)
class TokenEntry:
    sha256: str
    principal: Principal


@dataclass
class TokenRegistry:
    """API tokens mapped to principals. Only SHA-256 digests of the tokens are kept.

    The file (JSON or YAML) lists ``tokens``, each with ``token`` (or ``sha256``, its hex
    digest, so the file need not hold secrets), ``actor``, ``roles`` and ``tenant``::

        tokens:
          - {token: s3cret-agent, actor: agent-7, roles: [agent], tenant: acme}
          - {sha256: 9f86d0..., actor: alice, roles: [approver, operator], tenant: acme}
    """

    entries: dict[str, Principal] = field(default_factory=dict)

    @classmethod
    def from_data(cls, data: Any, source: str = "tokens") -> TokenRegistry:
        items = data.get("tokens") if isinstance(data, Mapping) else data
        if not isinstance(items, list):
            raise InvalidInput(f"{source}: expected a list of tokens under 'tokens'")
        registry = cls()
        for i, item in enumerate(items):
            registry.add_entry(_entry(item, f"{source}: token #{i + 1}"))
        return registry

    @classmethod
    def from_file(cls, path: str | Path) -> TokenRegistry:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidInput(f"cannot read tokens file {str(p)!r}: {exc.strerror}") from exc
        try:
            data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise InvalidInput(f"tokens file {str(p)!r} is not valid JSON/YAML: {exc}") from exc
        return cls.from_data(data, str(p))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TokenRegistry | None:
        """From ``STATEWRIGHT_TOKENS_FILE``; None when it is not set (open mode)."""
        env = os.environ if environ is None else environ
        path = env.get("STATEWRIGHT_TOKENS_FILE")
        return cls.from_file(path) if path else None

    def add(
        self, token: str, actor: str, roles: Iterable[str], tenant: str = DEFAULT_TENANT
    ) -> None:
        self.add_entry(TokenEntry(digest(token), Principal(actor, frozenset(roles), tenant)))

    def add_entry(self, entry: TokenEntry) -> None:
        self.entries[entry.sha256] = entry.principal

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise Unauthorized("an API token is required (Authorization: Bearer <token>)")
        wanted = digest(token)
        # Compare every digest in constant time rather than a dict lookup on attacker input.
        found = None
        for known, principal in self.entries.items():
            if hmac.compare_digest(known, wanted):
                found = principal
        if found is None:
            raise Unauthorized("unknown API token")
        return found


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _entry(item: Any, where: str) -> TokenEntry:
    if not isinstance(item, Mapping):
        raise InvalidInput(f"{where}: expected a mapping")
    token, sha = item.get("token"), item.get("sha256")
    if (token is None) == (sha is None):
        raise InvalidInput(f"{where}: give exactly one of 'token' and 'sha256'")
    if token is not None and (not isinstance(token, str) or len(token) < 8):
        raise InvalidInput(f"{where}: 'token' must be a string of at least 8 characters")
    if sha is not None and (not isinstance(sha, str) or len(sha) != 64):
        raise InvalidInput(f"{where}: 'sha256' must be a 64-character hex digest")
    actor, roles = item.get("actor"), item.get("roles", [])
    tenant = item.get("tenant", DEFAULT_TENANT)
    if not isinstance(actor, str) or not actor.strip():
        raise InvalidInput(f"{where}: 'actor' must be a non-empty string")
    if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
        raise InvalidInput(f"{where}: 'roles' must be a list of role names")
    if tenant != ALL_TENANTS and not ids.valid_id(tenant):
        raise InvalidInput(f"{where}: 'tenant' must be '*' or a tenant name ({ids.RULE})")
    principal = Principal(actor, frozenset(roles), tenant)
    return TokenEntry(digest(token) if token is not None else str(sha).lower(), principal)


def public_error(exc: StatewrightError, principal: Principal) -> dict[str, Any]:
    """:meth:`Access.public_error` (for a surface that has the caller, not an Access)."""
    body = exc.to_dict()
    if exc.as_given:
        return body
    localized: dict[str, Any] = ids.localize_value(body, principal.scope)
    return localized


def not_found(workflow_id: str) -> WorkflowNotFound:
    """Not found, naming the id as the caller gave it (even one that looks like a store id:
    for this caller it names nothing)."""
    exc = WorkflowNotFound(workflow_id)
    exc.as_given = True
    return exc
