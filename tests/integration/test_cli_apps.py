"""The CLI with definitions and apps: diagram, check, --app loading, worker."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from statewright.definition import agent_task_machine, save_path
from tests.forkserver import ForkServer
from tests.integration.conftest import EXAMPLES, Cli

ORDERS = str(EXAMPLES / "order_fulfilment.py")
BROKEN = """\
name: broken
states:
  - {name: a, initial: true}
  - {name: b}
  - {name: island}
  - {name: end, terminal: true}
events: [{name: go}, {name: back}]
transitions:
  - {event: go, source: a, target: b}
  - {event: back, source: b, target: a}
  - {event: go, source: b, target: nowhere}
"""


def test_diagram_of_a_type_a_file_and_a_workflow(cli: Cli, tmp_path: Path) -> None:
    assert cli("diagram", "agent_task").stdout.startswith("stateDiagram-v2\n")
    assert cli("diagram", "agent_task", "--format", "dot").stdout.startswith('digraph "agent')
    cli("start", "agent_task", "--id", "t1")
    cli("send", "t1", "start")
    assert "class running current" in cli("diagram", "--id", "t1").stdout
    data = cli.json("diagram", "agent_task", "--id", "t1", "--format", "dot")
    assert (data["current"], data["format"], data["machine"]) == ("running", "dot", "agent_task")

    path = tmp_path / "task.json"
    save_path(agent_task_machine("task_copy"), path)
    assert "[*] --> planned" in cli("diagram", str(path)).stdout
    assert cli.error("diagram", str(path), "--id", "t1", code=2) == (
        "error[invalid_input]: workflow 't1' is a 'agent_task', not a 'task_copy'"
    )
    assert cli.error("diagram", "nope", code=1).startswith("error[unknown_workflow_type]")
    assert cli.error("diagram", code=2).startswith("error[invalid_input]")
    cli("diagram", "agent_task", "--format", "png", code=2)


def test_check_a_valid_definition(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    save_path(agent_task_machine(), path)
    text = cli("check", str(path)).stdout
    assert text.startswith(f"OK {path}: machine agent_task v1: 7 states")
    summary = cli.json("check", str(path))
    assert summary["ok"] and summary["initial"] == "planned"
    assert summary["terminal"] == ["done", "failed"]


NESTED = """\
name: ticket
states:
  - name: open
    initial: true
    after: {3600: expire}
    states:
      - {name: new, initial: true}
      - {name: working, exit: {worked: "True"}}
  - {name: closed, terminal: true}
events: [{name: pick}, {name: close}, {name: expire}]
transitions:
  - {event: pick, source: open.new, target: open.working}
  - {event: close, source: open, target: closed}
  - {event: expire, source: open, target: closed}
