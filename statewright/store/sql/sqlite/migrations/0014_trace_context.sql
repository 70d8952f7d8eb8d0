-- 0014_trace_context: the W3C trace context (traceparent, tracestate: a JSON object) of the
-- caller that last started or moved the workflow inside a trace, written with its transition;
-- the worker's handler and step spans join that trace. NULL: no trace.

ALTER TABLE workflows ADD COLUMN trace TEXT;
