"""A workflow as an LLM should see it: enough to decide the next action, nothing raw.

The view answers "where is it, what may I do now, what is it waiting for, what has been done"
from the durable row, the step ledger, the transition log and its children alone, so a model
with a fresh context window (after a crash, a restart or a hand-over) can continue from one
call.

What the workflow's type redacts never shows here, whoever asks (the server's
:class:`Access` does not see secrets): not in the summary, step results or errors, payloads,
progress or the last error.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from statewright.access import Access
from statewright.engine import llm_usage
from statewright.mcp_server.catalogue import WAIT, Catalogue
from statewright.redaction import Redactor
from statewright.types import StepRecord, TimerRecord, TransitionRecord, WorkflowRow
from statewright.views import summarize

RECENT = 5
"""How many of the last transitions the view carries."""
STEPS_SHOWN = 200
"""How many steps (the first, by start) the view carries at most."""


def iso(at: float | None) -> str | None:
    if at is None:
        return None
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def allowed_actions(access: Access, catalogue: Catalogue, row: WorkflowRow) -> list[str]:
    """The tool names the caller may call on ``row`` now."""
    return [
        t.name
        for e in access.allowed_for(row)
        if (t := catalogue.event_tool(row.type, e)) is not None
    ]


async def automatic(
    access: Access, row: WorkflowRow, timers: list[TimerRecord] | None = None
) -> bool:
    """Whether a worker runs (or will soon run) ``row``'s state handler: a step is under way or
    due, or a retry of it is scheduled. A workflow that only waits for a timer (an approval
    reminder next day) or an event is not automatic."""
    if row.terminal:
        return False
    if row.lease_owner is not None:
        return True
    wtype = access.type_of(row.type, row.machine_version)
    if row.state not in wtype.handlers or row.next_due_at is None:
        return False
    if timers is None:
        timers = await access.timers(access.public_id(row.id), row=row)
    # next_due_at is the earliest of the handler's run and the timers: a timer's own due
    # time means nothing but that timer is pending.
    return all(row.next_due_at < t.due_at for t in timers)


async def family(access: Access, row: WorkflowRow) -> dict[str, Any]:
    """``parent`` (its id and the key it started this one under) for a child, and
    ``children`` (how many, how many ended: what a parent waits for) for a parent; empty for
    a workflow that is neither. The children are counted from one page of them."""
    out: dict[str, Any] = {}
    if row.parent is not None:
        out["parent"] = {"workflow_id": access.public_id(row.parent), "key": row.parent_key}
    counts = await access.child_counts(row)
    if counts is not None and counts.total:
        out["children"] = counts.to_dict()
    return out


async def state_view(access: Access, catalogue: Catalogue, row: WorkflowRow) -> dict[str, Any]:
    """The LLM-shaped view of one workflow (see the module docstring)."""
    machine = access.known_machine(row)
    kin = await family(access, row)
    if machine is None:
        return _unregistered_view(access, row) | kin
    # As stored: the view redacts what it shows with one redactor learnt from all of it.
    known_as = access.public_id(row.id)
    steps = await access.steps(known_as, limit=STEPS_SHOWN + 1, row=row, redact=False)
    since = max(0, row.version - RECENT)
    recent = await access.history(known_as, since, row=row, redact=False)
    actions = allowed_actions(access, catalogue, row)
    timers = [] if row.terminal else await access.timers(known_as, row=row)
    working = await automatic(access, row, timers)
    others = _others(access, row)
    red = access.redactor(
        row,
        *(s.result for s in steps),
        *(r.payload for r in recent),
        *(r.context_patch for r in recent),
    )
    summary = access.summary(row)
    view: dict[str, Any] = {
        "workflow_id": access.public_id(row.id),
        "type": row.type,
        "state": row.state,
        "state_description": machine.states[row.state].description,
        "terminal": row.terminal,
        "version": row.version,
        "allowed_actions": [_action(catalogue, name) for name in actions],
        # True while a worker runs (or is about to run) this state's step: wait for it.
        "automatic": working,
        "waiting_for": _waiting_for(access, row, actions, others, working, kin.get("children")),
        "next": _next(row, actions, working),
    }
    view |= kin
    if timers:
        view["timers"] = [{"event": t.event, "due_at": iso(t.due_at)} for t in timers]
    if others:
        view["others_may_fire"] = others
    if row.progress is not None:
        view["progress"] = summarize(red.mapping(row.progress))
    if row.parked is not None:
        view["parked"] = row.parked
    if row.last_error:
        view["last_error"] = access.public_text(red.text(row.last_error))
    if row.cancel_requested is not None:
        view["cancel_requested"] = True
    if found := access.search_view(row):
        view["search_attributes"] = found
    if summary.text is not None:
        view["summary_text"] = summary.text
    view["summary"] = summary.data
    view["completed_steps"] = [
        _step(access, s, red) for s in steps[:STEPS_SHOWN] if s.status == "done"
    ]
    unfinished = [_step(access, s, red) for s in steps[:STEPS_SHOWN] if s.status != "done"]
    if unfinished:
        view["unfinished_steps"] = unfinished
    if len(steps) > STEPS_SHOWN:
        view["more_steps"] = f"only the first {STEPS_SHOWN} steps are shown"
    # Its agents' tokens and cost: from the steps read above when they are all of them.
    used = llm_usage.report(steps) if len(steps) <= STEPS_SHOWN else await access.usage(row)
    if used is not None:
        view["usage"] = used
    view["recent_transitions"] = [transition(r, red, access) for r in recent]
    view["updated_at"] = iso(row.updated_at)
    view["in_state_since"] = iso(row.state_entered_at)
    return view


def brief(access: Access, catalogue: Catalogue, row: WorkflowRow) -> dict[str, Any]:
    """One line of a listing."""
    return (
        {
            "workflow_id": access.public_id(row.id),
            "type": row.type,
            "state": row.state,
            "terminal": row.terminal,
            "version": row.version,
            "allowed_actions": allowed_actions(access, catalogue, row),
            "in_state_since": iso(row.state_entered_at),
        }
        | ({"parked": row.parked} if row.parked is not None else {})
        | _searchable(access, row)
    )


def _searchable(access: Access, row: WorkflowRow) -> dict[str, Any]:
    found = access.search_view(row)
    return {"search_attributes": found} if found else {}


def transition(
    rec: TransitionRecord, red: Redactor, access: Access | None = None
) -> dict[str, Any]:
    """One log entry for an LLM; with ``access``, its actor names workflows (``workflow
    <parent>``, ``timer for child <child>``) by the ids that caller knows them by."""
    out: dict[str, Any] = {
        "version": rec.version,
        "event": rec.event,
        "from": rec.from_state,
        "to": rec.to_state,
        "actor": rec.actor if access is None else access.public_text(rec.actor),
        "at": iso(rec.at),
    }
    payload = red.mapping(rec.payload)
    if payload:
        out["payload"] = summarize(payload)
    return out


def _action(catalogue: Catalogue, name: str) -> dict[str, Any]:
    spec = catalogue.events[name]
    out: dict[str, Any] = {"tool": name, "event": spec.event}
    if spec.summary:
        out["description"] = spec.summary
    if spec.payload_required:
        out["payload_required"] = list(spec.payload_required)
    return out


def _step(access: Access, s: StepRecord, red: Redactor) -> dict[str, Any]:
    out: dict[str, Any] = {"step": s.step, "status": s.status}
    if s.status == "done":
        out["result"] = summarize(red.value(s.result))
    if s.outcome is not None:
        # unknown: it may have taken effect; not_applied: safe to run again.
        out["outcome"] = s.outcome
    if s.error:
        out["error"] = access.public_text(red.text(s.error))
    if s.attempts > 1:
        out["attempts"] = s.attempts
    out["finished_at" if s.finished_at is not None else "started_at"] = iso(
        s.finished_at if s.finished_at is not None else s.started_at
    )
    return out


def _unregistered_view(access: Access, row: WorkflowRow) -> dict[str, Any]:
    """A workflow whose machine version this server does not have (an old version after an
    upgrade): what is known of it, and that nothing can be done with it here."""
    summary = access.summary(row)
    view: dict[str, Any] = {
        "workflow_id": access.public_id(row.id),
        "type": row.type,
        "machine_version": row.machine_version,
        "state": row.state,
        "terminal": row.terminal,
        "version": row.version,
        "allowed_actions": [],
        "automatic": False,
        "waiting_for": "nothing"
        if row.terminal
        else (
            f"an operator: version {row.machine_version} of {row.type!r} is not registered "
            "in this server, so no action can be taken on it here"
        ),
        "summary": summary.data,
    }
    if summary.text is not None:
        view["summary_text"] = summary.text
    return view


def _others(access: Access, row: WorkflowRow) -> list[dict[str, Any]]:
    """Events that could fire now but not by this caller, and who may fire them."""
    if row.terminal:
        return []
    machine = access.machine_of(row)
    mine = set(access.allowed_for(row))
    out = []
    for name in machine.allowed_events(row.state, row.context):
        if name in mine:
            continue
        event = machine.events[name]
        roles = ["approver", *event.roles] if event.approval else list(event.roles)
        entry: dict[str, Any] = {"event": name, "roles": list(dict.fromkeys(roles))}
        if event.approval:
            entry["approval"] = True
        out.append(entry)
    return out


def _waiting_for(
    access: Access,
    row: WorkflowRow,
    actions: list[str],
    others: list[dict[str, Any]],
    working: bool,
    children: dict[str, Any] | None = None,
) -> str:
    if row.terminal:
        return "nothing: the workflow is finished"
    if row.cancel_requested is not None:
        return "the running step to stop: a cancel was requested"
    if row.parked is not None:
        return (
            f"an operator: the workflow is parked ({row.parked}); nothing runs until they "
            "resolve it (see last_error)"
        )
    if working:
        text = f"a worker: the {row.state!r} step runs automatically"
        now = access.now()
        if row.lease_owner is None and row.next_due_at is not None and row.next_due_at > now + 1:
            text += f" (next attempt at {iso(row.next_due_at)})"
        return text
    state = access.machine_of(row).states[row.state]
    timers = list(state.after.values())
    parts = []
    if children is not None and children["live"]:
        parts.append(f"its children to end ({children['text']})")
    if actions:
        parts.append("you: one of allowed_actions")
    if others:
        names = ", ".join(o["event"] for o in others)
        parts.append(f"someone else to fire {names}")
    if timers:
        parts.append(f"a timer ({', '.join(dict.fromkeys(timers))})")
    if row.last_error:
        parts.append("an operator: the last step failed (see last_error)")
    return "; or ".join(parts) or "an event nobody can fire now"


def _next(row: WorkflowRow, actions: list[str], working: bool) -> str:
    if row.terminal:
        return "Nothing left to do: the workflow is finished."
    if working or row.cancel_requested is not None:
        return f"Call {WAIT} to wait for the worker (progress is reported), then decide."
    if row.parked is not None:
        return (
            "It waits for an operator (see parked and last_error): tell the user, or call one "
            f"of allowed_actions if one fits; {WAIT} returns once it moves."
        )
    if actions:
        return "Call one of allowed_actions, or wait if none fits yet."
    return (
        "You have no action here: wait for someone else (see others_may_fire) or a timer; "
        f"call {WAIT} or check back later."
    )
