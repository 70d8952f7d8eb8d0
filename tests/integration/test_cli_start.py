"""``statewright --help`` and ``statewright show ID`` start fast: what they import.

Deterministic, not timed: each command runs in a fresh interpreter (as the console script
does), and the test fails if a heavy dependency is in ``sys.modules`` when it exits. The
timings are in bench/bench_cli.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from statewright.cli import app
from tests.integration.conftest import CLEAN_ENV, Cli

ALWAYS_HEAVY = (
    # the HTTP service, the MCP SDK, metrics and tracing: only serve, mcp, worker, alerts
    "fastapi",
    "uvicorn",
    "starlette",
    "pydantic",
    "pydantic_core",
    "typer._adapters",  # Typer's Pydantic coercion (statewright.cli.options.plain_coercion)
    "mcp",
    "prometheus_client",
    "opentelemetry",
    "httpx",
    "psycopg",
    "psycopg_pool",
    "hypothesis",
    "yaml",
    "statewright.observability",
    "statewright.http",
    "statewright.mcp_server",
    "statewright.access",
    "statewright.testing",
)
HELP_HEAVY = (
    *ALWAYS_HEAVY,
    "jsonschema",
    "rich",
    "asyncio",
    "sqlite3",
    "statewright.engine",
    "statewright.store",
    "statewright.definition",
    "statewright.types",
)
"""`--help` only builds the command table: no engine, store, definitions or output."""
SHOW_HEAVY = ALWAYS_HEAVY
"""`show` needs the engine, the SQLite store and Rich. It also imports jsonschema: the
built-in agent_task machine's payload schemas are checked when it is built."""

PROBE = """
import json, os, sys
from statewright.cli.main import main
sys.argv = ["statewright", *sys.argv[2:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open(os.environ["PROBE_OUT"], "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def loaded(tmp_path: Path, *args: str) -> tuple[int, set[str], str]:
    """Run ``statewright ARGS`` in a fresh interpreter: its exit code, the modules loaded
    when it ended, and what it printed."""
    report = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    env["PROBE_OUT"] = str(report)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "-", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.exists(), done.stderr
    data = json.loads(report.read_text())
    return data["code"], set(data["modules"]), done.stdout


def heavy(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(
        name for name in names if any(m == name or m.startswith(name + ".") for m in modules)
    )


def test_help_imports_no_heavy_module(tmp_path: Path) -> None:
    code, modules, out = loaded(tmp_path, "--help")
    assert code == 0
    assert "Commands" in out and "show" in out
    assert heavy(modules, HELP_HEAVY) == []


@pytest.mark.parametrize("command", ["serve", "mcp", "worker", "show", "alerts"])
def test_a_command_help_imports_no_heavy_module(tmp_path: Path, command: str) -> None:
    code, modules, out = loaded(tmp_path, command, "--help")
    assert code == 0
    assert "Usage: statewright " + command in out
    if command == "alerts":  # its --threshold help lists AlertThresholds' defaults
        assert heavy(modules, ALWAYS_HEAVY) == ["statewright.observability"]
    else:
        assert heavy(modules, HELP_HEAVY) == []


def test_show_on_sqlite_imports_no_heavy_module(cli: Cli, tmp_path: Path) -> None:
    cli("start", "agent_task", "--id", "w1", "--input", '{"goal": "triage"}')
    code, modules, out = loaded(tmp_path, "--db", str(cli.db), "show", "w1")
    assert code == 0
    assert "workflow w1" in out and "planned" in out
    assert heavy(modules, SHOW_HEAVY) == []


def test_list_and_show_json_import_no_heavy_module(cli: Cli, tmp_path: Path) -> None:
    cli("start", "agent_task", "--id", "w1")
    # (`--limit 5` would import Pydantic: Typer converts a number typed on the command line)
    for args in (("list", "--state", "planned"), ("show", "w1", "--json")):
        code, modules, _ = loaded(tmp_path, "--db", str(cli.db), *args)
        assert code == 0, args
        assert heavy(modules, SHOW_HEAVY) == [], args


def test_values_repeated_to_stay_light_agree_with_their_source() -> None:
    from statewright.cli import options, serve
    from statewright.http import limits, longpoll
    from statewright.store import DEFAULT_DB

    assert options.DEFAULT_DB == DEFAULT_DB
    assert (serve.MAX_BODY_BYTES, serve.MAX_HEADER_BYTES, serve.PARSER_HEADROOM) == (
        limits.MAX_BODY_BYTES,
        limits.MAX_HEADER_BYTES,
        limits.PARSER_HEADROOM,
    )
    assert serve.MAX_WAIT == longpoll.MAX_WAIT


def test_alerts_help_lists_the_threshold_defaults(cli: Cli) -> None:
    from statewright.cli.alerts import DEFAULTS_MARK, _defaults

    text = "".join(cli("alerts", "--help", db=False).stdout.split())  # as wrapped: no spaces
    assert "".join(DEFAULTS_MARK.split()) not in text
    assert "".join(f"Defaults: {_defaults()}.".split()) in text


def test_plain_coercion_keeps_typer_messages(cli: Cli) -> None:
    """Values Typer must convert or refuse still go through Typer."""
    cli("start", "agent_task", "--id", "w1")
    assert len(cli.json("list", "--limit", "1")) == 1
    refused = cli("list", "--limit", "0", code=2)
    assert "--limit" in refused.stderr
    refused = cli("list", "--limit", "many", code=2)
    assert "--limit" in refused.stderr
    from_env = cli.runner.invoke(
        app, ["--db", str(cli.db), "list"], env={**CLEAN_ENV, "STATEWRIGHT_JSON": "1"}
    )
    assert from_env.exit_code == 0 and from_env.stdout.lstrip().startswith("[")


def test_import_statewright_is_lazy_and_complete() -> None:
    code = (
        "import sys, statewright; "
        "assert 'statewright.engine' not in sys.modules, 'engine imported'; "
        "from statewright import Engine, SQLiteStore, Worker; "
        "import statewright.engine as e; assert Engine is e.Engine; "
        "ns = {}; exec('from statewright import *', ns); "
        "missing = set(statewright.__all__) - set(ns); assert not missing, missing; "
        "assert set(statewright.__all__) <= set(dir(statewright))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    import statewright

    with pytest.raises(AttributeError):
        _ = statewright.NoSuchThing  # type: ignore[attr-defined]
