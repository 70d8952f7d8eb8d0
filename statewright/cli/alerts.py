"""``statewright alerts``: evaluate the alert rules on the store (for cron, CI, monitoring)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from statewright.cli.loading import with_engine
from statewright.cli.options import Command, Settings
from statewright.cli.output import emit_json, out
from statewright.errors import InvalidInput

if TYPE_CHECKING:
    from statewright.engine.core import Engine
    from statewright.observability.alerts import AlertThresholds
    from statewright.observability.delivery import AlertDelivery

AlertWebhookOption = Annotated[
    list[str] | None,
    typer.Option(
        "--alert-webhook",
        metavar="URL",
        envvar="STATEWRIGHT_ALERT_WEBHOOKS",
        show_envvar=True,
        help="Deliver alert notifications (Alertmanager's webhook format) to this URL "
        "(repeatable; the variable takes space-separated URLs).",
    ),
]
AlertIntervalOption = Annotated[
    str,
    typer.Option(
        "--alert-interval",
        envvar="STATEWRIGHT_ALERT_INTERVAL",
        show_envvar=True,
        help="How often the alert rules are evaluated for delivery (10s, 5m, ...).",
    ),
]
AlertMaxAttemptsOption = Annotated[
    int,
    typer.Option(
        "--alert-max-attempts",
        min=1,
        help="Failed sends after which a notification is dead-lettered (an error log line).",
    ),
]
AlertTimeoutOption = Annotated[
    str,
    typer.Option(
        "--alert-timeout",
        help="How long one webhook request may take (a claim on a notification lasts "
        "twice that plus 5s).",
    ),
]

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
    prometheus_rules: Annotated[
        Path | None,
        typer.Option(
            "--prometheus-rules",
            metavar="FILE",
            help="Write a Prometheus rules file equivalent to the rules (over the metrics "
            "statewright exports; '-' for stdout) and exit, evaluating nothing.",
        ),
    ] = None,
    deliver: Annotated[
        bool,
        typer.Option(
            "--deliver",
            help="Keep evaluating every --alert-interval and deliver FIRING/RESOLVED "
            "notifications to every --alert-webhook through the store's outbox, until "
            "SIGINT/SIGTERM.",
        ),
    ] = False,
    alert_webhook: AlertWebhookOption = None,
    alert_interval: AlertIntervalOption = "30s",
    alert_max_attempts: AlertMaxAttemptsOption = 10,
    alert_timeout: AlertTimeoutOption = "10s",
    alert_claim: Annotated[
        str | None,
        typer.Option(
            "--alert-claim",
            help="How long a claim on notifications lasts (default: twice --alert-timeout "
            "plus 5s): what a deliverer killed mid-send leaves is sent by another then.",
        ),
    ] = None,
) -> None:
    """Evaluate the alert rules on the store; exit 0 when none fires, 1 when any fires.

    Rules: running_too_long (live workflows in a working state, one with a handler or named
    in working_states, past running_too_long), retry_flapping (retry counter at
    retry_attempts, or retry_transitions transient-error events within retry_window),
    paused_abandoned (waiting for an approval past paused_too_long), blocked_too_long,
    failure_ratio (share of the workflows ended within failure_window that ended in a
    failure_states state, with at least failure_min_ended ended), invalid_transition_spike
    (rejection_spike refused events of one type within rejection_window) and workflow_parked
    (critical: parked_workflows workflows of one type parked for an operator in one state,
    from the moment they park).

    Exit codes: 0 no alert fires; 1 at least one alert fires (or the store could not be read:
    then an error line is on stderr and nothing on stdout); 2 a bad option.
    """
    from statewright.observability.alerts import AlertThresholds, evaluate_alerts

    thresholds = AlertThresholds().with_overrides(_parse(threshold or []))
    if prometheus_rules is not None:
        _write_rules(s, thresholds, prometheus_rules)
        return
    if deliver:
        _deliver(
            s,
            thresholds,
            tenant,
            alert_webhook,
            interval=alert_interval,
            max_attempts=alert_max_attempts,
            timeout=alert_timeout,
            claim=alert_claim,
        )
        return
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


def _write_rules(s: Settings, thresholds: AlertThresholds, target: Path) -> None:
    from statewright.observability.prom_rules import rules_yaml

    text = with_engine(s, lambda e: _rules_text(e, thresholds, rules_yaml))
    if str(target) == "-":
        sys.stdout.write(text)  # as is: a console would wrap long lines, breaking the YAML
        return
    target.write_text(text)
    if s.json:
        emit_json({"written": str(target)})
    else:
        out.print(f"wrote {target}", markup=False)


async def _rules_text(e: Engine, thresholds: AlertThresholds, render: Any) -> str:
    return str(render(e, thresholds))


def _deliver(
    s: Settings,
    thresholds: AlertThresholds,
    tenant: str | None,
    webhooks: list[str] | None,
    *,
    interval: str,
    max_attempts: int,
    timeout: str,
    claim: str | None,
) -> None:
    from statewright.cli.timers import parse_duration
    from statewright.observability.delivery import AlertDelivery

    urls = [u for item in webhooks or [] for u in item.split()]
    if not urls:
        raise InvalidInput("--deliver needs at least one --alert-webhook URL")
    every, limit = parse_duration(interval), parse_duration(timeout)
    claim_seconds = None if claim is None else parse_duration(claim)

    async def go(engine: Engine) -> None:
        import asyncio
        import signal

        delivery = AlertDelivery(
            engine,
            urls,
            thresholds=thresholds,
            tenant=tenant,
            interval=every,
            max_attempts=max_attempts,
            timeout=limit,
            claim_seconds=claim_seconds,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, delivery.stop)
        await delivery.run()

    with_engine(s, go)


def delivery_for(
    engine: Engine,
    webhooks: list[str],
    interval: str,
    thresholds: list[str],
    *,
    max_attempts: int = 10,
    timeout: str = "10s",
) -> AlertDelivery:
    """The alert delivery ``serve --alert-webhook`` runs (bad options raise InvalidInput)."""
    from statewright.cli.timers import parse_duration
    from statewright.observability.alerts import AlertThresholds
    from statewright.observability.delivery import AlertDelivery

    th = AlertThresholds().with_overrides(_parse(thresholds))
    return AlertDelivery(
        engine,
        webhooks,
        thresholds=th,
        interval=parse_duration(interval),
        max_attempts=max_attempts,
        timeout=parse_duration(timeout),
    )
