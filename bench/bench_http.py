"""HTTP benchmark: requests/s and latency of the REST API of a real ``statewright serve``
process, driven by ``wrk``, next to the ``/livez`` floor measured in the same run.

    .venv/bin/python bench/bench_http.py [--duration 5] [--connections 1,50]
                                         [--json out.json] [--postgres DSN] [--profile]

The server is ``python -m statewright.cli --db <fresh SQLite file> --app <machine.json>
serve --tokens <tokens.yaml>`` on a free loopback port, exactly as an operator runs it (one
uvicorn process, its default log level). Every request carries ``Authorization: Bearer`` with
an admin token, so authentication is part of the cost. ``--workflows`` (1000) workflows of a
small machine ``open --ping--> open`` (a self-loop, so every send is legal), ``open --close-->
closed`` are started through the API before the runs.

Operations, each a wrk Lua script (written to the temp dir):

- ``livez``: ``GET /livez``. The floor: the framework and the HTTP server, no store.
- ``get``: ``GET /v1/workflows/{id}``, ids drawn at random among the seeded ones.
- ``list``: ``GET /v1/workflows?limit=20``.
- ``start``: ``POST /v1/workflows`` (no id: the service picks one). A durable write.
- ``send``: ``POST /v1/workflows/{id}/events`` with ``ping``, random seeded ids. A durable write.

Each runs ``--duration`` seconds at each ``--connections`` count (``wrk -t min(2, c) -c c``).
The figures: requests/s, that as a % of ``/livez`` at the same connection count, p50/p99
latency (wrk's histogram, from a Lua ``done()``), non-2xx/socket errors (must be 0), and the
server's CPU time per request (``/proc/<pid>/stat``: all its threads, SQLite's included);
"by CPU" is ``/livez``'s CPU per request over the operation's, which moves much less than
req/s when other processes share the machine. wrk runs on the same machine and takes CPU
from the server; its CPU time is printed too.

``--profile [OPS]`` attaches ``py-spy record --nonblocking`` to the server during one more run
of each of OPS (default ``get``; not one of the measured runs: sampling costs CPU) and prints
where the server's time goes. See bench/README.md for how to read it.
"""

from __future__ import annotations

import argparse
import json
import linecache
import os
import platform
import re
import resource
import secrets
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MEMORY_FS = {"tmpfs", "ramfs", "devtmpfs"}
TOKEN = "bench-" + secrets.token_hex(12)
CONTEXT: dict[str, Any] = {"customer": "c-42", "amount": 1999, "currency": "EUR"}
OPERATIONS = ("livez", "get", "list", "start", "send")
READS = ("get", "list")
TARGET_READ_SHARE = 0.50  # reads >= 50% of /livez req/s at the same connection count
TARGET_P99_MS = 100.0  # p99 < 100 ms at 50 connections
TARGET_P99_CONNECTIONS = 50
MACHINE = {
    "name": "bench",
    "description": "HTTP benchmark: a self-loop so that every send is legal.",
    "states": [{"name": "open", "initial": True}, {"name": "closed", "terminal": True}],
    "events": [{"name": "ping"}, {"name": "close"}],
    "transitions": [
        {"event": "ping", "source": "open", "target": "open"},
        {"event": "close", "source": "open", "target": "closed"},
    ],
}
WHAT = {
    "livez": "GET /livez",
    "get": "GET /v1/workflows/{id}",
    "list": "GET /v1/workflows?limit=20",
    "start": "POST /v1/workflows",
    "send": "POST /v1/workflows/{id}/events",
}


# -- the wrk scripts -------------------------------------------------------------------------

LUA_COMMON = """
wrk.headers["Authorization"] = "Bearer %(token)s"
wrk.headers["Content-Type"] = "application/json"
local threads = 0
function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end
function init(args)
  math.randomseed(7919 * ((tid or 0) + 1) + os.time())
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%%d,"duration_us":%%d,"bytes":%%d,"status_errors":%%d,' ..
    '"connect_errors":%%d,"read_errors":%%d,"write_errors":%%d,"timeouts":%%d,' ..
    '"p50_us":%%.0f,"p90_us":%%.0f,"p99_us":%%.0f,"max_us":%%.0f,"mean_us":%%.1f}\\n',
    summary.requests, summary.duration, summary.bytes, e.status, e.connect, e.read, e.write,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
"""

