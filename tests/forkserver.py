"""A fork server: a process that imports what a test's children need once, then forks each one.

Starting a Python process that imports statewright costs about half a second of CPU; a test
that starts (and SIGKILLs) hundreds of them would spend most of its time there. A fork server
(``python -m tests.forkserver --target MODULE:FUNCTION ...``, started by :class:`ForkServer`)
imports its ``--preload`` modules and the target's module once, runs an optional ``--prepare``
hook (a ``MODULE:FUNCTION`` called without arguments, to warm up what imports leave lazy),
then serves requests from the test, one JSON line each on its stdin, answered by one JSON line
on its stdout:

- ``{"op": "spawn", "argv": [...], "stdout": path, "stderr": path, "append": bool, "env":
  {...} | null, "cwd": path | null}``: ``os.fork()`` a child that calls ``target(argv)`` and
  exits with what it returns (None: 0; ``SystemExit`` as Python handles it), stdin from
  /dev/null, stdout and stderr to their files (truncated, or appended to with ``append``; one
  file when both paths are the same), its environment replaced by ``env`` and its working
  folder ``cwd`` when given (as ``subprocess.Popen``'s ``env`` and ``cwd``; its ``PYTHONPATH``
  goes first on ``sys.path``; a module that read the environment when the server imported it
  keeps what it read: preload none such); on its way out the child runs the exit handlers
  (``atexit``) as an interpreter does;
  answers ``{"pid": ...}``.
- ``{"op": "status", "pids": [...]}``: the exit code of each (None while it runs).
- ``{"op": "wait", "pid": n, "timeout": s}``: waits up to ``s`` seconds for it to exit;
  ``{"code": ...}`` (None if it still runs).
- ``{"op": "kill", "pid": n}``: SIGKILL, unless it has exited already, and reap it at once;
  answers ``{"code": ..., "was_running": bool}``.
- ``{"op": "signal", "pid": n, "signal": s}``: send signal ``s`` unless it has exited;
  answers ``{"sent": bool}``.
- ``{"op": "quit"}`` (or EOF on stdin): SIGKILL every child still running, reap, exit.

Exit codes are those of ``subprocess.Popen.returncode``: ``-9`` for SIGKILL.

Fork safety: the server never starts an event loop or a thread (checked before every fork
from ``/proc/self/task``), and opens no database: every SQLite or PostgreSQL connection is
opened by the child, after the fork (checked too: the server's open file descriptors may not
grow past those it had once its imports were done). Only the server (the children's parent)
sends signals to its children and reaps them: a pid it signals is its own child, never a
reused pid, and every dead child is reaped within a few milliseconds (``os.waitpid``); until
then it is a zombie, which engine recovery already counts as dead
(``statewright.engine.recovery``).

Users: tests/acceptance/crash/zygote.py (crash-test workers) and tests/cli_forks.py
(``statewright`` command lines, the ``cli_forks`` fixture).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Self

from tests.xdist_zygote import exit_status, python_path

ROOT = Path(__file__).resolve().parents[1]
REAP_INTERVAL = 0.005

Target = Callable[[list[str]], int | None]


# -- the server process ----------------------------------------------------------------------


def _resolve(spec: str) -> Any:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


class _Server:
    def __init__(self, proto_in: int, proto_out: int, target: Target) -> None:
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.target = target
        self.running: set[int] = set()
        self.exited: dict[int, int] = {}
        self.base_fds = _fds()

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
            outputs = req["stdout"], req["stderr"]
            place = req.get("env"), req.get("cwd")
            return {"pid": self.spawn(req["argv"], outputs, bool(req.get("append")), place)}
        if op == "status":
            self.reap()
            return {"codes": {str(p): self.exited.get(p) for p in req["pids"]}}
        if op == "wait":
            pid, until = req["pid"], time.monotonic() + req["timeout"]
            while True:
                self.reap()
                if pid not in self.running or time.monotonic() >= until:
                    return {"code": self.exited.get(pid)}
                time.sleep(REAP_INTERVAL)
        if op == "kill":
            pid = req["pid"]
            self.reap()
            was_running = pid in self.running
            if was_running:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                self._exited(pid, status)
            return {"code": self.exited.get(pid), "was_running": was_running}
        if op == "signal":
            self.reap()
            sent = req["pid"] in self.running
            if sent:
                os.kill(req["pid"], req["signal"])
            return {"sent": sent}
        raise ValueError(f"unknown op {op!r}")

    def spawn(
        self,
        argv: Sequence[str],
        outputs: tuple[str, str],
        append: bool,
        place: tuple[dict[str, str] | None, str | None] = (None, None),
    ) -> int:
        threads = _threads()
        if threads != 1:
            raise RuntimeError(f"the fork server runs {threads} threads: forking would be unsafe")
        leaked = _fds() - self.base_fds
        if leaked:  # a connection or file opened in the server would be shared by its children
            targets = {fd: _readlink(fd) for fd in leaked}
            raise RuntimeError(f"the fork server has opened descriptors since start-up: {targets}")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            self._child(list(argv), outputs, append, place)
        self.running.add(pid)
        return pid

    def _child(
        self,
        argv: list[str],
        outputs: tuple[str, str],
        append: bool,
        place: tuple[dict[str, str] | None, str | None],
    ) -> None:
        code = 70
        try:
            env, cwd = place
            if env is not None:
                os.environ.clear()
                os.environ.update(env)
                # As an interpreter started with this environment: its PYTHONPATH first.
                sys.path[:0] = [p for p in python_path(env) if p not in sys.path]
            if cwd is not None:
                os.chdir(cwd)
            os.close(self.proto_in)  # the test sees EOF from the server alone, not its children
            os.close(self.proto_out)
            # The handlers a fresh interpreter starts with (the server ignores SIGINT):
            # KeyboardInterrupt on SIGINT (asyncio.run installs its own only over this one).
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            mode = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
            opened: dict[str, int] = {}
            for target, path in zip((1, 2), outputs, strict=True):
                if path not in opened:
                    opened[path] = os.open(path, mode, 0o644)
                os.dup2(opened[path], target)
            for fd in opened.values():
                os.close(fd)
            result = self.target(argv)
            code = 0 if result is None else result
        except SystemExit as exc:  # as the interpreter itself exits on it
            code = exit_status(exc)
        except BaseException:
            traceback.print_exc()
        finally:
            # What an interpreter does on its way out: the exit handlers (a span exporter's
            # last flush, logging's), then the streams.
            with contextlib.suppress(BaseException):
                atexit._run_exitfuncs()
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

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


def main() -> None:
    started = time.monotonic()
    parser = argparse.ArgumentParser(prog="python -m tests.forkserver")
    parser.add_argument("--target", required=True, help="MODULE:FUNCTION each child calls")
    parser.add_argument("--preload", action="append", default=[], help="a module to import")
    parser.add_argument("--prepare", help="MODULE:FUNCTION to call once, after the imports")
    args = parser.parse_args()
    for name in args.preload:
        importlib.import_module(name)
    target = _resolve(args.target)  # imports its module: a forked child imports nothing
    if args.prepare:
        _resolve(args.prepare)()
    # What is imported now lives as long as the server: out of the garbage collector's sight,
    # a child's collections do not walk it (nor copy its pages on write), as ``gc.freeze``'s
    # documentation advises before forking.
    gc.collect()
    gc.freeze()
    # The protocol gets private descriptors; 0 and 1 point at /dev/null, so nothing printed
    # by an import (or inherited by a child) can corrupt it.
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    # Ctrl-C in a terminal reaches the whole process group: the test stops the server itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = _Server(proto_in, proto_out, target)
    server.send({"ready": True, "pid": os.getpid(), "preload": time.monotonic() - started})
    try:
        server.serve()
    finally:
        server.shutdown()


# -- the test's side -------------------------------------------------------------------------


class ForkServerError(RuntimeError):
    pass


class ForkServer:
    """The test's handle on a fork server process (see the module docstring).

    ``log`` gets the server's own stderr; ``env`` is added to the server's (and so the
    children's) environment; ``name`` says which server in error messages.
    """

    def __init__(
        self,
        log: Path,
        target: str,
        *,
        preload: Sequence[str] = (),
        prepare: str | None = None,
        env: Mapping[str, str] | None = None,
        name: str = "fork server",
        timeout: float = 60.0,
    ) -> None:
        self.log = log
        self.name = name
        self.timeout = timeout
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "tests.forkserver", "--target", target]
        command += [f"--preload={module}" for module in preload]
        command += [f"--prepare={prepare}"] if prepare else []
        self._err: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": path, **(env or {})},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
        )
        self._buffer = b""
        hello = self._read(timeout)
        self.pid: int = hello["pid"]
        self.preload: float = hello["preload"]
        self.spawned = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        until = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            readable, _, _ = select.select([fd], [], [], max(0.0, until - time.monotonic()))
            if not readable:
                raise ForkServerError(
                    f"the {self.name} did not answer in {timeout}s{self._tail()}"
                )
            data = os.read(fd, 1 << 16)
            if not data:
                raise ForkServerError(f"the {self.name} exited ({self.proc.poll()}){self._tail()}")
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise ForkServerError(answer["error"])
        return answer

    def _tail(self) -> str:
        self._err.flush()
        text = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
        return f"\n--- {self.name} stderr ---\n{text}" if text else ""

    def call(self, request: dict[str, Any], answer_within: float | None = None) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise ForkServerError(
                f"the {self.name} is gone ({self.proc.poll()}){self._tail()}"
            ) from None
        return self._read(self.timeout if answer_within is None else answer_within)

    def spawn(
        self,
        argv: Sequence[str],
        stdout: Path,
        stderr: Path | None = None,
        *,
        append: bool = False,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
    ) -> int:
        """Fork a child calling the target with ``argv``, its output in ``stdout`` and
        ``stderr`` (the same file if None), truncated or appended to, in the environment
        ``env`` (the server's if None) and the folder ``cwd`` (the server's if None); its pid."""
        request = {
            "op": "spawn",
            "argv": list(argv),
            "stdout": str(stdout),
            "stderr": str(stdout if stderr is None else stderr),
            "append": append,
            "env": None if env is None else dict(env),
            "cwd": None if cwd is None else str(cwd),
        }
        pid = int(self.call(request)["pid"])
        self.spawned += 1
        return pid

    def popen(
        self,
        argv: Sequence[str],
        stdout: Path,
        stderr: Path | None = None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
    ) -> Child:
        """:meth:`spawn` with its output appended to ``stdout`` and ``stderr`` (both to
        ``stdout`` if None), as a Popen-like handle."""
        return Child(self, self.spawn(argv, stdout, stderr, append=True, env=env, cwd=cwd))

    def run(
        self,
        argv: Sequence[str],
        folder: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Like ``subprocess.run(..., capture_output=True, text=True)``: fork a child, wait for
        it (``subprocess.TimeoutExpired`` after ``timeout`` seconds, the child killed), and
        return its exit code and output; the output goes through files in ``folder``."""
        out = folder / f"run-{self.pid}-{self.spawned + 1}.out"
        err = out.with_suffix(".err")
        child = Child(self, self.spawn(argv, out, err, env=env, cwd=cwd))
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(child.pid)
            raise
        assert code is not None
        stdout, stderr = out.read_text(), err.read_text()
        out.unlink()
        err.unlink()
        return subprocess.CompletedProcess(list(argv), code, stdout, stderr)

    def status(self, pids: Sequence[int]) -> dict[int, int | None]:
        """The exit code of each child (None while it runs)."""
        codes = self.call({"op": "status", "pids": list(pids)})["codes"]
        return {int(p): c for p, c in codes.items()}

    def wait(self, pid: int, timeout: float) -> int | None:
        """The child's exit code once it has exited, or None after ``timeout`` seconds."""
        request = {"op": "wait", "pid": pid, "timeout": timeout}
        code = self.call(request, timeout + self.timeout)["code"]
        return None if code is None else int(code)

    def kill(self, pid: int) -> tuple[int, bool]:
        """SIGKILL a child (reaped at once): ``(exit code, whether it was still running)``."""
        answer = self.call({"op": "kill", "pid": pid})
        return int(answer["code"]), bool(answer["was_running"])

    def signal(self, pid: int, sig: int) -> bool:
        """Send ``sig`` to a child unless it has exited; whether it was sent."""
        return bool(self.call({"op": "signal", "pid": pid, "signal": int(sig)})["sent"])

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


class Child:
    """A forked child, with the part of ``subprocess.Popen``'s interface the tests use."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.wait(0.0, check=False)

    def wait(self, timeout: float = 60.0, *, check: bool = True) -> int | None:
        """The exit code; raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds
        (``check=False``: returns None then)."""
        if self.returncode is None:
            self.returncode = self.server.wait(self.pid, timeout)
        if self.returncode is None and check:
            raise subprocess.TimeoutExpired(f"forked child (pid {self.pid})", timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.server.signal(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


if __name__ == "__main__":
    main()
