"""The framework-neutral agent session: an agent's loop inside one state's handler.

An :class:`AgentSession` is what an adapter (PydanticAI, the OpenAI Agents SDK) drives:

- **model calls** are durable steps (:meth:`AgentSession.model_call`): the stored result is an
  envelope with the call's usage, the framework's serialised response and the call's new
  messages in a neutral form, so a re-run of the handler (after a crash, a retry) gets every
  completed response back from the ledger and the model is not asked again; before a fresh
  call the type's budgets are checked (:class:`~statewright.errors.BudgetExceeded`);
- **tool calls** are durable steps (:meth:`AgentSession.tool_call`), their action able to read
  the step's key (:func:`current_key`) to hand to the external system as an idempotency key and
  fencing token;
- **the state's events** that the session's roles may fire are the agent's only way to move
  the workflow (:meth:`AgentSession.event_tools`, :meth:`AgentSession.choose`): an illegal
  choice gets a structured refusal for the model, never an exception.

Steps are named per *visit* of the state (``run.workflow.version``, bumped only by
transitions): fresh on each new visit of the same state, stable across re-runs of the handler
within one visit, so a replay of the agent loop finds its steps by their ordinal.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import re
import weakref
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from statewright.access.principal import CHILD_EVENTS, Principal
from statewright.engine import budgets
from statewright.engine import llm_usage as usage
from statewright.engine.ledger import StepKey
from statewright.engine.llm_usage import Usage
from statewright.engine.steps import Run
from statewright.engine.workflow_type import Applied, Next, NotApplied, Reconciler
from statewright.errors import (
    BudgetExceeded,
    FatalError,
    IllegalTransition,
    InvalidInput,
    InvalidPayload,
    NoEventChosen,
    StatewrightError,
)
from statewright.types import JSON

ModelCall = Callable[[], Awaitable[tuple[JSON, list[JSON], Usage]]]
"""A fresh model call: returns (the serialised response, its new neutral messages, usage)."""

ModelReconcile = Callable[[str], Awaitable[tuple[JSON, list[JSON], Usage] | None]]
"""An adapter's reconcile of a model call whose outcome is unknown (see
:meth:`AgentSession.model_call`): given the step's key, the response a gateway recorded for it,
in :data:`ModelCall`'s form, or None when it has none (the model is asked again)."""

_KEY: contextvars.ContextVar[StepKey | None] = contextvars.ContextVar(
    "statewright_agent_step_key", default=None
)

_NAMES: weakref.WeakKeyDictionary[Run, set[str]] = weakref.WeakKeyDictionary()
"""The session names taken in each handler run (a second session of a name would replay the
first one's steps as its own)."""

ANY_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}
"""The parameters of an event declared without a payload schema."""


def current_key() -> StepKey | None:
    """The key of the tool or model step running now (None outside one): a ``str`` to send
    as the external system's idempotency key (a tool's service, a model gateway that records
    responses), carrying the claim's fencing token."""
    return _KEY.get()


@dataclass(frozen=True)
class EventTool:
    """One of the state's events offered to the model as a tool."""

    name: str
    description: str
    parameters: JSON
    """A JSON Schema of the event's payload (an object)."""


