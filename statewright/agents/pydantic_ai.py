"""Run a PydanticAI agent inside a state's handler, durably and only through the state's events.

Like PydanticAI's own durable-execution wrappers (``TemporalAgent``, ``DBOSAgent``), the agent's
model is wrapped so that each request is a durable step, and its toolsets so that each tool
call is one (:class:`~statewright.agents.core.AgentSession`). After a crash the handler runs
again from its start: the agent loop replays, every completed model response and tool result
comes back from the ledger (the model is not asked again, no tool effect repeats), and the
conversation is rebuilt from them as it was. A request a crash cut (its step left *executing*)
is asked again, unless ``model_reconcile`` finds the response a model gateway recorded under
the step's key (:func:`~statewright.agents.core.current_key`, set during the request).

What is new is the state: the workflow's events that leave the state, and that the agent's
roles may fire (approval events never), are offered to the model as tools typed from their
payload schemas. The model moves the workflow only by calling one: when the choice is legal
now the agent's run ends and the handler returns that :class:`~statewright.Next`; an illegal
one (a guard fails, a bad payload) comes back to the model as a structured refusal and the
loop goes on; an event not offered is an unknown tool to PydanticAI (its usual retry
prompt)::

    from statewright.agents.pydantic_ai import StatewrightAgent

    reviewer = StatewrightAgent(agent, roles=("agent",), tools={"pay": ToolOptions(reconcile=...)})

    async def reviewing(run: Run) -> Next:
        return await reviewer.run(run, f"Review refund {run.context['order']}")

A reached budget of the workflow's type (:class:`~statewright.engine.budgets.Budget`) ends the
run with the budget's event (its payload: what the budget counted), the model not called. An
agent that ends with an output and no event chosen raises
:class:`~statewright.agents.core.NoEventChosen` (fatal: a re-run would replay the same end),
unless ``on_no_event`` names the event to fire then (with ``{"output": ...}`` as payload when
its schema takes it).

Tools run one at a time (PydanticAI's ``sequential`` mode), each a step named by the model
call that asked for it and its place in that response: stable across replays whatever ids a
provider gives. A tool's step is not ``safe_to_repeat`` unless its :class:`ToolOptions` says so:
a crash inside it is reconciled (``reconcile``) or parks the workflow. A tool reads its step's
key with :func:`~statewright.agents.core.current_key` (an idempotency key and fencing token).
Its result is stored as JSON (``pydantic_core.to_jsonable_python``): a replay hands the model
that JSON form. ``ModelRetry`` from a tool is stored too, and raised again on replay.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

try:
    import pydantic_core
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models import (
        CompletedStreamedResponse,
        Model,
        ModelRequestParameters,
        StreamedResponse,
        infer_model,
    )
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import RunContext, Tool
    from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
except ImportError as exc:  # pragma: no cover - the extra is installed in the test env
    raise ImportError(
        "statewright.agents.pydantic_ai needs PydanticAI: pip install 'statewright[pydantic-ai]'"
    ) from exc

from statewright.agents.core import AgentSession, find_raised, reconciler, tool_name
from statewright.engine.llm_usage import Usage
from statewright.engine.steps import Run
from statewright.engine.workflow_type import Next, Reconciler
from statewright.errors import BudgetExceeded, InvalidInput
from statewright.types import JSON

ModelReconcileHook = Callable[[str], Awaitable[ModelResponse | None] | ModelResponse | None]
"""``model_reconcile(key) -> ModelResponse | None``: the response recorded for a model step's
key (see :class:`StatewrightAgent`)."""

RETRY_KEY = "$model_retry"
"""A tool step's stored result when the tool raised ``ModelRetry`` (its message)."""


@dataclass(frozen=True)
class ToolOptions:
    """How one tool's calls run as steps (see :meth:`Run.step`)."""

    safe_to_repeat: bool = False
    """A call cut by a crash may simply run again (a read, an idempotent write)."""
    reconcile: Reconciler | None = None
    """Asked, with the step's key, whether a call cut by a crash took effect."""