LUA_BODY = {
    "livez": """
wrk.method = "GET"
wrk.path = "/livez"
""",
    "list": """
wrk.method = "GET"
wrk.path = "/v1/workflows?limit=20"
""",
    "start": """
wrk.method = "POST"
wrk.path = "/v1/workflows"
wrk.body = '%(start_body)s'
""",
    "get": """
local ids = {%(ids)s}
local n = #ids
request = function()
  return wrk.format("GET", "/v1/workflows/" .. ids[math.random(n)])
end
""",
    "send": """
local ids = {%(ids)s}
local n = #ids
local body = '%(send_body)s'
request = function()
  return wrk.format("POST", "/v1/workflows/" .. ids[math.random(n)] .. "/events", nil, body)
end
""",
}


def write_scripts(folder: Path, ids: list[str], pace_ms: float = 0.0) -> dict[str, Path]:
    """One wrk script per operation; with ``pace_ms``, each connection waits that long
    between two requests (wrk's ``delay()``)."""
    pace = f"function delay()\n  return {pace_ms:g}\nend\n" if pace_ms > 0 else ""
    values = {
        "token": TOKEN,
        "ids": ",".join(f'"{i}"' for i in ids),
        "start_body": json.dumps({"type": "bench", "input": CONTEXT}, separators=(",", ":")),
        "send_body": json.dumps({"event": "ping", "payload": {"note": "ping"}}),
    }
    scripts = {}
    for op in OPERATIONS:
        path = folder / f"{op}.lua"
        path.write_text((LUA_COMMON + LUA_BODY[op]) % values + pace)
        scripts[op] = path
    return scripts


# -- results ---------------------------------------------------------------------------------


@dataclass
class Run:
    op: str
    connections: int
    requests: int
    seconds: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    status_errors: int
    socket_errors: int
    server_cpu_s: float
    server_sys_s: float  # the part of server_cpu_s spent in the kernel
    wrk_cpu_s: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    @property
    def errors(self) -> int:
        return self.status_errors + self.socket_errors

    @property
    def server_us_per_req(self) -> float:
        return 1e6 * self.server_cpu_s / max(1, self.requests)

    @property
    def kernel_share(self) -> float:
        return self.server_sys_s / self.server_cpu_s if self.server_cpu_s else 0.0

    def summary(self) -> dict[str, Any]:
        d = {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}
        d.update(
            rps=round(self.rps, 1),
            server_cpu_pct=round(100 * self.server_cpu_s / self.seconds, 1),
            wrk_cpu_pct=round(100 * self.wrk_cpu_s / self.seconds, 1),
            server_us_per_req=round(self.server_us_per_req, 1),
            server_kernel_pct=round(100 * self.kernel_share, 1),
        )
        return d


@dataclass
class Figure:
    """One (operation, connections) over all rounds: the median of each figure."""

    op: str
    connections: int
    runs: list[Run] = field(default_factory=list)

    def med(self, attr: str) -> float:
        return float(statistics.median(float(getattr(r, attr)) for r in self.runs))

    @property
    def rps(self) -> float:
        return self.med("rps")

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.runs)

    def cpu_share(self, floor: Figure) -> float:
        """/livez's server CPU per request ÷ this one's: the req/s share this operation would
        get if both were CPU-bound. It moves much less than req/s on a busy machine."""
        return floor.med("server_us_per_req") / self.med("server_us_per_req")

    def summary(self, floor: Figure | None) -> dict[str, Any]:
        return {
            "operation": self.op,
            "request": WHAT[self.op],
            "connections": self.connections,
            "rps": round(self.rps, 1),
            "pct_of_livez": round(100 * self.rps / floor.rps, 1) if floor else None,
            "pct_of_livez_by_cpu": round(100 * self.cpu_share(floor), 1) if floor else None,
            "p50_ms": round(self.med("p50_ms"), 3),
            "p99_ms": round(self.med("p99_ms"), 3),
            "max_ms": round(self.med("max_ms"), 3),
            "errors": self.errors,
            "server_cpu_pct": round(
                statistics.median(100 * r.server_cpu_s / r.seconds for r in self.runs), 1
            ),
            "server_us_per_req": round(self.med("server_us_per_req"), 1),
            "server_kernel_pct": round(100 * self.med("kernel_share"), 1),
            "runs": [r.summary() for r in self.runs],
        }


