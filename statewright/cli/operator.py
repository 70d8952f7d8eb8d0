"""Operator commands: resolve-step and resume, for workflows parked for a person, and
patch-context, an audited change of a workflow's context by hand.

A workflow is parked (``statewright show`` prints ``parked <reason>``) when a worker cannot
go on safely by itself, e.g. a step was interrupted and nothing can tell whether its call
took effect (``step_outcome_unknown``). The operator checks the external system and answers
with ``resolve-step`` (which also resumes it), or fixes the cause and runs ``resume``.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

import typer

from statewright.cli.loading import with_engine
from statewright.cli.options import Settings
from statewright.cli.output import compact, emit_json, escape, out
from statewright.errors import InvalidInput

log = logging.getLogger(__name__)

IdArg = Annotated[str, typer.Argument(help="Workflow id.", show_default=False)]
ReasonOption = Annotated[str, typer.Option(help="Why (kept with the step / in the log).")]
ActorOption = Annotated[str, typer.Option(help="Who answers (recorded).")]
ExpectedVersionOption = Annotated[
    int | None,
    typer.Option(help="Refuse unless the workflow is at this version.", show_default=False),
]
IdempotencyKeyOption = Annotated[
    str | None,
    typer.Option(help="Makes a retry of this command apply nothing twice.", show_default=False),
]


def resolve_step(
    s: Settings,
    workflow_id: IdArg,
    step: Annotated[str, typer.Argument(help="The step's name (run.step).", show_default=False)],
    reason: ReasonOption,
    applied: Annotated[
        str | None,
        typer.Option(
            "--applied",
            metavar="RESULT_JSON",
            help="The step did take effect; its result as the external system holds it (any "
            "JSON value). The step returns it from now on.",
        ),
    ] = None,
    not_applied: Annotated[
        bool,
        typer.Option("--not-applied", help="The step never took effect: it may run again."),
    ] = False,
    actor: ActorOption = "cli",
) -> None:
    """Answer for a step whose outcome is unknown, then resume its parked workflow.

    Give exactly one of --applied RESULT_JSON and --not-applied. Refused (exit code 2) for a
    step that is done, or while a worker holds the workflow.
    """
    if (applied is None) == (not not_applied):
        raise InvalidInput("give exactly one of --applied RESULT_JSON and --not-applied")
    from statewright.engine.workflow_type import Applied, NotApplied

    verdict = NotApplied() if applied is None else Applied(_json_value(applied, "--applied"))
    record = with_engine(
        s,
        lambda e: e.resolve_step(workflow_id, step, verdict, actor=actor, reason=reason),
    )
    if s.json:
        emit_json(record)
        return
    what = "applied" if applied is not None else "not applied"
    result = f", result {escape(compact(record.result, 60))}" if applied is not None else ""
    out.print(
        f"step [bold]{escape(step)}[/] of [bold]{escape(workflow_id)}[/] resolved as {what}"
        f"{result}: now {escape(record.status)}"
    )


def resume(
    s: Settings,
    workflow_id: IdArg,
    reason: ReasonOption,
    reconcile: Annotated[
        bool,
        typer.Option(
            "--reconcile",
            help="For a workflow parked because a step's outcome is unknown: resume anyway, "
            "to have the step's reconcile hook asked again (it may answer now); without a "
            "verdict it parks again. Without this flag such a workflow is refused: resolve "
            "the step instead (resolve-step).",
        ),
    ] = False,
    actor: ActorOption = "cli",
) -> None:
    """Make a parked workflow run its state's handler again (finished steps keep their
    results). Refused (exit code 2) for a finished workflow, while a worker holds it, or
    (step_unresolved) while it is parked because a step's outcome is unknown: it would park
    again; answer for the step with resolve-step, which resumes it."""
    row = with_engine(
        s, lambda e: e.resume(workflow_id, actor=actor, reason=reason, reconcile=reconcile)
    )
    if s.json:
        emit_json(row)
        return
    out.print(
        f"resumed [bold]{escape(row.id)}[/]: [bold cyan]{escape(row.state)}[/] runs again "
        "when a worker picks it up"
        + (
            " (the step's reconcile hook is asked again: without a verdict it parks again)"
            if reconcile
            else ""
        )
    )


def migrate(
    s: Settings,
    workflow_type: Annotated[str, typer.Argument(help="The workflow type.", show_default=False)],
    from_version: Annotated[int, typer.Argument(help="Move workflows on this version...")],
    to_version: Annotated[int, typer.Argument(help="...to this one (registered by --app).")],
    reason: ReasonOption,
    state_map: Annotated[
        list[str] | None,
        typer.Option(
            "--map",
            metavar="OLD=NEW",
            help="A state renamed by the new version (repeat for each); unnamed states keep "
            "their name.",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the plan; change nothing.")
    ] = False,
    actor: ActorOption = "cli",
) -> None:
    """Move the live workflows of a type from one machine version to another: each is one
    transition, logged as $migrate with the actor, reason and map. Refused (exit code 2),
    before anything moves, when a state would land in one the new version lacks."""
    mapping: dict[str, str] = {}
    for item in state_map or []:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            raise InvalidInput(f"--map takes OLD=NEW, not {item!r}")
        mapping[old] = new
    done = with_engine(
        s,
        lambda e: e.migrate(
            workflow_type,
            from_version,
            to_version,
            mapping,
            actor=actor,
            reason=reason,
            dry_run=dry_run,
        ),
    )
    if s.json:
        emit_json(
            {
                "plan": [{"id": w, "from": a, "to": b} for w, a, b in done.plan],
                "moved": done.moved,
                "busy": done.busy,
                "dry_run": done.dry_run,
            }
        )
        return
    for wid, old_state, new_state in done.plan:
        out.print(f"{escape(wid)}: {escape(old_state)} -> {escape(new_state)}")
    if done.dry_run:
        out.print(f"dry run: {len(done.plan)} workflow(s) would move; nothing changed")
    else:
        out.print(
            f"moved {len(done.moved)} workflow(s) to v{to_version}"
            + (f"; {len(done.busy)} held by a worker, not moved" if done.busy else "")
        )


def fork(
    s: Settings,
    workflow_id: IdArg,
    reason: ReasonOption,
    version: Annotated[
        int | None,
        typer.Option(help="The version to start from (default: the latest).", show_default=False),
    ] = None,
    new_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            help="The new workflow's id (default: <id>.fork-<version>).",
            show_default=False,
        ),
    ] = None,
    rerun_steps: Annotated[
        bool,
        typer.Option(
            "--rerun-steps",
            help="Forking from a version after which steps were done runs them again, under "
            "the fork's keys (a charge is made twice): refused (exit code 2, naming them) "
            "without this flag.",
        ),
    ] = False,
    actor: ActorOption = "cli",
) -> None:
    """Start a new workflow from a past version of this one: its state and context as of that
    version, with the results of the steps done by then (they do not run again). Logged as
    $fork with the source, version, actor and reason; the original is not touched.

    Steps done AFTER that version run again in the fork under its own keys: say so with
    --rerun-steps. Refused (exit code 2) while a worker holds the workflow, and while a step
    of it has an unknown outcome (resolve-step it first)."""
    row = with_engine(
        s,
        lambda e: e.fork(
            workflow_id,
            actor=actor,
            reason=reason,
            version=version,
            new_id=new_id,
            rerun_steps=rerun_steps,
        ),
    )
    if s.json:
        emit_json(row)
        return
    out.print(
        f"forked [bold]{escape(workflow_id)}[/] into [bold]{escape(row.id)}[/]: "
        f"[bold cyan]{escape(row.state)}[/]"
    )


def move(
    s: Settings,
    workflow_id: IdArg,
    state: Annotated[str, typer.Argument(help="The state to move to.", show_default=False)],
    reason: ReasonOption,
    expected_version: ExpectedVersionOption = None,
    idempotency_key: IdempotencyKeyOption = None,
    actor: ActorOption = "cli",
) -> None:
    """Move a workflow to a named state outside the machine's edges (a last resort): one
    transition, logged as $move with the actor and reason. The state is entered as by any
    transition. Refused (exit code 2) for a finished workflow or a state its machine lacks."""
    row = with_engine(
        s,
        lambda e: e.move_to(
            workflow_id,
            state,
            actor=actor,
            reason=reason,
            expected_version=expected_version,
            idempotency_key=idempotency_key,
        ),
    )
    if s.json:
        emit_json(row)
        return
    out.print(
        f"moved [bold]{escape(row.id)}[/] to [bold cyan]{escape(row.state)}[/] "
        f"(version {row.version})"
    )


def patch_context(
    s: Settings,
    workflow_id: IdArg,
    patch: Annotated[
        str,
        typer.Argument(
            metavar="PATCH_JSON",
            help='Top-level context keys to set, as a JSON object: \'{"address": "1 Main St"}\'.',
            show_default=False,
        ),
    ],
    reason: ReasonOption,
    expected_version: ExpectedVersionOption = None,
    idempotency_key: IdempotencyKeyOption = None,
    actor: ActorOption = "cli",
) -> None:
    """Set context keys by hand: one transition, logged as $patch_context with the actor and
    reason. The state stays; a state with a handler runs it again. Refused (exit code 2) for a
    finished workflow or a patch that is not a non-empty JSON object."""
    value = _json_value(patch, "PATCH_JSON")
    if not isinstance(value, dict):
        raise InvalidInput("PATCH_JSON must be a JSON object of context keys")
    row = with_engine(
        s,
        lambda e: e.patch_context(
            workflow_id,
            value,
            actor=actor,
            reason=reason,
            expected_version=expected_version,
            idempotency_key=idempotency_key,
        ),
    )
    if s.json:
        emit_json(row)
        return
    out.print(
        f"context of [bold]{escape(row.id)}[/] patched ({escape(', '.join(sorted(value)))}): "
        f"version {row.version}, still [bold cyan]{escape(row.state)}[/]"
    )


def _json_value(text: str, what: str) -> Any:
    """Any JSON value, strictly (no NaN)."""

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(text, parse_constant=constant)
    except ValueError as exc:
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
