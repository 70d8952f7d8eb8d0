"""What a handler run's processing can end in, and what happened to it: the values
:func:`statewright.engine.outcome.decide` reads and returns.

The outcomes (:data:`Outcome`: :class:`Advance`, :class:`Idle`, :class:`Retry`...) each name
one write (or none) that :func:`statewright.engine.settle.settle` makes; what happened
(:data:`Happened`: :class:`Ended`, :class:`Failed`, :class:`Refused`) is what ``decide`` is
asked about; :class:`Claim` is the workflow a write is for. Data only: the choice is made in
:mod:`statewright.engine.outcome`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statewright.engine.transitions import Defer, Fire
from statewright.engine.workflow_type import HandlerResult, WorkflowType
from statewright.errors import (
    IdempotencyKeyReused,
    IllegalTransition,
    InvalidInput,
    InvalidPayload,
    LeaseLost,
    VersionConflict,
)
from statewright.types import Lease, WorkflowRow, quick_init

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime
    from statewright.engine.steps import Run

# -- what is written ----------------------------------------------------------------------------


@quick_init
@dataclass(frozen=True)
class Advance:
    """The handler's next event; it carries the run's last step *done* record."""

    fire: Fire
    chain: bool
    """The next state's handler may run under this claim (see ``Worker.may_chain``)."""


@dataclass(frozen=True)
class Idle:
    """The handler returned None: stay, consume the inputs it took, arm its timers."""

    defer: Defer


@dataclass(frozen=True)
class FireTimer:
    """A due timer's event, consuming the timer (a recurring one re-armed)."""

    fire: Fire
    has_handler: bool
    """The state has a handler (a retry it owes must not hide behind a refused timer)."""


@dataclass(frozen=True)
class KeepTimer:
    """A recurring timer whose event was refused: consumed and re-armed, state kept."""

    defer: Defer


@dataclass(frozen=True)
class LetGo:
    """Nothing to run (a timer was consumed meanwhile): release, re-armed from the pending
    timers, keeping the counters, error and parked reason."""


@dataclass(frozen=True)
class Retry:
    """A transient failure: the ``on_transient`` event (a Fire) or the handler again after
    the backoff (a Defer)."""

    change: Fire | Defer
    delay: float
    fallback: Defer
    """The park written if the machine refuses the event."""


@dataclass(frozen=True)
class Fail:
    """A fatal failure (or spent budget): the ``on_fatal`` event; or the
    ``step_outcome_unknown`` event."""

    fire: Fire
    fallback: Defer


@dataclass(frozen=True)
class Park:
    """Stay for an operator (the workflow shows up as stuck), logged as an error."""

    defer: Defer
    message: str
    extra: dict[str, Any] = field(default_factory=dict)
    fallback: Defer | None = None
    """The park written instead if this one is refused by the machine (None: raise)."""
    cause: BaseException | None = None
    """The refusal that led here (logged with its traceback)."""


@dataclass(frozen=True)
class CancelRun:
    """The type's cancel event, with the handler's partial results."""

    fire: Fire
    park: bool
    """Park when the machine refuses it (otherwise the refusal is raised to the caller)."""


@dataclass(frozen=True)
class Release:
    """Hand the claim back as it is, for this or another worker to claim again."""


@dataclass(frozen=True)
class Drop:
    """The lease is gone (another worker took the workflow over): write nothing."""

    logged: bool = False


@dataclass(frozen=True)
class Refuse:
    """Raise ``error`` to the caller (a cancel it asked for without parking was refused)."""

    error: Exception


Outcome = (
    Advance
    | Idle
    | FireTimer
    | KeepTimer
    | LetGo
    | Retry
    | Fail
    | Park
    | CancelRun
    | Release
    | Drop
    | Refuse
)

# -- what happened ------------------------------------------------------------------------------


@quick_init
@dataclass(frozen=True)
class Ended:
    """How a handler run ended, as the worker saw it."""

    result: HandlerResult = None
    raised: BaseException | None = None
    """What the handler raised: Cancelled, LeaseLost or another Exception."""
    stopped: bool = False
    """The worker cancelled its task: for a deadline, a forced cancel, a lost lease or an
    expired shutdown grace (the flags below say which)."""
    lost: bool = False
    timed_out: bool = False
    killed_for_cancel: bool = False
    abandoned: bool = False
    chain: bool = False


@dataclass(frozen=True)
class Failed:
    """A failure of the row's current state that the type's retry policy applies to."""

    error: BaseException


@dataclass(frozen=True)
class Refused:
    """``outcome``'s write was refused with ``error``."""

    outcome: Outcome
    error: Exception


Happened = Ended | Failed | Refused

REFUSALS = (
    VersionConflict,
    LeaseLost,
    IllegalTransition,
    InvalidPayload,
    InvalidInput,
    IdempotencyKeyReused,
)


@dataclass
class Claim:
    """The workflow a write is for, as read, and who writes it."""

    rt: Runtime
    wtype: WorkflowType
    row: WorkflowRow
    lease: Lease | None
    actor: str
    """The actor of the handler's events, and the requester of a cancel that names none."""
    run: Run | None = None
    """The handler's run, whose pending step record and inputs go with the outcome."""


__all__ = [
    "REFUSALS",
    "Advance",
    "CancelRun",
    "Claim",
    "Drop",
    "Ended",
    "Fail",
    "Failed",
    "FireTimer",
    "Happened",
    "Idle",
    "KeepTimer",
    "LetGo",
    "Outcome",
    "Park",
    "Refuse",
    "Refused",
    "Release",
    "Retry",
]
