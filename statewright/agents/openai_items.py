"""The OpenAI Agents SDK's wire forms for the adapter (:mod:`statewright.agents.openai_agents`):
a ``ModelResponse`` to JSON and back, as a model step stores it, and the Responses-API items a
model call adds to the conversation as neutral messages (the shared agents contract's form:
``{"role", "content", "tool_calls"?, "tool_call_id"?}``), readable without the SDK.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

try:
    from agents import ModelResponse
    from agents.items import TResponseOutputItem
    from agents.usage import Usage as SdkUsage
    from pydantic import BaseModel, TypeAdapter
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        "statewright.agents.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'statewright[openai-agents]'"
    ) from exc

from statewright.types import JSON

_OUTPUT = TypeAdapter(list[TResponseOutputItem])
_USAGE = TypeAdapter(SdkUsage)


# -- ModelResponse <-> JSON ----------------------------------------------------------------------


def dump_response(response: ModelResponse) -> JSON:
    """A ``ModelResponse`` as JSON, every field kept (output items as the SDK's models dump
    them: only the fields set, by their wire names)."""
    return {
        "output": _OUTPUT.dump_python(
            response.output, mode="json", by_alias=True, exclude_unset=True
        ),
        "usage": _USAGE.dump_python(response.usage, mode="json"),
        "response_id": response.response_id,
        "request_id": response.request_id,
        "raw_usage": response.raw_usage,
    }


def load_response(data: Mapping[str, Any]) -> ModelResponse:
    """The ``ModelResponse`` :func:`dump_response` stored."""
    return ModelResponse(
        output=_OUTPUT.validate_python(data["output"]),
        usage=_USAGE.validate_python(data["usage"]),
        response_id=data.get("response_id"),
        request_id=data.get("request_id"),
        raw_usage=data.get("raw_usage"),
    )


# -- the conversation in neutral form ------------------------------------------------------------


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the texts of its parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text", part.get("refusal"))
                if isinstance(text, str):
                    parts.append(text)
        return "".join(parts)
    return "" if content is None else str(content)


def _args(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def neutral(item: Any) -> JSON | None:
    """One Responses-API item (input or output) as a neutral message, or None for items that
    are not conversation (reasoning, hosted tool traces)."""
    if isinstance(item, BaseModel):
        item = item.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if not isinstance(item, Mapping):
        return None
    kind = item.get("type")
    if kind == "function_call":
        call = {
            "id": item.get("call_id"),
            "name": item.get("name"),
            "args": _args(item.get("arguments")),
        }
        return {"role": "assistant", "content": "", "tool_calls": [call]}
    if kind == "function_call_output":
        output = item.get("output")
        content = output if isinstance(output, str) else json.dumps(output, default=str)
        return {"role": "tool", "content": content, "tool_call_id": item.get("call_id")}
    role = item.get("role")
    if role is not None and kind in (None, "message"):
        role = "system" if role == "developer" else role
        if role in ("user", "assistant", "system"):
            return {"role": role, "content": _text(item.get("content"))}
    return None


class Conversation:
    """Which input items each model call adds: the SDK sends the whole history every time
    (the original input, then each response's output and each tool's output), so a call's new
    items are those past the previous call's input and output. Advanced on every call, fresh or
    replayed, so that it counts the same on every run."""

    def __init__(self) -> None:
        self.seen = 0

    def new_messages(
        self, instructions: str | None, input: str | list[Any], response: ModelResponse
    ) -> list[JSON]:
        items: list[Any] = (
            [{"role": "user", "content": input}] if isinstance(input, str) else input
        )
        messages: list[JSON] = []
        if self.seen == 0 and instructions:
            messages.append({"role": "system", "content": instructions})
        for item in [*items[self.seen :], *response.output]:
            message = neutral(item)
            if message is not None:
                messages.append(message)
        return messages

    def advance(self, input: str | list[Any], output_items: int) -> None:
        self.seen = (1 if isinstance(input, str) else len(input)) + output_items


def price(model: str, input_tokens: int, output_tokens: int) -> float | None:
    """The call's cost in USD when it can be told: by ``genai-prices`` (installed with
    PydanticAI; optional here) for an OpenAI model it knows; None otherwise (unknown, not
    zero)."""
    try:
        import genai_prices
    except ImportError:
        return None
    try:
        used = genai_prices.Usage(input_tokens=input_tokens, output_tokens=output_tokens)
        return float(genai_prices.calc_price(used, model, provider_id="openai").total_price)
    except Exception:  # a model it does not know (LookupError), or usage it cannot price
        return None


__all__ = ["Conversation", "dump_response", "load_response", "neutral", "price"]
