"""A span exporter for tests in other processes: the SDK's in-memory exporter that also
appends each exported batch to the JSON-lines file ``STATEWRIGHT_TEST_SPAN_FILE`` names (the
batch processor exports when the process flushes or shuts its tracer provider down).
Installed as the ``span_file`` entry point of the
``opentelemetry_traces_exporter`` group by tests/acceptance/test_traces.py, so a real
``statewright worker`` selects it with ``OTEL_TRACES_EXPORTER=span_file``, as it would
``otlp`` or ``console``."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

ENV = "STATEWRIGHT_TEST_SPAN_FILE"


def span_record(span: Any) -> dict[str, Any]:
    ctx, parent = span.context, span.parent
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_id": None if parent is None else f"{parent.span_id:016x}",
        "parent_trace_id": None if parent is None else f"{parent.trace_id:032x}",
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "events": [e.name for e in span.events],
        "service": span.resource.attributes.get("service.name"),
    }


class SpanFileExporter(InMemorySpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        with open(os.environ[ENV], "a", encoding="utf-8") as f:
            for span in spans:
                f.write(json.dumps(span_record(span)) + "\n")
        return result
