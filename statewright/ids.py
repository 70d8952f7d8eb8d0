"""Workflow ids and tenant names: one validator for every surface (Python, CLI, HTTP, MCP),
and how the surfaces scope ids per tenant.

**Through HTTP and MCP, ids are scoped per tenant.** A workflow a caller starts in tenant
``acme`` is kept under the *qualified* id ``acme:order-1``; the ``default`` tenant's keep
their bare ids. A caller bound to one tenant (an API token with a ``tenant``) names
workflows by their ids *in* that tenant, so two tenants may both have an ``order-1``, and no
response tells one tenant whether an id exists in another: another tenant's workflow is, for
the caller, exactly as absent as a free id. ``:`` cannot appear in an id or a tenant name, so
a qualified id never collides with a bare one. Callers that see every tenant (an API token
with tenant ``*``, the local open mode) see and give store ids (``acme:order-1``).

The Python API and the CLI are trusted with every tenant and use store ids as given:
``engine.start(..., workflow_id="order-1", tenant="acme")`` keeps the bare id ``order-1``.
A tenant's callers still find such a workflow of theirs by that id (as they find those
started before ids were scoped), and a start of that id in that tenant is a retry of it. A
bare id given to another tenant this way is the one id a default-tenant caller cannot reuse.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from statewright.errors import InvalidInput

SEPARATOR = ":"
DEFAULT_TENANT = "default"
_NAME = r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}"
ID_PATTERN = rf"^{_NAME}$"
"""A local workflow id or a tenant name (as a JSON-Schema/OpenAPI pattern)."""
REF_PATTERN = rf"^(?:{_NAME}{SEPARATOR})?{_NAME}$"
"""A store id: a local id, optionally qualified by its tenant."""
_ID = re.compile(_NAME)
_REF = re.compile(rf"(?:({_NAME}){SEPARATOR})?({_NAME})")
RULE = "1-200 letters, digits, '_', '.', '-', starting with a letter or digit"


def valid_id(value: Any) -> bool:
    """Whether ``value`` is a valid local id or tenant name. The whole string must match (a
    trailing newline, which ``re.match(r"...$")`` lets through, is refused)."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def check_id(value: Any, what: str = "workflow id") -> str:
    if not valid_id(value):
        raise InvalidInput(f"invalid {what} {value!r}: {RULE}", field=what)
    return str(value)


_SYSTEM_MADE = re.compile(r"\.(?:[0-9]+T[0-9]+Z|fork-[0-9]+)\Z")
"""The end of an id the system makes: a schedule's tick (``.20270115T020000Z``) or a fork's
default id (``.fork-3``)."""
SYSTEM_RULE = (
    "ids ending in '.<digits>T<digits>Z' (a schedule's tick, such as '.20270115T020000Z') "
    "or '.fork-<n>' are made by schedules and forks"
)


def system_made(value: str) -> bool:
    """Whether ``value`` (a local or store id) has the form of an id the system makes."""
    return _SYSTEM_MADE.search(value.rpartition(SEPARATOR)[2]) is not None


def check_new_id(value: Any, tenant: str | None = None) -> str:
    """An id a caller gives for a workflow it creates: a valid id (or store id, qualified by
    ``tenant`` when given) that is not of a form the system makes (:func:`system_made`), so a
    caller can never take a schedule's tick or a fork's id before it is made."""
    checked = check_ref(value, tenant)
    if system_made(checked):
        raise InvalidInput(
            f"invalid workflow id {value!r}: {SYSTEM_RULE}, not by callers", field="workflow id"
        )
    return checked


def fork_id(workflow_id: str, version: int) -> str:
    """The id a fork of ``workflow_id`` at ``version`` gets when none is given."""
    return f"{workflow_id}.fork-{version}"


def check_ref(value: Any, tenant: str | None = None) -> str:
    """A store id (``id`` or ``tenant:id``); with ``tenant``, a qualified id must be that
    tenant's."""
    match = _REF.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidInput(
            f"invalid workflow id {value!r}: {RULE} (optionally after '<tenant>:')",
            field="workflow id",
        )
    prefix = match.group(1)
    if prefix is not None and tenant is not None and prefix != tenant:
        raise InvalidInput(
            f"workflow id {value!r} is qualified by tenant {prefix!r}, not {tenant!r}",
            field="workflow id",
        )
    return str(value)


def qualify(tenant: str, local: str) -> str:
    """The store id of a tenant's workflow ``local`` (bare in the default tenant)."""
    if tenant == DEFAULT_TENANT or SEPARATOR in local:
        return local
    return f"{tenant}{SEPARATOR}{local}"


def local(store_id: str, tenant: str | None) -> str:
    """The id a caller bound to ``tenant`` knows ``store_id`` by (None: sees every tenant)."""
    if tenant is not None and store_id.startswith(tenant + SEPARATOR):
        return store_id[len(tenant) + 1 :]
    return store_id


def localize(text: str, tenant: str | None) -> str:
    """``text`` (an error message, a last error) as a caller bound to ``tenant`` reads it: every
    store id of that tenant in it (``acme:order-1``, also inside a step key
    ``acme:order-1:charge``) named as the caller knows it (``order-1``). Unchanged for a
    caller that sees every tenant (None) and for the default tenant (its store ids are bare).
    """
    if tenant is None or tenant == DEFAULT_TENANT or tenant + SEPARATOR not in text:
        return text
    return _qualifier(tenant).sub("", text)


def localize_value(value: Any, tenant: str | None) -> Any:
    """:func:`localize` applied to every string in a JSON value (an error's details)."""
    if tenant is None or tenant == DEFAULT_TENANT:
        return value
    if isinstance(value, str):
        return localize(value, tenant)
    if isinstance(value, dict):
        return {k: localize_value(v, tenant) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [localize_value(v, tenant) for v in value]
    return value


@functools.lru_cache(maxsize=256)
def _qualifier(tenant: str) -> re.Pattern[str]:
    # The tenant's prefix where an id starts: not inside a longer name (``xacme:1``), and
    # followed by an id's first character.
    prefix = re.escape(tenant + SEPARATOR)
    return re.compile(rf"(?<![A-Za-z0-9_.\-{SEPARATOR}]){prefix}(?=[A-Za-z0-9])")
