"""Retention commands: prune finished workflows (optionally archiving them), import an archive.

Durations are a number and a unit: ``0s``, ``90m``, ``12h``, ``30d``, ``2w``
(:func:`statewright.engine.retention.parse_duration`, the one parser; a bad one exits 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from statewright.cli.loading import with_engine
from statewright.cli.options import Settings
from statewright.cli.output import emit_json, err, escape, out

if TYPE_CHECKING:
    from statewright.engine import Engine
    from statewright.engine.retention import ImportReport, PruneReport

DurationHelp = "A duration: 0s, 90m, 12h, 30d, 2w."


def prune(
    s: Settings,
    terminal_older_than: Annotated[
        str,
        typer.Option(
            "--terminal-older-than",
            metavar="DURATION",
            help="Delete finished workflows whose final state was entered longer ago than "
            "this. " + DurationHelp,
            show_default=False,
        ),
    ],
    archive: Annotated[
        Path | None,
        typer.Option(
            "--archive",
            metavar="FILE.jsonl.gz",
            help="Append each workflow (row, log, steps, timers, inbox) to this gzip'd JSON "
            "lines file, fsynced before it is deleted; `statewright import` restores it.",
            show_default=False,
        ),
    ] = None,
    rejections_older_than: Annotated[
        str | None,
        typer.Option(
            "--rejections-older-than",
            metavar="DURATION",
            help="Also delete refused events older than this. " + DurationHelp,
            show_default=False,
        ),
    ] = None,
    alerts_older_than: Annotated[
        str | None,
        typer.Option(
            "--alerts-older-than",
            metavar="DURATION",
            help="Also delete alert notifications delivered or dead-lettered and created "
            "longer ago than this (pending ones are kept). " + DurationHelp,
            show_default=False,
        ),
    ] = None,
    pruned_ids_older_than: Annotated[
        str | None,
        typer.Option(
            "--pruned-ids-older-than",
            metavar="DURATION",
            help="Also forget the ids of workflows pruned longer ago than this: a start of "
            "such an id (or its idempotency key) creates a new workflow again, which runs its "
            "steps again under the same keys. Without it, pruned ids are refused for ever "
            "(workflow_pruned). " + DurationHelp,
            show_default=False,
        ),
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option(help="Only this tenant's workflows and refusals.", show_default=False),
    ] = None,
    batch: Annotated[
        int,
        typer.Option(
            min=1, max=10_000, help="Workflows deleted per transaction (each one short)."
        ),
    ] = 500,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be deleted; change nothing.")
    ] = False,
) -> None:
    """Delete finished workflows whole (row, log, steps, timers, inbox, refused events) through
    the log's one sanctioned delete, in short batches that never hold up live workflows. Each
    leaves its id behind (a tombstone): a start of it is refused (workflow_pruned) until
    --pruned-ids-older-than forgets it. Refused (exit code 2) for a bad duration."""
    from statewright.engine.retention import parse_duration

    older = parse_duration(terminal_older_than)
    rej = None if rejections_older_than is None else parse_duration(rejections_older_than)
    alerts = None if alerts_older_than is None else parse_duration(alerts_older_than)
    ids = None if pruned_ids_older_than is None else parse_duration(pruned_ids_older_than)

    async def go(engine: Engine) -> PruneReport:
        return await engine.prune(
            older,
            archive=archive,
            tenant=tenant,
            batch=batch,
            rejections_older_than=rej,
            alerts_older_than=alerts,
            pruned_ids_older_than=ids,
            dry_run=dry_run,
        )

    report = with_engine(s, go)
    if s.json:
        emit_json(report.to_dict())
        return
    verb = "would delete" if report.dry_run else "deleted"
    out.print(
        f"{verb} {report.workflows} finished workflow(s): {report.transitions} log entries, "
        f"{report.steps} steps, {report.timers} timers, {report.inbox} inputs, "
        f"{report.rejections} refused events, {report.alert_notifications} alert "
        f"notifications, {report.pruned_ids} pruned ids ({report.seconds:.2f}s)"
    )
    if archive is not None and not report.dry_run:
        out.print(f"archived {report.archived} workflow(s) to {escape(str(archive))}")


def import_(
    s: Settings,
    path: Annotated[
        Path,
        typer.Argument(metavar="FILE.jsonl.gz", help="An archive written by prune --archive."),
    ],
    max_record_bytes: Annotated[
        int,
        typer.Option(
            "--max-record-bytes",
            min=1,
            help="The most one line (one workflow) may inflate to; a longer one is refused "
            "unread.",
        ),
    ] = 16 * 1024 * 1024,
) -> None:
    """Restore the workflows of a prune archive, each whole in one transaction. An archive is
    checked, not trusted: a record is refused (listed, exit code 1, nothing written for it;
    the rest goes on) unless it is a finished workflow (terminal, unleased, not due), its id
    consistent with its tenant, every value within the engine's input limits, and replaying
    its log gives its row (with --app naming its machines; else the log's order only, and it
    is listed as unchecked). A workflow already here with the same data is skipped; with
    other data it is refused (exit code 1), nothing written for it. A file that is not an
    archive is refused (exit code 2) before anything is written."""

    async def go(engine: Engine) -> ImportReport:
        return await engine.import_archive(path, max_record_bytes=max_record_bytes)

    report = with_engine(s, go)
    if s.json:
        emit_json(report.to_dict())
    else:
        out.print(
            f"imported {len(report.imported)} workflow(s); {len(report.identical)} already "
            f"here unchanged (skipped)"
        )
        if report.unchecked:
            out.print(
                f"{len(report.unchecked)} imported on machine versions not registered here "
                "(pass --app): replay not checked"
            )
        if report.truncated:
            out.print(
                "the archive ends in an incomplete batch (a prune stopped while writing it; "
                "those workflows were never deleted)"
            )
    for refusal in report.refused[:10]:
        what = f" ({refusal['id']})" if refusal["id"] is not None else ""
        err.print(
            f"refused line {refusal['line']}{what}: error[{refusal['code']}]: "
            f"{refusal['message']}",
            markup=False,
        )
    if len(report.refused) > 10:
        err.print(f"... and {len(report.refused) - 10} more refused record(s) (see --json)")
    if report.conflicts:
        shown = ", ".join(report.conflicts[:10]) + (" ..." if len(report.conflicts) > 10 else "")
        err.print(
            f"refused {len(report.conflicts)} workflow(s) that exist here with other data: "
            f"{escape(shown)}"
        )
    if report.conflicts or report.refused:
        raise typer.Exit(1)
