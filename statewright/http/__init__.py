"""The HTTP service (``statewright serve``)."""

from __future__ import annotations

from statewright.http.app import WorkerOptions, create_app

__all__ = ["WorkerOptions", "create_app"]
