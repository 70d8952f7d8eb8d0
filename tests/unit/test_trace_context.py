"""W3C trace context stored with workflows; a worker's handler and step spans join the trace
of the request that started or moved the workflow (in one process here; across processes in
tests/acceptance/test_traces.py). Recorded by the SDK's in-memory exporter."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

from statewright import ManualClock, Worker
from statewright.engine import tracecontext
from statewright.http import create_app
from statewright.observability import otel_setup
from statewright.observability.tracing import EVENT_NAME, attach_tracing
from statewright.testing import memory_engine
from tests.acceptance.apps.traced import TYPES

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """An SDK provider as the process's global one for one test (it can be set only once
    per process: the globals are swapped and put back, as OpenTelemetry's test helpers do)."""
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(exporter))
    saved = trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    trace.set_tracer_provider(p)
    try:
        yield p
    finally:
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def traceparent(stored: str | None) -> str:
    """The stored ``traceparent``'s trace and parent ids (the flags vary by SDK version)."""
    assert stored is not None
    return str(json.loads(stored)["traceparent"])[:-3]


async def test_a_start_and_a_send_inside_a_span_store_its_context(
    provider: TracerProvider,
) -> None:
    tracer = provider.get_tracer("test")
    async with memory_engine(TYPES, ManualClock()) as engine:
        assert (await engine.start("order", workflow_id="untraced")).row.trace is None
        with tracer.start_as_current_span("request") as request:
            row = (await engine.start("order", workflow_id="o1")).row
        ctx = request.get_span_context()
        want = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}"
        assert traceparent(row.trace) == want
        assert traceparent((await engine.get("o1")).trace) == want  # stored, not just returned
        # A transition outside any span leaves it; one inside another span replaces it.
        await engine.patch_context("o1", {"x": 1}, reason="test", actor="ops")
        assert traceparent((await engine.get("o1")).trace) == want
        with tracer.start_as_current_span("second") as second:
            moved = (await engine.send("o1", "fail")).row
        other = second.get_span_context()
        assert traceparent(moved.trace) == f"00-{other.trace_id:032x}-{other.span_id:016x}"
        assert traceparent((await engine.get("o1")).trace) == traceparent(moved.trace)


async def test_nothing_is_captured_or_recorded_without_a_span_or_provider(
    exporter: InMemorySpanExporter,
) -> None:
    assert tracecontext.capture() is None
    assert tracecontext.tracer() is None
    async with memory_engine(TYPES, ManualClock()) as engine:
        await engine.start("order", workflow_id="o1")
        await Worker(engine).run_until_idle()
        row = await engine.get("o1")
        assert (row.state, row.trace) == ("done", None)
    assert exporter.get_finished_spans() == ()


