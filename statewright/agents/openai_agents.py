"""The OpenAI Agents SDK in a state: ``Runner.run`` inside a handler, durable and state-bound.

``await run_agent(run, agent, input)`` runs an SDK ``Agent`` as a state's handler would want it:

- **each model call is a durable step** (:meth:`AgentSession.model_call`): the agent's model is
  wrapped in :class:`DurableModel`, whose ``get_response`` stores the whole ``ModelResponse``
  (output items, usage, ids) as JSON with the call's usage and new messages. When the handler
  runs again after a crash, the SDK's loop runs again from its start and every call already
  answered gets its stored response back: the model is not asked again. A call a crash cut
  is asked again, unless ``model_reconcile`` finds the response a model gateway recorded under
  the step's key (:func:`statewright.agents.core.current_key`, set during the call);
- **each function tool call is a durable step** (:meth:`AgentSession.tool_call`, named by the
  tool and the model's call id, which the stored response keeps stable): a completed tool is
  not run again; the tool reads its step key with :func:`statewright.agents.core.current_key`
  to hand it on as an idempotency key and fencing token. A tool's error is told to the model
  only when nothing can have been applied (see :func:`durable_tool`);
- **the state's events are the agent's only way to move the workflow**: each event with an
  edge out of the state that ``roles`` may fire is offered as a ``FunctionTool`` typed from its
  payload schema. An accepted choice ends the run and ``run_agent`` returns its :class:`Next`;
  a refused one (a guard, a bad payload) is the tool's output, a structured refusal the model
  reads and recovers from. An event not offered (an approval) is an unknown tool to the SDK,
  and the workflow never moves on it;
- **a budget of the type crossed** returns ``Next(budget.event, ...)`` without calling the
  model again.

Like a handler's steps, this asks the agent to be deterministic given its stored answers: the
same instructions, tools and input on every run of one visit (they are, when they come from
the workflow's context).

Not supported, and refused with :class:`~statewright.errors.InvalidInput` rather than run
without durability or with a replay that could differ: handoffs, MCP servers on the agent,
local tools that are not function tools (computer, shell, apply-patch, custom tools), and
tools that need approval (a person's decision is an approval event). The SDK's model retries
(``ModelSettings.retry``) are welcome: a failed call asked again is the same model step, its
next attempt. Guardrails run as the SDK runs them,
outside the ledger: keep them free of effects. Hosted tools (web search, file search...)
run inside the model call and are part of its step. Streaming (``Runner.run_streamed``) is
refused by :class:`DurableModel`; :func:`run_agent` never streams.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

try:
    from agents import (
        Agent,
        FunctionTool,
        Model,
        ModelResponse,
        ModelTracing,
        RunConfig,
        RunContextWrapper,
        Runner,
        Tool,
        ToolsToFinalOutputResult,
    )
    from agents.exceptions import ModelBehaviorError
    from agents.models.default_models import get_default_model
    from agents.models.multi_provider import MultiProvider
    from agents.tool import (
        FunctionToolResult,
        maybe_invoke_function_tool_failure_error_function,
        set_function_tool_failure_error_function,
    )
    from pydantic import BaseModel
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        "statewright.agents.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'statewright[openai-agents]'"
    ) from exc

from statewright.agents.core import (
    AgentSession,
    NoEventChosen,
    find_raised,
    reconciler,
    tool_name,
)
from statewright.agents.openai_items import Conversation, dump_response, load_response, price
from statewright.agents.usage import Usage
from statewright.engine.steps import Run
from statewright.engine.workflow_type import Next, Reconciler
from statewright.errors import BudgetExceeded, InvalidInput
from statewright.types import JSON

DEFAULT_MAX_TURNS = 10
"""The SDK's own default: model calls one run may make before ``MaxTurnsExceeded``."""

HOSTED_TOOLS = frozenset(
    {
        "FileSearchTool",
        "WebSearchTool",
        "CodeInterpreterTool",
        "HostedMCPTool",
        "ImageGenerationTool",
        "ToolSearchTool",
    }
)
"""Tools the model's provider runs inside the model call: their effects are the model step's."""

# -- the durable model ---------------------------------------------------------------------------


