"""Commands on workflows: start, send, show, history, approve, deny, cancel, input, list.

Every command that writes takes ``--idempotency-key``: run again with the same key (after a
crash, a timeout, or ``error[outcome_unknown]``), it applies nothing twice and says so
(``already applied``; ``"replayed": true`` with ``--json``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from statewright.cli.agents import usage_lines
from statewright.cli.loading import with_engine
from statewright.cli.options import Settings
from statewright.cli.output import (
    compact,
    duration,
    emit_json,
    escape,
    out,
    parse_json_object,
    plain,
    table,
    when,
)
from statewright.errors import UnknownWorkflowType

if TYPE_CHECKING:
    from statewright.engine import Engine
    from statewright.types import CancelRequest, WorkflowRow

IdArg = Annotated[str, typer.Argument(help="Workflow id.", show_default=False)]
KeyOption = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key",
        help="Makes the command safe to run again: with the same key (after a crash, a "
        "timeout or error[outcome_unknown]) it applies nothing twice. 1-255 printable ASCII "
        "characters, no spaces; a new key for each new request.",
    ),
]


def _row_line(row: WorkflowRow, verb: str) -> None:
    out.print(
        f"{verb} [bold]{escape(row.id)}[/] ({escape(row.type)} v{row.machine_version}): "
        f"[bold cyan]{escape(row.state)}[/] at version {row.version}"
    )


def _emit(s: Settings, row: WorkflowRow, verb: str, key: str | None, replayed: bool) -> None:
    """The row (with ``replayed`` when a key was given), or one line for people."""
    if s.json:
        emit_json(row if key is None else {**plain(row), "replayed": replayed})
    elif replayed:
        out.print(
            f"already applied with idempotency key {escape(repr(key))}: nothing was done "
            f"again; [bold]{escape(row.id)}[/] is [bold cyan]{escape(row.state)}[/] at "
            f"version {row.version}"
        )
    else:
        _row_line(row, verb)


def start(
    s: Settings,
    type_: Annotated[str, typer.Argument(metavar="TYPE", help="Workflow type (machine name).")],
    input_: Annotated[
        str | None, typer.Option("--input", help="Initial context, a JSON object.")
    ] = None,
    workflow_id: Annotated[
        str | None, typer.Option("--id", help="Choose the id (then start is idempotent).")
    ] = None,
    actor: Annotated[str, typer.Option(help="Who starts it (recorded in the log).")] = "cli",
    key: KeyOption = None,
) -> None:
    """Start a workflow in its machine's initial state.

    With --idempotency-key and no --id, the key names the workflow: running it again starts
    nothing new.
    """
    context = parse_json_object(input_, "--input")
    started = with_engine(
        s,
        lambda e: e.start(
            type_, context, workflow_id=workflow_id, actor=actor, idempotency_key=key
        ),
    )
    _emit(s, started.row, "started", key, key is not None and not started.created)


def send(
    s: Settings,
    workflow_id: IdArg,
    event: Annotated[str, typer.Argument(help="Event name.", show_default=False)],
    payload: Annotated[str | None, typer.Option(help="Event payload, a JSON object.")] = None,
    actor: Annotated[str, typer.Option(help="Who fires it (recorded in the log).")] = "cli",
    expected_version: Annotated[
        int | None,
        typer.Option(help="Refuse (version_conflict) unless the workflow is at this version."),
    ] = None,
    key: KeyOption = None,
    if_allowed: Annotated[
        bool,
        typer.Option(
            "--if-allowed",
            help="If the workflow's state does not allow the event now, say so and exit 0 "
            "(nothing changes) instead of refusing it.",
        ),
    ] = False,
) -> None:
    """Fire an event; refused with exit code 2 if it is not allowed now (see --if-allowed)."""
    data = parse_json_object(payload, "--payload")
    sent = with_engine(
        s,
        lambda e: e.send(
            workflow_id,
            event,
            data,
            actor=actor,
            expected_version=expected_version,
            idempotency_key=key,
            if_allowed=if_allowed,
        ),
    )
    if sent.applied:
        _emit(s, sent.row, "moved", key, sent.replayed)
        return
    row, reason = sent.row, None if sent.refusal is None else sent.refusal.reason
    allowed = [] if sent.refusal is None else sent.refusal.allowed
    if s.json:
        emit_json({**plain(row), "applied": False, "reason": reason, "allowed_events": allowed})
        return
    why = f" ({reason})" if reason else ""
    out.print(
        f"not applied: {escape(repr(event))} is not allowed in state "
        f"[bold cyan]{escape(row.state)}[/]{escape(why)}; nothing changed "
        f"([bold]{escape(row.id)}[/] at version {row.version}; allowed: "
        f"{escape(', '.join(allowed) or 'none')})"
    )


def _decide(
    s: Settings,
    workflow_id: str,
    approve: bool,
    approver: str,
    comment: str | None,
    key: str | None,
) -> None:
    decided = with_engine(
        s,
        lambda e: e.decide(
            workflow_id, approve, approver=approver, comment=comment, idempotency_key=key
        ),
    )
    _emit(s, decided.row, "approved" if approve else "denied", key, decided.replayed)


def approve(
    s: Settings,
    workflow_id: IdArg,
    approver: Annotated[str, typer.Option(help="Who approves (recorded as the actor).")],
    comment: Annotated[str | None, typer.Option(help="Why.")] = None,
    key: KeyOption = None,
) -> None:
    """Approve a workflow waiting for a decision (fires its type's approval event)."""
    _decide(s, workflow_id, True, approver, comment, key)


def deny(
    s: Settings,
    workflow_id: IdArg,
    approver: Annotated[str, typer.Option(help="Who denies (recorded as the actor).")],
    comment: Annotated[str | None, typer.Option(help="Why.")] = None,
    key: KeyOption = None,
) -> None:
    """Deny a workflow waiting for a decision (fires its type's denial event)."""
    _decide(s, workflow_id, False, approver, comment, key)


def cancel(
    s: Settings,
    workflow_id: IdArg,
    reason: Annotated[str, typer.Option(help="Why (recorded in the cancel event's payload).")],
    actor: Annotated[str, typer.Option(help="Who cancels (recorded in the log).")] = "cli",
    key: KeyOption = None,
) -> None:
    """Cancel a workflow: at once if no worker runs it, else through its running handler.

    Refused (exit code 2) if its current state has no edge for the type's cancel event.
    """

    cancelled = with_engine(
        s, lambda e: e.cancel(workflow_id, reason=reason, actor=actor, idempotency_key=key)
    )
    row, replayed = cancelled.row, cancelled.replayed
    if s.json or replayed:
        _emit(s, row, "cancelled", key, replayed)
    elif row.cancel_requested is not None:
        out.print(
            f"cancel requested for [bold]{escape(row.id)}[/]: its worker ends the handler "
            f"running in [bold cyan]{escape(row.state)}[/]"
        )
    else:
        _row_line(row, "cancelled")


def input_(
    s: Settings,
    workflow_id: IdArg,
    name: Annotated[str, typer.Argument(help="Input name.", show_default=False)],
    payload: Annotated[str | None, typer.Option(help="Input payload, a JSON object.")] = None,
    key: KeyOption = None,
) -> None:
    """Post an input into a workflow's inbox (a running handler may be waiting for it).

    Refused (exit code 2) once the workflow has finished, and when no handler would ever
    read it (neither the workflow's state nor any state after it has one).
    """
    data = parse_json_object(payload, "--payload")
    done = with_engine(s, lambda e: e.post_input(workflow_id, name, data, idempotency_key=key))
    item, created = done.item, done.created
    if s.json:
        posted = {"workflow_id": workflow_id, "name": name, "input_id": item.id}
        emit_json(posted if key is None else {**posted, "replayed": not created})
    elif not created:
        out.print(
            f"already posted with idempotency key {escape(repr(key))}: input "
            f"{escape(name)!r} #{item.id} to [bold]{escape(workflow_id)}[/], nothing posted again"
        )
    else:
        out.print(f"posted input {escape(name)!r} #{item.id} to [bold]{escape(workflow_id)}[/]")


async def _details(engine: Engine, workflow_id: str) -> dict[str, Any]:
    from statewright.views import CHILDREN_COUNTED, ChildCounts

    row = await engine.get(workflow_id)
    try:
        allowed: list[str] | None = await engine.allowed_events(workflow_id)
    except UnknownWorkflowType:
        allowed = None  # the type is not loaded (--app): show the row anyway
    children: list[dict[str, Any]] = []
    counts = ChildCounts.of([])
    if row.has_children:
        # Read through Access as the local caller (every tenant, store ids), imported only
        # for a parent: `show` of any other workflow does not pay for its import.
        from statewright.access import LOCAL, Access

        access = Access(engine, LOCAL)
        found = await access.children(workflow_id, limit=CHILDREN_COUNTED + 1, row=row)
        children = [access.child_view(c) for c in found[:CHILDREN_COUNTED]]
        counts = ChildCounts.of(found[:CHILDREN_COUNTED], more=len(found) > CHILDREN_COUNTED)
    from statewright.engine.llm_usage import report

    steps = await engine.steps(workflow_id)
    return {
        "workflow": row,
        "cancel_request": row.cancel,
        "allowed_events": allowed,
        "timers": await engine.timers(workflow_id),
        "steps": steps,
        "usage": report(steps),  # its agents' tokens and cost (None: no model call)
        "children": children,
        "children_counts": counts.to_dict(),
        "more_children": counts.more,
        # as stored (written with its transitions; derived from the context)
        "search_attributes": await engine.search_attributes(row.id),
    }


def show(s: Settings, workflow_id: IdArg) -> None:
    """Show a workflow: state, version, context, allowed events, timers, steps, last error,
    its parent and its children (the first 100)."""
    from rich.console import Group
    from rich.panel import Panel

    d = with_engine(s, lambda e: _details(e, workflow_id))
    if s.json:
        emit_json(d)
        return
    row: WorkflowRow = d["workflow"]
    allowed: list[str] | None = d["allowed_events"]
    if allowed is None:
        allowed_text = "? (the type is not loaded: pass --app)"
    else:
        allowed_text = ", ".join(allowed) or "(none)"
    lines = [
        f"type      {escape(row.type)} v{row.machine_version}",
        f"state     [bold cyan]{escape(row.state)}[/]" + (" (terminal)" if row.terminal else ""),
        f"version   {row.version}",
        f"entered   {when(row.state_entered_at)}   created {when(row.created_at)}",
        f"allowed   {escape(allowed_text)}",
        f"context   {escape(compact(row.context, 200))}",
    ]
    if d["search_attributes"]:
        found = ", ".join(f"{k}={v}" for k, v in d["search_attributes"].items())
        lines.append(f"search    {escape(found)}")
    if row.parent is not None:
        lines.append(f"parent    {escape(row.parent)} (child key {escape(str(row.parent_key))})")
    counts: dict[str, Any] = d["children_counts"]
    if counts["total"]:
        lines.append(f"children  {escape(counts['text'])}")
    if row.attempts or row.total_attempts:
        lines.append(f"attempts  {row.attempts} ({row.total_attempts} over its life)")
    if row.next_due_at is not None:
        lines.append(f"next due  {when(row.next_due_at)}")
    if row.lease_owner:
        lines.append(f"leased by {escape(row.lease_owner)} until {when(row.lease_expires_at)}")
    if row.progress is not None:
        lines.append(f"progress  {escape(_progress(row.progress))}")
    request: CancelRequest | None = d["cancel_request"]
    if request is not None:
        by = f" by {request.actor}" if request.actor else ""
        lines.append(f"[yellow]cancel    requested{escape(by)}: {escape(request.reason)}[/]")
    if row.parked is not None:
        todo = (
            "statewright resolve-step: resume would park it again"
            if row.parked == "step_outcome_unknown"
            else "fix the cause, then statewright resume"
        )
        lines.append(
            f"[bold red]parked    {escape(row.parked)}[/]: waits for an operator ({todo})"
        )
    if d["usage"] is not None:
        lines += [f"usage     {escape(text)}" for text in usage_lines(d["usage"])]
    if row.last_error:
        lines.append(f"[red]error     {escape(row.last_error)}[/]")
    parts: list[Any] = ["\n".join(lines)]
    if d["timers"]:
        parts.append(
            table("timers", ["due", "event"], [(when(t.due_at), t.event) for t in d["timers"]])
        )
    if d["steps"]:
        parts.append(
            table(
                "steps",
                ["step", "status", "outcome", "attempts", "result / error"],
                [
                    (
                        # A step with an undo names it; an undo is the step ``undo.<step>``.
                        st.step + (f" (undo: {st.compensation})" if st.compensation else ""),
                        st.status,
                        st.outcome or "",
                        st.attempts,
                        st.error or compact(st.result, 60),
                    )
                    for st in d["steps"]
                ],
            )
        )
    if d["children"]:
        parts.append(
            table(
                "children" + (f" (the first {len(d['children'])})" if d["more_children"] else ""),
                ["child", "type", "state", "outcome"],
                [
                    (c["id"], c["type"], c["state"], _outcome(c["succeeded"]))
                    for c in d["children"]
                ],
            )
        )
    out.print(Panel(Group(*parts), title=f"workflow {row.id}", title_align="left"))


def _outcome(succeeded: bool | None) -> str:
    """An ended child's outcome; nothing for a live one (its state says what it does)."""
    return "" if succeeded is None else "succeeded" if succeeded else "failed"


def _progress(progress: dict[str, Any]) -> str:
    """``3/10 fetching {"extra": 1}`` from ``done``, ``of``, ``message`` and the rest."""
    rest = dict(progress)
    done, of, message = rest.pop("done", None), rest.pop("of", None), rest.pop("message", None)
    parts = []
    if done is not None:
        parts.append(f"{done}/{of}" if of is not None else str(done))
    elif of is not None:
        rest["of"] = of
    if message is not None:
        parts.append(str(message))
    if rest:
        parts.append(compact(rest, 120))
    return " ".join(parts)


def history(s: Settings, workflow_id: IdArg) -> None:
    """The workflow's transition log: every change, by whom, with its payload."""
    records = with_engine(s, lambda e: e.history(workflow_id))
    if s.json:
        emit_json(records)
        return
    # "from" is the previous line's state, so one state column reads as the path taken.
    out.print(
        table(
            f"history of {workflow_id}",
            ["v", "at", "event", "-> state", "actor", "payload"],
            [
                (
                    r.version,
                    when(r.at),
                    r.event,
                    r.to_state,
                    r.actor,
                    compact(r.payload, 60) if r.payload else "",
                )
                for r in records
            ],
        )
    )


def list_(
    s: Settings,
    type_: Annotated[str | None, typer.Option("--type", help="Only this type.")] = None,
    state: Annotated[str | None, typer.Option(help="Only workflows in this state.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many.")] = 100,
    search: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            help="Only workflows whose search attribute NAME has VALUE (NAME=VALUE; "
            "repeatable: all must match). The type (--app) must declare NAME.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """List workflows, longest in their state first."""
    from statewright.engine.search import parse
    from statewright.types import WorkflowFilter

    where = WorkflowFilter(type=type_, state=state, limit=limit, search=parse(search or ()))
    rows = with_engine(s, lambda e: e.list_workflows(where))
    if s.json:
        emit_json([plain(r) for r in rows])
        return
    now = time.time()
    out.print(
        table(
            f"{len(rows)} workflow(s)",
            ["id", "type", "state", "v", "in state", "error"],
            [
                (
                    r.id,
                    r.type,
                    r.state
                    + (" (end)" if r.terminal else "")
                    + (f" (parked: {r.parked})" if r.parked else ""),
                    r.version,
                    duration(now - r.state_entered_at),
                    r.last_error or "",
                )
                for r in rows
            ],
        )
    )
