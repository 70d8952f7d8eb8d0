"""What every part of the engine works with: the store, the registered types, the clock, the
input limits, the observers and the one way a row changes.

The parts (commands, operator actions, reads, timers, schedules, cancel, retention, the
worker...) are functions or objects that take a :class:`Runtime`, never the
:class:`~statewright.engine.core.Engine`: the engine is only the public front that builds one
and forwards to them. So a part can be read, tested and changed without the rest, and the
engine's modules import one another in one direction only.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Protocol

from statewright.clock import Clock, SystemClock
from statewright.engine.hooks import Observers
from statewright.engine.registry import Registry
from statewright.engine.transitions import Transitions
from statewright.jsonvalue import Limits
from statewright.store.protocol import FullStore as Store


@dataclass(frozen=True)
class Settings:
    """Engine-wide choices that are not parts of their own."""

    default_stuck_after: float = 86400.0
    """Seconds in a state after which a workflow counts as stuck, for states that declare no
    ``stuck_after``."""
    allow_compatible_changes: bool = False
    """Whether a machine version whose definition only gained states, events or edges since
    the store recorded it is accepted (and recorded anew) rather than refused."""


@dataclass
class Runtime:
    """The engine's shared parts (see the module docstring)."""

    store: Store
    registry: Registry
    clock: Clock = field(default_factory=SystemClock)
    limits: Limits = field(default_factory=Limits)
    observers: Observers = field(default_factory=Observers)
    rng: random.Random = field(default_factory=random.Random)
    settings: Settings = field(default_factory=Settings)
    row_cache_size: int = 4096
    background: set[asyncio.Task[None]] = field(default_factory=set)
    """Work started after a write that nobody awaits (an ended parent's cascade to its
    children): awaited by the engine's close."""
    transitions: Transitions = field(init=False)
    """The one way a workflow's row changes (every command, the worker, cancel, recovery)."""

    def __post_init__(self) -> None:
        self.transitions = Transitions(
            self.store,
            self.registry,
            self.clock,
            self.limits,
            self.observers,
            self.row_cache_size,
        )


class HasRuntime(Protocol):
    """Something that carries a runtime: the :class:`~statewright.engine.core.Engine`, given
    to a :class:`~statewright.engine.worker.Worker` (which uses its runtime, not the
    engine)."""

    @property
    def runtime(self) -> Runtime: ...
