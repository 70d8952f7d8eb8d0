"""Commands on what a workflow's agents did: ``conversation`` (their messages), and the usage
line ``show`` prints (:mod:`statewright.agents.usage`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from statewright.cli.loading import with_engine
from statewright.cli.options import Settings
from statewright.cli.output import compact, emit_json, escape, out, table

if TYPE_CHECKING:
    from statewright.engine import Engine

IdArg = Annotated[str, typer.Argument(help="Workflow id.", show_default=False)]


def usage_lines(usage: dict[str, Any]) -> list[str]:
    """``show``'s lines of a workflow's usage: ``200 tokens (160 in, 40 out), 0.004 USD, 2
    model calls`` and the tokens by model."""
    total = usage["total"]
    models = ", ".join(f"{name} {t['tokens']}" for name, t in usage["by_model"].items())
    return [
        f"{total['tokens']} tokens ({total['input_tokens']} in, {total['output_tokens']} out), "
        f"{total['cost']:g} USD, {total['model_calls']} model calls",
        f"tokens by model: {models}",
    ]


async def _conversation(engine: Engine, workflow_id: str) -> list[dict[str, Any]]:
    from statewright.access import LOCAL, Access

    return await Access(engine, LOCAL).conversation(workflow_id)


def conversation(s: Settings, workflow_id: IdArg) -> None:
    """The messages of the workflow's agents' model calls, in order: who said what in which
    state (tool calls named with their arguments)."""
    messages = with_engine(s, lambda e: _conversation(e, workflow_id))
    if s.json:
        emit_json(messages)
        return
    if not messages:
        out.print(f"{escape(workflow_id)}: no agent conversation (no model call recorded)")
        return
    out.print(
        table(
            f"conversation of {workflow_id}",
            ["state", "agent", "role", "message"],
            [
                (
                    f"{m.get('state')} (v{m.get('visit')})",
                    str(m.get("agent")),
                    str(m.get("role")),
                    _text(m),
                )
                for m in messages
            ],
        )
    )


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else compact(content, 200)
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        named = ", ".join(
            f"{c.get('name')}({compact(c.get('args'), 60)})" for c in calls if isinstance(c, dict)
        )
        text = f"{text}\n-> {named}" if text else f"-> {named}"
    answers = message.get("tool_call_id")
    return f"[{answers}] {text}" if answers else text
