"""OpenTelemetry: span events per transition, and the HTTP request's trace context.

When a tracer is configured (one passed to :func:`attach_tracing`, or a real global
TracerProvider, e.g. the SDK's), every committed transition adds a span event named
``statewright.transition`` to the current span (the HTTP request's, the caller's, a worker's
handler span), or, when no span is recording, to a short span of its own with the same name.
Without a tracer it costs one lookup per transition and records nothing.

Spans across processes (the trace context stored with a workflow, the worker's handler and
step spans) are :mod:`statewright.engine.tracecontext`'s; :class:`TraceContextMiddleware`
makes an HTTP request's ``traceparent`` header the current context when no instrumentation
(e.g. opentelemetry-instrumentation-fastapi) made a server span current already, so the
workflows a request starts or moves carry its trace even without an SDK in the server.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from statewright._version import __version__
from statewright.engine.core import Engine
from statewright.engine.hooks import TransitionEvent

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

EVENT_NAME = "statewright.transition"
SCOPE = "statewright"


def transition_attributes(ev: TransitionEvent) -> dict[str, AttributeValue]:
    """The span event's attributes: no from_state or duration_ms on a start (it has no state
    before), and the guard and the step (``step.name``, ``step.attempt``) only when known (see
    :class:`~statewright.engine.hooks.TransitionEvent`)."""
    row = ev.after
    attrs: dict[str, AttributeValue] = {
        "statewright.workflow.id": row.id,
        "statewright.workflow.type": row.type,
        "statewright.workflow.tenant": row.tenant,
        "statewright.to_state": row.state,
        "statewright.event": ev.event,
        "statewright.actor": ev.actor,
        "statewright.version": row.version,
    }
    if ev.before is not None:
        attrs["statewright.from_state"] = ev.before.state
        duration = ev.duration_ms
        if duration is not None:
            attrs["statewright.duration_ms"] = duration
    if ev.guard is not None:
        attrs["statewright.guard"] = ev.guard
    if ev.step is not None:
        attrs["statewright.step.name"] = ev.step
    if ev.attempt is not None:
        attrs["statewright.step.attempt"] = ev.attempt
    return attrs


class TransitionTracer:
    """The transition observer. ``tracer`` None: the global provider's, when one is set."""

    def __init__(self, tracer: Tracer | None = None) -> None:
        self.tracer = tracer
        self._global: tuple[object, Tracer | None] | None = None

    def _tracer(self) -> Tracer | None:
        if self.tracer is not None:
            return self.tracer
        provider = trace.get_tracer_provider()
        if self._global is None or self._global[0] is not provider:
            # The default provider is a proxy to a no-op until someone sets a real one.
            unset = isinstance(provider, ProxyTracerProvider | NoOpTracerProvider)
            tracer = None if unset else provider.get_tracer(SCOPE, __version__)
            self._global = (provider, tracer)
        return self._global[1]

    def __call__(self, ev: TransitionEvent) -> None:
        current = trace.get_current_span()
        if current.is_recording():
            current.add_event(EVENT_NAME, transition_attributes(ev))
            return
        tracer = self._tracer()
        if tracer is None:
            return
        attrs = transition_attributes(ev)
        span = tracer.start_span(EVENT_NAME, kind=SpanKind.INTERNAL, attributes=attrs)
        try:
            span.add_event(EVENT_NAME, attrs)
        finally:
            span.end()


class TraceContextMiddleware:
    """Pure ASGI middleware: a request that carries a W3C ``traceparent`` header and comes
    with no current span runs with that remote span context current (what the engine stores
    with the workflows it starts or moves). A request without the header, or inside a span
    already, passes untouched. Pure ASGI, not Starlette's ``BaseHTTPMiddleware``: that would
    buffer streamed bodies (see :mod:`statewright.http.limits`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or trace.get_current_span().get_span_context().is_valid:
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name in _TRACE_HEADERS
        }
        if "traceparent" not in carrier:
            await self.app(scope, receive, send)
            return
        token = otel_context.attach(_W3C.extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            otel_context.detach(token)


_TRACE_HEADERS = (b"traceparent", b"tracestate")
_W3C = TraceContextTextMapPropagator()

_attached: weakref.WeakKeyDictionary[Engine, TransitionTracer] = weakref.WeakKeyDictionary()


def attach_tracing(engine: Engine, tracer: Tracer | None = None) -> TransitionTracer:
    """Add the transition span events to ``engine`` (once; a later ``tracer`` replaces the
    earlier one)."""
    found = _attached.get(engine)
    if found is None:
        found = _attached[engine] = TransitionTracer(tracer)
        engine.observers.transition.append(found)
    elif tracer is not None:
        found.tracer = tracer
    return found


__all__ = [
    "EVENT_NAME",
    "TraceContextMiddleware",
    "TransitionTracer",
    "attach_tracing",
    "transition_attributes",
]
