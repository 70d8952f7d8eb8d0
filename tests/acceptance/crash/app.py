"""The workflow the crash test runs, a fake external service, and fault injection.

Shared by the test process (which creates the workflows and checks the outcome) and the worker
processes (which run them and get killed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import mmap
import os
import random
import signal
import sqlite3
import struct
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from statewright import Applied, MachineBuilder, Next, NotApplied, Run, WorkflowType
from statewright.engine.hooks import TransitionEvent
from statewright.engine.workflow_type import Handler, Reconciled
from statewright.errors import FatalError

TYPE = "crash_order"
# (state the handler runs in, step it runs, event it returns); each event leads to the next
# state, the last one to the terminal "done".
STAGES: tuple[tuple[str, str, str], ...] = (
    ("validating", "validate", "validated"),
    ("reserving", "reserve", "reserved"),
    ("charging", "charge", "charged"),
    ("shipping", "ship", "shipped"),
    ("notifying", "notify", "notified"),
)
STEPS = tuple(step for _, step, _ in STAGES)
PATH = (*(state for state, _, _ in STAGES), "done")
"""The states every workflow must pass through, in order."""
SAFE_TO_REPEAT = frozenset({"notify"})
"""In ``dedupe`` mode, steps without a reconcile hook: re-run blindly, the service's
idempotency absorbs it. In the other modes no step is safe to repeat (a repeated call is a
doubled effect by definition): every step has a reconcile hook."""
TYPE_LEVEL_RECONCILE = frozenset({"reserve", "ship"})
"""Steps reconciled through ``WorkflowType.reconcilers`` (the rest pass ``reconcile=``)."""

POINTS = ("before_step", "before_effect", "during_step", "after_step", "after_transition")
"""Where the worker can kill itself:

before_step: in the handler, before ``run.step`` (nothing recorded for the step yet).
before_effect: in the action, after the ledger committed *executing*, before the service call.
during_step: in the action, after the service applied the effect, before the action returns.
after_step: in the handler after ``run.step`` returned (ledger *done*), before the handler
    returns its event: between the step and its transition.
after_transition: in a transition observer, right after a transition committed.

A plan may also name ``point/step`` (e.g. ``during_step/notify``) to count only that step's hits.
"""

Mode = Literal["dedupe", "count", "fence"]
MODES: tuple[Mode, ...] = ("dedupe", "count", "fence")


def machine() -> Any:
    b = MachineBuilder(TYPE)
    for i, (state, _, _) in enumerate(STAGES):
        b.state(state, initial=i == 0)
    b.state("done", terminal=True).state("failed", terminal=True)
    for _, _, event in STAGES:
        b.event(event)
    b.event("fatal_error")
    for i, (state, _, event) in enumerate(STAGES):
        b.transition(event, state, PATH[i + 1])
    # A fatal error (e.g. a step whose outcome is unknown) is visible as a wrong path.
    b.transition("fatal_error", [s for s, _, _ in STAGES], "failed")
    return b.build()


def append_line(path: str | Path, line: str) -> None:
    """Append one line with a single write(2): once it returns, a SIGKILL cannot lose it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def amount_of(key: str) -> int:
    return sum(key.encode()) % 1000


class FencedOff(FatalError):
    """The service refused a call whose fencing token is lower than one it has seen for the
    key (a worker that lost its claim): nothing was applied."""