class DurableModel(Model):
    """A ``Model`` whose every ``get_response`` is a durable model step of ``session``: the
    response is stored with its usage and messages and, on a later run of the handler, given
    back from the ledger instead of asking ``model`` again."""

    def __init__(
        self,
        session: AgentSession,
        model: Model,
        model_name: str,
        *,
        failures: list[BaseException],
        reconcile: ModelReconcileHook | None = None,
    ) -> None:
        self.session = session
        self.model = model
        self.model_name = model_name
        self.reconcile = reconcile
        self.conversation = Conversation()
        self.failures = failures

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Tool],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        def made(response: ModelResponse) -> tuple[JSON, list[JSON], Usage]:
            messages = self.conversation.new_messages(system_instructions, input, response)
            used = response.usage
            usage = Usage(
                model=self.model_name,
                input_tokens=used.input_tokens,
                output_tokens=used.output_tokens,
                cost=price(self.model_name, used.input_tokens, used.output_tokens),
            )
            return dump_response(response), messages, usage

        async def call() -> tuple[JSON, list[JSON], Usage]:
            response = await self.model.get_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )
            return made(response)

        reconcile = reconciler(self.reconcile, made, ModelResponse, "an agents.ModelResponse")
        try:
            stored = await self.session.model_call(call, reconcile=reconcile)
        except BaseException as exc:
            self.failures.append(exc)
            raise
        response = load_response(stored)
        self.conversation.advance(input, len(response.output))
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise InvalidInput(
            "a durable model call is not streamed: run the agent with run_agent "
            "(Runner.run), not Runner.run_streamed"
        )


ModelReconcileHook = Callable[[str], Awaitable[ModelResponse | None] | ModelResponse | None]
"""``model_reconcile(key) -> agents.ModelResponse | None``: the response recorded for a model
step's key (see :func:`run_agent`)."""


# -- tools ---------------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    """A tool's output as JSON, so that a replay gives the SDK exactly what the first run did:
    JSON values as they are, pydantic models (the SDK's structured outputs included) dumped,
    anything else as its text (which is what the SDK would send the model)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, list) and any(isinstance(v, BaseModel) for v in value):
        return [_jsonable(v) for v in value]
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


def durable_tool(
    session: AgentSession,
    tool: FunctionTool,
    *,
    safe_to_repeat: bool,
    reconcile: Reconciler | None,
    failures: list[BaseException],
) -> FunctionTool:
    """A copy of ``tool`` whose every invocation is a durable tool step of ``session`` (named by
    the tool and the model's call id).

    An error of the tool becomes the message the SDK would give the model (the tool's
    ``failure_error_function``), stored as the step's result so that a re-run replays it, only
    when nothing can have been applied: the model's arguments were refused before the tool
    ran (``ModelBehaviorError``), the error proves the request never left (the type's
    ``RetryPolicy.outcome``: ``RequestNotSent``, connection refused...), or the tool is
    ``safe_to_repeat``. Any other error (a timeout of the tool's ``timeout_seconds`` too) fails
    the step, its outcome unknown, and the handler with it: the re-run reconciles the step
    before anything runs again (or parks the workflow), where a message would have let the
    model call the tool again and apply twice.
    """
    wrapped = copy.copy(tool)
    set_function_tool_failure_error_function(wrapped, None)  # its errors reach the step
    # The tool's timeout bounds the call inside the step: the SDK's, around the step, would
    # cancel the step itself and tell the model, its outcome unknown.
    timeout, wrapped.timeout_seconds = wrapped.timeout_seconds, None
    invoke = wrapped.on_invoke_tool
    policy = session.run.type.retry

    async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
        async def action(key: Any) -> Any:
            try:
                call = invoke(ctx, arguments)
                output = await (call if timeout is None else asyncio.wait_for(call, timeout))
            except Exception as exc:
                told = safe_to_repeat or isinstance(exc, ModelBehaviorError)
                if not (told or policy.outcome(exc) == "not_applied"):
                    raise
                message = await maybe_invoke_function_tool_failure_error_function(
                    function_tool=tool, context=ctx, error=exc
                )
                if message is None:  # the tool's errors are to be raised
                    raise
                return message
            return _jsonable(output)

        try:
            return await session.tool_call(
                tool.name,
                ctx.tool_call_id,
                action,
                safe_to_repeat=safe_to_repeat,
                reconcile=reconcile,
            )
        except BaseException as exc:
            failures.append(exc)
            raise

    wrapped.on_invoke_tool = on_invoke_tool
    return wrapped


