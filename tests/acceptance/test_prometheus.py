"""A real Prometheus scrapes ``statewright serve`` and two separate ``statewright worker
--metrics-port`` processes (issue 15, items 3 and 4).

The processes share one SQLite file. Workflows are started, held, refused and resumed through
serve's HTTP API; the workers run their handlers (a retry, a step, a finishing transition
each). ``/usr/bin/prometheus`` (Debian package ``prometheus``) scrapes both every second; the
test reads its query API until each process's counters show what each did, then runs every
query of the Grafana dashboard (ops/grafana/statewright.json) on it: each must parse and
return data. Without Prometheus the test fails.

The ``statewright`` processes are forked from this worker's fork server (the ``cli_forks``
fixture, tests/cli_forks.py): the same command lines through the CLI's own entry point,
without an interpreter start-up each. Prometheus is a process of its own.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.forkserver import Child, ForkServer
from tests.unit.test_grafana_dashboard import exprs, load, substituted

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "tests" / "acceptance" / "apps" / "metered.py"
PROMETHEUS = os.environ.get("STATEWRIGHT_TEST_PROMETHEUS", "/usr/bin/prometheus")
TIMEOUT = 30.0
RUN = 6
"""Workflows the workers run to the end (the held one included, once resumed)."""
WORKERS = 2


def _free_port() -> int:
    # serve and Prometheus take a port number, not 0 (neither prints the port it got); the
    # short window between closing this socket and their bind is the usual test idiom.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _Watched:
    """What the test does with a process, started anew or forked: check it runs, stop it."""

    name: str
    lines: list[str]
    popen: subprocess.Popen[str] | Child

    def alive(self) -> None:
        code = self.popen.poll()
        assert code is None, f"{self.name} exited {code}:\n" + "\n".join(self.lines[-30:])

    def _signal_and_wait(self, sig: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


class Proc(_Watched):
    """A subprocess whose stderr is read into :attr:`lines` by a thread (no pipe fills up)."""

    popen: subprocess.Popen[str]

    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.name = name
        self.lines: list[str] = []
        self.popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.lines.append(line.rstrip("\n"))

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the process (unless it exited), wait for it and close its pipe."""
        self._signal_and_wait(sig)
        self._reader.join(5)
        assert self.popen.stderr is not None
        self.popen.stderr.close()
        return self.popen.returncode


class ForkedProc(_Watched):
    """A ``statewright`` process forked from the fork server, with :class:`Proc`'s interface:
    its stderr goes to a file, read for :attr:`lines`."""

    popen: Child

    def __init__(
        self, forks: ForkServer, name: str, argv: list[str], env: dict[str, str], err: Path
    ) -> None:
        self.name = name
        self.err = err
        self.popen = forks.popen(argv, Path(os.devnull), err, env=env, cwd=ROOT)

    @property
    def lines(self) -> list[str]:  # type: ignore[override]  # read-only here: read from a file
        return self.err.read_text(errors="replace").splitlines() if self.err.exists() else []

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Signal the process (unless it exited) and wait for it."""
        self._signal_and_wait(sig)
        return self.popen.returncode


@contextmanager
def _running(procs: list[Proc | ForkedProc]) -> Iterator[list[Proc | ForkedProc]]:
    try:
        yield procs
    finally:
        for p in reversed(procs):
            p.stop(signal.SIGKILL)


def _until(
    what: str, check: Callable[[], Any], procs: list[Proc | ForkedProc], timeout: float = TIMEOUT
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        for p in procs:
            p.alive()
        try:
            last = check()
        except (httpx.HTTPError, AssertionError) as exc:
            last = exc
        else:
            if last:
                return last
        assert time.monotonic() < deadline, f"timed out waiting for {what}: last {last!r}"
        time.sleep(0.1)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _cli(db: Path, *args: str) -> list[str]:
    """The arguments of ``statewright`` (forked from ``cli_forks``)."""
    return ["--db", str(db), "--app", str(APP), *args]


def _config(path: Path, jobs: dict[str, list[str]]) -> Path:
    """A Prometheus configuration scraping each job's targets every second (JSON is YAML)."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": targets}]}
            for job, targets in jobs.items()
        ],
    }
    path.write_text(json.dumps(config))
    return path


class QueryFailed(Exception):
    """Prometheus refused a query (a syntax error, say): fails at once, never waited out."""


