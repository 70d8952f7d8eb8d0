"""Timer commands: ``timers`` lists a workflow's pending timers, ``schedule`` arms one,
``cancel-timer`` deletes one by its key (see ``Engine.schedule``)."""

from __future__ import annotations

import datetime
import re
from typing import Annotated

import typer

from statewright.cli.loading import with_engine
from statewright.cli.options import Settings
from statewright.cli.output import compact, emit_json, escape, out, parse_json_object, table, when
from statewright.errors import InvalidInput, TimerNotFound

IdArg = Annotated[str, typer.Argument(help="Workflow id.", show_default=False)]
ActorOption = Annotated[str, typer.Option(help="Who asks (recorded in the logs).")]

# Hand-written: four suffixes are all the CLI takes, not worth a dependency.
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``10s``, ``90m``, ``2h``, ``1d`` (or plain seconds) as seconds."""
    m = _DURATION.match(text)
    if m is None:
        raise InvalidInput(f"not a duration: {text!r} (use e.g. 10s, 90m, 2h, 1d)")
    return float(m.group(1)) * _UNIT[m.group(2)]


def parse_time(text: str) -> float:
    """An ISO 8601 date and time (local time when it has no offset) as epoch seconds."""
    try:
        at = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(f"not an ISO 8601 time: {text!r}") from None
    return at.timestamp()


def timers(s: Settings, workflow_id: IdArg) -> None:
    """List a workflow's pending timers, earliest first."""
    found = with_engine(s, lambda e: e.timers(workflow_id))
    if s.json:
        emit_json(found)
        return
    if not found:
        out.print(f"[bold]{escape(workflow_id)}[/] has no pending timers")
        return
    rows = [
        (
            t.key or "-",
            t.event,
            when(t.due_at),
            "-" if t.every is None else f"{t.every:g}s",
            "yes" if t.keep else "no",
            t.scheduled_by or "-",
            compact(t.payload, 40),
        )
        for t in found
    ]
    columns = ["key", "event", "due", "every", "keep", "scheduled by", "payload"]
    out.print(table(None, columns, rows))


def schedule(
    s: Settings,
    workflow_id: IdArg,
    event: Annotated[str, typer.Argument(help="The event it fires.", show_default=False)],
    after: Annotated[
        str | None,
        typer.Option(help="When, from now: 10s, 90m, 2h, 1d.", show_default=False),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(help="When, as an ISO 8601 time.", show_default=False),
    ] = None,
    payload: Annotated[
        str | None,
        typer.Option(
            metavar="JSON", help="The event's payload (a JSON object).", show_default=False
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            help="Its name (default: the event); the same key replaces it.", show_default=False
        ),
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Survive leaving the current state.")
    ] = False,
    actor: ActorOption = "cli",
) -> None:
    """Schedule a durable timer on a workflow: give exactly one of --after and --at.
    Refused (exit code 2) for a finished workflow or an event its state cannot take. The
    transition it makes is logged as ``timer for <actor>``."""
    if (after is None) == (at is None):
        raise InvalidInput("give exactly one of --after DURATION and --at ISO8601")
    seconds = None if after is None else parse_duration(after)
    epoch = None if at is None else parse_time(at)
    body = parse_json_object(payload, "--payload")
    record = with_engine(
        s,
        lambda e: e.schedule(
            workflow_id,
            event,
            after=seconds,
            at=epoch,
            payload=body,
            key=key,
            keep=keep,
            actor=actor,
        ),
    )
    if s.json:
        emit_json(record)
        return
    out.print(
        f"timer [bold]{escape(record.key or event)}[/] of [bold]{escape(workflow_id)}[/] fires "
        f"[bold cyan]{escape(record.event)}[/] at {when(record.due_at)}"
        + (" (kept across states)" if record.keep else "")
    )


def cancel_timer(
    s: Settings,
    workflow_id: IdArg,
    key: Annotated[str, typer.Argument(help="The timer's key.", show_default=False)],
    actor: ActorOption = "cli",
) -> None:
    """Cancel a workflow's pending timer by its key (exit code 1 when there is none)."""
    removed = with_engine(s, lambda e: e.cancel_timer(workflow_id, key, actor=actor))
    if not removed:
        raise TimerNotFound(workflow_id, key)
    if s.json:
        emit_json({"removed": True})
        return
    out.print(f"timer [bold]{escape(key)}[/] of [bold]{escape(workflow_id)}[/] cancelled")