def event_tool(
    session: AgentSession, name: str, description: str, parameters: JSON, *, tool: str
) -> FunctionTool:
    """The tool (named ``tool``) that offers event ``name``: its arguments are the payload;
    its output is :meth:`AgentSession.choose`'s answer (accepted, or a structured refusal)."""

    async def on_invoke_tool(ctx: Any, arguments: str) -> str:
        try:
            payload = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            answer: Mapping[str, Any] = {
                "accepted": False,
                "event": name,
                "error": "invalid_payload",
                "message": "the arguments must be a JSON object (the event's payload)",
            }
        else:
            answer = session.choose(name, payload)
        return json.dumps(answer, default=str)

    schema = dict(parameters)
    schema.setdefault("type", "object")
    return FunctionTool(
        name=tool,
        description=description,
        params_json_schema=schema,
        on_invoke_tool=on_invoke_tool,
        strict_json_schema=False,
    )


ToolUseBehavior = Callable[
    [RunContextWrapper[Any], list[FunctionToolResult]], Awaitable[ToolsToFinalOutputResult]
]


def _stop_when_chosen(
    session: AgentSession, events: frozenset[str], original: Any
) -> ToolUseBehavior:
    """The agent's ``tool_use_behavior`` with one rule first: an accepted event ends the run.
    The agent's own behaviour applies to its own tools' results."""

    async def decide(
        ctx: RunContextWrapper[Any], results: list[FunctionToolResult]
    ) -> ToolsToFinalOutputResult:
        if session.chosen is not None:
            return ToolsToFinalOutputResult(
                is_final_output=True, final_output=session.chosen.event
            )
        own = [r for r in results if r.tool.name not in events]
        if not own or original == "run_llm_again":
            return ToolsToFinalOutputResult(is_final_output=False)
        if original == "stop_on_first_tool":
            return ToolsToFinalOutputResult(is_final_output=True, final_output=own[0].output)
        if isinstance(original, Mapping):
            names = original.get("stop_at_tool_names", [])
            for r in own:
                if r.tool.name in names:
                    return ToolsToFinalOutputResult(is_final_output=True, final_output=r.output)
            return ToolsToFinalOutputResult(is_final_output=False)
        verdict = original(ctx, own)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return verdict  # type: ignore[no-any-return]

    return decide


# -- the run -------------------------------------------------------------------------------------


def _model_of(agent: Agent[Any], run_config: RunConfig | None) -> tuple[Model, str]:
    """The model the SDK would use for ``agent`` (the run config's overrides the agent's) and
    its name for usage."""
    chosen = run_config.model if run_config is not None and run_config.model is not None else None
    chosen = chosen if chosen is not None else agent.model
    if isinstance(chosen, Model):
        name = getattr(chosen, "model", None)
        return chosen, name if isinstance(name, str) and name else type(chosen).__name__
    name = chosen or get_default_model()
    provider = run_config.model_provider if run_config is not None else MultiProvider()
    return provider.get_model(name), name


def _check_agent(agent: Agent[Any]) -> None:
    """Refuse what would run outside the ledger or break its replay."""
    if agent.handoffs:
        raise InvalidInput(
            f"agent {agent.name!r} has handoffs: run_agent runs one agent in a state "
            "(model each hand-off as an event to another state)"
        )
    if agent.mcp_servers:
        raise InvalidInput(
            f"agent {agent.name!r} has MCP servers: their tools would not be durable steps; "
            "wrap the calls you need in function tools"
        )
    for tool in agent.tools:
        if isinstance(tool, FunctionTool) and tool.needs_approval is not False:
            raise InvalidInput(
                f"tool {tool.name!r} of agent {agent.name!r} needs approval: a person's "
                "decision is an approval event of the machine, not an interruption of the run"
            )
        if not isinstance(tool, FunctionTool) and type(tool).__name__ not in HOSTED_TOOLS:
            raise InvalidInput(
                f"tool {getattr(tool, 'name', tool)!r} of agent {agent.name!r} runs locally "
                "but is not a function tool: it cannot be a durable step"
            )


