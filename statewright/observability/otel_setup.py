"""Configure the OpenTelemetry SDK from the standard ``OTEL_*`` environment variables, for
``statewright serve`` and ``statewright worker`` (the optional extra ``statewright[otel]``).

Only when tracing is asked for: ``OTEL_TRACES_EXPORTER``, ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_SERVICE_NAME`` set, ``OTEL_SDK_DISABLED`` not
true, and no tracer provider set already (e.g. by ``opentelemetry-instrument``). Then a
``TracerProvider`` with a ``BatchSpanProcessor`` per exporter named in
``OTEL_TRACES_EXPORTER`` (default ``otlp``) becomes the global one.

The SDK does the rest of the environment handling itself: the resource
(``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), the sampler (``OTEL_TRACES_SAMPLER``),
the batching (``OTEL_BSP_*``), and each exporter its own endpoint, headers, timeout and
compression (``OTEL_EXPORTER_OTLP_*``). Exporters are found by name among the
``opentelemetry_traces_exporter`` entry points, as the SDK's auto-configuration does;
``otlp`` picks the transport ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` /
``OTEL_EXPORTER_OTLP_PROTOCOL`` names (``http/protobuf`` by default: the extra's).

Why not the SDK's own configurator (``opentelemetry.sdk._configuration``, which
opentelemetry-distro wraps): it is private API, and it also sets up metrics and logs
exporters (``OTEL_METRICS_EXPORTER`` defaults to ``otlp``), where statewright exports its
metrics to Prometheus. This is the traces part of it, on the SDK's public classes.

Without the SDK installed, the variables get a warning naming the extra, never a crash.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

log = logging.getLogger("statewright.otel")

EXTRA_HINT = "pip install 'statewright[otel]'"
ASKING = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
)
"""Any of these set asks for traces to be exported."""
GROUP = "opentelemetry_traces_exporter"
OTLP = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}


def wanted(env: Mapping[str, str]) -> bool:
    """Whether the environment asks for traces (and does not disable the SDK)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(env.get(name, "").strip() for name in ASKING)


def exporter_names(env: Mapping[str, str]) -> list[str]:
    """The entry point names of the exporters ``OTEL_TRACES_EXPORTER`` lists."""
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    out: list[str] = []
    for name in names:
        if not name or name == "none":
            continue
        if name == "otlp":
            protocol = (
                env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf"
            ).strip()
            name = OTLP.get(protocol, f"otlp ({protocol})")
        out.append(name)
    return out


def configure_from_env(
    service: str, env: Mapping[str, str] | None = None, *, warn: Any = None
) -> Any:
    """Set the global TracerProvider from the ``OTEL_*`` variables when they ask for one;
    returns it (None when nothing was configured). ``service``: the ``service.name`` when
    ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` name none. ``warn(text)``: how to
    tell the operator about a problem (default: a log warning); it never raises."""
    env = os.environ if env is None else env
    say = warn or (lambda text: log.warning(text, extra={"action": "otel_setup"}))
    if not wanted(env):
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        say(
            "OTEL_* variables are set but the OpenTelemetry SDK is not installed: "
            f"no traces are exported ({EXTRA_HINT})"
        )
        return None
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        log.info(
            "a tracer provider is set already: OTEL_* left to it",
            extra={"action": "otel_setup"},
        )
        return None
    exporters, started = [], []
    for name in exporter_names(env):
        found = list(entry_points(group=GROUP, name=name))
        if not found:
            hint = f" ({EXTRA_HINT})" if name.startswith("otlp") else ""
            say(f"OTEL_TRACES_EXPORTER: no span exporter {name!r} is installed{hint}")
            continue
        try:
            exporters.append(found[0].load()())
            started.append(name)
        except Exception as exc:  # a broken plugin or bad settings: say so, keep serving
            say(f"span exporter {name!r} could not start: {type(exc).__name__}: {exc}")
    if not exporters:
        return None
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    named = env.get("OTEL_SERVICE_NAME") or str(resource.attributes.get(SERVICE_NAME, ""))
    if not named or named.startswith("unknown_service"):
        named = service
    resource = resource.merge(Resource({SERVICE_NAME: named}))
    provider = TracerProvider(resource=resource)  # shuts down (flushes) at exit
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    log.info(
        "traces exported",
        extra={"action": "otel_setup", "exporters": started, "service": named},
    )
    return provider


def flush_at_shutdown(app: Any, provider: Any) -> Any:
    """``app`` (ASGI) exporting its last spans when the server shuts it down (the lifespan's
    shutdown): uvicorn ends a signalled process by raising the signal again after shutdown,
    which skips the SDK's exit-time flush. ``provider`` None: ``app`` unchanged."""
    if provider is None:
        return app

    async def flushing(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                import asyncio

                await asyncio.to_thread(provider.force_flush)
            await send(message)

        await app(scope, receive, sending)

    return flushing


__all__ = ["configure_from_env", "exporter_names", "flush_at_shutdown", "wanted"]
