"""A scripted, offline ``Model`` for the OpenAI Agents SDK adapter's tests (no network).

:class:`ScriptedModel` answers call ``n`` of a run with ``script[n]``: a list of tool calls
(``("tool", name, args)``) or a text (``"..."``). It counts every call it is asked, and may
fail a chosen call once (a crash while the model was thinking). The SDK's own tracing export is
off for the tests (no API key, no network).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agents import ModelResponse, Usage, set_tracing_disabled
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

set_tracing_disabled(True)

Call = tuple[str, str, dict[str, Any]]
"""``("tool", name, args)``: the model calls tool ``name`` with ``args``."""
Turn = str | list[Call]


class ModelDown(Exception):
    """The scripted model's call failed (as a timeout would)."""


@dataclass
class ScriptedModel(Model):
    """Answers call ``n`` (counted across runs by the inputs it has seen) with ``script[n]``."""

    script: list[Turn]
    model: str = "scripted-1"
    fail_at: set[int] = field(default_factory=set)
    """Calls that fail once (``ModelDown``) the first time they are asked."""
    asked: list[int] = field(default_factory=list)
    """Every call asked, by its number (a call asked twice appears twice)."""
    inputs: list[Any] = field(default_factory=list)

    def number(self, input: str | list[Any]) -> int:
        """The call's number in its run: one past the last scripted turn its input holds."""
        if isinstance(input, str):
            return 0
        turns = [_turn(item) for item in input]
        return 1 + max((t for t in turns if t is not None), default=-1)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        n = self.number(input)
        self.asked.append(n)
        self.inputs.append(input)
        if n in self.fail_at:
            self.fail_at.discard(n)
            raise ModelDown(f"call {n}")
        return response(self.script[n], n)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def _turn(item: Any) -> int | None:
    """The scripted turn an input item came from (its ids carry it), or None."""
    if not isinstance(item, dict):
        return None
    ident = item.get("call_id") if item.get("type") == "function_call" else None
    if ident is None and item.get("role") == "assistant":
        ident = item.get("id")
    if not isinstance(ident, str) or "_" not in ident:
        return None
    return int(ident.split("_")[1])


def response(turn: Turn, n: int) -> ModelResponse:
    """One scripted answer: a text, or tool calls (their call ids name the call and turn)."""
    usage = Usage(requests=1, input_tokens=100 + n, output_tokens=10 + n, total_tokens=110 + 2 * n)
    if isinstance(turn, str):
        text = ResponseOutputText(type="output_text", text=turn, annotations=[])
        message = ResponseOutputMessage(
            id=f"msg_{n}", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=usage, response_id=f"resp_{n}")
    calls: list[Any] = [
        ResponseFunctionToolCall(
            type="function_call",
            id=f"fc_{n}_{i}",
            call_id=f"call_{n}_{i}",
            name=name,
            arguments=json.dumps(args),
        )
        for i, (_, name, args) in enumerate(turn)
    ]
    return ModelResponse(output=calls, usage=usage, response_id=f"resp_{n}")


def tool(name: str, **args: Any) -> list[Call]:
    """A turn of one tool call."""
    return [("tool", name, args)]
