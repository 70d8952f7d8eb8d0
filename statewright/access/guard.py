"""A command as one caller may use it: the rules of :class:`~statewright.access.Access`,
applied the same way to every command on a workflow.

An engine command is a function of the runtime whose next argument is the workflow's id
(:mod:`statewright.engine.commands`, :mod:`~statewright.engine.operator`...). Access names it
once with what it needs, e.g.::

    send = command(commands.send, fires("event"), errors=REFUSALS, withheld=("context",))
    resume = command(operator.resume, role("resume workflows", OPERATOR, ADMIN))

and ``access.send(workflow_id, ...)`` then takes the command's own arguments, and

1. reads the workflow as this caller knows it (another tenant's does not exist for it:
   ``workflow_not_found``, so ids do not leak);
2. applies the rules, in order (a role the caller needs, or the roles of the event the
   command fires);
3. names new workflows in the workflow's tenant (``new_ids``: a fork's id);
4. calls the command on the store's id, with the caller as ``actor`` and the row just read
   as ``row``, for the commands that take them (a caller never gives either);
5. words what the command refuses for this caller (``errors``; a refusal carried by a
   result, ``if_allowed``, too).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, Generic, Protocol, TypeVar, overload

from statewright import ids
from statewright.access.principal import Principal
from statewright.engine.runtime import Runtime
from statewright.engine.transitions import Dispatched
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import (
    IllegalTransition,
    InvalidInput,
    StatewrightError,
    StepsWouldRerun,
    StepUnresolved,
    WorkflowBusy,
)
from statewright.store.protocol import fork_source_busy
from statewright.types import WorkflowRow

R = TypeVar("R")
CommandFn = Callable[..., Awaitable[R]]
"""An engine command: ``(runtime, workflow_id, ...)`` to an awaitable result."""


class Caller(Protocol):
    """What the rules use of :class:`~statewright.access.Access`."""

    principal: Principal
    runtime: Runtime

    async def get(self, workflow_id: str) -> WorkflowRow: ...

    def type_of(self, name: str, version: int | None = None) -> WorkflowType: ...

    def check_event(self, row: WorkflowRow, event: str, verb: str = "fire") -> None: ...

    def refusal(self, row: WorkflowRow, exc: IllegalTransition) -> IllegalTransition: ...

    def public_id(self, store_id: str) -> str: ...


Rule = Callable[[Caller, WorkflowRow, Mapping[str, Any]], None]
"""Raises Forbidden (or InvalidInput) unless the caller may run the command on the row with
these arguments (by name)."""
Reword = Callable[[Caller, WorkflowRow, str, Any], StatewrightError]
"""The error as this caller may read it (given the workflow id as the caller gave it)."""


def writer(what: str) -> Rule:
    """Any caller that does not only read."""

    def rule(access: Caller, row: WorkflowRow, args: Mapping[str, Any]) -> None:
        access.principal.check_writer(what)

    return rule


def role(what: str, *roles: str) -> Rule:
    """A caller with one of ``roles``."""

    def rule(access: Caller, row: WorkflowRow, args: Mapping[str, Any]) -> None:
        access.principal.check_role(what, *roles)

    return rule


EventOf = Callable[[WorkflowType, Mapping[str, Any]], "str | None"]


def fires(event: str | EventOf, verb: str = "fire") -> Rule:
    """A caller whose roles may fire the event the command fires: the argument named
    ``event``, or what ``event`` finds in the workflow's type."""

    def rule(access: Caller, row: WorkflowRow, args: Mapping[str, Any]) -> None:
        if isinstance(event, str):
            name = args[event]
        else:
            name = event(access.type_of(row.type, row.machine_version), args)
            if name is None:
                raise InvalidInput(f"workflows of type {row.type!r} cannot be cancelled")
        access.check_event(row, name, verb)

    return rule


