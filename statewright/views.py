"""Plain-JSON views of workflows for the surfaces (HTTP, dashboard, MCP).

A context blob can be large (documents, tool outputs); the views carry a *summary* shaped for
a person or an LLM: the type's ``summary`` hook's text and/or small object when it has one,
else every top-level key but the redacted ones and those starting with ``_``, long strings
cut, long lists shortened, deep nesting elided. The full context stays one request away.

What a caller may not see is taken out by a :class:`~statewright.redaction.Redactor` (which
one is :class:`~statewright.access.Access`'s call); summaries are always redacted.

A workflow's children are shown one line each (:func:`child_view`: nothing in it is redacted)
with counts that say what a parent waits for (:class:`ChildCounts`: "2 of 3 children done").
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statewright.definition.joins import FAILED_STATES
from statewright.engine.compensation_names import UNDO_PREFIX
from statewright.redaction import NO_REDACTION, Redactor, copy_json
from statewright.types import StepRecord, TransitionRecord, WorkflowRow

log = logging.getLogger("statewright.views")

MAX_STRING = 200
MAX_ITEMS = 5
MAX_KEYS = 30
MAX_DEPTH = 2
MAX_SUMMARY_TEXT = 1000
"""Characters a summary hook's text may have; a longer one falls back to the default."""
MAX_SUMMARY_BYTES = 8 * 1024
"""Bytes (as compact JSON) a summary hook's data may have; more falls back to the default."""


def summarize(value: Any, depth: int = 0) -> Any:
    """A bounded copy of a JSON value (see the module docstring)."""
    if isinstance(value, str):
        if len(value) <= MAX_STRING:
            return value
        return value[:MAX_STRING] + f"... ({len(value) - MAX_STRING} more characters)"
    if isinstance(value, list):
        if depth >= MAX_DEPTH:
            return f"[{len(value)} items]"
        head = [summarize(v, depth + 1) for v in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            head.append(f"... ({len(value) - MAX_ITEMS} more items)")
        return head
    if isinstance(value, dict):
        if depth >= MAX_DEPTH and value:
            return f"{{{len(value)} keys}}"
        keys = list(value)
        out = {k: summarize(value[k], depth + 1) for k in keys[:MAX_KEYS]}
        if len(keys) > MAX_KEYS:
            out["..."] = f"{len(keys) - MAX_KEYS} more keys"
        return out
    return value


@dataclass(frozen=True)
class Summary:
    """A workflow's summary: the type's text (None without one) and a JSON value."""

    text: str | None
    data: Any


def default_summary(context: Mapping[str, Any], redactor: Redactor = NO_REDACTION) -> Any:
    """The context shaped by :func:`summarize`, without its redacted keys and the keys
    starting with ``_`` (the workflow's own bookkeeping)."""
    shown = redactor.value(dict(context))
    return summarize({k: v for k, v in shown.items() if not str(k).startswith("_")})


_failed_hooks: set[str] = set()


def summary_of(
    type_name: str,
    context: Mapping[str, Any],
    hook: Callable[[Mapping[str, Any]], Any] | None,
    redactor: Redactor = NO_REDACTION,
) -> Summary:
    """The summary of a workflow of ``type_name``: its ``hook``'s, else the default.

    The hook sees the redacted context and its output is redacted again. A hook that raises,
    or returns anything but a short text and/or a small JSON object, never breaks the read:
    the default summary is shown and the failure logged (with its traceback once per type).
    """
    if hook is None:
        return Summary(None, default_summary(context, redactor))
    try:
        # A copy either way: the hook cannot change the row it was shown.
        shown = redactor.value(dict(context)) if redactor.active else copy_json(dict(context))
        text, data = _shaped(hook(shown))
    except Exception as exc:
        first = type_name not in _failed_hooks
        _failed_hooks.add(type_name)
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "summary hook failed: the default summary is shown",
            exc_info=first,
            extra={
                "action": "summary_hook_failed",
                "workflow_type": type_name,
                "error": f"{type(exc).__name__}: {exc}"[:500],
            },
        )
        return Summary(None, default_summary(context, redactor))
    return Summary(
        None if text is None else redactor.text(text),
        default_summary(context, redactor) if data is None else redactor.value(data),
    )


def _shaped(out: Any) -> tuple[str | None, Any]:
    """A hook's output as ``(text, data)``; raises for anything else."""
    if inspect.isawaitable(out):
        close = getattr(out, "close", None)
        if callable(close):
            close()  # never awaited: no "coroutine was never awaited" warning
        raise TypeError("a summary hook must be a plain function, not async")
    text: Any = None
    data: Any = None
    if isinstance(out, str):
        text = out
    elif isinstance(out, Mapping):
        data = out
    elif isinstance(out, tuple) and len(out) == 2:
        text, data = out
    else:
        raise TypeError(f"expected a str, a mapping or (str, mapping), got {type(out).__name__}")
    if text is not None and not isinstance(text, str):
        raise TypeError(f"the summary text must be a str, not {type(text).__name__}")
    if text is not None and len(text) > MAX_SUMMARY_TEXT:
        raise ValueError(
            f"the summary text has {len(text)} characters (at most {MAX_SUMMARY_TEXT})"
        )
    if data is not None:
        if not isinstance(data, Mapping):
            raise TypeError(f"the summary data must be a mapping, not {type(data).__name__}")
        # Plain JSON only (no NaN, no objects), small: a copy the hook cannot change later.
        encoded = json.dumps(dict(data), allow_nan=False, separators=(",", ":"))
        if len(encoded.encode()) > MAX_SUMMARY_BYTES:
            raise ValueError(f"the summary data is over {MAX_SUMMARY_BYTES} bytes as JSON")
        data = json.loads(encoded)
    return text, data


