"""``statewright bulk``: one operator action over every workflow a filter matches (see
:mod:`statewright.engine.bulk`), e.g. after an incident::

    statewright bulk cancel --type order --state charging --older-than 1h \\
        --reason "incident 42" --dry-run
    statewright bulk cancel --type order --state charging --older-than 1h \\
        --reason "incident 42" --operation-id incident-42

Give the same ``--operation-id`` to run it again after an interruption: what it applied
before is counted ``replayed``, not applied twice.
"""

from __future__ import annotations

import math
import re
import time
from typing import Annotated

import typer

from statewright.cli.loading import with_engine
from statewright.cli.options import Settings
from statewright.cli.output import emit_json, escape, out
from statewright.errors import InvalidInput

_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def age_seconds(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h`` or ``1d`` in seconds; InvalidInput otherwise."""
    m = _AGE.fullmatch(text.strip())
    if m is None:
        raise InvalidInput(f"invalid age {text!r}: a number with s, m, h or d (e.g. 15m)")
    return float(m.group(1)) * _UNIT[m.group(2)]


def bulk(
    s: Settings,
    action: Annotated[
        str,
        typer.Argument(help="cancel, resume, retry, move or fork.", show_default=False),
    ],
    reason: Annotated[str, typer.Option(help="Why (in each workflow's log).")],
    type_: Annotated[str | None, typer.Option("--type", help="Only this type.")] = None,
    state: Annotated[str | None, typer.Option(help="Only workflows in this state.")] = None,
    version: Annotated[
        int | None, typer.Option(help="Only workflows on this machine version.")
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option(help="Only workflows in their state for longer (e.g. 90s, 15m, 2h, 1d)."),
    ] = None,
    entered_before: Annotated[
        float | None,
        typer.Option(
            help="Only workflows that entered their state before this time (Unix seconds): "
            "a re-run of a fork or a move passes the first run's (printed), so what that run "
            "made or moved is not matched again.",
            show_default=False,
        ),
    ] = None,
    parked: Annotated[
        str | None,
        typer.Option(
            help="Only parked workflows: 'any', or a reason (e.g. step_outcome_unknown).",
        ),
    ] = None,
    to_state: Annotated[
        str | None, typer.Option("--to", help="For move: the state to move them to.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count and sample the matches; change nothing.")
    ] = False,
    operation_id: Annotated[
        str | None,
        typer.Option(
            help="Names the operation: running it again applies nothing twice (default: new).",
            show_default=False,
        ),
    ] = None,
    batch: Annotated[int, typer.Option(min=1, max=5000, help="Workflows read at a time.")] = 500,
    sample: Annotated[int, typer.Option(min=0, max=100, help="Ids shown.")] = 10,
    actor: Annotated[str, typer.Option(help="Who acts (recorded).")] = "cli",
    include: Annotated[
        str,
        typer.Option(
            help="Which workflows: 'live' (the default), 'finished' (to fork them, say) or "
            "'all'.",
        ),
    ] = "live",
    search: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            help="Only workflows whose search attribute NAME has VALUE (NAME=VALUE; "
            "repeatable: all must match).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Cancel, resume (parked), retry (run the state's handler again), move (--to) or fork
    every live workflow matching the filter. Prints the counts: matched, applied, replayed
    (done by an earlier run of the same --operation-id), skipped (not allowed now), failed."""
    from statewright.engine.bulk import BulkFilter, cutoff
    from statewright.engine.search import parse

    if entered_before is not None and not math.isfinite(entered_before):
        raise InvalidInput("--entered-before must be a finite time (Unix seconds)")
    age = None if older_than is None else age_seconds(older_than)
    ends = {"live": False, "finished": True, "all": None}
    if include not in ends:
        raise InvalidInput(f"--include is live, finished or all, not {include!r}")
    where = BulkFilter(
        terminal=ends[include],
        type=type_,
        state=state,
        version=version,
        entered_before=cutoff(entered_before, age, time.time()),
        parked=parked is not None,
        parked_reason=None if parked in (None, "any") else parked,
        search=parse(search or ()),
    )
    done = with_engine(
        s,
        lambda e: e.bulk(
            action,
            where,
            reason=reason,
            actor=actor,
            dry_run=dry_run,
            operation_id=operation_id,
            to_state=to_state,
            batch=batch,
            sample=sample,
        ),
    )
    if s.json:
        emit_json(done)
        return
    if dry_run:
        out.print(
            f"dry run of bulk {escape(action)} [bold]{escape(done.operation_id)}[/]: "
            f"{done.matched} workflow(s) match; nothing changed"
        )
    else:
        out.print(
            f"bulk {escape(action)} [bold]{escape(done.operation_id)}[/]: {done.matched} "
            f"matched, {done.applied} applied, {done.replayed} replayed, {done.skipped} "
            f"skipped, {done.failed} failed"
        )
    if action in ("fork", "move") and done.entered_before is not None:
        out.print(f"run it again with --entered-before {done.entered_before!r}")
    if done.sample:
        out.print("sample: " + ", ".join(escape(i) for i in done.sample))
    for wid, why in done.errors.items():
        out.print(f"  {escape(wid)}: {escape(why)}")