def approval_event(wtype: WorkflowType, args: Mapping[str, Any]) -> str:
    """The event a decision fires: the type's approval or denial event."""
    return wtype.approve_event if args["approve"] else wtype.deny_event


def cancel_event(wtype: WorkflowType, args: Mapping[str, Any]) -> str | None:
    """The event a cancel fires (None: the type cannot be cancelled)."""
    return wtype.cancel_event


REFUSALS: Mapping[type[StatewrightError], Reword] = {
    # Only the events this caller may fire are named as allowed, under the id it knows.
    IllegalTransition: lambda access, row, given, exc: access.refusal(row, exc),
}
FORK_ERRORS: Mapping[type[StatewrightError], Reword] = {
    StepUnresolved: lambda access, row, given, exc: StepUnresolved(
        access.public_id(exc.workflow_id), exc.steps, action="fork"
    ),
    StepsWouldRerun: lambda access, row, given, exc: StepsWouldRerun(
        access.public_id(exc.workflow_id), exc.version, exc.steps
    ),
    WorkflowBusy: lambda access, row, given, exc: WorkflowBusy(fork_source_busy(given)),
}


class command(Generic[R]):
    """An :class:`~statewright.access.Access` method over an engine command (see the
    module docstring).

    The method takes the command's arguments but the runtime, ``actor`` and ``row``, and
    returns what the command returns. They are checked when it is called (a TypeError, as
    for any call), not by mypy, which sees ``Callable[..., Awaitable[R]]``: a ParamSpec
    cannot drop the ``actor`` that every command takes and no caller of Access gives.
    """

    def __init__(
        self,
        fn: CommandFn[R],
        *rules: Rule,
        errors: Mapping[type[StatewrightError], Reword] | None = None,
        new_ids: tuple[str, ...] = (),
        withheld: tuple[str, ...] = (),
    ) -> None:
        self.fn = fn
        self.rules = rules
        self.errors = errors or {}
        self.new_ids = new_ids
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters)
        self.id_param = params[1]
        self.supplied = {p for p in ("actor", "row") if p in params}
        self.withheld = frozenset({"actor", "row", *withheld})
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type[object], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, access: None, owner: type[object]) -> command[R]: ...

    @overload
    def __get__(self, access: Caller, owner: type[object]) -> CommandFn[R]: ...

    def __get__(self, access: Caller | None, owner: type[object]) -> command[R] | CommandFn[R]:
        if access is None:
            return self

        async def call(workflow_id: str, /, *args: Any, **kwargs: Any) -> R:
            return await self.run(access, workflow_id, args, kwargs)

        call.__doc__ = self.__doc__
        call.__name__ = self.name
        return call

    async def run(
        self, access: Caller, workflow_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        taken = self.withheld & kwargs.keys()
        if taken:
            raise TypeError(f"Access.{self.name}() takes no {', '.join(sorted(taken))}")
        supplied = dict.fromkeys(self.supplied)  # (given below: the caller, the row read)
        bound = self.signature.bind(access.runtime, workflow_id, *args, **kwargs, **supplied)
        row = await access.get(workflow_id)
        named = bound.arguments
        for rule in self.rules:
            rule(access, row, named)
        for name in self.new_ids:
            given = named.get(name)
            if given is not None:
                named[name] = ids.qualify(row.tenant, ids.check_new_id(ids.check_id(given)))
        named[self.id_param] = row.id
        if "actor" in self.supplied:
            named["actor"] = access.principal.actor
        if "row" in self.supplied:
            named["row"] = row
        try:
            result = await self.fn(*bound.args, **bound.kwargs)
        except StatewrightError as exc:
            for kind, reword in self.errors.items():
                if isinstance(exc, kind):
                    raise reword(access, row, workflow_id, exc) from None
            raise
        if isinstance(result, Dispatched) and result.refusal is not None:
            refusal = access.refusal(result.row, result.refusal)
            return replace(result, refusal=refusal)
        return result