# -- the server ------------------------------------------------------------------------------


def filesystem(path: Path) -> tuple[str, str, str]:
    """(mount point, fs type, device) holding ``path``, from /proc/mounts."""
    real = os.path.realpath(path)
    best = ("/", "?", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype, *_ = line.split()
                mnt = mnt.replace("\\040", " ")
                inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best[0]):
                    best = (mnt, fstype, dev)
    except OSError:
        pass
    return best


def bench_dir(explicit: str | None) -> Path:
    """A fresh folder on a real disk (the writes' fsyncs are part of what is measured)."""
    if explicit:
        base = Path(explicit)
    else:
        tmp = Path(tempfile.gettempdir())
        base = tmp if filesystem(tmp)[1] not in MEMORY_FS else REPO / ".statewright" / "bench"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="sw-bench-http-", dir=base))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``statewright serve`` in a child process."""

    def __init__(self, folder: Path, db: str, port: int, log_level: str | None = None) -> None:
        self.port = port
        self.machine = folder / "bench-machine.json"
        self.machine.write_text(json.dumps(MACHINE, indent=2))
        self.tokens = folder / "tokens.yaml"
        self.tokens.write_text(
            f'tokens:\n  - {{token: {TOKEN}, actor: bench, roles: [admin], tenant: "*"}}\n'
        )
        self.log_path = folder / "server.log"
        self.argv = [
            sys.executable,
            "-m",
            "statewright.cli",
            "--db",
            db,
            "--app",
            str(self.machine),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tokens",
            str(self.tokens),
            *(["--log-level", log_level] if log_level else []),
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
        self.log = open(self.log_path, "wb")  # closed in stop()
        self.proc = subprocess.Popen(
            self.argv, cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                with urllib.request.urlopen(f"{self.url}/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise SystemExit(f"the server was not ready within {timeout:g}s\n{self.log_tail()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise SystemExit(
                f"the server exited with code {self.proc.returncode}\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join("  | " + line for line in text[-lines:])

    def cpu_seconds(self) -> tuple[float, float]:
        """(user, system) CPU time of the server process, all its threads."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # uvicorn shuts down cleanly, closing the store
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "log", None) is not None:
            self.log.close()


