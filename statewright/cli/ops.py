"""Operations: init, stuck, replay, worker."""

from __future__ import annotations

import logging
import shlex
import signal
from typing import TYPE_CHECKING, Annotated, Any

import typer

from statewright.cli.loading import db_path, with_engine
from statewright.cli.options import Settings
from statewright.cli.output import (
    LogFormat,
    LogFormatOption,
    duration,
    emit_json,
    err,
    escape,
    out,
    table,
    use_log_format,
)
from statewright.errors import InvalidInput

if TYPE_CHECKING:
    from statewright.engine import Engine, Worker
    from statewright.engine.core import Stuck
    from statewright.observability.worker_http import WorkerEndpoint

log = logging.getLogger(__name__)


def init(s: Settings) -> None:
    """Create the database, or migrate it to the current schema; print where it is."""

    async def go(engine: Engine) -> dict[str, Any]:
        return {"db": db_path(engine), "types": sorted(t.name for t in engine.types)}

    info = with_engine(s, go)
    if s.json:
        emit_json(info)
    else:
        out.print(f"database ready: [bold]{escape(info['db'])}[/]")
        out.print(f"workflow types: {escape(', '.join(info['types']))}")


STUCK_SHOWN = 1000
"""Stuck workflows the command lists at most (it counts them all)."""


def stuck(s: Settings) -> None:
    """Workflows parked for an operator (from the moment they park) and non-terminal ones
    that have sat in their state longer than its threshold, with what to do about each."""

    async def go(engine: Engine) -> tuple[list[Stuck], int]:
        total = sum(g.count for g in await engine.stuck_counts())
        return await engine.stuck(limit=STUCK_SHOWN), total

    found, total = with_engine(s, go)
    if s.json:
        emit_json(
            [
                {
                    "workflow": x.workflow,
                    "age": x.age,
                    "threshold": x.threshold,
                    "parked": x.parked,
                    "action": x.action,
                    "step": x.step,
                    "todo": _todo(x),
                }
                for x in found
            ]
        )
        return
    if not found:
        out.print("no stuck workflows")
        return
    out.print(
        table(
            f"{total} stuck workflow(s)"
            + (f", the first {len(found)} by type, state and age" if total > len(found) else ""),
            ["id", "type", "state", "in state", "threshold", "why (parked)", "error"],
            [
                (
                    x.workflow.id,
                    x.workflow.type,
                    x.workflow.state,
                    duration(x.age),
                    duration(x.threshold),
                    x.parked or "past threshold",
                    x.workflow.last_error or "",
                )
                for x in found
            ],
        )
    )
    out.print("what to do:", markup=False)
    for x in found:
        out.print(f"  {x.workflow.id}: {_todo(x)}", markup=False, highlight=False)


def _todo(x: Stuck) -> str:
    """What to do about a stuck workflow, as the command to run."""
    wid = shlex.quote(x.workflow.id)
    if x.action == "resolve_step":
        step = shlex.quote(x.step or "")
        return (
            f"the outcome of step {x.step!r} is unknown: check the external system, then "
            f"statewright resolve-step {wid} {step} --applied RESULT_JSON (or --not-applied) "
            "--reason ..."
        )
    if x.action == "resume":
        return f"fix the cause (see its error), then statewright resume {wid} --reason ..."
    return f"see why it has not moved: statewright show {wid}"


def replay(s: Settings, workflow_id: Annotated[str, typer.Argument(help="Workflow id.")]) -> None:
    """Rebuild a workflow from its transition log and compare it with the stored row."""
    replayed = with_engine(s, lambda e: e.check(workflow_id))
    if s.json:
        emit_json({"ok": True, "workflow_id": workflow_id, "replayed": replayed})
        return
    out.print(
        f"[green]OK[/] replaying the log of {escape(workflow_id)} gives the stored row: "
        f"state {escape(str(replayed.state))}, version {replayed.version}"
    )


