"""``statewright schedules add|list|show|remove|pause|resume``: cron schedules that start
workflows (see ``Engine.schedule_start``; a running ``statewright worker`` fires the ticks).

(``statewright schedule`` is the older command that arms a timer on one workflow.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from statewright.cli.loading import with_engine
from statewright.cli.options import Command, Group, Settings, command
from statewright.cli.output import emit_json, escape, out, parse_json_object, table, when

if TYPE_CHECKING:
    from statewright.types import ScheduleRecord

app = typer.Typer(
    name="schedules",
    cls=Group,
    help="Cron schedules that start workflows (a running worker fires them).",
    no_args_is_help=True,
    rich_markup_mode=None,
)

IdArg = Annotated[str, typer.Argument(help="The schedule's id.", show_default=False)]


def _line(s: ScheduleRecord) -> str:
    state = "paused" if s.paused else f"next {when(s.next_at)}"
    return (
        f"schedule [bold]{escape(s.id)}[/] starts [bold]{escape(s.type)}[/] at "
        f"[cyan]{escape(s.cron)}[/] ({escape(s.timezone)}, catch-up {s.catch_up}); {state}"
    )


def add(
    s: Settings,
    schedule_id: IdArg,
    workflow_type: Annotated[
        str, typer.Argument(metavar="TYPE", help="The workflow type.", show_default=False)
    ],
    cron: Annotated[
        str,
        typer.Argument(
            help="Five cron fields, quoted ('*/5 * * * *'), or @hourly, @daily...",
            show_default=False,
        ),
    ],
    input: Annotated[
        str | None,
        typer.Option(
            "--input",
            metavar="JSON",
            help="Every start's input (a JSON object).",
            show_default=False,
        ),
    ] = None,
    catch_up: Annotated[
        str,
        typer.Option(help="Missed ticks: latest (start the latest only), all, or skip."),
    ] = "latest",
    timezone: Annotated[str, typer.Option(help="IANA time zone of the cron line.")] = "UTC",
    tenant: Annotated[str, typer.Option(help="The tenant of the workflows.")] = "default",
    paused: Annotated[bool, typer.Option("--paused", help="Declare it paused.")] = False,
    actor: Annotated[
        str, typer.Option(help="Who declares it: its workflows are started on their behalf.")
    ] = "cli",
) -> None:
    """Declare a schedule (or replace the one of that id). Refused (exit code 2) for an
    invalid cron line, time zone, catch-up policy or input; nothing is written then. The
    workflows it starts are logged as started by ``schedule:<id> for <actor>``."""
    body = parse_json_object(input, "--input")
    record = with_engine(
        s,
        lambda e: e.schedule_start(
            workflow_type,
            cron,
            body,
            schedule_id=schedule_id,
            catch_up=catch_up,
            timezone=timezone,
            tenant=tenant,
            paused=paused,
            actor=actor,
        ),
    )
    if s.json:
        emit_json(record)
        return
    out.print(_line(record))


def list_(s: Settings) -> None:
    """List the schedules."""
    found = with_engine(s, lambda e: e.schedules())
    if s.json:
        emit_json(found)
        return
    if not found:
        out.print("no schedules")
        return
    rows = [
        (
            x.id,
            x.type,
            f"{x.cron} ({x.timezone}, {x.catch_up})",
            "paused" if x.paused else when(x.next_at),
            x.last_workflow_id or "-",
            x.last_error or "",
        )
        for x in found
    ]
    columns = ["id", "type", "cron", "next", "last started", "error"]
    out.print(table(None, columns, rows))


def show(s: Settings, schedule_id: IdArg) -> None:
    """Show one schedule (exit code 1 when there is none)."""
    record = with_engine(s, lambda e: e.get_schedule(schedule_id))
    if s.json:
        emit_json(record)
        return
    out.print(_line(record))
    if record.created_by:
        out.print(f"declared by: {escape(record.created_by)}")
    if record.last_workflow_id:
        out.print(f"last started: {escape(record.last_workflow_id)}")
    if record.last_error:
        out.print(f"last error: {escape(record.last_error)}")


def remove(s: Settings, schedule_id: IdArg) -> None:
    """Remove a schedule; the workflows it started stay (exit code 1 when there is none)."""
    with_engine(s, lambda e: e.unschedule(schedule_id))
    if s.json:
        emit_json({"removed": True})
        return
    out.print(f"schedule [bold]{escape(schedule_id)}[/] removed")


def pause(s: Settings, schedule_id: IdArg) -> None:
    """Pause a schedule: no tick fires until it is resumed."""
    record = with_engine(s, lambda e: e.pause_schedule(schedule_id))
    emit_json(record) if s.json else out.print(_line(record))


def resume(s: Settings, schedule_id: IdArg) -> None:
    """Resume a schedule from its next tick after now (the paused ticks are skipped)."""
    record = with_engine(s, lambda e: e.resume_schedule(schedule_id))
    emit_json(record) if s.json else out.print(_line(record))


_COMMANDS: list[tuple[str, Callable[..., None]]] = [
    ("add", add),
    ("list", list_),
    ("show", show),
    ("remove", remove),
    ("pause", pause),
    ("resume", resume),
]
for _name, _fn in _COMMANDS:
    app.command(_name, cls=Command)(command(_fn))