@dataclass
class StatewrightAgent:
    """A PydanticAI ``Agent`` to run in state handlers (see the module docstring).

    Args:
        agent: the PydanticAI agent (its model, tools, instructions, output type).
        name: the agent's name in step names (``{name}.v{visit}.model.{n}``).
        roles: the roles the agent fires events with.
        events: only these events are offered (None: all the roles may fire).
        tools: per-tool step options, by tool name.
        on_no_event: the event to fire when the agent ends without choosing one (None:
            :class:`NoEventChosen`).
        model_reconcile: ``model_reconcile(key) -> ModelResponse | None`` (sync or async),
            asked for a model call a crash cut (its step found *executing*): the response a
            gateway recorded for the step's key, which the model call sent along
            (:func:`~statewright.agents.core.current_key`), or None. A response found is the
            step's result, as if the call had returned it, and the model is not asked again.
            A real deployment plugs in its model gateway or proxy that records responses by
            idempotency key; without one (None, the default) a cut call is asked again.
    """

    agent: Agent[Any, Any]
    name: str = "agent"
    roles: Sequence[str] = ("agent",)
    events: Sequence[str] | None = None
    tools: Mapping[str, ToolOptions] = field(default_factory=dict)
    on_no_event: str | None = None
    model_reconcile: ModelReconcileHook | None = None

    async def run(
        self,
        run: Run,
        prompt: str | None,
        *,
        deps: Any = None,
        model: Model | str | None = None,
        message_history: Sequence[ModelMessage] | None = None,
        **iter_options: Any,
    ) -> Next:
        """Run the agent on ``prompt`` in ``run``'s state; return the event it chose."""
        session = AgentSession(run, name=self.name, roles=self.roles, events=self.events)
        base = infer_model(model if model is not None else _agent_model(self.agent))
        durable = _DurableModel(base, session, self.model_reconcile)
        toolsets: list[AbstractToolset[Any]] = [
            _DurableToolset(ts, session, durable, self.tools) for ts in self.agent.toolsets
        ]
        toolsets.append(_event_toolset(session))
        try:
            with (
                self.agent.override(model=durable, toolsets=toolsets, tools=[]),
                Agent.parallel_tool_call_execution_mode("sequential"),
            ):
                output = await self._loop(session, prompt, deps, message_history, iter_options)
        except BaseException as exc:
            found = _budget(exc)
            if found is None:
                raise
            return session.budget_next(found)
        if session.chosen is not None:
            return session.chosen
        return session.no_event(self.on_no_event, _jsonable(output))

    async def _loop(
        self,
        session: AgentSession,
        prompt: str | None,
        deps: Any,
        history: Sequence[ModelMessage] | None,
        options: Mapping[str, Any],
    ) -> Any:
        async with self.agent.iter(
            prompt, deps=deps, message_history=history, **options
        ) as agent_run:
            async for node in agent_run:
                if session.chosen is not None and Agent.is_model_request_node(node):
                    return None  # an event was accepted: the model is not asked again
            return None if agent_run.result is None else agent_run.result.output


async def run_agent(
    run: Run,
    agent: Agent[Any, Any],
    prompt: str | None,
    *,
    name: str = "agent",
    roles: Sequence[str] = ("agent",),
    events: Sequence[str] | None = None,
    tools: Mapping[str, ToolOptions] | None = None,
    on_no_event: str | None = None,
    model_reconcile: ModelReconcileHook | None = None,
    deps: Any = None,
    **options: Any,
) -> Next:
    """Run ``agent`` on ``prompt`` in ``run``'s state: :meth:`StatewrightAgent.run` in one
    call."""
    wrapped = StatewrightAgent(
        agent, name, roles, events, tools or {}, on_no_event, model_reconcile
    )
    return await wrapped.run(run, prompt, deps=deps, **options)


# -- the model -----------------------------------------------------------------------------------


class _DurableModel(WrapperModel):
    """The agent's model, each request a durable step of the session."""

    def __init__(
        self,
        wrapped: Model,
        session: AgentSession,
        reconcile: ModelReconcileHook | None = None,
    ) -> None:
        super().__init__(wrapped)
        self.session = session
        self.reconcile = reconcile
        self.seen = 0
        """Messages of the history already stored with an earlier model step."""
        self.call_ids: dict[str, str] = {}
        """A tool call's id -> its step's id: ``{model ordinal}-{place in the response}``."""
        self.ordinal = 0

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        new = messages[self.seen :]

        def made(response: ModelResponse) -> tuple[JSON, list[JSON], Usage]:
            return _dump(response), neutral([*new, response]), _usage(response, self.wrapped)

        async def call() -> tuple[JSON, list[JSON], Usage]:
            return made(
                await self.wrapped.request(messages, model_settings, model_request_parameters)
            )

        reconcile = reconciler(self.reconcile, made, ModelResponse, "a pydantic_ai ModelResponse")
        stored = await self.session.model_call(call, reconcile=reconcile)
        response = _load(stored)
        self.seen = len(messages) + 1
        ordinal, self.ordinal = self.ordinal, self.ordinal + 1
        for place, part in enumerate(response.parts):
            if isinstance(part, ToolCallPart):
                self.call_ids[part.tool_call_id] = f"{ordinal}-{place}"
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        # A step stores a whole response: streaming replays it as events once it is stored.
        response = await self.request(messages, model_settings, model_request_parameters)
        yield CompletedStreamedResponse(
            response, model_request_parameters=model_request_parameters, replay_events=True
        )


def _agent_model(agent: Agent[Any, Any]) -> Model | str:
    model = agent.model
    if model is None:
        raise InvalidInput("the agent has no model: give the agent one, or pass model=")
    return model


