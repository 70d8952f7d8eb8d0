"""Observability: Prometheus metrics (:mod:`.metrics`), alert rules evaluated from the store
(:mod:`.alerts`), JSON logs (:mod:`.logs`) and OpenTelemetry span events (:mod:`.tracing`).

Each module is imported on its own (nothing is imported here), so a command that only needs
JSON logs does not load prometheus-client or OpenTelemetry.
"""

from __future__ import annotations
