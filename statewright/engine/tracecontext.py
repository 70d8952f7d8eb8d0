"""W3C trace context carried with workflows, and the worker's handler and step spans.

- **Capture**: a start or a transition made while a span is current (an HTTP request's, a
  caller's own) stores that span's W3C trace context (``traceparent``, ``tracestate``, as a
  JSON object) on the workflow's row, in the transaction that writes it
  (:attr:`~statewright.types.WorkflowRow.trace`). A write made outside any span leaves the
  stored one as it is.
- **Handler spans**: a worker runs each handler inside a span
  ``statewright.handler <type>.<state>`` (kind CONSUMER), a child of the stored context, so
  it joins the trace of the request that started or moved the workflow; the transition the
  handler's outcome makes is captured inside that span, so the next handler is its child and
  a chain of handlers stays in one trace.
- **Step spans**: each ``run.step`` gets a child span ``statewright.step <name>``; the
  action runs inside it (an instrumented HTTP client's spans nest under it).

OpenTelemetry is only looked up here, never imported by this module: a process that never
imported the API has no current span and no tracer provider (so nothing to capture or
record), and the engine costs one dictionary lookup per write without it
(``statewright show`` must not load OpenTelemetry: tests/integration/test_cli_start.py).
Spans are recorded only when a real tracer provider is set (the SDK's); without one a handler
costs a lookup or two and records nothing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from statewright.types import WorkflowRow

API = "opentelemetry.trace"
SCOPE = "statewright"
HANDLER_SPAN = "statewright.handler"
STEP_SPAN = "statewright.step"

_global: tuple[object, Tracer | None] | None = None
_w3c: TraceContextTextMapPropagator | None = None


def capture() -> str | None:
    """The current span's W3C trace context as JSON text (``traceparent`` and, if any,
    ``tracestate``), or None when no valid span context is current."""
    api = sys.modules.get(API)
    if api is None:
        return None  # nothing imported the OpenTelemetry API: no span can be current
    if not api.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    # The W3C propagator itself, not the global one: baggage (user data, unbounded) is not
    # stored with a workflow, and what is stored reads back whatever OTEL_PROPAGATORS says.
    _propagator().inject(carrier)
    return json.dumps(carrier, sort_keys=True, separators=(",", ":")) if carrier else None


def extract(stored: str | None) -> Context:
    """The context a stored trace context (:func:`capture`) describes: an empty one (a new
    trace) when there is none or it is unreadable."""
    from opentelemetry.context import Context

    if not stored:
        return Context()
    try:
        carrier = json.loads(stored)
    except ValueError:
        return Context()
    if not isinstance(carrier, dict):
        return Context()
    text = {str(k): str(v) for k, v in carrier.items()}
    return _propagator().extract(text, context=Context())


def _propagator() -> TraceContextTextMapPropagator:
    global _w3c
    if _w3c is None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _w3c = TraceContextTextMapPropagator()
    return _w3c


def tracer() -> Tracer | None:
    """The global provider's tracer, or None while no real provider is set (the default
    proxy to a no-op)."""
    global _global
    api = sys.modules.get(API)
    if api is None:
        return None
    provider = api.get_tracer_provider()
    if _global is None or _global[0] is not provider:
        from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider

        from statewright._version import __version__

        unset = isinstance(provider, ProxyTracerProvider | NoOpTracerProvider)
        _global = (provider, None if unset else provider.get_tracer(SCOPE, __version__))
    return _global[1]


def _attrs(row: WorkflowRow) -> dict[str, Any]:
    return {
        "statewright.workflow.id": row.id,
        "statewright.workflow.type": row.type,
        "statewright.workflow.tenant": row.tenant,
        "statewright.workflow.version": row.version,
        "statewright.machine_version": row.machine_version,
        "statewright.state": row.state,
    }


@contextmanager
def handler_span(row: WorkflowRow) -> Iterator[None]:
    """Run a worker's handler (and the write of its outcome) inside its span, the current
    span meanwhile; nothing without a tracer provider. An exception that escapes is recorded
    on the span (a handler's own failure, which the worker handles, is recorded by
    :func:`failed`)."""
    found = tracer()
    if found is None:
        yield
        return
    from opentelemetry.trace import SpanKind, use_span

    attrs = _attrs(row)
    attrs["statewright.attempt"] = row.attempts + 1
    span = found.start_span(
        f"{HANDLER_SPAN} {row.type}.{row.state}",
        context=extract(row.trace),
        kind=SpanKind.CONSUMER,
        attributes=attrs,
    )
    with use_span(span, end_on_exit=True):
        yield


@contextmanager
def step_span(row: WorkflowRow, name: str, key: str) -> Iterator[None]:
    """Run one ``run.step`` inside its span (a child of the current one: the handler's, or
    one the handler started); nothing without a tracer provider."""
    found = tracer()
    if found is None:
        yield
        return
    from opentelemetry.trace import SpanKind, use_span

    attrs = _attrs(row)
    attrs["statewright.step.name"] = name
    attrs["statewright.step.key"] = key
    span = found.start_span(f"{STEP_SPAN} {name}", kind=SpanKind.INTERNAL, attributes=attrs)
    with use_span(span, end_on_exit=True):
        try:
            yield
        except Exception:
            note(outcome="failed")
            raise
        except BaseException:
            note(outcome="cancelled")
            raise


def _current() -> Span | None:
    api = sys.modules.get(API)
    if api is None:
        return None
    span: Span = api.get_current_span()
    return span if span.is_recording() else None


def note(**attrs: str | int | float | bool | None) -> None:
    """Set ``statewright.<name>`` attributes on the current span (the handler's or step's),
    when one is recording; None values are left out."""
    span = _current()
    if span is None:
        return
    for name, value in attrs.items():
        if value is not None:
            span.set_attribute(f"statewright.{name}", value)


def failed(exc: BaseException, outcome: str = "failed") -> None:
    """Record a failure the worker handles on the current span: the exception, status
    ERROR, and the outcome."""
    span = _current()
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:1000]))
    span.set_attribute("statewright.outcome", outcome)


__all__ = [
    "HANDLER_SPAN",
    "STEP_SPAN",
    "capture",
    "extract",
    "failed",
    "handler_span",
    "note",
    "step_span",
    "tracer",
]
