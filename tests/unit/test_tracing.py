"""OpenTelemetry: a span event per transition, on the current span or a short span of its own,
recorded by the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from statewright import ManualClock
from statewright.definition.builtin.agent_task import agent_task_machine
from statewright.errors import IllegalTransition
from statewright.http import create_app
from statewright.observability.tracing import EVENT_NAME, attach_tracing
from statewright.testing import memory_engine


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(exporter))
    return p


@pytest.fixture
def global_provider(provider: TracerProvider) -> Iterator[TracerProvider]:
    """``provider`` as the process's global TracerProvider for one test (it can be set only
    once per process, so the globals are swapped and put back, as OpenTelemetry's own test
    helpers do)."""
    saved = trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    trace.set_tracer_provider(provider)
    try:
        yield provider
    finally:
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved


def transitions(spans: tuple[ReadableSpan, ...]) -> list[dict[str, object]]:
    return [dict(e.attributes or {}) for s in spans for e in s.events if e.name == EVENT_NAME]


async def test_each_transition_gets_a_short_span_when_none_is_recording(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with memory_engine([agent_task_machine()], ManualClock()) as engine:
        attach_tracing(engine, provider.get_tracer("test"))
        await engine.start("agent_task", workflow_id="t1", actor="agent-7", tenant="acme")
        await engine.send("t1", "start", actor="agent-7")
        with pytest.raises(IllegalTransition):
            await engine.send("t1", "start")  # refused: no transition, no event
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == [EVENT_NAME, EVENT_NAME]
    assert all(s.kind is trace.SpanKind.INTERNAL for s in spans)
    start, moved = transitions(spans)
    assert start == {
        "statewright.workflow.id": "t1",
        "statewright.workflow.type": "agent_task",
        "statewright.workflow.tenant": "acme",
        "statewright.to_state": "planned",
        "statewright.event": "$start",
        "statewright.actor": "agent-7",
        "statewright.version": 1,
    }
    assert moved["statewright.from_state"] == "planned"
    assert (moved["statewright.to_state"], moved["statewright.version"]) == ("running", 2)


async def test_the_event_goes_to_the_current_span_when_one_is_recording(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = provider.get_tracer("test")
    async with memory_engine([agent_task_machine()], ManualClock()) as engine:
        attach_tracing(engine, tracer)
        with tracer.start_as_current_span("handle request"):
            await engine.start("agent_task", workflow_id="t1")
            await engine.send("t1", "start")
    [span] = exporter.get_finished_spans()
    assert span.name == "handle request"
    assert [e["statewright.event"] for e in transitions((span,))] == ["$start", "start"]


async def test_nothing_is_recorded_without_a_tracer(exporter: InMemorySpanExporter) -> None:
    async with memory_engine([agent_task_machine()], ManualClock()) as engine:
        observer = attach_tracing(engine)
        assert attach_tracing(engine) is observer  # attached once
        await engine.start("agent_task", workflow_id="t1")
    assert exporter.get_finished_spans() == ()


async def test_a_global_sdk_provider_is_used_and_the_app_attaches_tracing(
    global_provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with memory_engine([agent_task_machine()], ManualClock()) as engine:
        app = create_app(engine, manage_engine=False)  # open mode: a local admin
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sw") as client:
            r = await client.post("/v1/workflows", json={"type": "agent_task", "id": "t1"})
            assert r.status_code == 201, r.text
            r = await client.post("/v1/workflows/t1/events", json={"event": "start"})
            assert r.status_code == 200, r.text
    events = transitions(exporter.get_finished_spans())
    assert [(e["statewright.event"], e["statewright.actor"]) for e in events] == [
        ("$start", "local"),
        ("start", "local"),
    ]
