from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from statewright.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# The suite must not depend on the caller's environment.
CLEAN_ENV: dict[str, str | None] = {
    name: None
    for name in (
        "STATEWRIGHT_DB",
        "STATEWRIGHT_APP",
        "STATEWRIGHT_JSON",
        "STATEWRIGHT_LOG_LEVEL",
        "STATEWRIGHT_EXAMPLES",
        "STATEWRIGHT_CONCURRENCY",
        "STATEWRIGHT_LEASE_SECONDS",
        "STATEWRIGHT_POLL_INTERVAL",
        "STATEWRIGHT_GRACE",
        "STATEWRIGHT_CANCEL_GRACE",
        "STATEWRIGHT_LOG_FORMAT",
        "STATEWRIGHT_ALERT_THRESHOLDS",
        "STATEWRIGHT_TENANT",
        "STATEWRIGHT_TOKENS_FILE",
        "STATEWRIGHT_TOKEN",
        "STATEWRIGHT_HOST",
        "STATEWRIGHT_PORT",
        "STATEWRIGHT_MAX_BODY_BYTES",
        "STATEWRIGHT_MAX_HEADER_BYTES",
        "STATEWRIGHT_METRICS_AUTH",
        "STATEWRIGHT_ALERT_WEBHOOKS",
        "STATEWRIGHT_ALERT_INTERVAL",
        "STATEWRIGHT_METRICS_PORT",
        "STATEWRIGHT_METRICS_HOST",
    )
}


@dataclass
class Cli:
    """Runs ``statewright --db <tmp> ...`` in-process and checks the exit code."""

    db: Path
    runner: CliRunner = field(default_factory=CliRunner)

    def __call__(self, *args: str, code: int = 0, db: bool = True) -> Result:
        argv = ["--db", str(self.db), *args] if db else list(args)
        result = self.runner.invoke(app, argv, env=CLEAN_ENV)
        assert result.exit_code == code, (
            f"statewright {' '.join(argv)} exited {result.exit_code}, not {code}\n"
            f"stdout: {result.stdout}\nstderr: {result.stderr}\n{result.exception!r}"
        )
        return result

    def json(self, *args: str, code: int = 0) -> Any:
        return json.loads(self("--json", *args, code=code).stdout)

    def error(self, *args: str, code: int) -> str:
        """The one-line error report of a failing command."""
        stderr = self(*args, code=code).stderr
        assert stderr.startswith("error["), stderr
        return stderr.splitlines()[0]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "sw.db")
