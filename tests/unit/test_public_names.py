"""The public names: a short root, every exception in one module, no vestigial names."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import statewright
from statewright import errors
from statewright.engine.steps import Run

FIRST_WORKFLOW = {
    # a machine
    "Machine",
    "MachineBuilder",
    "State",
    "Event",
    "Transition",
    "Guard",
    "Assign",
    # a type and its handlers
    "WorkflowType",
    "Run",
    "SyncRun",
    "Next",
    "RetryPolicy",
    "Applied",
    "NotApplied",
    # an engine on a store, a worker
    "Engine",
    "SyncEngine",
    "Worker",
    "SQLiteStore",
    "Store",
    "store_from_url",
    "ManualClock",
    # the errors a caller catches, or a handler raises, routinely
    "StatewrightError",
    "IllegalTransition",
    "InvalidInput",
    "WorkflowNotFound",
    "TransientError",
    "FatalError",
    "__version__",
}


def test_the_root_names_what_a_first_workflow_writes() -> None:
    assert set(statewright.__all__) == FIRST_WORKFLOW
    assert len(statewright.__all__) == len(FIRST_WORKFLOW) == 28  # was 63
    for name in statewright.__all__:
        assert getattr(statewright, name) is not None
    for moved in ("WorkflowPruned", "Limits", "WorkflowRow", "Dispatched", "agent_task_type"):
        assert not hasattr(statewright, moved), moved


def _exceptions(cls: type[BaseException]) -> set[type[BaseException]]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _exceptions(sub)
    return found


def test_every_statewright_error_is_defined_in_statewright_errors() -> None:
    for module in pkgutil.walk_packages(statewright.__path__, "statewright."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    elsewhere = sorted(
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _exceptions(errors.StatewrightError)
        if cls.__module__.startswith("statewright.") and cls.__module__ != "statewright.errors"
    )
    assert elsewhere == []
    codes = [
        cls.code
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.StatewrightError)
    ]
    assert len(codes) == len(set(codes))  # each code names one class


def test_vestigial_names_are_gone() -> None:
    assert not hasattr(errors, "StepError")  # never raised
    # One way to read a pending cancel: the request in full (a SyncRun forwards to its Run).
    assert hasattr(Run, "cancel_request") and not hasattr(Run, "cancel_requested")
