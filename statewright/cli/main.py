"""The Typer app: global options, the command table, and the console-script entry point.

Every command pays for what this module imports, ``statewright --help`` included: the command
modules import only Typer and light statewright modules at their top, and each command
imports the engine, the store, Rich, the HTTP service, the MCP SDK or OpenTelemetry when it
runs (tests/integration/test_cli_start.py lists what must stay out).
"""

from __future__ import annotations

from collections.abc import Callable

import typer

from statewright.cli import (
    agents,
    alerts,
    bulk,
    definitions,
    demo,
    mcp,
    operator,
    ops,
    paths,
    retention,
    schedules,
    serve,
    subscriptions,
    timers,
    workflows,
)
from statewright.cli.options import (
    AppOption,
    Command,
    DbOption,
    Group,
    JsonOption,
    LogLevelOption,
    Settings,
    command,
    root_settings,
)

HELP = """Durable, explicit state machines for AI-agent and backend workflows.

Exit codes: 0 success; 2 the input was refused and nothing was written (malformed JSON or
argument, a payload that breaks the event's schema, an event not allowed in the current
state, a finished workflow, an --idempotency-key used for another request); 1 any other
failure (unknown workflow or type, version conflict, store error, a failed check;
outcome_unknown: it may have been applied, run it again with the same --idempotency-key).
Errors print one line `error[<code>]: <message>` on stderr (with --json, the error as a JSON
object).
"""

app = typer.Typer(
    name="statewright",
    cls=Group,
    help=HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def root(
    ctx: typer.Context,
    db: DbOption = None,
    app_: AppOption = None,
    as_json: JsonOption = False,
    log_level: LogLevelOption = None,
) -> None:
    ctx.obj = root_settings(db, app_, as_json, log_level)


_COMMANDS: list[tuple[str, Callable[..., None], str]] = [
    ("init", ops.init, "error"),
    ("start", workflows.start, "error"),
    ("send", workflows.send, "error"),
    ("show", workflows.show, "error"),
    ("history", workflows.history, "error"),
    ("conversation", agents.conversation, "error"),
    ("approve", workflows.approve, "error"),
    ("deny", workflows.deny, "error"),
    ("cancel", workflows.cancel, "error"),
    ("input", workflows.input_, "error"),
    ("resolve-step", operator.resolve_step, "error"),
    ("resume", operator.resume, "error"),
    ("patch-context", operator.patch_context, "error"),
    ("move", operator.move, "error"),
    ("fork", operator.fork, "error"),
    ("migrate", operator.migrate, "error"),
    ("bulk", bulk.bulk, "error"),
    ("prune", retention.prune, "error"),
    ("import", retention.import_, "error"),
    ("timers", timers.timers, "error"),
    ("schedule", timers.schedule, "error"),
    ("cancel-timer", timers.cancel_timer, "error"),
    ("list", workflows.list_, "error"),
    ("stuck", ops.stuck, "error"),
    ("alerts", alerts.alerts, "error"),
    ("replay", ops.replay, "error"),
    ("diagram", definitions.diagram, "error"),
    ("check", definitions.check, "error"),
    ("paths", paths.paths, "error"),
    ("worker", ops.worker, "info"),
    ("serve", serve.serve, "info"),
    ("mcp", mcp.mcp, "error"),
    ("demo", demo.demo, "error"),
]
_CLASSES: dict[str, type[Command]] = {"alerts": alerts.AlertsCommand}
"""Commands with a Click class of their own (the others': :class:`Command`)."""
for _name, _fn, _level in _COMMANDS:
    app.command(_name, cls=_CLASSES.get(_name, Command))(command(_fn, log_level=_level))
app.add_typer(schedules.app, name="schedules")
app.add_typer(subscriptions.app, name="subscriptions")


def main() -> None:
    """Console-script entry point (``statewright``)."""
    app()


__all__ = ["Settings", "app", "main"]