def api(conn: HTTPConnection, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    data = None if body is None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    return r.status, r.read()


def seed(server: Server, count: int, prefix: str) -> list[str]:
    """``count`` workflows started through the API (one keep-alive connection)."""
    conn = HTTPConnection("127.0.0.1", server.port, timeout=30)
    ids = [f"{prefix}{i:05d}" for i in range(count)]
    try:
        for wid in ids:
            status, body = api(
                conn, "POST", "/v1/workflows", {"type": "bench", "id": wid, "input": CONTEXT}
            )
            if status not in (200, 201):
                raise SystemExit(f"seeding {wid}: HTTP {status} {body[:300]!r}")
    finally:
        conn.close()
    return ids


def sample_error(server: Server, op: str, ids: list[str]) -> str:
    """One request of ``op``, to show what an error looked like."""
    conn = HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        status, body = {
            "livez": lambda: api(conn, "GET", "/livez"),
            "get": lambda: api(conn, "GET", f"/v1/workflows/{ids[0]}"),
            "list": lambda: api(conn, "GET", "/v1/workflows?limit=20"),
            "start": lambda: api(conn, "POST", "/v1/workflows", {"type": "bench"}),
            "send": lambda: api(conn, "POST", f"/v1/workflows/{ids[0]}/events", {"event": "ping"}),
        }[op]()
        return f"a single {op} now answers HTTP {status}: {body[:300]!r}"
    except OSError as exc:
        return f"a single {op} now fails: {exc!r}"
    finally:
        conn.close()


# -- wrk -------------------------------------------------------------------------------------


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_wrk(
    server: Server, script: Path, op: str, connections: int, duration: float, threads: int
) -> Run:
    argv = [
        "wrk",
        f"-t{max(1, min(threads, connections))}",
        f"-c{connections}",
        f"-d{max(1, round(duration))}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        server.url,
    ]
    server.check_alive()
    cpu0, wrk0 = server.cpu_seconds(), children_cpu()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    cpu1, wrk1 = server.cpu_seconds(), children_cpu()
    line = next((x for x in done.stdout.splitlines() if x.startswith("BENCH_JSON ")), None)
    if done.returncode != 0 or line is None:
        server.check_alive()
        raise SystemExit(f"wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    d = json.loads(line.removeprefix("BENCH_JSON "))
    return Run(
        op=op,
        connections=connections,
        requests=d["requests"],
        seconds=d["duration_us"] / 1e6,
        p50_ms=d["p50_us"] / 1000,
        p90_ms=d["p90_us"] / 1000,
        p99_ms=d["p99_us"] / 1000,
        max_ms=d["max_us"] / 1000,
        mean_ms=d["mean_us"] / 1000,
        status_errors=d["status_errors"],
        socket_errors=d["connect_errors"] + d["read_errors"] + d["write_errors"] + d["timeouts"],
        server_cpu_s=sum(cpu1) - sum(cpu0),
        server_sys_s=cpu1[1] - cpu0[1],
        wrk_cpu_s=wrk1 - wrk0,
    )


# -- profile ---------------------------------------------------------------------------------

FRAME = re.compile(r"^(?P<fn>.*?) \((?P<path>[^()]*?)(?::(?P<line>\d+))?\)$")
# Where a thread waits. py-spy's own idle detection does not work in this VM (threads blocked
# in Condition.wait are sampled as running), so idle samples are recognised by their leaf.
IDLE_FUNCS = {"Condition.wait", "Event.wait", "Thread.join", "EpollSelector.select"}
IDLE_LINE = re.compile(r"queue\.get\(\)|\.get\(block=True|\.acquire\(\)")
# The frames at the bottom of every stack of a thread, left out of the inclusive figures.
ANCHORS = {
    "Handle._run",
    "BaseEventLoop._run_once",
    "WorkerThread.run",
    "GroupCommitConnection._run",
}


LOOP_PACKAGES = ("stdlib/asyncio", "uvicorn", "h11", "starlette", "fastapi", "statewright/http")


@dataclass(frozen=True)
class Frame:
    fn: str
    file: str  # shortened: statewright/..., fastapi/..., stdlib/asyncio/...
    path: str
    line: int

    @property
    def name(self) -> str:
        return f"{self.fn} ({self.file})"


def short_file(path: str) -> str:
    i = path.find("site-packages/")
    if i >= 0:
        return path[i + len("site-packages/") :]
    m = re.search(r"/lib/python3[.\d]*/(.*)$", path)
    if m:
        return "stdlib/" + m[1]
    i = path.rfind("statewright/")
    return path[i:] if i >= 0 else path


def area(file: str) -> str:
    """The package a frame belongs to, for the self-time summary."""
    parts = file.split("/")
    if parts[0] == "statewright":
        return "/".join(parts[:2]) if len(parts) > 2 else "statewright"
    if parts[0] == "stdlib":
        return "stdlib/" + parts[1].removesuffix(".py") if len(parts) > 1 else "stdlib"
    return parts[0].removesuffix(".py")


def parse_folded(text: str) -> list[tuple[list[Frame], int]]:
    stacks = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for raw in stack.split(";"):
            m = FRAME.match(raw.strip())
            if m:
                path = m["path"]
                frames.append(Frame(m["fn"], short_file(path), path, int(m["line"] or 0)))
            else:
                frames.append(Frame(raw.strip(), "", "", 0))
        stacks.append((frames, int(count)))
    return stacks


def thread_kind(frames: list[Frame]) -> str:
    names = {f.fn for f in frames}
    if "WorkerThread.run" in names:
        return "anyio worker threads (sync FastAPI dependencies/endpoints)"
    if "GroupCommitConnection._run" in names:
        return "SQLite connection thread"
    if "BaseEventLoop.run_forever" in names:
        return "event loop thread"
    # A stack read while the process ran on (--nonblocking) is sometimes cut short: one
    # with the HTTP stack's frames in it is the event loop's.
    if any(f.file.startswith(LOOP_PACKAGES) for f in frames):
        return "event loop thread (stack cut short)"
    return "other"


def idle(frames: list[Frame]) -> bool:
    leaf = frames[-1]
    if leaf.fn in IDLE_FUNCS:
        return True
    text = linecache.getline(leaf.path, leaf.line) if leaf.path else ""
    return bool(IDLE_LINE.search(text))


def profile_report(folded: str, seconds: float, rate: int, top: int = 20) -> str:
    stacks = parse_folded(folded)
    threads: Counter[str] = Counter()
    busy: Counter[str] = Counter()
    selfs: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, count in stacks:
        kind = thread_kind(frames)
        threads[kind] += count
        if idle(frames):
            continue
        busy[kind] += count
        leaf = frames[-1]
        selfs[leaf.name] += count
        areas[area(leaf.file) if leaf.file else leaf.fn] += count
        cut = max((i for i, f in enumerate(frames) if f.fn in ANCHORS), default=-1)
        for name in {f.name for f in frames[cut + 1 :]}:
            inclusive[name] += count
    total = sum(busy.values())
    if not total:
        return "py-spy recorded no busy samples"
    per_thread = seconds * rate  # samples one always-busy thread would give

    def block(title: str, counter: Counter[str], n: int) -> list[str]:
        out = [title]
        for name, c in counter.most_common(n):
            out.append(f"  {100 * c / total:5.1f}%  {name}")
        return out

    lines = [
        f"{total} busy samples at {rate} Hz over {seconds:g} s (idle waits left out); "
        "% = share of the busy samples",
        "busy time by thread (1.00 = one core):",
    ]
    for kind, c in busy.most_common():
        lines.append(f"  {c / per_thread:5.2f}  {kind}")
    lines += block("self time by package/module:", areas, 15)
    lines += block("self time by function:", selfs, top)
    lines += block(
        "inclusive time by function (below the event loop's / threads' own frames):",
        inclusive,
        top + 15,
    )
    return "\n".join(lines)


def run_profile(
    server: Server,
    script: Path,
    op: str,
    connections: int,
    duration: float,
    threads: int,
    out: Path,
    rate: int,
) -> str:
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(pyspy).exists():
        return "py-spy not found (pip install py-spy into the venv); no profile"
    seconds = max(2, round(duration))
    spy = subprocess.Popen(
        [
            pyspy,
            "record",
            "--pid",
            str(server.pid),
            "--duration",
            str(seconds + 1),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--output",
            str(out),
            "--nonblocking",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    time.sleep(0.5)  # py-spy attaches; it records 1 s more than wrk runs
    r = run_wrk(server, script, op, connections, seconds, threads)
    log, _ = spy.communicate(timeout=60)
    if spy.returncode != 0 or not out.exists():
        return f"py-spy failed ({spy.returncode}): {log.strip()[-500:]}"
    head = (
        f"(while profiled: {r.rps:,.0f} req/s, p50 {r.p50_ms:.2f} ms, server CPU "
        f"{100 * r.server_cpu_s / r.seconds:.0f}%; sampled without stopping the process, so "
        "some stacks are cut short: the inclusive figures are lower bounds)\n"
    )
    return head + profile_report(out.read_text(), seconds + 1, rate)


# -- report ----------------------------------------------------------------------------------


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(figures: dict[tuple[str, int], Figure], connections: list[int]) -> str:
    rows = [
        [
            "operation",
            "conns",
            "req/s",
            "% livez",
            "by CPU",
            "p50 ms",
            "p99 ms",
            "max ms",
            "errors",
            "srv CPU",
            "srv µs/req",
            "in kernel",
        ]
    ]
    for c in connections:
        floor = figures.get(("livez", c))
        for op in OPERATIONS:
            f = figures.get((op, c))
            if f is None:
                continue
            rows.append(
                [
                    op,
                    str(c),
                    f"{f.rps:,.0f}",
                    f"{100 * f.rps / floor.rps:.0f}%" if floor else "-",
                    f"{100 * f.cpu_share(floor):.0f}%" if floor else "-",
                    f"{f.med('p50_ms'):.2f}",
                    f"{f.med('p99_ms'):.2f}",
                    f"{f.med('max_ms'):.1f}",
                    str(f.errors),
                    f"{statistics.median(100 * r.server_cpu_s / r.seconds for r in f.runs):.0f}%",
                    f"{f.med('server_us_per_req'):,.0f}",
                    f"{100 * f.med('kernel_share'):.0f}%",
                ]
            )
    return table(rows)


def verdicts(figures: dict[tuple[str, int], Figure], connections: list[int]) -> list[str]:
    out = []
    for c in connections:
        floor = figures.get(("livez", c))
        for op in READS:
            f = figures.get((op, c))
            if f is None or floor is None:
                continue
            share = f.rps / floor.rps
            ok = "PASS" if share >= TARGET_READ_SHARE else "MISS"
            out.append(
                f"{ok}  {op} x{c}: {100 * share:.0f}% of /livez "
                f"({f.rps:,.0f} vs {floor.rps:,.0f} req/s; by CPU per request "
                f"{100 * f.cpu_share(floor):.0f}%; target >= {100 * TARGET_READ_SHARE:.0f}%)"
            )
    if TARGET_P99_CONNECTIONS in connections:
        c = TARGET_P99_CONNECTIONS
        for op in OPERATIONS:
            f = figures.get((op, c))
            if f is None:
                continue
            p99 = f.med("p99_ms")
            ok = "PASS" if p99 < TARGET_P99_MS else "MISS"
            out.append(f"{ok}  {op} x{c}: p99 {p99:.1f} ms (target < {TARGET_P99_MS:g} ms)")
    else:
        out.append(f"(p99 target not checked: {TARGET_P99_CONNECTIONS} connections not measured)")
    errors = sum(f.errors for f in figures.values())
    out.append(f"{'PASS' if errors == 0 else 'MISS'}  non-2xx and socket errors: {errors}")
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--duration", type=float, default=5, help="seconds per run (5)")
    p.add_argument("--connections", default="1,50", help="comma-separated counts (1,50)")
    p.add_argument("--threads", type=int, default=2, help="wrk threads, at most connections (2)")
    p.add_argument("--ops", default=",".join(OPERATIONS), help="operations (all)")
    p.add_argument("--workflows", type=int, default=1000, help="seeded workflows (1000)")
    p.add_argument("--repeat", type=int, default=1, help="rounds; figures are medians (1)")
    p.add_argument("--warmup", type=float, default=1, help="seconds of each op first (1; 0: none)")
    p.add_argument(
        "--pace",
        type=float,
        default=0.0,
        metavar="MS",
        help="wait MS between two requests of a connection (a smoke run: every path, little\n"
        "load; the figures then mean nothing) (0: none)",
    )
    p.add_argument("--postgres", metavar="DSN", help="use a PostgreSQL store at DSN")
    p.add_argument(
        "--server-log-level",
        metavar="LEVEL",
        help="the server's --log-level (default: serve's own, info: one line per transition)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--dir", help="folder for the database and scripts (default: /tmp)")
    p.add_argument("--keep", action="store_true", help="keep the folder (database, scripts, log)")
    p.add_argument(
        "--profile",
        nargs="?",
        const="get",
        metavar="OPS",
        help="then py-spy the server during one more run of each of OPS (get) at the\n"
        "largest connection count, and print where its time goes",
    )
    p.add_argument("--profile-rate", type=int, default=100, help="py-spy samples/s (100)")
    args = p.parse_args(argv)
    connections = [int(c) for c in args.connections.split(",") if c.strip()]
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    for o in ops:
        if o not in OPERATIONS:
            p.error(f"unknown operation {o!r} (one of {', '.join(OPERATIONS)})")
    profile_ops = [o.strip() for o in (args.profile or "").split(",") if o.strip()]
    for o in profile_ops:
        if o not in OPERATIONS:
            p.error(f"--profile: unknown operation {o!r} (one of {', '.join(OPERATIONS)})")
    if "livez" not in ops:
        ops.insert(0, "livez")  # the floor every other figure is compared with
    if any(c < 1 for c in connections):
        p.error("--connections: counts must be >= 1")
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: apt-get install -y wrk")

    folder = bench_dir(args.dir)
    db = args.postgres or str(folder / "bench.db")
    prefix = f"b{secrets.token_hex(3)}-" if args.postgres else "b-"
    server = Server(folder, db, free_port(), args.server_log_level)
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout
    wrk_version = wrk_version.split("\n")[0].split(" Copyright")[0].strip()
    store = (
        "PostgreSQL " + re.sub(r"//[^@/]*@", "//***@", args.postgres)
        if args.postgres
        else f"SQLite {sqlite3.sqlite_version} in {folder} ({filesystem(folder)[1]})"
    )
    print(
        f"statewright HTTP bench: python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}, {wrk_version}\n"
        f"store {store}; {args.workflows} seeded workflows; {args.duration:g} s per run, "
        f"connections {','.join(map(str, connections))}, {args.repeat} round(s)\n",
        flush=True,
    )
    started = time.perf_counter()
    figures: dict[tuple[str, int], Figure] = {}
    profiles: dict[str, str] = {}
    try:
        server.start()
        t0 = time.perf_counter()
        ids = seed(server, args.workflows, prefix)
        print(
            f"server pid {server.pid} on {server.url}; seeded {len(ids)} workflows in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        scripts = write_scripts(folder, ids, args.pace)
        if args.warmup > 0:
            for op in ops:
                run_wrk(server, scripts[op], op, max(connections), args.warmup, args.threads)
        for round_ in range(1, args.repeat + 1):
            if args.repeat > 1:
                print(f"round {round_}/{args.repeat}")
            for c in connections:
                for op in ops:
                    r = run_wrk(server, scripts[op], op, c, args.duration, args.threads)
                    figures.setdefault((op, c), Figure(op, c)).runs.append(r)
                    print(
                        f"  {op:<6} x{c:<4} {r.rps:>8,.0f} req/s  p50 {r.p50_ms:7.2f} ms  "
                        f"p99 {r.p99_ms:7.2f} ms  errors {r.errors}  server CPU "
                        f"{100 * r.server_cpu_s / r.seconds:3.0f}% ({r.server_us_per_req:,.0f} "
                        f"µs/req, {100 * r.kernel_share:.0f}% in kernel)  "
                        f"wrk CPU {100 * r.wrk_cpu_s / r.seconds:3.0f}%",
                        flush=True,
                    )
                    if r.errors:
                        print("    " + sample_error(server, op, ids), flush=True)
        for op in profile_ops:
            out = folder / f"profile-{op}.folded"
            print(f"\nprofiling {op} x{max(connections)} with py-spy ...", flush=True)
            text = run_profile(
                server,
                scripts[op],
                op,
                max(connections),
                args.duration,
                args.threads,
                out,
                args.profile_rate,
            )
            if args.json and out.exists():
                keep_as = Path(args.json).with_suffix(f".{op}.folded")
                shutil.copyfile(out, keep_as)
                text = f"(raw stacks: {keep_as})\n{text}"
            elif args.keep:
                text = f"(raw stacks: {out})\n{text}"
            profiles[op] = text
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)

    medians = f", medians of {args.repeat} rounds" if args.repeat > 1 else ""
    print(
        f"\nHTTP API vs the /livez floor (wrk, real `statewright serve`, admin bearer token; "
        f"% livez = req/s / /livez req/s at the same connection count; by CPU = /livez's "
        f"srv µs/req / this one's; srv = the server process's CPU, all threads; in kernel = "
        f"its system time share{medians})"
    )
    print(report(figures, connections))
    print("\ntargets")
    print("\n".join("  " + v for v in verdicts(figures, connections)))
    for op, text in profiles.items():
        print(f"\nprofile of the server during {op} x{max(connections)} (py-spy)\n{text}")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")

    if args.json:
        doc = {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "wrk": wrk_version,
            "store": "postgres" if args.postgres else "sqlite",
            "sqlite": sqlite3.sqlite_version,
            "duration": args.duration,
            "repeat": args.repeat,
            "workflows": args.workflows,
            "results": [
                f.summary(figures.get(("livez", f.connections))) for f in figures.values()
            ],
            "targets": verdicts(figures, connections),
            "profiles": profiles,
        }
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