class Service:
    """A fake external system with its own SQLite file.

    ``mode``:

    - ``"dedupe"``: honours idempotency keys: ``apply`` records the effect only for a new key
      and returns the stored effect either way (a doubled call is absorbed).
    - ``"count"``: no deduplication at all: every ``apply`` records a new effect row. Exactly
      once can only come from the engine (ledger and reconcile hooks).
    - ``"fence"``: no deduplication by key, but the highest fencing token seen per key is
      recorded, and a call with a lower one is refused (:class:`FencedOff`, no effect).

    Every ``apply`` is counted (``calls``; refused ones in ``refused``); ``lookup`` answers the
    reconcile question (the first effect of the key). Each call is one short transaction (WAL,
    synchronous FULL), so a SIGKILL leaves either all of it or none of it.

    Thread-safe: actions run on the worker's event loop, synchronous reconcile hooks in its
    thread pool; one lock serialises them on the one connection.
    """

    def __init__(
        self, path: str | Path, journal: str | Path | None = None, mode: Mode = "dedupe"
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown service mode {mode!r}")
        self.mode: Mode = mode
        self.journal = journal
        """A file where every reconcile lookup appends ``key verdict`` (for the test's report)."""
        self._lock = threading.Lock()
        self.conn = sqlite3.connect(
            str(path), isolation_level=None, timeout=30, check_same_thread=False
        )
        with self._lock:
            for _ in range(50):  # processes opening a fresh file at once: the WAL switch may fail
                try:
                    self.conn.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError:
                    threading.Event().wait(0.01)
            self.conn.execute("PRAGMA synchronous=FULL")
            for ddl in (
                "CREATE TABLE IF NOT EXISTS effects ("
                " id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, payload TEXT NOT NULL)",
                "CREATE INDEX IF NOT EXISTS effects_key ON effects (key)",
                "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, n INTEGER NOT NULL)",
                "CREATE TABLE IF NOT EXISTS fences (key TEXT PRIMARY KEY, token INTEGER NOT NULL)",
                "CREATE TABLE IF NOT EXISTS refused ("
                " id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, token INTEGER NOT NULL,"
                " highest INTEGER NOT NULL)",
            ):
                self.conn.execute(ddl)

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    @staticmethod
    def _effect(row: tuple[int, str, str]) -> dict[str, Any]:
        return {"effect_id": row[0], "key": row[1], **json.loads(row[2])}

    def apply(
        self, key: str, payload: Mapping[str, Any], token: int | None = None
    ) -> dict[str, Any]:
        """Apply the effect of ``key`` (see the modes); ``token`` is the caller's fencing
        token (required in ``fence`` mode)."""
        if self.mode == "fence" and token is None:
            raise ValueError("fence mode needs the caller's fencing token")
        with self._lock:
            c = self.conn
            c.execute("BEGIN IMMEDIATE")
            try:
                refusal = self._fence(key, token) if self.mode == "fence" else None
                if refusal is not None:
                    c.execute(
                        "INSERT INTO refused (key, token, highest) VALUES (?, ?, ?)",
                        (key, token, refusal),
                    )
                    c.execute("COMMIT")
                    raise FencedOff(f"{key}: fencing token {token} < {refusal} seen before")
                c.execute(
                    "INSERT INTO calls (key, n) VALUES (?, 1)"
                    " ON CONFLICT (key) DO UPDATE SET n = n + 1",
                    (key,),
                )
                row = self._first(key) if self.mode == "dedupe" else None
                if row is None:
                    text = json.dumps(dict(payload), sort_keys=True)
                    cur = c.execute(
                        "INSERT INTO effects (key, payload) VALUES (?, ?)", (key, text)
                    )
                    row = (int(cur.lastrowid or 0), str(key), text)
                c.execute("COMMIT")
            except FencedOff:
                raise
            except BaseException:
                c.execute("ROLLBACK")
                raise
        assert row is not None
        return self._effect(row)

    def _fence(self, key: str, token: int | None) -> int | None:
        """In the open transaction: the highest token seen if ``token`` is lower (refused),
        else None after recording ``token`` as the highest."""
        assert token is not None
        found = self.conn.execute("SELECT token FROM fences WHERE key = ?", (key,)).fetchone()
        if found is not None and token < found[0]:
            return int(found[0])
        self.conn.execute(
            "INSERT INTO fences (key, token) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET token = excluded.token",
            (key, token),
        )
        return None

    def lookup(self, key: str, token: int | None = None) -> Reconciled:
        """The reconcile hook: ``Applied`` with the key's first effect, or ``NotApplied``.

        In ``fence`` mode, given the asking claim's fencing token (``token``, or the key's own
        ``fencing_token`` when it is a ``StepKey``), the lookup first raises the key's fence to
        it, in the same transaction: a call of an older claim still in flight is refused when
        it lands, even between this answer and the new claim's own call. An older token than
        the fence is refused (:class:`FencedOff`).
        """
        if token is None:
            token = getattr(key, "fencing_token", None)
        with self._lock:
            c = self.conn
            if self.mode == "fence" and token is not None:
                c.execute("BEGIN IMMEDIATE")
                try:
                    refusal = self._fence(key, token)
                    if refusal is not None:
                        c.execute(
                            "INSERT INTO refused (key, token, highest) VALUES (?, ?, ?)",
                            (key, token, refusal),
                        )
                        c.execute("COMMIT")
                        raise FencedOff(f"{key}: lookup with token {token} < {refusal}")
                    row = self._first(key)
                    c.execute("COMMIT")
                except FencedOff:
                    raise
                except BaseException:
                    c.execute("ROLLBACK")
                    raise
            else:
                row = self._first(key)
        verdict: Reconciled = NotApplied() if row is None else Applied(self._effect(row))
        if self.journal is not None:
            append_line(self.journal, f"{key} {type(verdict).__name__}")
        return verdict

    def _first(self, key: str) -> tuple[int, str, str] | None:
        row = self.conn.execute(
            "SELECT id, key, payload FROM effects WHERE key = ? ORDER BY id LIMIT 1", (key,)
        ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), str(row[2]))

    def effects(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self.conn.execute("SELECT id, key, payload FROM effects ORDER BY id").fetchall()
        return [self._effect(r) for r in rows]

    def calls(self) -> dict[str, int]:
        with self._lock:
            return dict(self.conn.execute("SELECT key, n FROM calls").fetchall())

    def refusals(self) -> list[tuple[str, int, int]]:
        """``(key, token, highest seen)`` of every call refused in ``fence`` mode."""
        with self._lock:
            rows = self.conn.execute("SELECT key, token, highest FROM refused ORDER BY id")
            return [(str(k), int(t), int(h)) for k, t, h in rows.fetchall()]


class InFlight:
    """A counter of the actions in flight in one worker process, shared with the test.

    The worker increments it (in a small file it maps into memory) just before the delay that
    precedes a service call and decrements it after the delay that follows, so the test can
    aim a kill from outside at a moment when calls are in flight. One file per worker slot;
    a new worker zeroes it (its predecessor may have died mid-call).
    """

    SIZE = 8

    def __init__(self, path: str | Path, *, create: bool = False) -> None:
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            if os.fstat(fd).st_size < self.SIZE:
                os.ftruncate(fd, self.SIZE)
            self._map = mmap.mmap(fd, self.SIZE)
        finally:
            os.close(fd)

    @property
    def value(self) -> int:
        return int(struct.unpack_from("q", self._map, 0)[0])

    def set(self, value: int) -> None:
        struct.pack_into("q", self._map, 0, value)

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        self.set(self.value + 1)  # only the worker's event loop thread writes it
        try:
            yield
        finally:
            self.set(self.value - 1)

    def close(self) -> None:
        self._map.close()


class Faults:
    """Kills this process with SIGKILL when a point is reached for the planned n-th time.

    ``plan`` maps a point of :data:`POINTS` to the occurrence (1-based) that kills; the marker
    line goes to ``kill_log`` first so the test can tell the kill happened there.
    ``call_delay``: the longest random pause just before and just after each service call (so
    that kills from outside land while calls are in flight); ``inflight`` counts those calls.
    """

    def __init__(
        self,
        plan: Mapping[str, int] | None = None,
        kill_log: str | Path | None = None,
        rng: random.Random | None = None,
        max_jitter: float = 0.0,
        call_delay: float = 0.0,
        inflight: InFlight | None = None,
    ) -> None:
        unknown = {p.partition("/")[0] for p in plan or {}} - set(POINTS)
        if unknown:
            raise ValueError(f"unknown kill points {sorted(unknown)}")
        self.plan = dict(plan or {})
        self.kill_log = kill_log
        self.rng = rng or random.Random()
        self.max_jitter = max_jitter
        self.call_delay = call_delay
        self.inflight = inflight
        self.seen: dict[str, int] = dict.fromkeys(POINTS, 0)

    def hit(self, point: str, workflow_id: str, detail: str) -> None:
        for name in (point, f"{point}/{detail}"):
            self.seen[name] = self.seen.get(name, 0) + 1
            if self.plan.get(name) == self.seen[name]:
                self._die(name, workflow_id, detail)

    def _die(self, name: str, workflow_id: str, detail: str) -> None:
        if self.kill_log is not None:
            line = f"{name} {self.seen[name]} {workflow_id} {detail} pid={os.getpid()}"
            append_line(self.kill_log, line)
        os.kill(os.getpid(), signal.SIGKILL)
        os._exit(99)  # unreachable: SIGKILL cannot be caught

    async def jitter(self) -> None:
        """A short random pause, so that concurrent workflows interleave differently."""
        await asyncio.sleep(self.rng.uniform(0, self.max_jitter) if self.max_jitter else 0)

    async def around_call(self) -> None:
        """The random pause just before and after a service call (0 to ``call_delay``)."""
        if self.call_delay:
            await asyncio.sleep(self.rng.uniform(0, self.call_delay))

    def calling(self) -> contextlib.AbstractContextManager[None]:
        return self.inflight.calling() if self.inflight is not None else contextlib.nullcontext()

    def on_transition(self, ev: TransitionEvent) -> None:
        self.hit("after_transition", ev.after.id, ev.after.state)


def _handler(step: str, event: str, service: Service, faults: Faults) -> Handler:
    safe_to_repeat = service.mode == "dedupe" and step in SAFE_TO_REPEAT

    async def handler(run: Run) -> Next:
        faults.hit("before_step", run.id, step)
        await faults.jitter()

        async def action(key: Any) -> dict[str, Any]:  # a StepKey: str + fencing_token
            faults.hit("before_effect", run.id, step)
            await faults.jitter()
            with faults.calling():
                await faults.around_call()
                effect = service.apply(
                    key, {"step": step, "amount": amount_of(key)}, token=key.fencing_token
                )
                await faults.around_call()
            faults.hit("during_step", run.id, step)
            await faults.jitter()
            return effect

        if safe_to_repeat:
            result = await run.step(step, action, safe_to_repeat=True)
        elif step in TYPE_LEVEL_RECONCILE:
            result = await run.step(step, action)  # the type's hook (it gets the token too)
        else:
            result = await run.step(step, action, reconcile=service.lookup)
        faults.hit("after_step", run.id, step)
        await faults.jitter()
        # last_step: a search attribute, written with the transition (verify checks it)
        return Next(
            event, {"effect_id": result["effect_id"]}, context={step: result, "last_step": step}
        )

    return handler


def make_type(service: Service, faults: Faults | None = None) -> WorkflowType:
    """The workflow type; in ``count`` and ``fence`` modes every step has a reconcile hook
    (none is safe to repeat); in ``dedupe`` mode :data:`SAFE_TO_REPEAT` steps have none."""
    faults = faults or Faults()
    return WorkflowType(
        machine(),
        handlers={state: _handler(step, event, service, faults) for state, step, event in STAGES},
        reconcilers={step: service.lookup for step in TYPE_LEVEL_RECONCILE},
        search_attributes=("last_step",),
    )
