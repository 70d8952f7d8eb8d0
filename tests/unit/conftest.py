from __future__ import annotations

import pytest

from statewright import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
