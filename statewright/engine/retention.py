"""Retention: delete finished workflows whole (prune), archive them first, import them back.

Prune works in batches, each its own short transaction in the store, so live transitions wait
at most for one batch: a batch reads up to ``batch`` finished workflows older than the cutoff
(oldest first), writes them to the archive when one is given (fsynced), then deletes each one
still at the version read, with everything keyed by it (log, steps, timers, inbox, refused
events), through the log's one sanctioned delete (see :mod:`statewright.store.retention_sql`).

Crash safety: the archive is durable before the delete starts, so a crash between the two
loses nothing (the next prune archives those workflows again: the archive may hold a workflow
twice, which import treats as the same workflow). Several prunes at once (workers) are safe:
PostgreSQL skips rows another prune holds, SQLite runs one writer at a time, and a workflow
already gone is simply not counted.

The archive is gzip'd JSON lines, one workflow per line. Each batch is appended as a gzip
member of its own, so a crash while writing one leaves a truncated last member: import reads
every complete line and reports the tail (those workflows were never deleted).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import math
import os
import re
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statewright import jsonvalue
from statewright.engine import search
from statewright.engine.replay import check_archived
from statewright.errors import InvalidInput, StatewrightError, UnknownWorkflowType
from statewright.store.retention_sql import RELATED, SEARCH_KEY, check_restorable, comparable

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger(__name__)

DEFAULT_BATCH = 500
MAX_BATCH = 10_000
BATCH_SECONDS = 0.01
"""How long one delete transaction should take: a batch that took longer halves the next one
(down to 1 workflow), one that took under half of it doubles it (up to ``batch``); after each
batch prune pauses as long as the batch took. SQLite has one writer at a time (across
processes): the pause leaves the write lock free for live transitions. PostgreSQL locks only
the finished rows it deletes, but a batch's WAL, I/O and CPU compete with live transitions'
commits: the pause keeps prune to about half of what it could take (measured with
bench/bench_prune.py: a 20 ms budget doubled the p99 of live sends during a prune)."""
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_duration(text: str) -> float:
    """Seconds of a duration like ``0s``, ``90m``, ``12h``, ``30d``, ``2w`` (one number, one
    unit); InvalidInput otherwise. (Hand-written: five units need no dependency.)"""
    m = _DURATION.match(text or "")
    if m is None:
        raise InvalidInput(
            f"bad duration {text!r}: a number and a unit, s, m, h, d or w (e.g. 90m, 30d)"
        )
    return float(m.group(1)) * _UNITS[m.group(2)]


@dataclass
class PruneReport:
    """What a prune deleted (with ``dry_run``: would delete), row counts per table."""

    workflows: int = 0
    transitions: int = 0
    steps: int = 0
    timers: int = 0
    inbox: int = 0
    rejections: int = 0
    """Refused events deleted: those of the pruned workflows and those past their cutoff."""
    alert_notifications: int = 0
    """Alert notifications delivered or dead-lettered before their cutoff, deleted."""
    pruned_ids: int = 0
    """Tombstones of workflows pruned before their cutoff, deleted: those ids may be started
    again (a pruned workflow's id is otherwise refused for ever)."""
    seconds: float = 0.0
    archived: int = 0
    """Records written to the archive (a workflow a concurrent prune took may be among them)."""
    batches: int = 0
    dry_run: bool = False
    cutoff: float = 0.0
    """Workflows that finished before this time (epoch seconds) were pruned."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def rate(self) -> float:
        """Workflows per second."""
        return self.workflows / self.seconds if self.seconds > 0 else 0.0


@dataclass
class ImportReport:
    """What an import restored."""

    imported: list[str] = field(default_factory=list)
    identical: list[str] = field(default_factory=list)
    """Already in the store exactly as archived (a re-import, or a duplicate line): skipped."""
    conflicts: list[str] = field(default_factory=list)
    """In the store with other data: refused, nothing written for them."""
    refused: list[dict[str, Any]] = field(default_factory=list)
    """Records that failed a check (``line``, ``id`` when readable, ``code``, ``message``):
    nothing written for them; the rest of the archive went on."""
    unchecked: list[str] = field(default_factory=list)
    """Imported, but their machine version is not registered here: replay not checked."""
    truncated: bool = False
    """The archive ends in an incomplete batch (a prune stopped while writing it; those
    workflows were not deleted)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number of seconds")
    if not math.isfinite(value) or value < 0:
        raise InvalidInput(f"{what} must be a finite number of seconds, 0 or more")
    return float(value)


async def prune(
    rt: Runtime,
    terminal_older_than: float,
    *,
    archive: str | os.PathLike[str] | None = None,
    tenant: str | None = None,
    batch: int = DEFAULT_BATCH,
    rejections_older_than: float | None = None,
    alerts_older_than: float | None = None,
    pruned_ids_older_than: float | None = None,
    dry_run: bool = False,
) -> PruneReport:
    """Delete finished workflows whose final state was entered more than
    ``terminal_older_than`` seconds ago, whole (row, log, steps, timers, inbox, refused
    events), in batches of ``batch``, each its own short transaction; and refused events
    older than ``rejections_older_than`` seconds. With ``archive`` (a ``.jsonl.gz`` path,
    appended to) each batch is written and fsynced before it is deleted. ``dry_run`` counts
    and changes nothing. Raises InvalidInput.

    ``alerts_older_than``: also delete the alert notifications
    (:mod:`statewright.observability.delivery`) created more than that many seconds ago and
    delivered or dead-lettered since; pending ones stay. Deleting one cannot make it be sent
    again: a notification is written only with a change of the alert's recorded state, which
    stays.

    Each pruned workflow leaves a tombstone (its id, tenant, type and when), written with its
    delete: a start of that id, or with the idempotency key it came from, is refused with
    :class:`~statewright.errors.WorkflowPruned` rather than creating a workflow that would run
    the same steps under the same keys. Tombstones are kept until ``pruned_ids_older_than``
    (seconds since their prune) deletes them; only then may such an id be started again."""
    older = _check_seconds(terminal_older_than, "terminal_older_than")
    rej_older = (
        None
        if rejections_older_than is None
        else _check_seconds(rejections_older_than, "rejections_older_than")
    )
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise InvalidInput(f"batch must be a whole number from 1 to {MAX_BATCH}")
    if tenant is not None and (not isinstance(tenant, str) or not tenant):
        raise InvalidInput("tenant must be a non-empty string")
    alerts_older = (
        None
        if alerts_older_than is None
        else _check_seconds(alerts_older_than, "alerts_older_than")
    )
    if alerts_older is not None and tenant is not None:
        raise InvalidInput("alert notifications are not kept per tenant: prune them without one")
    ids_older = (
        None
        if pruned_ids_older_than is None
        else _check_seconds(pruned_ids_older_than, "pruned_ids_older_than")
    )
    writer = None if archive is None or dry_run else ArchiveWriter(archive)
    store = rt.store
    now = rt.clock.now()
    report = PruneReport(dry_run=dry_run, cutoff=now - older)
    started = time.perf_counter()
    after: tuple[float, str] | None = None
    size = batch
    budget = BATCH_SECONDS
    while True:
        keys = await store.prunable(report.cutoff, tenant=tenant, after=after, limit=size)
        if not keys:
            break
        after = (keys[-1][2], keys[-1][0])  # page on: skipped ones are not read again
        report.batches += 1
        ids = [k[0] for k in keys]
        if dry_run:
            records = await store.export_workflows(ids)
            report.workflows += len(records)
            for rec in records:
                for table in RELATED:
                    setattr(report, table, getattr(report, table) + len(rec[table]))
            continue
        held = [(k[0], k[1]) for k in keys]
        if writer is not None:
            records = await store.export_workflows(ids)
            # Durable before anything is deleted (in a thread: fsync blocks); only what was
            # archived, at the version archived, is deleted.
            await asyncio.to_thread(writer.append, records)
            report.archived += len(records)
            held = [(r["id"], int(r["workflow"]["version"])) for r in records]
        took = time.perf_counter()
        deleted, counts = await store.delete_workflows(held, now) if held else ([], {})
        took = time.perf_counter() - took
        for wid in deleted:
            rt.transitions.rows.drop(wid)
        for name, n in counts.items():
            setattr(report, name, getattr(report, name) + n)
        if took > budget and size > 1:
            size = max(1, size // 2)
        elif took < budget / 2 and size < batch:
            size = min(batch, size * 2)
        await asyncio.sleep(took)  # see BATCH_SECONDS
    if rej_older is not None:
        before = now - rej_older
        if dry_run:
            report.rejections += await store.prune_rejections(
                before, tenant=tenant, limit=0, dry_run=True
            )
        else:
            while True:
                took = time.perf_counter()
                n = await store.prune_rejections(before, tenant=tenant, limit=batch * 10)
                took = time.perf_counter() - took
                report.rejections += n
                if n < batch * 10:
                    break
                await asyncio.sleep(took)
    if alerts_older is not None:
        before = now - alerts_older
        if dry_run:
            report.alert_notifications = await store.prune_alert_notifications(
                before, limit=0, dry_run=True
            )
        else:
            while True:
                took = time.perf_counter()
                n = await store.prune_alert_notifications(before, limit=batch * 10)
                took = time.perf_counter() - took
                report.alert_notifications += n
                if n < batch * 10:
                    break
                await asyncio.sleep(took)
    if ids_older is not None:
        before = now - ids_older
        if dry_run:
            report.pruned_ids = await store.forget_pruned_ids(
                before, tenant=tenant, limit=0, dry_run=True
            )
        else:
            while True:
                took = time.perf_counter()
                n = await store.forget_pruned_ids(before, tenant=tenant, limit=batch * 10)
                took = time.perf_counter() - took
                report.pruned_ids += n
                if n < batch * 10:
                    break
                await asyncio.sleep(took)
    report.seconds = time.perf_counter() - started
    if not dry_run:
        log.info(
            "pruned finished workflows",
            extra={"action": "pruned", **report.to_dict()},
        )
    return report


def check_worker_options(older: float | None, every: float) -> None:
    """A worker's prune options (InvalidInput when bad)."""
    if older is not None:
        _check_seconds(older, "prune_terminal_older_than")
    if _check_seconds(every, "prune_every") <= 0:
        raise InvalidInput("prune_every must be more than 0 seconds")


def prune_periodically(rt: Runtime, older: float, every: float) -> asyncio.Task[None]:
    """A worker's periodic prune (``Worker(prune_terminal_older_than=older,
    prune_every=every)``): no archive (several workers would each write their own, and a
    worker has no place to keep one); a failed round is logged and the next one tries
    again."""

    async def loop() -> None:
        while True:
            try:
                report = await prune(rt, older)
                if report.workflows:
                    log.info(
                        "worker pruned finished workflows",
                        extra={"action": "worker_pruned", "workflows": report.workflows},
                    )
            except StatewrightError:
                log.exception("prune failed", extra={"action": "prune_failed"})
            await asyncio.sleep(every)

    return asyncio.create_task(loop(), name="statewright-prune")


class ArchiveWriter:
    """Appends records to a ``.jsonl.gz`` file, one gzip member per batch, fsynced."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise InvalidInput(f"archive {str(self.path)!r} is a directory")
        if not self.path.parent.is_dir():
            raise InvalidInput(f"archive {str(self.path)!r}: no such folder")

    def append(self, records: Sequence[dict[str, Any]]) -> None:
        if not records:
            return
        text = "".join(
            json.dumps(r, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"
            for r in records
        )
        member = gzip.compress(text.encode("utf-8"), mtime=0)
        created = not self.path.exists()
        with open(self.path, "ab") as f:
            f.write(member)
            f.flush()
            os.fsync(f.fileno())
        if created:  # the new file's name must survive a crash too
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024
"""The most one archive line (one workflow) may inflate to; a longer line is refused unread
(``import_archive(max_record_bytes=)``, ``statewright import --max-record-bytes``)."""
_SKIP_CHUNK = 1 << 20


@dataclass(frozen=True)
class Unreadable:
    """An archive line that is not a record: too long, not JSON."""

    error: StatewrightError


def read_archive(
    path: str | os.PathLike[str], max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
) -> tuple[Iterator[tuple[int, Any]], list[bool]]:
    """``(line number, record)`` of every complete line, and a flag set when the file ends in
    an incomplete batch. A line longer than ``max_record_bytes`` once inflated is skipped
    without being held (an :class:`Unreadable` in its place), as is one that is not JSON;
    decoding never recurses (a line nested 5,000 deep decodes, and the limits refuse it).
    InvalidInput for a file that is not such an archive: not gzip, or a first line that is
    not a statewright record."""
    p = Path(path)
    if not p.is_file():
        raise InvalidInput(f"no such archive file {str(p)!r}")
    if isinstance(max_record_bytes, bool) or not isinstance(max_record_bytes, int):
        raise InvalidInput("max_record_bytes must be a whole number of bytes")
    if max_record_bytes < 1:
        raise InvalidInput("max_record_bytes must be at least 1")
    truncated = [False]

    def lines() -> Iterator[tuple[int, Any]]:
        number = 0
        with gzip.open(p, "rb") as f:
            while True:
                try:
                    raw = f.readline(max_record_bytes + 1)
                    complete = raw.endswith(b"\n")
                    too_long = not complete and len(raw) > max_record_bytes
                    if too_long:  # skip the rest of it a chunk at a time, never holding it
                        while not complete:
                            chunk = f.readline(_SKIP_CHUNK)
                            if not chunk:
                                break
                            complete = chunk.endswith(b"\n")
                except (EOFError, zlib.error):
                    truncated[0] = True
                    return
                except gzip.BadGzipFile as exc:
                    if number == 0:
                        raise InvalidInput(f"{str(p)!r} is not a gzip'd archive: {exc}") from None
                    truncated[0] = True
                    return
                if not raw:
                    return
                number += 1
                if not complete:  # the end of a batch cut short
                    truncated[0] = True
                    return
                if too_long:
                    error = InvalidInput(
                        f"the line is longer than {max_record_bytes} bytes inflated "
                        "(max_record_bytes): not read"
                    )
                    yield number, Unreadable(error)
                    continue
                try:
                    rec = jsonvalue.loads(raw)
                except ValueError:
                    if number == 1:
                        raise InvalidInput(f"{str(p)!r} line 1: not JSON") from None
                    yield number, Unreadable(InvalidInput("the line is not JSON"))
                    continue
                if number == 1 and (not isinstance(rec, dict) or "format" not in rec):
                    raise InvalidInput(f"{str(p)!r} line 1: not a statewright archive record")
                yield number, rec

    return lines(), truncated


def _search_of(rt: Runtime, rec: Mapping[str, Any]) -> dict[str, str] | None:
    """A restored workflow's search attributes, as its type declares them (none when its
    version is not registered here)."""
    wf = rec["workflow"]
    try:
        names = rt.registry.type_of(wf["type"], wf["machine_version"]).search_attributes
    except UnknownWorkflowType:
        return None
    return search.attributes(names, wf["context"]) if names else None


async def import_archive(
    rt: Runtime,
    path: str | os.PathLike[str],
    *,
    max_record_bytes: int | None = None,
) -> ImportReport:
    """Restore the workflows of a prune archive, each whole in one transaction, **an archive
    being data to check, not to trust**: each record is checked whole first, in the
    transaction that would write it, and refused (listed in ``refused`` with its line and why;
    nothing written for it; the rest of the archive goes on) unless it is a finished workflow
    (terminal, unleased, not due, no timers: nothing can run it), its id consistent with its
    tenant, every value within this engine's input limits (the context, every payload and
    patch of its log, step results, inputs: :class:`~statewright.jsonvalue.Limits`) and its
    log replays to its row (on its machine version when registered here; else the log's order
    only, and it is listed in ``unchecked``). A line longer than ``max_record_bytes`` once
    inflated (default 16 MiB) is refused unread; decoding never recurses.

    A workflow already here with the same data is skipped (``identical``); with other data it
    is refused (``conflicts``), nothing written. Raises InvalidInput (before writing anything)
    for a file that is not an archive."""
    if max_record_bytes is None:
        max_record_bytes = DEFAULT_MAX_RECORD_BYTES
    records, truncated = read_archive(path, max_record_bytes)
    report = ImportReport()
    store = rt.store
    columns: dict[str, set[str]] | None = None
    for number, rec in records:
        named = rec.get("id") if isinstance(rec, dict) else None
        try:
            if isinstance(rec, Unreadable):
                raise rec.error
            check_restorable(rec)
            wid: str = rec["id"]
            checked = _check_values(rt, rec)
            # its search attributes, from its context (never from the file)
            rec = {**rec, SEARCH_KEY: _search_of(rt, rec)}
            restored = await store.restore_workflow(rec, lambda r: _check_replay(rt, r))
        except StatewrightError as exc:
            _refuse(report, number, named if isinstance(named, str) else None, exc)
            continue
        if restored:
            report.imported.append(wid)
            rt.transitions.rows.drop(wid)
            if not checked:
                report.unchecked.append(wid)
            continue
        existing = await store.export_workflows([wid])
        if existing:
            if columns is None:
                columns = _columns(existing[0])
            if comparable(existing[0], columns) == comparable(rec, columns):
                report.identical.append(wid)
                continue
        report.conflicts.append(wid)
        log.warning(
            "import refused a workflow that exists with other data",
            extra={"action": "import_conflict", "workflow_id": wid},
        )
    report.truncated = truncated[0]
    return report


def _refuse(report: ImportReport, line: int, wid: str | None, exc: StatewrightError) -> None:
    report.refused.append({"line": line, "id": wid, "code": exc.code, "message": exc.message})
    log.warning(
        "import refused a record",
        extra={
            "action": "import_refused",
            "line": line,
            "workflow_id": wid,
            "code": exc.code,
            "error": exc.message,
        },
    )


def _check_values(rt: Runtime, rec: dict[str, Any]) -> bool:
    """Every value of the record within the engine's input limits (as if it were handed in
    now: the context, every payload and patch of the log, step results, progress, inputs),
    and its machine version registered here; ValueTooDeep, ValueTooLarge, InvalidInput.
    Returns whether the replay can be checked (its machine version is registered)."""
    limits = rt.limits
    wf = rec["workflow"]
    wid = wf["id"]
    for col, value in wf.items():
        if value is not None:
            limits.check(value, f"{col} of {wid!r}")
    for table in RELATED:
        for i, row in enumerate(rec[table], 1):
            for col, value in row.items():
                if value is not None:
                    limits.check(value, f"{table}[{i}].{col} of {wid!r}")
    return rt.registry.known_machine(wf["type"], wf["machine_version"]) is not None


def _check_replay(rt: Runtime, rec: dict[str, Any]) -> None:
    """The record's log replays to its row (on its machine when registered here, else in
    order only): ReplayMismatch otherwise. Run by the store in the transaction that would
    write the record, before it writes."""
    check_archived(rt, rec["workflow"], rec["transitions"])


def _columns(rec: dict[str, Any]) -> dict[str, set[str]]:
    """The columns this store has, as one of its own records shows them (rows of a table a
    record has none of are compared whole)."""
    out = {"workflows": set(rec["workflow"])}
    for table in RELATED:
        if rec[table]:
            out[table] = set(rec[table][0])
    return out


__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "ArchiveWriter",
    "ImportReport",
    "PruneReport",
    "Unreadable",
    "check_worker_options",
    "import_archive",
    "parse_duration",
    "prune",
    "prune_periodically",
    "read_archive",
]
