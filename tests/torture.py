"""The long runs of the repeated random tries: ``--torture`` (or ``STATEWRIGHT_TORTURE=1``).

The SIGKILL tortures (tests/acceptance) kill workers dozens of times by default and hundreds of
times under ``--torture``. The property tests (hypothesis, schemathesis) are repeated random
tries too: by default each runs a smaller number of examples that still covers what it checks
(its docstring says how), and under ``--torture`` its full count (what it ran before this
split, or more).

``configure`` (called by tests/conftest.py's ``pytest_configure``, before any test module is
imported) registers two hypothesis profiles and loads one: ``statewright`` by default and
``statewright-torture`` under ``--torture``. A test that names its own count takes it from
``examples(full, default)``: the full count under ``--torture``, its default otherwise.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

TORTURE_ENV = "STATEWRIGHT_TORTURE"
PROFILE = "statewright"
TORTURE_PROFILE = "statewright-torture"

settings.register_profile(PROFILE, max_examples=25)
"""For a ``@given`` test without a count of its own (none at the moment)."""
settings.register_profile(TORTURE_PROFILE, max_examples=100)
"""Hypothesis's own default count."""


def torture_enabled(config: pytest.Config) -> bool:
    """``--torture`` or ``STATEWRIGHT_TORTURE=1``: the long runs (hundreds of kills)."""
    flag = bool(config.getoption("--torture", default=False))
    return flag or os.environ.get(TORTURE_ENV, "").strip() not in ("", "0")


def configure(config: pytest.Config) -> None:
    """Load the hypothesis profile of this run (``--torture`` or not)."""
    settings.load_profile(TORTURE_PROFILE if torture_enabled(config) else PROFILE)


def torture() -> bool:
    """This run is a ``--torture`` one (the profile ``configure`` loaded)."""
    return settings.get_current_profile_name() == TORTURE_PROFILE


def examples(full: int, default: int) -> int:
    """How many examples a property test runs: ``full`` under ``--torture``, else ``default``
    (never more than ``full``)."""
    return full if torture() else min(default, full)
