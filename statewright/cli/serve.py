"""``statewright serve``: the HTTP API, dashboard, probes and metrics (uvicorn).

Uvicorn runs with its h11 HTTP implementation, pinned: uvicorn has a setting for h11's
request-head buffer (``h11_max_incomplete_event_size``), none for httptools'. That buffer is
set above the app's header limit, so oversized headers get the app's JSON 431 rather than the
parser's plain-text 400 (see :mod:`statewright.http.limits`).
"""

from __future__ import annotations

import gc
import ipaddress
import logging
from typing import Annotated

import typer

from statewright.cli.alerts import (
    AlertIntervalOption,
    AlertMaxAttemptsOption,
    AlertTimeoutOption,
    AlertWebhookOption,
)
from statewright.cli.loading import build_engine
from statewright.cli.options import Settings
from statewright.cli.output import LogFormat, LogFormatOption, err, use_log_format
from statewright.errors import InvalidInput

# uvicorn and statewright.http (FastAPI, Starlette, pydantic; the MCP SDK only with the first
# request to /mcp) are imported by serve() itself: every other command, and `statewright --help`,
# would pay for them here.
log = logging.getLogger("statewright.http")

# statewright.http.limits' defaults, repeated for the options below: importing that module
# loads FastAPI (tests/integration/test_cli_start.py checks that the values agree).
MAX_BODY_BYTES = 1_048_576
MAX_HEADER_BYTES = 16_384
PARSER_HEADROOM = 4
MAX_WAIT = 30.0
"""statewright.http.longpoll.MAX_WAIT, for the same reason."""


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _notice(fmt: LogFormat, text: str, *, warn: bool = False) -> None:
    """A line for the operator: plain on stderr, or a log record with --log-format json."""
    if fmt is LogFormat.json:
        log.log(logging.WARNING if warn else logging.INFO, text, extra={"action": "serve"})
    else:
        err.print(text, style="yellow" if warn else None, markup=False)


GC_THRESHOLD = (50_000, 20, 100)
"""The collector's thresholds in a service: Python's default (700 allocations) runs a young
collection every few requests, and the older ones stall every request in flight (measured:
GET p99 113 ms at 50 connections, 38 ms with these; 1,473 against 1,760 req/s)."""