async def run_agent(
    run: Run,
    agent: Agent[Any],
    input: str | list[Any],
    *,
    name: str = "agent",
    roles: Iterable[str] = ("agent",),
    events: Iterable[str] | None = None,
    context: Any = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    run_config: RunConfig | None = None,
    safe_to_repeat: Iterable[str] = (),
    reconcilers: Mapping[str, Reconciler] | None = None,
    on_no_event: str | None = None,
    model_reconcile: ModelReconcileHook | None = None,
) -> Next:
    """Run ``agent`` on ``input`` as this state's handler (``Runner.run`` under the hood) and
    return the event it chose, as the handler's :class:`Next`.

    Args:
        run: the handler's run.
        agent: an SDK ``Agent``; it is cloned, never changed: its model wrapped in
            :class:`DurableModel`, its function tools in durable steps, the state's events
            added as tools (a name taken by both is refused: InvalidInput).
        input: the user input, as ``Runner.run`` takes it (deterministic per visit).
        name: the agent's name in step names (``<name>.v<visit>.model.<n>``...): two agents in
            one state need two names.
        roles: whose right the agent fires events with; ``events`` narrows the offer further.
        context: passed to ``Runner.run``.
        max_turns: passed to ``Runner.run``.
        run_config: passed to ``Runner.run`` (its ``model``, if set, is the model wrapped).
            Without a run config, a tool name the model makes up (an event not offered) gets
            the SDK's "not found" message back
            (``tool_not_found_behavior="return_error_to_model"``) instead of failing the run.
        safe_to_repeat: names of tools that may run again when a crash left their outcome
            unknown; any other such tool is reconciled (``reconcilers[name]``) or parks the
            workflow, like any step (see :meth:`Run.step`).
        on_no_event: the event to fire, with ``{"output": <final output>}`` as payload when
            its schema takes it, when the agent finishes without choosing one; None (the
            default) raises :class:`NoEventChosen` (fatal: a re-run would replay the same
            answers and end the same way).
        model_reconcile: ``model_reconcile(key) -> agents.ModelResponse | None`` (sync or
            async), asked for a model call a crash cut (its step found *executing*): the
            response recorded for the step's key, which the call sent along
            (:func:`~statewright.agents.core.current_key`, readable by the model client), or
            None. A response found is the step's result, and the model is not asked again. A
            real deployment plugs in its model gateway or proxy that records responses by
            idempotency key; without one (None) a cut call is asked again.

    Returns the chosen ``Next(event, payload)``; when a budget of the type is used up, the
    budget's event (:meth:`AgentSession.budget_next`) without calling the model again.
    """
    _check_agent(agent)
    session = AgentSession(run, name=name, roles=roles, events=events)
    offered = session.event_tools()
    names: dict[str, str] = {}  # tool name -> event
    for t in offered:
        names[tool_name(t.name, names)] = t.name
    event_names = frozenset(names)
    clash = sorted(event_names & {t.name for t in agent.tools})
    if clash:
        raise InvalidInput(
            f"agent {agent.name!r} has tools named like the state's events: {clash}"
        )
    failures: list[BaseException] = []
    model, model_name = _model_of(agent, run_config)
    repeatable = frozenset(safe_to_repeat)
    hooks = dict(reconcilers or {})
    tools: list[Any] = [
        durable_tool(
            session,
            tool,
            safe_to_repeat=tool.name in repeatable,
            reconcile=hooks.get(tool.name),
            failures=failures,
        )
        if isinstance(tool, FunctionTool)
        else tool
        for tool in agent.tools
    ]
    tools += [
        event_tool(session, t.name, t.description, t.parameters, tool=name)
        for name, t in zip(names, offered, strict=True)
    ]
    bound = agent.clone(
        model=DurableModel(
            session, model, model_name, failures=failures, reconcile=model_reconcile
        ),
        tools=tools,
        tool_use_behavior=_stop_when_chosen(session, event_names, agent.tool_use_behavior),
    )
    # A name the model makes up (an event not offered, an approval) is told to the model, not
    # raised: raising would fail the handler, and its re-run would replay the same mistake.
    config = (
        RunConfig(tool_not_found_behavior="return_error_to_model")
        if run_config is None
        else dataclasses.replace(run_config, model=None)
    )
    try:
        result = await Runner.run(
            bound, input, context=context, max_turns=max_turns, run_config=config
        )
    except Exception as exc:
        # The SDK wraps a tool's exception (UserError); the statewright one is re-raised as it
        # is, so that the worker sees a lost lease, a cancel or an unknown outcome for what it is.
        cause = _origin(exc, failures)
        if isinstance(cause, BudgetExceeded):
            return session.budget_next(cause)
        if cause is not None and cause is not exc:
            raise cause from None
        raise
    if session.chosen is not None:
        return session.chosen
    return session.no_event(on_no_event, _jsonable(result.final_output))


def _origin(exc: BaseException, failures: list[BaseException]) -> BaseException | None:
    """The failure of a model or tool step that ``exc`` is, or was raised from (the SDK wraps
    a tool's); None when it comes from elsewhere (a step's error the SDK retried and got past
    is not it)."""
    ours = {id(f) for f in failures}
    return find_raised(exc, lambda e: id(e) in ours, context=True)


__all__ = [
    "DEFAULT_MAX_TURNS",
    "DurableModel",
    "NoEventChosen",
    "dump_response",
    "load_response",
    "run_agent",
    "tool_name",
]
