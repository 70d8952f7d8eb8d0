"""A full disk under SQLite, for real: the store lives on a 32 MB tmpfs that the test fills
(0-64 KB left) while worker processes run workflows that charge a payment service that does
not deduplicate (its file is on the ordinary disk), and while the test starts workflows with
200 KB inputs and small ones together, so that SQLite's group commit meets SQLITE_FULL in
batches larger than its page cache (which spill) and at COMMIT. Then the disk is freed.

Every start is checked against the store afterwards: answered ok, the workflow is there;
answered ``store_error``, it is not (``outcome_unknown`` may go either way). Every workflow
that exists finishes, is charged exactly once, and replays to its row.

Needs root (``mount -t tmpfs``), as the acceptance tests run here and in CI: it fails, never
skips, without it.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from statewright import Engine, SQLiteStore
from statewright.errors import OutcomeUnknown, StoreError
from tests.acceptance.apps.exactly_once import TYPES, Service
from tests.acceptance.test_exactly_once import check_charged_once, fork_worker, processes
from tests.forkserver import ForkServer

SIZE = "32m"
"""Room, once the filler is gone, for what got in: the database's own file and a WAL of up to
4 MB (its auto-checkpoint point) fill 8 MB by themselves after a few 200 KB starts."""
ROUNDS = 6
BIG = 200_000
BIGS, SMALLS = 12, 4
"""Starts sent together in each full-disk period (as in the report of issue 22)."""
FREE = 64 * 1024
"""Bytes at most left free when the disk is filled."""


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail(
            f"this test mounts a tmpfs and must run as root (uid {os.geteuid()}): "
            "run the acceptance tests as root, as CI does"
        )
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs on {path}: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path, leave: int, rng: random.Random) -> Path:
    """Fill ``disk`` with a file until at most ``leave`` bytes are free; the file."""
    filler = disk / f"filler-{rng.randrange(1 << 30)}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        chunk = b"\0" * (64 * 1024)
        while True:
            free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
            if free <= leave:
                break
            try:
                os.write(fd, chunk[: min(len(chunk), free - leave)])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    return filler


@pytest.mark.acceptance
async def test_a_full_disk_answers_every_write_truly_and_charges_each_payment_once(
    tmp_path: Path, cli_forks: ForkServer
) -> None:
    seed = int(os.environ.get("STATEWRIGHT_CRASH_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    tag = f"[seed {seed}]"
    with tmpfs(tmp_path / "disk", SIZE) as disk:
        db = str(disk / "statewright.db")
        service = Service(tmp_path / "service.db")
        store = SQLiteStore(db)
        engine = Engine(store, TYPES)
        answers: dict[str, BaseException | None] = {}
        running = [f"run-{i}" for i in range(40)]
        async with engine:
            for wid in running:
                await engine.start("slow_action_pay", workflow_id=wid)
            with processes() as procs:
                for name in ("a", "b"):
                    procs.append(
                        fork_worker(
                            cli_forks, db, tmp_path, name, "--lease-seconds", "2", EO_BLOCK="1.0"
                        )
                    )
                # Both workers up (a worker whose first recovery meets a full disk exits 1):
                # each has charged.
                pids = {p.pid for p in procs}
                deadline = time.monotonic() + 30
                while not pids <= {c[3] for c in service.charges()}:
                    assert time.monotonic() < deadline, f"{tag} the workers never charged"
                    await asyncio.sleep(0.05)

                async def start(wid: str, size: int) -> None:
                    try:
                        await engine.start(
                            "slow_action_pay", {"blob": "x" * size}, workflow_id=wid
                        )
                    except StoreError as exc:  # OutcomeUnknown among them
                        answers[wid] = exc
                    else:
                        answers[wid] = None

                for round_ in range(ROUNDS):
                    filler = fill(disk, rng.randrange(FREE + 1), rng)
                    try:
                        sizes = [BIG] * BIGS + [10] * SMALLS
                        rng.shuffle(sizes)
                        await asyncio.gather(
                            *(start(f"r{round_}-{i}", n) for i, n in enumerate(sizes))
                        )
                        await asyncio.sleep(1.0)  # the workers write on the full disk too
                    finally:
                        filler.unlink()
                    await asyncio.sleep(0.5)
                dead = {
                    name: (p.returncode, (tmp_path / f"{name}.err").read_text()[-3000:])
                    for name, p in zip("ab", procs, strict=True)
                    if p.poll() is not None
                }
                assert not dead, f"{tag} workers exited during the full-disk periods: {dead}"

                ok = [w for w, a in answers.items() if a is None]
                refused = [w for w, a in answers.items() if type(a) is StoreError]
                unknown = [w for w, a in answers.items() if isinstance(a, OutcomeUnknown)]
                assert len(ok) + len(refused) + len(unknown) == len(answers)
                lied = [w for w in refused if await store.get_workflow(w) is not None]
                assert not lied, f"{tag} answered store_error, yet in the store: {lied}"
                lost = [w for w in ok if await store.get_workflow(w) is None]
                assert not lost, f"{tag} answered ok, yet not in the store: {lost}"
                assert refused, f"{tag} the disk was never full for a start: no test"
                landed = [w for w in unknown if await store.get_workflow(w) is not None]
                ids = running + ok + landed
                usage = {f.name: f.stat().st_size for f in disk.iterdir()}

                deadline = time.monotonic() + 60
                while True:
                    rows = [await engine.get(w) for w in ids]
                    if all(r.terminal for r in rows):
                        break
                    if time.monotonic() > deadline:
                        late = [(r.id, r.state, r.parked, r.last_error) for r in rows]
                        logs = {
                            name: (p.poll(), (tmp_path / f"{name}.err").read_text()[-3000:])
                            for name, p in zip("ab", procs, strict=True)
                        }
                        pytest.fail(
                            f"{tag} not finished after the disk was freed: {late}; {logs}; "
                            f"files after the full periods: {usage}"
                        )
                    await asyncio.sleep(0.1)
                for p in procs:
                    p.send_signal(signal.SIGTERM)
                for p in procs:
                    assert p.wait(timeout=30) == 0, f"{tag} a worker did not stop cleanly"
            for wid in ids:
                await check_charged_once(engine, service, wid)
            charged = {c[1] for c in service.charges()}
            assert charged == {f"{w}:charge" for w in ids}, f"{tag} charges of unknown ids"
            errors = "".join((tmp_path / f"{n}.err").read_text() for n in ("a", "b"))
            print(
                f"{tag} starts ok {len(ok)}, store_error {len(refused)}, outcome_unknown "
                f"{len(unknown)} ({len(landed)} landed); {len(ids)} workflows charged once; "
                f"worker store failures logged: {errors.count('full')}; batches SQLite "
                f"rolled back here: {store.conn.rolled_back}; "
                f"files after the full periods: {usage}"
            )
        service.close()
