"""``statewright alerts``: evaluate the alert rules on the store (for cron, CI, monitoring)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer

from statewright.cli.loading import with_engine
from statewright.cli.options import Command, Settings
from statewright.cli.output import emit_json, out
from statewright.errors import InvalidInput

DEFAULTS_MARK = "{threshold defaults}"
"""Stands for the thresholds' defaults in --threshold's help until :class:`AlertsCommand`
fills them in."""


def _defaults() -> str:
    from statewright.observability.alerts import AlertThresholds

    defaults = AlertThresholds()
    parts = []
    for f in dataclasses.fields(defaults):
        value = getattr(defaults, f.name)
        shown = ",".join(sorted(value)) if isinstance(value, frozenset) else f"{value:g}"
        parts.append(f"{f.name}={shown}")
    return "; ".join(parts)


class AlertsCommand(Command):
    """The ``alerts`` command, whose --threshold help lists the defaults of
    :class:`~statewright.observability.alerts.AlertThresholds`. They are filled in when the
    command's parameters are first asked for (its help, or a run), not when the command
    table is built: that would import statewright.observability for every command."""

    def get_params(self, ctx: Any) -> Any:
        params = super().get_params(ctx)
        for param in params:
            text = getattr(param, "help", None)
            if isinstance(text, str) and DEFAULTS_MARK in text:
                param.help = text.replace(DEFAULTS_MARK, _defaults())  # type: ignore[attr-defined]
        return params


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
            f"comma-separated names. Defaults: {DEFAULTS_MARK}.",
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
    from statewright.observability.alerts import AlertThresholds, evaluate_alerts

    thresholds = AlertThresholds().with_overrides(_parse(threshold or []))
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