def tune_gc() -> None:
    """Freeze what start-up allocated (modules, the app: never garbage, no longer scanned by
    each collection) and make collections rarer (:data:`GC_THRESHOLD`). The cycles a request
    leaves behind are still collected, just in larger batches."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def serve(
    s: Settings,
    host: Annotated[
        str, typer.Option(envvar="STATEWRIGHT_HOST", show_envvar=True, help="Bind address.")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(min=0, max=65535, envvar="STATEWRIGHT_PORT", show_envvar=True),
    ] = 8080,
    tokens: Annotated[
        str | None,
        typer.Option(
            "--tokens",
            envvar="STATEWRIGHT_TOKENS_FILE",
            show_envvar=True,
            help="API tokens file (YAML/JSON: token or sha256, actor, roles, tenant). Without "
            "it the service is open (every caller of the API and dashboard a local admin; of "
            "/mcp, the agent role only) and binds only to loopback.",
        ),
    ] = None,
    worker: Annotated[
        bool, typer.Option("--worker", help="Also run a worker in this process.")
    ] = False,
    concurrency: Annotated[int, typer.Option(min=1, help="Worker concurrency.")] = 8,
    max_body_bytes: Annotated[
        int,
        typer.Option(
            min=0,
            envvar="STATEWRIGHT_MAX_BODY_BYTES",
            show_envvar=True,
            help="The largest request body taken; a larger one is refused (413 "
            "payload_too_large) and never read past the limit.",
        ),
    ] = MAX_BODY_BYTES,
    max_header_bytes: Annotated[
        int,
        typer.Option(
            min=1024,
            envvar="STATEWRIGHT_MAX_HEADER_BYTES",
            show_envvar=True,
            help="The largest total of request headers taken (431 headers_too_large above "
            f"it; heads over {PARSER_HEADROOM}x this get the HTTP parser's plain 400).",
        ),
    ] = MAX_HEADER_BYTES,
    metrics_auth: Annotated[
        bool,
        typer.Option(
            "--metrics-auth",
            envvar="STATEWRIGHT_METRICS_AUTH",
            show_envvar=True,
            help="/metrics wants a token with the ops or admin role (open by default, for "
            "scrapers).",
        ),
    ] = False,
    max_wait: Annotated[
        float,
        typer.Option(
            min=0,
            max=3600,
            envvar="STATEWRIGHT_MAX_WAIT",
            show_envvar=True,
            help="The longest a long-polling GET /v1/workflows/{id} waits, in seconds (a "
            "larger ?timeout= is cut to it).",
        ),
    ] = MAX_WAIT,
    alert_webhook: AlertWebhookOption = None,
    alert_interval: AlertIntervalOption = "30s",
    alert_max_attempts: AlertMaxAttemptsOption = 10,
    alert_timeout: AlertTimeoutOption = "10s",
    alert_threshold: Annotated[
        list[str] | None,
        typer.Option(
            "--alert-threshold",
            metavar="NAME=VALUE",
            envvar="STATEWRIGHT_ALERT_THRESHOLDS",
            show_envvar=True,
            help="Change an alert threshold for delivery (as `statewright alerts --threshold`).",
        ),
    ] = None,
    subscriptions: Annotated[
        bool,
        typer.Option(
            "--subscriptions",
            envvar="STATEWRIGHT_SUBSCRIPTIONS",
            show_envvar=True,
            help="Pump the webhook subscriptions and deliver their notifications (also done "
            "with --alert-webhook).",
        ),
    ] = False,
    log_format: LogFormatOption = LogFormat.text,
) -> None:
    """Serve the HTTP API, dashboard (/), probes and /metrics until SIGINT/SIGTERM; with
    --alert-webhook, also evaluate the alert rules every --alert-interval and deliver their
    notifications, and the subscriptions' (with --subscriptions alone: only those)."""
    import uvicorn

    from statewright.access import TokenRegistry
    from statewright.http import WorkerOptions, create_app, limits
    from statewright.observability.otel_setup import configure_from_env, flush_at_shutdown

    use_log_format(log_format)
    # OTEL_* variables: spans exported (the optional extra statewright[otel]).
    traces = configure_from_env(
        "statewright", warn=lambda text: _notice(log_format, text, warn=True)
    )
    registry = TokenRegistry.from_file(tokens) if tokens else None
    if registry is None and not _loopback(host):
        raise InvalidInput(
            f"refusing to serve on {host!r} without --tokens: open mode is for localhost only"
        )
    engine = build_engine(s)
    app = create_app(
        engine,
        registry,
        worker=WorkerOptions(concurrency=concurrency) if worker else None,
        max_body_bytes=max_body_bytes,
        max_header_bytes=max_header_bytes,
        metrics_auth=metrics_auth,
        max_wait=max_wait,
    )
    webhooks = [u for item in alert_webhook or [] for u in item.split()]
    if webhooks:
        from statewright.cli.alerts import delivery_for
        from statewright.observability.delivery import run_with_app

        delivery = delivery_for(
            engine,
            webhooks,
            alert_interval,
            alert_threshold or [],
            max_attempts=alert_max_attempts,
            timeout=alert_timeout,
        )
        run_with_app(app, delivery)
    elif subscriptions:
        from statewright.observability.delivery import AlertDelivery, run_with_app

        run_with_app(app, AlertDelivery(engine, alerts=False))
    if registry is None:
        _notice(
            log_format,
            "open mode: no --tokens, every local caller of the API and dashboard is an admin "
            "(MCP at /mcp: the agent role only)",
            warn=True,
        )
    _notice(log_format, f"statewright serving on http://{host}:{port}/")
    tune_gc()
    uvicorn.run(
        flush_at_shutdown(app, traces),
        host=host,
        port=port,
        log_level=(s.log_level or "info").lower(),
        log_config=None,
        lifespan="on",
        http="h11",
        h11_max_incomplete_event_size=limits.parser_limit(max_header_bytes),
    )