def _dump(response: ModelResponse) -> JSON:
    [dumped] = ModelMessagesTypeAdapter.dump_python([response], mode="json")
    return dict(dumped)


def _load(stored: JSON) -> ModelResponse:
    [message] = ModelMessagesTypeAdapter.validate_python([stored])
    if not isinstance(message, ModelResponse):
        raise InvalidInput("a stored model step does not hold a PydanticAI ModelResponse")
    return message


def _usage(response: ModelResponse, model: Model) -> Usage:
    cost: float | None
    try:
        cost = float(response.cost().total_price)
    except Exception:  # no price known for the model (or no usage reported)
        cost = None
    return Usage(
        response.model_name or model.model_name or "unknown",
        int(response.usage.input_tokens or 0),
        int(response.usage.output_tokens or 0),
        cost,
    )


def neutral(messages: Sequence[ModelMessage]) -> list[JSON]:
    """PydanticAI messages in the contract's neutral form (role, content, tool calls)."""
    out: list[JSON] = []
    for message in messages:
        if isinstance(message, ModelResponse):
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            entry: JSON = {"role": "assistant", "content": text}
            calls = [
                {"id": p.tool_call_id, "name": p.tool_name, "args": p.args_as_dict()}
                for p in message.parts
                if isinstance(p, ToolCallPart)
            ]
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            continue
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                out.append({"role": "system", "content": part.content})
            elif isinstance(part, UserPromptPart):
                content = part.content if isinstance(part.content, str) else str(part.content)
                out.append({"role": "user", "content": content})
            elif isinstance(part, ToolReturnPart):
                out.append(
                    {
                        "role": "tool",
                        "content": part.model_response_str(),
                        "tool_call_id": part.tool_call_id,
                    }
                )
            elif isinstance(part, RetryPromptPart):
                entry = {"role": "tool" if part.tool_name else "user"}
                entry["content"] = part.model_response()
                if part.tool_name:
                    entry["tool_call_id"] = part.tool_call_id
                out.append(entry)
    return out


# -- the tools -----------------------------------------------------------------------------------


@dataclass
class _DurableToolset(WrapperToolset[Any]):
    """One of the agent's toolsets, each call a durable step of the session."""

    session: AgentSession = field(kw_only=True)
    model: _DurableModel = field(kw_only=True)
    options: Mapping[str, ToolOptions] = field(kw_only=True)

    def __init__(
        self,
        wrapped: AbstractToolset[Any],
        session: AgentSession,
        model: _DurableModel,
        options: Mapping[str, ToolOptions],
    ) -> None:
        super().__init__(wrapped)
        self.session, self.model, self.options = session, model, options

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        opts = self.options.get(name, ToolOptions())
        call_id = ctx.tool_call_id or ""
        index = self.model.call_ids.get(call_id, call_id.replace(":", "_") or "x")

        async def action(key: Any) -> Any:
            try:
                result = await self.wrapped.call_tool(name, tool_args, ctx, tool)
            except ModelRetry as exc:
                return {RETRY_KEY: exc.message}
            return pydantic_core.to_jsonable_python(result)

        result = await self.session.tool_call(
            name, index, action, safe_to_repeat=opts.safe_to_repeat, reconcile=opts.reconcile
        )
        if isinstance(result, dict) and set(result) == {RETRY_KEY}:
            raise ModelRetry(str(result[RETRY_KEY]))
        return result


def _event_toolset(session: AgentSession) -> FunctionToolset[Any]:
    """The state's offered events as tools: calling one is :meth:`AgentSession.choose`.

    A tool is named as its event where the providers allow (``[A-Za-z0-9_-]{1,64}``), with
    other characters as ``_`` otherwise (an event name may hold ``.``)."""
    tools: list[Tool[Any]] = []
    taken: set[str] = set()
    for event in session.event_tools():
        name = tool_name(event.name, taken)
        taken.add(name)

        def choose(_event: str = event.name, **payload: Any) -> dict[str, Any]:
            return session.choose(_event, payload)

        schema = dict(event.parameters)
        schema.setdefault("type", "object")
        tools.append(Tool.from_schema(choose, name, event.description, schema))
    return FunctionToolset(tools)


def _budget(exc: BaseException) -> BudgetExceeded | None:
    """The BudgetExceeded ``exc`` is or was raised from (directly, or in a group)."""
    found = find_raised(exc, lambda e: isinstance(e, BudgetExceeded))
    return found if isinstance(found, BudgetExceeded) else None


def _jsonable(value: Any) -> Any:
    try:
        return pydantic_core.to_jsonable_python(value)
    except Exception:
        return repr(value)


__all__ = [
    "ModelReconcileHook",
    "StatewrightAgent",
    "ToolOptions",
    "neutral",
    "run_agent",
    "tool_name",
]