def worker(
    s: Settings,
    concurrency: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="STATEWRIGHT_CONCURRENCY",
            show_envvar=True,
            help="Workflows run at once.",
        ),
    ] = 8,
    lease_seconds: Annotated[
        float,
        typer.Option(
            min=1.0,
            envvar="STATEWRIGHT_LEASE_SECONDS",
            show_envvar=True,
            help="How long a claim lasts without a heartbeat.",
        ),
    ] = 30.0,
    poll_interval: Annotated[
        float,
        typer.Option(
            min=0.01,
            envvar="STATEWRIGHT_POLL_INTERVAL",
            show_envvar=True,
            help="Longest wait between claims when idle (a wake-up from the store usually "
            "ends it sooner); also how often running handlers are checked for cancel requests.",
        ),
    ] = 0.5,
    grace: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            envvar="STATEWRIGHT_GRACE",
            show_envvar=True,
            help="On SIGTERM/SIGINT, seconds running handlers get to finish before they are "
            "cancelled (their workflows are then left for another worker). Default: no limit; "
            "a second signal cancels them at once.",
        ),
    ] = None,
    cancel_grace: Annotated[
        float,
        typer.Option(
            min=0.0,
            envvar="STATEWRIGHT_CANCEL_GRACE",
            show_envvar=True,
            help="Seconds a handler has to stop by itself after a cancel request before its "
            "task is cancelled.",
        ),
    ] = 5.0,
    threads: Annotated[
        int | None,
        typer.Option(
            min=1,
            envvar="STATEWRIGHT_THREADS",
            show_envvar=True,
            help="Threads that run synchronous handlers, step actions and reconcile hooks "
            "(default: the concurrency, at least 4). Async handlers run on the event loop.",
        ),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Run one round of due work.")] = False,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Run until nothing is due, then exit.")
    ] = False,
    prune_terminal_older_than: Annotated[
        str | None,
        typer.Option(
            "--prune-terminal-older-than",
            metavar="DURATION",
            help="Also prune finished workflows older than this (30d, 12h, ...) every "
            "--prune-every, without an archive (`statewright prune --archive` keeps one). "
            "Safe with several workers.",
            show_default=False,
        ),
    ] = None,
    prune_every: Annotated[
        str,
        typer.Option("--prune-every", metavar="DURATION", help="See --prune-terminal-older-than."),
    ] = "1h",
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            envvar="STATEWRIGHT_METRICS_PORT",
            show_envvar=True,
            help="Serve /metrics (Prometheus) and /livez on this port (0: a free one; the "
            "address is printed). Default: no endpoint.",
        ),
    ] = None,
    metrics_host: Annotated[
        str,
        typer.Option(
            envvar="STATEWRIGHT_METRICS_HOST",
            show_envvar=True,
            help="Bind address of --metrics-port.",
        ),
    ] = "127.0.0.1",
    log_format: LogFormatOption = LogFormat.text,
) -> None:
    """Run the handlers and timers of due workflows (SIGINT/SIGTERM stop it cleanly).

    Recovers work held by dead workers first. Without --once or --until-idle it runs until
    signalled: it stops claiming, hands back work it claimed but has not started, lets the
    running handlers finish and persist (see --grace), releases its leases and exits 0.
    """
    if once and until_idle:
        raise InvalidInput("--once and --until-idle exclude each other")
    from statewright.engine.retention import parse_duration

    prune_older = (
        None if prune_terminal_older_than is None else parse_duration(prune_terminal_older_than)
    )
    prune_period = parse_duration(prune_every)
    use_log_format(log_format)
    # Imported here: OpenTelemetry is only needed by this command.
    from statewright.engine import Worker
    from statewright.observability.otel_setup import configure_from_env
    from statewright.observability.tracing import attach_tracing

    # OTEL_* variables: handler and step spans exported (the optional extra statewright[otel]).
    configure_from_env("statewright-worker", warn=lambda text: err.print(text, markup=False))

    async def go(engine: Engine) -> dict[str, Any]:
        attach_tracing(engine)  # span events per transition when a tracer provider is set
        w = Worker(
            engine,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            poll_interval=poll_interval,
            cancel_grace=cancel_grace,
            threads=threads,
            prune_terminal_older_than=prune_older,
            prune_every=prune_period,
        )
        if log_format is LogFormat.json:
            log.info(
                "worker started",
                extra={"action": "worker_started", "worker_id": w.id, "types": w.types},
            )
        elif not s.json:
            err.print(f"worker {w.id} on {escape(db_path(engine))}: {escape(', '.join(w.types))}")
        endpoint = (
            None if metrics_port is None else _serve_metrics(engine, w, metrics_host, metrics_port)
        )
        try:
            if once or until_idle:  # (run() recovers first, and then every lease_seconds)
                await w.recover()
            if endpoint is not None:
                endpoint.running(True)
            # w.processed counts handler runs (and timers fired), a chain's each: the claims
            # run_once / run_until_idle return would count a chain once.
            if once or until_idle:
                await (w.run_once() if once else w.run_until_idle())
                if prune_older is not None:  # run() prunes periodically; one round here
                    await engine.prune(prune_older)
            else:
                await _run_until_signalled(w, grace)
        finally:
            if endpoint is not None:
                endpoint.running(False)
                endpoint.close()
        # Every round's, not only the first's: a long-running worker recovers as it goes.
        return {
            "worker_id": w.id,
            "recovered": w.recovered,
            "orphans_cancelled": w.orphans_cancelled,
            "processed": w.processed,
        }

    def _serve_metrics(engine: Engine, w: Worker, host: str, port: int) -> WorkerEndpoint:
        # Imported here: only a worker with --metrics-port needs the endpoint.
        from statewright.observability.worker_http import WorkerEndpoint

        endpoint = WorkerEndpoint(engine, w, host, port)
        endpoint.start()
        bound_host, bound_port = endpoint.address
        if log_format is LogFormat.json:
            log.info(
                "worker metrics on %s/metrics",
                endpoint.url,
                extra={"action": "metrics_listening", "host": bound_host, "port": bound_port},
            )
        else:  # on stderr even with --json: stdout carries the command's result
            err.print(f"worker metrics on {escape(endpoint.url)}/metrics and /livez")
        return endpoint

    result = with_engine(s, go)
    if s.json:
        emit_json(result)
    else:
        orphans = result["orphans_cancelled"]
        out.print(
            f"worker stopped: recovered {result['recovered']}, "
            + (f"cancelled {orphans} orphaned child workflow(s), " if orphans else "")
            + f"processed {result['processed']} workflow step(s)"
        )


async def _run_until_signalled(w: Worker, grace: float | None) -> int:
    import asyncio

    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    received = 0

    def on_signal() -> None:
        nonlocal received
        received += 1
        # The first signal stops gracefully; another one cancels the running handlers.
        w.stop(grace if received == 1 else 0.0)

    for sig in signals:
        loop.add_signal_handler(sig, on_signal)
    try:
        await w.run(recover=True)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    return w.processed