class Prom:
    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` now; a Prometheus error fails the test."""
        r = self.http.get("/api/v1/query", params={"query": expr})
        body = r.json()
        if r.status_code != 200 or body["status"] != "success":
            raise QueryFailed(f"{expr}: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, expr: str) -> float | None:
        found = self.query(expr)
        return None if not found else float(found[0]["value"][1])


def test_prometheus_scrapes_serve_and_workers_and_runs_every_dashboard_query(
    tmp_path: Path, cli_forks: ForkServer
) -> None:
    assert shutil.which(PROMETHEUS), f"{PROMETHEUS} is missing: apt-get install -y prometheus"
    db = tmp_path / "sw.db"
    env = _env()
    serve_port, prom_port = _free_port(), _free_port()
    serve_argv = _cli(db, "serve", "--port", str(serve_port))
    serve = ForkedProc(cli_forks, "serve", serve_argv, env, tmp_path / "serve.err")
    with (
        _running([serve]) as procs,
        httpx.Client(base_url=f"http://127.0.0.1:{serve_port}", timeout=5.0) as api,
        httpx.Client(base_url=f"http://127.0.0.1:{prom_port}", timeout=5.0) as prom_http,
    ):
        _until("serve", lambda: api.get("/ready").status_code == 200, procs)

        # Through serve: RUN - 1 workflows for the worker, one held (later resumed) and one
        # held for good (stuck), one the worker parks (a fatal error); a refused event and one
        # that does not apply.
        for i in range(RUN - 1):
            created = api.post("/v1/workflows", json={"type": "metered", "id": f"m{i}"})
            assert created.status_code == 201, created.text
        body = {"type": "metered", "id": "broken", "input": {"fatal": True}}
        created = api.post("/v1/workflows", json=body)
        assert created.status_code == 201, created.text
        for wid in ("held", "parked"):
            created = api.post("/v1/workflows", json={"type": "metered", "id": wid})
            assert created.status_code == 201, created.text
            held = api.post(f"/v1/workflows/{wid}/events", json={"event": "hold"})
            assert held.status_code == 200, held.text
        refused = api.post("/v1/workflows/parked/events", json={"event": "finish"})
        assert (
            refused.status_code == 409 and refused.json()["error"]["code"] == "illegal_transition"
        )
        late = api.post(
            "/v1/workflows/parked/events", params={"if_allowed": "true"}, json={"event": "hold"}
        )
        assert late.status_code == 200 and late.json()["applied"] is False, late.text

        workers = [
            ForkedProc(
                cli_forks,
                f"worker {i}",
                _cli(db, "worker", "--poll-interval", "0.05", "--metrics-port", "0"),
                env,
                tmp_path / f"worker-{i}.err",
            )
            for i in range(WORKERS)
        ]
        procs += workers

        def bound(worker: ForkedProc) -> str | None:
            for line in worker.lines:
                found = re.search(r"worker metrics on http://(127\.0\.0\.1:\d+)/metrics", line)
                if found:
                    return found.group(1)
            return None

        addresses: list[str] = [
            _until("a worker's metrics address", functools.partial(bound, w), procs)
            for w in workers
        ]
        for address in addresses:
            livez = httpx.get(f"http://{address}/livez", timeout=5.0)
            assert (livez.status_code, livez.json()) == (200, {"status": "ok"})

        cfg = _config(
            tmp_path / "prometheus.yml",
            {"serve": [f"127.0.0.1:{serve_port}"], "worker": addresses},
        )
        prometheus = Proc(
            "prometheus",
            [
                PROMETHEUS,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--log.level=warn",
            ],
        )
        procs.append(prometheus)
        prom = Prom(prom_http)
        _until("prometheus", lambda: prom.http.get("/-/ready").status_code == 200, procs)

        def state(wid: str) -> str:
            row = api.get(f"/v1/workflows/{wid}")
            assert row.status_code == 200, row.text
            st: str = row.json()["state"]
            return st

        _until("the workers", lambda: all(state(f"m{i}") == "done" for i in range(RUN - 1)), procs)
        resumed = api.post("/v1/workflows/held/events", json={"event": "resume"})
        assert resumed.status_code == 200, resumed.text
        _until("the resumed workflow", lambda: state("held") == "done", procs)

        # What each process did, as Prometheus scraped it (the job names are the config's;
        # the instance label tells the workers apart).
        wanted = {
            'sum(statewright_transitions_total{job="serve", event="$start"})': RUN + 2,
            'sum(statewright_transitions_total{job="serve", event="hold"})': 2,
            'sum(statewright_transitions_total{job="serve", event="resume"})': 1,
            'sum(statewright_transitions_total{job="worker", event="finish"})': RUN,
            'sum(statewright_retries_total{job="worker", mode="in_place"})': RUN,
            'sum(statewright_step_duration_seconds_count{job="worker", step="measure"})': RUN,
            # The first attempt of "flaky" fails (a step failure, and so the handler's);
            # "broken" fails fatally in its handler before any step.
            'sum(statewright_failures_total{job="worker", kind="step", step="flaky", '
            'error="transient"})': RUN,
            'sum(statewright_failures_total{job="worker", kind="handler", step="flaky", '
            'error="transient"})': RUN,
            'sum(statewright_failures_total{job="worker", kind="handler", step="", '
            'error="fatal"})': 1,
            # One model call each (not again when the handler re-runs after "flaky").
            'sum(statewright_llm_calls_total{job="worker", type="metered", state="running", '
            'model="metered-model"})': RUN,
            'sum(statewright_llm_tokens_total{job="worker", kind="input"})': RUN * 100,
            'sum(statewright_llm_tokens_total{job="worker", kind="output"})': RUN * 20,
            'sum(statewright_llm_cost_total{job="worker"})': RUN * 0.25,
            'sum(statewright_rejected_transitions_total{job="serve", '
            'code="illegal_transition"})': 1,
            'sum(statewright_events_not_applied_total{job="serve"})': 1,
            'sum(statewright_recovery_seconds_count{job="serve", from_state="paused"})': 1,
            'max(statewright_workflows{job="worker", state="done"})': RUN,
            'min(statewright_workflows{job="worker", state="done"})': RUN,
            'statewright_workflows{job="serve", state="done"}': RUN,
            'max(statewright_stuck_workflows{job="worker", state="paused"})': 1,
            'max(statewright_stuck_workflows{job="worker", state="running"})': 1,  # parked
            'max(statewright_workflows_parked{job="worker", reason="fatal_error"})': 1,
            'statewright_workflows_parked{job="serve", state="running"}': 1,
            'sum(up{job="worker"})': WORKERS,
            'up{job="serve"}': 1,
            'sum(statewright_worker_live{job="worker"})': WORKERS,
        }

        def scraped() -> bool:
            got = {expr: prom.value(expr) for expr in wanted}
            assert got == wanted, {e: v for e, v in got.items() if v != wanted[e]}
            return True

        _until("the scraped values", scraped, procs)
        # Nothing the workers did is counted by serve, and the reverse; each workflow finished
        # once (the sum above), by one worker or the other.
        assert prom.value('sum(statewright_transitions_total{job="serve", event="finish"})') in (
            None,
            0.0,
        )
        assert prom.value('sum(statewright_transitions_total{job="worker", event="$start"})') in (
            None,
            0.0,
        )
        # The two workers' series stay apart: Prometheus's instance label, and their ids.
        info = prom.query('statewright_worker_info{job="worker"}')
        assert sorted(i["metric"]["instance"] for i in info) == sorted(addresses)
        assert len({i["metric"]["worker_id"] for i in info}) == WORKERS

        # Every dashboard query parses and returns data (rate() needs two samples: wait).
        queries = [(where, substituted(expr)) for where, expr in exprs(load())]

        def dashboard() -> bool:
            empty = [(where, q) for where, q in queries if not prom.query(q)]
            assert not empty, empty
            return True

        _until("every dashboard query to return data", dashboard, procs)

        for worker in workers:
            assert worker.stop() == 0, "\n".join(worker.lines)
        # uvicorn re-raises the SIGTERM it handled once it has shut down cleanly.
        assert serve.stop() in (0, -signal.SIGTERM), "\n".join(serve.lines)
        prometheus.stop()


@pytest.mark.parametrize("bad", ["-1", "65536", "x"])
def test_a_bad_metrics_port_is_refused(tmp_path: Path, bad: str, cli_forks: ForkServer) -> None:
    done = cli_forks.run(
        _cli(tmp_path / "sw.db", "worker", "--once", "--metrics-port", bad),
        tmp_path,
        cwd=ROOT,
        env=_env(),
        timeout=TIMEOUT,
    )
    assert done.returncode == 2 and "--metrics-port" in done.stderr, done.stderr
    assert not (tmp_path / "sw.db").exists()