async def test_handler_and_step_spans_join_the_request_trace_and_chain(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = provider.get_tracer("test")
    async with memory_engine(TYPES, ManualClock()) as engine:
        attach_tracing(engine)
        with tracer.start_as_current_span("request") as request:
            await engine.start("order", workflow_id="o1", tenant="acme")
        await Worker(engine).run_until_idle()
        assert (await engine.get("o1")).state == "done"
    spans = by_name(exporter.get_finished_spans())
    charging = spans["statewright.handler order.charging"]
    charge = spans["statewright.step charge"]
    shipping = spans["statewright.handler order.shipping"]
    ship = spans["statewright.step ship"]
    trace_id = request.get_span_context().trace_id
    assert {s.context.trace_id for s in (charging, charge, shipping, ship)} == {trace_id}
    assert charging.parent is not None and charging.parent.span_id == (
        request.get_span_context().span_id
    )
    assert charge.parent is not None and charge.parent.span_id == charging.context.span_id
    # The next handler is a child of the one whose transition moved the workflow there.
    assert shipping.parent is not None and shipping.parent.span_id == charging.context.span_id
    assert ship.parent is not None and ship.parent.span_id == shipping.context.span_id
    assert charging.kind is SpanKind.CONSUMER and charge.kind is SpanKind.INTERNAL
    attrs = dict(charging.attributes or {})
    assert attrs["statewright.workflow.id"] == "o1"
    assert attrs["statewright.workflow.type"] == "order"
    assert attrs["statewright.workflow.tenant"] == "acme"
    assert attrs["statewright.state"] == "charging"
    assert attrs["statewright.attempt"] == 1
    assert (attrs["statewright.outcome"], attrs["statewright.event"]) == ("next", "charged")
    step = dict(charge.attributes or {})
    assert step["statewright.step.name"] == "charge"
    assert step["statewright.step.key"] == "o1:charge"
    assert (step["statewright.attempt"], step["statewright.outcome"]) == (1, "done")
    # Today's span events per transition land on the handler span that made them.
    assert [
        (e.attributes or {})["statewright.event"] for e in charging.events if e.name == EVENT_NAME
    ] == ["charged"]


async def test_a_failing_step_is_recorded_as_an_error_on_both_spans(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = provider.get_tracer("test")
    async with memory_engine(TYPES, ManualClock()) as engine:
        with tracer.start_as_current_span("request"):
            await engine.start("order", {"fail": True}, workflow_id="o1")
        await Worker(engine).run_until_idle()
        assert (await engine.get("o1")).state == "failed"
    spans = by_name(exporter.get_finished_spans())
    ship, shipping = spans["statewright.step ship"], spans["statewright.handler order.shipping"]
    for span in (ship, shipping):
        assert span.status.status_code is StatusCode.ERROR
        assert [
            (e.attributes or {})["exception.type"] for e in span.events if e.name == "exception"
        ] == ["statewright.errors.FatalError"]
        assert dict(span.attributes or {})["statewright.outcome"] == "failed"


async def test_a_traceparent_header_is_stored_with_the_workflow_it_starts() -> None:
    # No SDK needed in the server: the header's context is what is stored.
    async with memory_engine(TYPES, ManualClock()) as engine:
        app = create_app(engine, manage_engine=False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sw") as client:
            r = await client.post(
                "/v1/workflows",
                json={"type": "order", "id": "o1"},
                headers={"traceparent": PARENT, "tracestate": "vendor=x"},
            )
            assert r.status_code == 201, r.text
            r = await client.post("/v1/workflows", json={"type": "order", "id": "o2"})
            assert r.status_code == 201, r.text
        stored = (await engine.get("o1")).trace
        assert stored is not None
        assert json.loads(stored) == {"traceparent": PARENT, "tracestate": "vendor=x"}
        assert (await engine.get("o2")).trace is None


def test_unreadable_stored_context_starts_a_new_trace() -> None:
    for stored in (None, "", "not json", "[1]", '{"traceparent": "garbage"}'):
        ctx = tracecontext.extract(stored)
        assert not trace.get_current_span(ctx).get_span_context().is_valid


def test_which_environments_ask_for_traces() -> None:
    assert not otel_setup.wanted({})
    assert otel_setup.wanted({"OTEL_SERVICE_NAME": "x"})
    assert otel_setup.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not otel_setup.wanted({"OTEL_SERVICE_NAME": "x", "OTEL_SDK_DISABLED": "true"})
    assert not otel_setup.wanted({"OTEL_TRACES_EXPORTER": "none"})
    assert otel_setup.exporter_names({}) == ["otlp_proto_http"]
    assert otel_setup.exporter_names({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == [
        "otlp_proto_grpc"
    ]
    assert otel_setup.exporter_names({"OTEL_TRACES_EXPORTER": "console, otlp"}) == [
        "console",
        "otlp_proto_http",
    ]


def test_the_environment_configures_the_sdk_provider(provider: TracerProvider) -> None:
    # A provider set already (here the fixture's) is left alone ...
    assert otel_setup.configure_from_env("svc", {"OTEL_TRACES_EXPORTER": "console"}) is None
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    warnings: list[str] = []
    # ... otherwise the exporters found are set up, and a missing one is named.
    env = {"OTEL_TRACES_EXPORTER": "console,nosuch", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}
    configured = otel_setup.configure_from_env("svc", env, warn=warnings.append)
    try:
        assert configured is trace.get_tracer_provider()
        assert isinstance(configured, TracerProvider)
        assert configured.resource.attributes["service.name"] == "svc"
        assert warnings == ["OTEL_TRACES_EXPORTER: no span exporter 'nosuch' is installed"]
    finally:
        configured.shutdown()


def test_without_the_sdk_the_variables_get_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK made unimportable, as in an install without the extra.
    monkeypatch.setitem(__import__("sys").modules, "opentelemetry.sdk.trace", None)
    warnings: list[str] = []
    assert (
        otel_setup.configure_from_env("svc", {"OTEL_SERVICE_NAME": "x"}, warn=warnings.append)
        is None
    )
    assert len(warnings) == 1 and "statewright[otel]" in warnings[0]
