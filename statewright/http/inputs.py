"""Request bodies of the HTTP API, and the patterns and checks of what callers send (part of
its OpenAPI document; the responses are in :mod:`statewright.http.schemas`).

Request bodies forbid unknown fields, so a typo is a 422, not a silently ignored option.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from statewright.engine.core import MAX_REASON
from statewright.engine.timers import TIMER_KEY_PATTERN as NEW_TIMER_KEY_PATTERN
from statewright.ids import ID_PATTERN, REF_PATTERN  # one validator for every surface

EVENT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.\-]{0,99}$"
IDEMPOTENCY_KEY_PATTERN = r"^[!-~]{1,255}$"
"""An idempotency key: 1-255 printable ASCII characters, no spaces (the engine's rule)."""
TIMER_KEY_PATTERN = r"^[!-~]{1,200}$"
"""A timer's key as it may be named (1-200 printable ASCII characters); a new one also has
no ``.`` or ``..`` between slashes (:data:`NEW_TIMER_KEY_PATTERN`)."""
NONBLANK = r"[^\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
"""Text with something besides whitespace in it: the engine refuses a reason or an approver's
name that ``str.strip()`` leaves empty. The class lists exactly what ``str.isspace()`` calls
whitespace, not ``\\s``, whose meaning differs between the regex engines that read it:
pydantic's (Rust: U+0085 is a space, U+001C-U+001F are not), JSON Schema's (ECMA-262: U+FEFF
is a space, U+0085 is not) and Python's. With the schema saying exactly so, a schema-valid
request is never refused for it."""


def not_null(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` for an optional query or header parameter: documented as its
    type alone, since an omitted parameter is how HTTP says "none" (``null`` is not a value
    a query string or header can carry)."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if o.get("type") != "null"]
        if len(kept) == 1:
            del schema["anyOf"]
            schema.update(kept[0])


def _valid_unicode(value: Any) -> None:
    """Raise ValueError for a string (value or key, at any depth) that is not valid Unicode.

    JSON may spell lone UTF-16 surrogates (``"\\ud800"``) and Python decodes them into
    strings that no UTF-8 encoder accepts: stored, they would make every later response about
    the workflow fail.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    "text must be valid Unicode (a lone surrogate escape such as \\ud800 is not)"
                ) from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class BodyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _unicode(cls, data: Any) -> Any:
        _valid_unicode(data)
        return data


class StartIn(BodyIn):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"type": "agent_task", "input": {"goal": "Triage issue 7"}, "id": "t-7"}]
        }
    )

    type: str = Field(min_length=1, max_length=200, description="The workflow type (machine).")
    input: dict[str, Any] = Field(default_factory=dict, description="The initial context.")
    id: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="A caller-chosen id makes the start idempotent.",
    )
    tenant: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="Only for tokens that see every tenant; others start in their own.",
    )


class EventIn(BodyIn):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"event": "start", "payload": {}, "expected_version": 1}]}
    )

    event: str = Field(pattern=EVENT_PATTERN)
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="The event's data, checked against the event's `payload_schema` (see "
        "`GET /v1/types/{name}`): 422 invalid_payload when it does not match.",
    )
    expected_version: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="Refuse (409 version_conflict) unless the workflow is at this version.",
    )


class ApprovalIn(BodyIn):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"workflow_id": "t-7", "decision": "approve", "comment": "Go ahead."},
                {"workflow_id": "t-7", "decision": "deny", "approver": "alice"},
            ]
        }
    )

    workflow_id: str = Field(pattern=REF_PATTERN)
    decision: Literal["approve", "deny"]
    approver: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=NONBLANK,
        description="The person deciding, when a service relays it (default: the caller).",
    )
    comment: str | None = Field(default=None, max_length=10_000)
    expected_version: int | None = Field(default=None, ge=1, le=2**31 - 1)


class CancelIn(BodyIn):
    model_config = ConfigDict(json_schema_extra={"examples": [{"reason": "Not needed any more."}]})

    reason: str = Field(min_length=1, max_length=10_000, pattern=NONBLANK)


class InputIn(BodyIn):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"name": "document", "payload": {"pages": 3}}]}
    )

    name: str = Field(pattern=EVENT_PATTERN)
    payload: dict[str, Any] = Field(default_factory=dict)


class ResolveAppliedIn(BodyIn):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"verdict": "applied", "result": {"charge_id": "ch_1"}, "reason": "in the PSP"}
            ]
        }
    )

    verdict: Literal["applied"] = Field(
        description="The external system did apply the step: it returns ``result`` from now on."
    )
    result: Any = Field(
        default=None, description="The step's result as the external system holds it."
    )
    reason: str = Field(
        min_length=1, max_length=10_000, pattern=NONBLANK, description="Why (for the audit)."
    )


class ResolveNotAppliedIn(BodyIn):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"verdict": "not_applied", "reason": "no such charge in the PSP"}]
        }
    )

    verdict: Literal["not_applied"] = Field(
        description="The external system never applied the step: it is safe to run again."
    )
    reason: str = Field(
        min_length=1, max_length=10_000, pattern=NONBLANK, description="Why (for the audit)."
    )


class ResumeIn(BodyIn):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"reason": "the gateway is back up"}]}
    )

    reason: str = Field(
        min_length=1, max_length=MAX_REASON, pattern=NONBLANK, description="Why (kept in the log)."
    )
    reconcile: bool = Field(
        default=False,
        strict=True,
        description="For a workflow parked because a step's outcome is unknown (otherwise "
        "refused, 409 step_unresolved): resume anyway so that the step's reconcile hook is "
        "asked again (it may answer now); without a verdict it parks again.",
    )


class ForkIn(BodyIn):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"version": 7, "reason": "retry after the fix"}]}
    )

    reason: str = Field(
        min_length=1, max_length=MAX_REASON, pattern=NONBLANK, description="Why (kept in the log)."
    )
    version: int | None = Field(
        default=None, ge=1, description="The version to start from (default: the latest)."
    )
    id: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="The new workflow's id (default: `<id>.fork-<version>`).",
    )
    rerun_steps: bool = Field(
        default=False,
        description="Forking from a version after which steps were done runs them **again**, "
        "under the fork's keys (a charge is made twice): refused (409 `steps_would_rerun`, "
        "naming them) unless this is true.",
    )


class MoveIn(BodyIn):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"state": "retrying", "reason": "handler fixed; run it again"}]
        }
    )

    state: str = Field(min_length=1, max_length=200, description="The state to move to.")
    reason: str = Field(
        min_length=1, max_length=MAX_REASON, pattern=NONBLANK, description="Why (kept in the log)."
    )
    expected_version: int | None = Field(
        default=None, ge=0, description="Refuse (409) unless the workflow is at this version."
    )


class ContextPatchIn(BodyIn):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"patch": {"shipping_address": "1 Main St"}, "reason": "customer called"}]
        }
    )

    patch: dict[str, Any] = Field(
        min_length=1,
        description="Top-level context keys to set (a shallow merge).",
        json_schema_extra={"propertyNames": {"minLength": 1}},
    )
    reason: str = Field(
        min_length=1, max_length=MAX_REASON, pattern=NONBLANK, description="Why (kept in the log)."
    )
    expected_version: int | None = Field(
        default=None, ge=0, description="Refuse (409) unless the workflow is at this version."
    )


class TimerIn(BodyIn):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"event": "expire", "after": 3600, "key": "deadline", "keep": True}],
            # Exactly one of after and at (checked below, and told to clients here).
            "oneOf": [
                {"required": ["after"], "properties": {"after": {"type": "number"}}},
                {"required": ["at"], "properties": {"at": {"type": "number"}}},
            ],
        }
    )

    event: str = Field(
        pattern=EVENT_PATTERN,
        description="The event it fires (also the timer's key, unless `key` is given).",
    )
    after: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, description="Seconds from now."
    )
    at: float | None = Field(
        default=None, allow_inf_nan=False, description="An epoch time (seconds)."
    )
    payload: dict[str, Any] | None = Field(default=None, description="The event's payload.")
    key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=NEW_TIMER_KEY_PATTERN,
        description="Its name (default: the event): scheduling the same key replaces it.",
    )
    keep: bool = Field(
        default=False,
        description="Survive leaving the current state (cleared only at a terminal state).",
    )

    @model_validator(mode="after")
    def _one_time(self) -> TimerIn:
        if (self.after is None) == (self.at is None):
            raise ValueError("give exactly one of 'after' (seconds) and 'at' (an epoch time)")
        return self
