"""``statewright serve``: the HTTP API, dashboard, probes and metrics (uvicorn)."""

from __future__ import annotations

import ipaddress
import logging
from typing import Annotated

import typer
import uvicorn

from statewright.access import TokenRegistry
from statewright.cli.loading import build_engine
from statewright.cli.options import Settings
from statewright.cli.output import LogFormat, LogFormatOption, err, use_log_format
from statewright.errors import InvalidInput
from statewright.http import WorkerOptions, create_app

log = logging.getLogger("statewright.http")


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
            "it the service is open (every caller a local admin) and binds only to loopback.",
        ),
    ] = None,
    worker: Annotated[
        bool, typer.Option("--worker", help="Also run a worker in this process.")
    ] = False,
    concurrency: Annotated[int, typer.Option(min=1, help="Worker concurrency.")] = 8,
    log_format: LogFormatOption = LogFormat.text,
) -> None:
    """Serve the HTTP API, dashboard (/), probes and /metrics until SIGINT/SIGTERM."""
    use_log_format(log_format)
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
    )
    if registry is None:
        _notice(log_format, "open mode: no --tokens, every local caller is an admin", warn=True)
    _notice(log_format, f"statewright serving on http://{host}:{port}/")
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=(s.log_level or "info").lower(),
        log_config=None,
        lifespan="on",
    )
