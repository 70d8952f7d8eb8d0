from __future__ import annotations

from tests.http.conftest import clock, engine  # noqa: F401 - both stores, ManualClock
