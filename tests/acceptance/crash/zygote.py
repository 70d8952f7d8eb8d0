"""A zygote for the crash tests: imports everything once, then forks a fresh worker per request.

Starting a worker with ``python -m tests.acceptance.crash.worker`` costs about half a second
of imports; hundreds of kills would spend most of their time there. The zygote
(``python -m tests.acceptance.crash.zygote``, started by :class:`Zygote`) imports the engine,
both stores and the crash app once, and then serves requests from the test, one JSON line
each on its stdin, answered by one JSON line on its stdout:

- ``{"op": "spawn", "argv": [...], "stdout": path, "stderr": path}``: ``os.fork()`` a child
  that runs :func:`tests.acceptance.crash.worker.child_main` (``asyncio.run`` of the worker, as
  ``python -m tests.acceptance.crash.worker`` does), with its own stdout/stderr files; answers
  ``{"pid": ...}``.
- ``{"op": "status", "pids": [...]}``: the exit code of each (None while it runs).
- ``{"op": "wait", "pid": n, "timeout": s}``: waits up to ``s`` seconds for it to exit.
- ``{"op": "kill", "pid": n}``: SIGKILL, unless it has exited already, and reap it at once;
  answers ``{"code": ..., "was_running": bool}``.
- ``{"op": "quit"}`` (or EOF on stdin): SIGKILL every child still running, reap, exit.

Exit codes are those of ``subprocess.Popen.returncode``: ``-9`` for SIGKILL.

Fork safety: the zygote never starts an event loop or a thread (checked before every fork
from ``/proc/self/task``), and opens no database: every SQLite or PostgreSQL connection is
opened by the child, after the fork (checked too: the zygote's open file descriptors may not
grow past those it had once its imports were done). Only the zygote (the children's parent)
sends the test's SIGKILLs and reaps: a pid it signals is its own child, never a reused pid,
and every dead child is reaped within a few milliseconds (``os.waitpid``); until then it is a
zombie, which engine recovery already counts as dead (``statewright.engine.recovery``).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[3]
REAP_INTERVAL = 0.005
PRELOAD = (
    "jsonschema",  # imported lazily when an engine opens
    "statewright.definition.graph",
    "statewright.definition.validate",
    "statewright.store.postgres",
    "statewright.store.postgres.listen",
    "statewright.store.sqlite",
    "tests.acceptance.crash.worker",
)


# -- the zygote process ----------------------------------------------------------------------


def _preload() -> None:
    """Import everything a worker needs, so that a forked child imports nothing."""
    for name in PRELOAD:
        importlib.import_module(name)
    from tests.acceptance.crash import worker

    worker.parser().parse_args(["--db", "x", "--service", "x", "--ready", "x", "--kill-log", "x"])


def _fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


class _Server:
    def __init__(self, proto_in: int, proto_out: int) -> None:
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.running: set[int] = set()
        self.exited: dict[int, int] = {}
        self.base_fds = _fds()
        self.forks = 0

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(self.proto_out, data) :]

    def reap(self) -> None:
        for pid in list(self.running):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self._exited(pid, status)

    def _exited(self, pid: int, status: int) -> None:
        self.running.discard(pid)
        self.exited[pid] = os.waitstatus_to_exitcode(status)

    def serve(self) -> None:
        buffer = b""
        while True:
            readable, _, _ = select.select([self.proto_in], [], [], REAP_INTERVAL)
            self.reap()
            if not readable:
                continue
            data = os.read(self.proto_in, 1 << 16)
            if not data:
                return  # the test is gone
            buffer += data
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                request = json.loads(line)
                if request["op"] == "quit":
                    return
                try:
                    self.send(self.handle(request))
                except Exception as exc:
                    self.send({"error": f"{type(exc).__name__}: {exc}"})

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        if op == "spawn":
            return {"pid": self.spawn(req["argv"], req["stdout"], req["stderr"])}
        if op == "status":
            self.reap()
            return {"codes": {str(p): self.exited.get(p) for p in req["pids"]}}
        if op == "wait":
            pid, until = req["pid"], time.monotonic() + req["timeout"]
            while pid in self.running and time.monotonic() < until:
                self.reap()
                if pid in self.running:
                    time.sleep(REAP_INTERVAL)
            return {"code": self.exited.get(pid)}
        if op == "kill":
            pid = req["pid"]
            self.reap()
            was_running = pid in self.running
            if was_running:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                self._exited(pid, status)
            return {"code": self.exited.get(pid), "was_running": was_running}
        raise ValueError(f"unknown op {op!r}")

    def spawn(self, argv: Sequence[str], stdout: str, stderr: str) -> int:
        threads = _threads()
        if threads != 1:
            raise RuntimeError(f"the zygote runs {threads} threads: forking would be unsafe")
        leaked = _fds() - self.base_fds
        if leaked:  # a connection or file opened in the zygote would be shared by its children
            targets = {fd: _readlink(fd) for fd in leaked}
            raise RuntimeError(f"the zygote has opened descriptors since start-up: {targets}")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(self.proto_in, self.proto_out, list(argv), stdout, stderr)
        self.forks += 1
        self.running.add(pid)
        return pid

    def shutdown(self) -> None:
        for pid in list(self.running):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            self._exited(pid, status)


def _readlink(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


def _child(proto_in: int, proto_out: int, argv: list[str], stdout: str, stderr: str) -> None:
    code = 70
    try:
        os.close(proto_in)  # the test sees EOF from the zygote alone, not from its children
        os.close(proto_out)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        for target, path in ((1, stdout), (2, stderr)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, target)
            os.close(fd)
        from tests.acceptance.crash.worker import child_main

        code = child_main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main() -> None:
    started = time.monotonic()
    _preload()
    # The protocol gets private descriptors; 0 and 1 point at /dev/null, so nothing printed
    # by an import (or inherited by a child) can corrupt it.
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    # Ctrl-C in a terminal reaches the whole process group: the test stops the zygote itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = _Server(proto_in, proto_out)
    server.send({"ready": True, "pid": os.getpid(), "preload": time.monotonic() - started})
    try:
        server.serve()
    finally:
        server.shutdown()


# -- the test's side -------------------------------------------------------------------------


class ZygoteError(RuntimeError):
    pass


class Zygote:
    """The test's handle on a zygote process (see the module docstring)."""

    def __init__(self, log: Path, timeout: float = 60.0) -> None:
        self.log = log
        self.timeout = timeout
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}
        self._err: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.acceptance.crash.zygote"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
        )
        self._buffer = b""
        hello = self._read(timeout)
        self.pid: int = hello["pid"]
        self.preload: float = hello["preload"]
        self.spawned = 0

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        until = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = until - time.monotonic()
            readable, _, _ = select.select([fd], [], [], max(0.0, left))
            if not readable:
                raise ZygoteError(f"the zygote did not answer within {timeout}s{self._tail()}")
            data = os.read(fd, 1 << 16)
            if not data:
                raise ZygoteError(f"the zygote exited ({self.proc.poll()}){self._tail()}")
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise ZygoteError(answer["error"])
        return answer

    def _tail(self) -> str:
        self._err.flush()
        text = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
        return f"\n--- zygote stderr ---\n{text}" if text else ""

    def _call(self, request: dict[str, Any], answer_within: float | None = None) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise ZygoteError(f"the zygote is gone ({self.proc.poll()}){self._tail()}") from None
        return self._read(self.timeout if answer_within is None else answer_within)

    def spawn(self, argv: Sequence[str], stdout: Path, stderr: Path) -> int:
        """Fork a worker running ``argv`` (the worker's command-line options); its pid."""
        answer = self._call(
            {"op": "spawn", "argv": list(argv), "stdout": str(stdout), "stderr": str(stderr)}
        )
        self.spawned += 1
        return int(answer["pid"])

    def status(self, pids: Sequence[int]) -> dict[int, int | None]:
        """The exit code of each child (None while it runs)."""
        codes = self._call({"op": "status", "pids": list(pids)})["codes"]
        return {int(p): c for p, c in codes.items()}

    def wait(self, pid: int, timeout: float) -> int | None:
        """The child's exit code once it has exited, or None after ``timeout`` seconds."""
        request = {"op": "wait", "pid": pid, "timeout": timeout}
        code = self._call(request, timeout + self.timeout)["code"]
        return None if code is None else int(code)

    def kill(self, pid: int) -> tuple[int, bool]:
        """SIGKILL a child (reaped at once): ``(exit code, whether it was still running)``."""
        answer = self._call({"op": "kill", "pid": pid})
        return int(answer["code"]), bool(answer["was_running"])

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.write(b'{"op": "quit"}\n')
                self.proc.stdin.flush()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._err.close()


if __name__ == "__main__":
    main()