class AgentSession:
    """One agent's durable loop in a state's handler (see the module docstring).

    Args:
        run: the handler's run.
        name: the agent's name, the prefix of its steps (no ``:`` or ``.``); one session per
            name in a handler run (InvalidInput otherwise).
        roles: the roles the agent fires events with (approval events are never offered).
        events: limit the offered events to these (None: every one the roles may fire).
    """

    def __init__(
        self,
        run: Run,
        *,
        name: str = "agent",
        roles: Iterable[str] = ("agent",),
        events: Iterable[str] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or ":" in name or "." in name:
            raise InvalidInput(f"an agent's name must be non-empty, without ':' or '.': {name!r}")
        taken = _NAMES.setdefault(run, set())
        if name in taken:
            raise InvalidInput(
                f"a second agent session named {name!r} in one handler run: its steps would "
                "be the first one's; give each agent run of a handler its own name"
            )
        taken.add(name)
        self.run = run
        self.name = name
        self.roles = frozenset(roles)
        self.only = None if events is None else frozenset(events)
        self.visit: int = run.workflow.version
        self.state: str = run.workflow.state
        self.chosen: Next | None = None
        self._model_index = 0

    # -- names ----------------------------------------------------------------------------------

    def step_name(self, kind: str, index: int | str, label: str = "") -> str:
        """``{name}.v{visit}.{kind}.{index}`` (+ ``.{label}``): a step of this visit."""
        base = f"{self.name}.v{self.visit}.{kind}.{index}"
        return f"{base}.{label}" if label else base

    # -- model calls ----------------------------------------------------------------------------

    async def model_call(
        self, call: ModelCall, *, reconcile: ModelReconcile | None = None
    ) -> JSON:
        """Run one model call as a durable step and return its serialised response.

        The ordinal of the response in this session names the step (a failed call asked
        again is the same step, its next attempt). A step already done returns its
        stored response (no budget check, no call). Otherwise the type's budgets are checked
        first (:class:`BudgetExceeded` when one is used up: the model is not called), then the
        call runs as a step ``safe_to_repeat`` whose stored result is the usage envelope;
        while it runs :func:`current_key` is the step's key (a model client or gateway can send
        it as an idempotency key).

        A call whose outcome is unknown (cut by a crash, the step found *executing*) is first
        reconciled: the adapter asks the user's hook for the response recorded under the
        step's key; one found becomes the step's result (:class:`Applied`, the same envelope a
        fresh call builds), the model not asked again. Without a hook, or when it has none, the
        call is asked again (:class:`NotApplied`): nothing but tokens was spent.

        Usage metrics (:func:`~statewright.engine.llm_usage.observe`) count a response once,
        in the run that records it in the ledger: a fresh one, or one reconciled (billed by the
        call a crash cut, whose run died before recording it); never one read back from the
        ledger.
        """
        index = self._model_index
        name = self.step_name("model", index)
        run = self.run
        found = await run.rt.store.get_step(run.key(name))
        if found is not None and found.status == "done":
            self._model_index += 1
            return _response(found.result)
        # BudgetExceeded: the model is not called. Each step recorded is reported (below).
        await usage.check_budgets(run, counted=True)
        recorded: list[Usage] = []

        def wrap(got: tuple[JSON, list[JSON], Usage]) -> JSON:
            response, messages, used = got
            recorded.append(used)
            return usage.envelope(
                used,
                agent=self.name,
                state=self.state,
                visit=self.visit,
                response=response,
                messages=messages,
            )

        async def action(key: StepKey) -> JSON:
            token = _KEY.set(key)
            try:
                return wrap(await call())
            finally:
                _KEY.reset(token)

        verdict: Reconciler | None = None
        if reconcile is not None:
            ask = reconcile

            async def found_response(key: str) -> Applied | NotApplied:
                got = await ask(key)
                return NotApplied() if got is None else Applied(wrap(got))

            verdict = found_response
        # Only a response moves the ordinal on: a call that failed and is asked again (by the
        # framework's retry) is the same step, so step n is always the n-th response.
        result = await run.step(name, action, safe_to_repeat=True, reconcile=verdict)
        usage.recorded(run, result)  # the budgets' totals of this run count it from now
        self._model_index += 1
        if recorded:
            usage.observe(run, recorded[-1])
        return _response(result)

    def no_event(self, on_no_event: str | None, output: JSON) -> Next:
        """The outcome of an agent run that ended without choosing an event (``output``: its
        final output as JSON): ``on_no_event`` with ``{"output": ...}`` as payload when the
        event's schema takes it (else none), or :class:`NoEventChosen` when it names none."""
        if on_no_event is None:
            raise NoEventChosen(
                f"agent {self.name!r} ended in state {self.state!r} without choosing an event "
                f"(offered: {', '.join(self.offered()) or 'none'})",
                output=output,
            )
        payload: dict[str, Any] = {"output": output}
        event = self.run.type.machine.events.get(on_no_event)
        if event is not None:
            try:
                event.validate_payload(payload)
            except InvalidPayload:
                payload = {}
        return Next(on_no_event, payload)

    def budget_next(self, exc: BudgetExceeded) -> Next:
        """The handler's outcome for a reached budget: the budget's event, with what it
        counted as payload (the same as the worker's for a BudgetExceeded it catches)."""
        return Next(exc.event, budgets.payload(exc.budget, exc.totals))

    # -- tool calls -----------------------------------------------------------------------------

    async def tool_call(
        self,
        tool: str,
        call_id: str | int,
        fn: Callable[[StepKey], Any],
        *,
        safe_to_repeat: bool = False,
        reconcile: Reconciler | None = None,
    ) -> Any:
        """Run a tool's call as a durable step ``{name}.v{visit}.tool.{call_id}.{tool}``.

        ``fn(key)`` runs at most once (see :meth:`Run.step`: an unknown outcome is reconciled,
        or asked again only when ``safe_to_repeat``); while it runs :func:`current_key` is the
        step's key. Its result must be JSON.
        """
        name = self.step_name("tool", call_id, tool)

        async def action(key: StepKey) -> Any:
            token = _KEY.set(key)
            try:
                if inspect.iscoroutinefunction(fn):
                    result = await fn(key)
                else:
                    # asyncio.to_thread copies the context: the key goes along.
                    result = await asyncio.to_thread(fn, key)
                if inspect.isawaitable(result):
                    result = await result
                return result
            finally:
                _KEY.reset(token)

        return await self.run.step(
            name, action, safe_to_repeat=safe_to_repeat, reconcile=reconcile
        )

    # -- events ---------------------------------------------------------------------------------

    def _may_fire(self, event: str) -> bool:
        declared = self.run.type.machine.events.get(event)
        if declared is None or declared.approval or event in CHILD_EVENTS:
            return False  # approval decisions and a child's notice are never the agent's
        if self.only is not None and event not in self.only:
            return False
        return Principal(self.name, self.roles).may_fire(declared)

    def offered(self) -> list[str]:
        """The events with an edge out of the state that the roles may fire."""
        machine = self.run.type.machine
        return [e for e in machine.events_from(self.state) if self._may_fire(e)]

    def event_tools(self) -> list[EventTool]:
        """The offered events as tools, typed from their payload schemas."""
        machine = self.run.type.machine
        tools = []
        for name in self.offered():
            event = machine.events[name]
            schema = dict(event.payload_schema) if event.payload_schema else dict(ANY_OBJECT)
            what = event.description or f"Fire the workflow event {name!r}."
            tools.append(
                EventTool(
                    name,
                    f"{what} Moves the workflow out of state {self.state!r}; "
                    "the agent's run ends when it is accepted.",
                    schema,
                )
            )
        return tools

    def allowed(self) -> list[str]:
        """The offered events whose guards pass now."""
        machine, row = self.run.type.machine, self.run.workflow
        offered = set(self.offered())
        return [e for e in machine.allowed_events(self.state, row.context) if e in offered]

    def choose(self, event: str, payload: Mapping[str, Any] | None) -> dict[str, Any]:
        """The model chose ``event``: record it when it is legal now (``chosen``) and say so;
        otherwise a structured refusal to hand back to the model. Never raises."""
        try:
            return self._choose(event, {} if payload is None else payload)
        except StatewrightError as exc:  # a guard raising, a payload over the limits
            return self._refusal(event, "invalid_payload", exc.message)

    def _choose(self, event: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(payload, Mapping):
            return self._refusal(event, "invalid_payload", "the payload must be an object")
        if self.chosen is not None:
            return self._refusal(
                event,
                "illegal_transition",
                f"event {self.chosen.event!r} was already chosen: the run is ending",
            )
        if not self._may_fire(event):
            if event in self.run.type.machine.events:
                return self._refusal(event, "forbidden", f"the agent may not fire event {event!r}")
            return self._refusal(event, "illegal_transition", f"no event {event!r}")
        row = self.run.workflow
        try:
            self.run.rt.limits.check(dict(payload), f"payload of {event!r}")
            self.run.type.machine.resolve(self.state, event, row.context, payload)
        except IllegalTransition as exc:
            return self._refusal(event, "illegal_transition", exc.message)
        except (InvalidPayload, InvalidInput) as exc:
            return self._refusal(event, "invalid_payload", exc.message)
        self.chosen = Next(event, dict(payload))
        return {"accepted": True, "event": event}

    def _refusal(self, event: str, error: str, message: str) -> dict[str, Any]:
        return {
            "accepted": False,
            "event": event,
            "error": error,
            "message": message,
            "allowed": self.allowed(),
        }


async def call_hook(hook: Callable[[str], Any], key: str) -> Any:
    """Call a user's hook (``async def`` or plain, which runs in a thread with the caller's
    context) with ``key``; await what it returns when that is awaitable."""
    if inspect.iscoroutinefunction(hook):
        result = await hook(key)
    else:
        result = await asyncio.to_thread(hook, key)
    if inspect.isawaitable(result):
        result = await result
    return result


def reconciler(
    hook: Callable[[str], Any] | None,
    made: Callable[[Any], tuple[JSON, list[JSON], Usage]],
    kind: type,
    what: str,
) -> ModelReconcile | None:
    """An adapter's :data:`ModelReconcile` from the user's ``model_reconcile(key)`` hook
    (sync or async): the framework response it found (an instance of ``kind``, named ``what`` in
    the error) made into a step's result by ``made``, as a fresh one is; None when it found
    none. A hook returning anything else fails the step's reconcile with InvalidInput."""
    if hook is None:
        return None
    ask = hook

    async def recorded(key: str) -> tuple[JSON, list[JSON], Usage] | None:
        found = await call_hook(ask, key)
        if found is None:
            return None
        if not isinstance(found, kind):
            raise InvalidInput(
                f"model_reconcile returned {type(found).__name__}, not {what} or None"
            )
        return made(found)

    return recorded


def _response(result: Any) -> JSON:
    if not isinstance(result, dict) or "response" not in result:
        raise FatalError(f"a model step's stored result is not a model envelope: {result!r:.200}")
    response: JSON = result["response"]
    return response


def tool_name(event: str, taken: Collection[str] = ()) -> str:
    """The tool name offered for ``event``: the event's name where the providers allow
    (``[A-Za-z0-9_-]{1,64}``), other characters as ``_`` (an event name may hold ``.``), made
    unique among ``taken``."""
    base = re.sub(r"[^A-Za-z0-9_-]", "_", event)[:64] or "event"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base[: 64 - len(str(n)) - 1]}_{n}"
    return name


def find_raised(
    exc: BaseException, match: Callable[[BaseException], bool], *, context: bool = False
) -> BaseException | None:
    """The exception ``exc`` is, or was raised from, that ``match`` picks: walking groups'
    members and ``__cause__`` (and ``__context__`` when ``context``), each once. A framework
    wraps what a step raised (in its own error, in a task group's): this finds it again."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if match(e):
            return e
        if isinstance(e, BaseExceptionGroup):
            todo.extend(e.exceptions)
        todo.extend(x for x in (e.__cause__, e.__context__ if context else None) if x is not None)
    return None


__all__ = [
    "ANY_OBJECT",
    "AgentSession",
    "BudgetExceeded",
    "EventTool",
    "ModelCall",
    "ModelReconcile",
    "NoEventChosen",
    "Usage",
    "call_hook",
    "current_key",
    "find_raised",
    "reconciler",
    "tool_name",
]
