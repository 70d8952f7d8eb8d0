"""``/v1/workflows/{id}/conversation``: what the workflow's agents said and were told (the
neutral messages of their model steps, :mod:`statewright.agents.usage`), redacted like step
results (the read: :meth:`~statewright.access.Access.conversation`). ``GET
/v1/workflows/{id}`` carries the token usage (:mod:`statewright.http.api`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from statewright.http.api import _ERRORS, WorkflowId
from statewright.http.deps import AccessDep, KnownQuery
from statewright.http.jsonbody import JSONBody

router = APIRouter(prefix="/v1", responses=_ERRORS, dependencies=[KnownQuery])


class MessageOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    step: str = Field(description="The model step the message came with.")
    agent: str | None = Field(description="The agent (session) that made the call.")
    state: str | None = Field(description="The state the workflow was in.")
    visit: int | None = Field(
        description="The visit of that state (the workflow's version while in it)."
    )
    role: str = Field(description="`user`, `assistant`, `tool` or `system`.")
    content: Any = Field(description="The message's text.")
    tool_calls: list[dict[str, Any]] | None = Field(
        default=None, description="The tools the model asked for: `{id, name, args}` each."
    )
    tool_call_id: str | None = Field(
        default=None, description="Of a tool's answer: the call it answers."
    )


class ConversationOut(BaseModel):
    messages: list[MessageOut] = Field(
        description="Every message of the workflow's agents' model calls, in the order made "
        "(each call's new messages: its prompt and tool results, then the model's answer)."
    )


@router.get(
    "/workflows/{workflow_id}/conversation",
    response_model=ConversationOut,
    summary="What the workflow's agents said and were told",
    description="The messages of the workflow's agents' model calls, as recorded with their "
    "steps (a crash resumes them from there), redacted like step results for callers "
    "without the operator or admin role. Empty for a workflow without agents.",
)
async def conversation(workflow_id: WorkflowId, access: AccessDep) -> JSONBody:
    return JSONBody({"messages": await access.conversation(workflow_id)})