def workflow_view(
    row: WorkflowRow,
    allowed: list[str] | None = None,
    *,
    summary: Summary | None = None,
    redactor: Redactor = NO_REDACTION,
) -> dict[str, Any]:
    """The workflow for the surfaces. ``summary``: as :func:`summary_of` made it (default:
    the default summary, through ``redactor``); ``redactor`` redacts the rest (the last
    error, the progress report). ``parent``/``parent_key``: the workflow that started this
    one as its child and the key it did so under (None for a workflow nothing started)."""
    if summary is None:
        summary = Summary(None, default_summary(row.context, redactor))
    view: dict[str, Any] = {
        "id": row.id,
        "type": row.type,
        "machine_version": row.machine_version,
        "tenant": row.tenant,
        "state": row.state,
        "terminal": row.terminal,
        "version": row.version,
        "attempts": row.attempts,
        "total_attempts": row.total_attempts,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "state_entered_at": row.state_entered_at,
        "next_due_at": row.next_due_at,
        "leased_by": row.lease_owner,
        "last_error": redactor.opt_text(row.last_error),
        "cancel_requested": row.cancel_requested is not None,
        "parked": row.parked,
        "progress": redactor.mapping(row.progress),
        "summary": summary.data,
        "summary_text": summary.text,
        "parent": row.parent,
        "parent_key": row.parent_key,
    }
    if allowed is not None:
        view["allowed_events"] = allowed
    return view


def transition_view(rec: TransitionRecord, redactor: Redactor = NO_REDACTION) -> dict[str, Any]:
    return {
        "seq": rec.seq,
        "workflow_id": rec.workflow_id,
        "version": rec.version,
        "from_state": rec.from_state,
        "to_state": rec.to_state,
        "event": rec.event,
        "payload": redactor.mapping(rec.payload),
        "actor": rec.actor,
        "context_patch": redactor.mapping(rec.context_patch),
        "at": rec.at,
    }


def step_view(rec: StepRecord, redactor: Redactor = NO_REDACTION) -> dict[str, Any]:
    return {
        "key": rec.key,
        "step": rec.step,
        "status": rec.status,
        "outcome": rec.outcome,
        "result": redactor.value(rec.result),
        "error": redactor.opt_text(rec.error),
        "attempts": rec.attempts,
        "started_at": rec.started_at,
        "finished_at": rec.finished_at,
        "compensation": rec.compensation,
        "compensates": rec.step[len(UNDO_PREFIX) :] if rec.step.startswith(UNDO_PREFIX) else None,
    }


# -- a workflow's children (statewright.engine.children) ------------------------------------

CHILDREN_COUNTED = 100
"""Children a count summary reads at most (one page, in id order): a parent with more is
said to have more (``more``), never scanned whole on a read."""


def succeeded(child: WorkflowRow) -> bool | None:
    """Whether an ended child succeeded, as the engine tells its parent (``child_failed`` for
    an end in ``failed`` or ``cancelled``, ``child_done`` otherwise); None while it runs."""
    if not child.terminal:
        return None
    return child.state not in FAILED_STATES


def child_view(child: WorkflowRow, public_id: Callable[[str], str]) -> dict[str, Any]:
    """One child's line: ``public_id`` names it as the caller knows it."""
    return {
        "id": public_id(child.id),
        "key": child.parent_key,
        "type": child.type,
        "state": child.state,
        "terminal": child.terminal,
        "succeeded": succeeded(child),
        "parked": child.parked,
        "state_entered_at": child.state_entered_at,
    }


@dataclass(frozen=True)
class ChildCounts:
    """How many children a workflow has, and how many ended (counted over the first
    :data:`CHILDREN_COUNTED` of them by id: ``more`` says there are others, not counted)."""

    total: int
    live: int
    ended: int
    failed: int
    """Of the ended ones, those that did not succeed (:func:`succeeded`)."""
    more: bool = False

    @classmethod
    def of(cls, children: Sequence[WorkflowRow], more: bool = False) -> ChildCounts:
        ended = [c for c in children if c.terminal]
        return cls(
            total=len(children),
            live=len(children) - len(ended),
            ended=len(ended),
            failed=sum(1 for c in ended if not succeeded(c)),
            more=more,
        )

    @property
    def text(self) -> str:
        """What a parent waits for, in a few words: ``2 of 3 children done (1 failed)``."""
        of = f"the first {self.total}" if self.more else str(self.total)
        noun = "child" if self.total == 1 and not self.more else "children"
        text = f"{self.ended} of {of} {noun} done"
        if self.failed:
            text += f" ({self.failed} failed)"
        if self.more:
            text += "; more children, not counted"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "live": self.live,
            "ended": self.ended,
            "failed": self.failed,
            "more": self.more,
            "text": self.text,
        }
