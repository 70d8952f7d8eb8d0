"""``statewright alerts``: evaluate the alert rules on the store (for cron, CI, monitoring)."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from statewright.cli.loading import with_engine
from statewright.cli.options import Settings
from statewright.cli.output import emit_json, out
from statewright.errors import InvalidInput
from statewright.observability.alerts import AlertThresholds, evaluate_alerts

_DEFAULTS = AlertThresholds()


def _defaults() -> str:
    parts = []
    for f in dataclasses.fields(_DEFAULTS):
        value = getattr(_DEFAULTS, f.name)
        shown = ",".join(sorted(value)) if isinstance(value, frozenset) else f"{value:g}"
        parts.append(f"{f.name}={shown}")
    return "; ".join(parts)


def _parse(items: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InvalidInput(f"--threshold {item!r}: expected NAME=VALUE")
        found[name.strip()] = value.strip()
    return found


def alerts(
    s: Settings,
    tenant: Annotated[
        str | None,
        typer.Option(
            envvar="STATEWRIGHT_TENANT",
            show_envvar=True,
            help="Only this tenant's workflows (default: every tenant).",
        ),
    ] = None,
    threshold: Annotated[
        list[str] | None,
        typer.Option(
            "--threshold",
            metavar="NAME=VALUE",
            envvar="STATEWRIGHT_ALERT_THRESHOLDS",
            show_envvar=True,
            help="Change a threshold (repeatable; the variable takes space-separated "
            "NAME=VALUE items). Seconds for durations and windows; state sets as "
            f"comma-separated names. Defaults: {_defaults()}.",
        ),
    ] = None,
) -> None:
    """Evaluate the alert rules on the store; exit 0 when none fires, 1 when any fires.

    Rules: running_too_long (live workflows in a working state, one with a handler or named
    in working_states, past running_too_long), retry_flapping (retry counter at
    retry_attempts, or retry_transitions transient-error events within retry_window),
    paused_abandoned (waiting for an approval past paused_too_long), blocked_too_long,
    failure_ratio (share of the workflows ended within failure_window that ended in a
    failure_states state, with at least failure_min_ended ended) and invalid_transition_spike
    (rejection_spike refused events of one type within rejection_window).

    Exit codes: 0 no alert fires; 1 at least one alert fires (or the store could not be read:
    then an error line is on stderr and nothing on stdout); 2 a bad option.
    """
    thresholds = _DEFAULTS.with_overrides(_parse(threshold or []))
    found = with_engine(s, lambda e: evaluate_alerts(e, thresholds, tenant=tenant))
    if s.json:
        emit_json({"status": "firing" if found else "ok", "alerts": found})
    elif not found:
        out.print("no alerts")
    else:
        # One line per alert (greppable, readable in a cron mail), its samples below it.
        out.print(f"{len(found)} alert(s) firing", markup=False)
        for a in found:
            where = a.type if a.state is None else f"{a.type}/{a.state}"
            out.print(f"{a.severity.upper()} {a.rule} {where}: {a.message}", markup=False)
            if a.sample_ids:
                out.print(f"  e.g. {', '.join(a.sample_ids)}", markup=False)
    if found:
        raise typer.Exit(1)