"""


def test_check_and_diagram_of_a_definition_with_compound_states(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "ticket.yaml"
    path.write_text(NESTED)
    summary = cli.json("check", str(path))
    assert (summary["states"], summary["initial"]) == (3, "open.new")
    assert (summary["compound_states"], summary["timers"]) == (["open"], 1)
    assert "compound open" in cli("check", str(path)).stdout
    assert 'subgraph "cluster_open" {' in cli("diagram", str(path), "--format", "dot").stdout


def test_check_lists_every_problem_with_its_code(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    out = cli("check", str(path), code=1).stdout
    assert out.startswith(f"{path}: 6 problem(s)\n")
    assert [line.split(":")[0] for line in out.splitlines()[1:]] == [
        "  unknown_target_state",
        "  unreachable_state",
        "  unreachable_state",
        "  trap_state",
        "  trap_state",
        "  trap_state",
    ]
    assert "goes to unknown state 'nowhere'" in out
    report = cli.json("check", str(path), code=1)
    assert report["ok"] is False
    assert [(p["code"], p["state"]) for p in report["problems"]][:3] == [
        ("unknown_target_state", "nowhere"),
        ("unreachable_state", "island"),
        ("unreachable_state", "end"),
    ]


def test_check_reports_syntax_and_file_errors(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    assert "  invalid_syntax: not valid JSON" in cli("check", str(bad), code=1).stdout
    schema = tmp_path / "schema.json"
    schema.write_text('{"name": "x", "states": [], "colour": 1}')
    assert "  invalid_document: " in cli("check", str(schema), code=1).stdout
    assert cli.error("check", str(tmp_path / "missing.json"), code=2).startswith(
        "error[invalid_input]: no such file"
    )
    other = tmp_path / "machine.txt"
    other.write_text("x")
    assert cli.error("check", str(other), code=2).startswith("error[invalid_input]")


def test_an_example_app_runs_under_the_cli_worker(cli: Cli) -> None:
    order = '{"sku": "BOOK-42", "quantity": 1, "amount_cents": 2599}'
    cli("--app", ORDERS, "start", "order_fulfilment", "--id", "o1", "--input", order)
    assert cli.json("--app", ORDERS, "worker", "--until-idle")["processed"] == 4
    shown = cli.json("--app", ORDERS, "show", "o1")
    assert shown["workflow"]["state"] == "fulfillment_triggered"
    assert [s["step"] for s in shown["steps"]] == ["reserve", "authorize", "capture", "fulfil"]
    assert shown["allowed_events"] == ["ship"]
    # No handler in fulfillment_triggered nor after it: an input would never be read.
    line = cli.error("--app", ORDERS, "input", "o1", "label", code=2)
    assert line.startswith("error[input_not_expected]: workflow 'o1' is in state ")
    assert cli.json("input", "o1", "label")["input_id"]  # without the handlers: taken
    line = cli.error("--app", ORDERS, "send", "o1", "ship", "--payload", "{}", code=2)
    assert line.startswith("error[invalid_payload]: ") and "tracking_number" in line
    cli("--app", ORDERS, "send", "o1", "ship", "--payload", '{"tracking_number": "T1"}')
    # The webhook's data reached the context through the event's assign action.
    assert (
        cli.json("--app", ORDERS, "show", "o1")["workflow"]["context"]["tracking_number"] == "T1"
    )
    patched = cli.json(
        "--app",
        ORDERS,
        "patch-context",
        "o1",
        '{"gift_note": "Happy birthday"}',
        "--reason",
        "customer asked by phone",
        "--actor",
        "alice",
    )
    assert (patched["state"], patched["context"]["gift_note"]) == ("shipped", "Happy birthday")
    last = cli.json("--app", ORDERS, "history", "o1")[-1]
    assert (last["event"], last["actor"], last["payload"]) == (
        "$patch_context",
        "alice",
        {"reason": "customer asked by phone"},
    )
    line = cli.error("--app", ORDERS, "patch-context", "o1", "[1]", "--reason", "x", code=2)
    assert line.startswith("error[invalid_input]")
    cli("--app", ORDERS, "replay", "o1")
    moved = cli.json(
        "--app",
        ORDERS,
        "move",
        "o1",
        "delivered",
        "--reason",
        "carrier confirmed by phone",
    )
    assert moved["state"] == "delivered"
    fork = ("--app", ORDERS, "fork", "o1", "--version", "2", "--id", "o1b", "--reason", "redo")
    # The payment was captured and the order fulfilled after v2: a fork from v2 does it
    # again, so it is refused until --rerun-steps says that is meant.
    line = cli.error(*fork, code=2)
    assert line.startswith("error[steps_would_rerun]") and "'capture', 'fulfil'" in line
    forked = cli.json(*fork, "--rerun-steps")
    assert (forked["id"], forked["state"]) == ("o1b", "inventory_reserved")
    cli("--app", ORDERS, "replay", "o1b")
    line = cli.error("--app", ORDERS, "move", "o1", "nowhere", "--reason", "x", code=2)
    assert line.startswith("error[unknown_state]") and "nowhere" in line
    cli("--app", ORDERS, "replay", "o1")
    assert "class delivered current" in cli("--app", ORDERS, "diagram", "--id", "o1").stdout
    # Without --app the row still shows; only what needs the machine is unknown.
    assert "pass --app" in cli("show", "o1").stdout
    assert cli.error("replay", "o1", code=1).startswith("error[unknown_workflow_type]")


def test_app_sources_modules_attributes_and_errors(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cli_app_mod.py").write_text(
        "from statewright import MachineBuilder, WorkflowType\n"
        "m = (MachineBuilder('tiny').state('a', initial=True).state('z', terminal=True)\n"
        "     .event('go').transition('go', 'a', 'z').build())\n"
        "TYPES = [WorkflowType(m)]\n"
        "other = MachineBuilder('tiny2').state('a', initial=True).state('z', terminal=True)"
        ".event('go').transition('go', 'a', 'z').build()\n"
        "nothing = 42\n"
    )
    (tmp_path / "cli_app_boom.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "cli_app_mod", raising=False)
    assert sorted(cli.json("--app", "cli_app_mod", "init")["types"]) == ["agent_task", "tiny"]
    assert "tiny2" in cli.json("--app", "cli_app_mod:other,cli_app_mod.py", "init")["types"]
    for app, why in [
        ("cli_app_mod:nothing", "expected a WorkflowType, a Machine or a list of them"),
        ("cli_app_mod:missing", "has no attribute 'missing'"),
        ("no_such_module_here", "cannot import module"),
        ("missing.py", "no such file"),
    ]:
        assert why in cli.error("--app", app, "init", code=2)
    lines = cli("--app", "cli_app_boom.py", "init", code=2).stderr.splitlines()
    assert "importing" in lines[0] and lines[1] == "  caused by: RuntimeError: boom"
    monkeypatch.delitem(sys.modules, "cli_app_mod", raising=False)


def test_worker_modes(cli: Cli) -> None:
    assert cli.json("worker", "--once") | {"worker_id": "w"} == {
        "worker_id": "w",
        "recovered": 0,
        "orphans_cancelled": 0,
        "processed": 0,
    }
    assert "processed 0" in cli("worker", "--until-idle").stdout
    assert cli.error("worker", "--once", "--until-idle", code=2).startswith("error[invalid_input]")


def test_the_worker_counts_what_it_recovered(cli: Cli) -> None:
    """It said "recovered 0" after recovering the work of a dead worker."""
    import asyncio
    import socket
    import subprocess

    from statewright import Engine, SQLiteStore
    from statewright.engine import agent_task_type

    dead = subprocess.Popen(["true"])  # a worker process that has exited
    dead.wait()
    owner = f"{socket.gethostname()}:{dead.pid}:dead"

    async def leave_leased() -> None:
        async with Engine(SQLiteStore(cli.db), [agent_task_type()]) as engine:
            for n in (1, 2):
                await engine.start("agent_task", {}, workflow_id=f"t{n}")
            now = engine.runtime.clock.now()
            claimed = await engine.store.claim_due(owner, now, 300.0, 10, ["agent_task"])
            assert len(claimed) == 2

    asyncio.run(leave_leased())
    assert cli.json("worker", "--until-idle")["recovered"] == 2
    assert "worker stopped: recovered 0," in cli("worker", "--until-idle").stdout


def _text(path: Path) -> str:
    """What a child wrote to ``path`` so far (it creates the file once forked)."""
    return path.read_text() if path.exists() else ""


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (its SigCgt mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    raise AssertionError(f"no SigCgt in /proc/{pid}/status")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_worker_stops_cleanly_on_a_signal(
    cli_forks: ForkServer, tmp_path: Path, sig: signal.Signals
) -> None:
    """A real ``statewright worker`` process (forked from the ``cli_forks`` server, as
    ``python -m statewright.cli`` would run it) exits 0 after ``sig``, having said so."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    out, err = tmp_path / "worker.out", tmp_path / "worker.err"
    argv = ["--db", str(tmp_path / "w.db"), "worker", "--poll-interval", "0.05"]
    proc = cli_forks.popen(argv, out, err, env=env)
    try:
        # It is up, and it handles SIGINT and SIGTERM: it installs both handlers at once, so
        # a signal now is the one it stops on, not one that kills it before it listens.
        deadline = time.monotonic() + 20
        while not (_text(err).startswith("worker ") and _catches(proc.pid, signal.SIGTERM)):
            assert proc.poll() is None, (_text(out), _text(err))
            assert time.monotonic() < deadline, ("the worker did not start", _text(err))
            time.sleep(0.01)
        proc.send_signal(sig)
        proc.wait(20)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err.read_text()
    assert "worker stopped" in out.read_text()
