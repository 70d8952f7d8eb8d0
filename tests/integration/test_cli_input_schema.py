"""A definition file's type options through the CLI and ``load_path``: ``input_schema:``
(``check`` says so, a bad start is refused with exit 2 and every error, nothing written),
``redact:`` read alike by ``--app`` and ``load_path``, and ``check``'s count of timers
(``every`` ones included)."""

from __future__ import annotations

import json
from pathlib import Path

from statewright.cli.loading import file_type
from statewright.definition import load_path
from statewright.engine import WorkflowType
from tests.integration.conftest import Cli

PARCEL = """\
name: parcel
redact: [customer.card]
input_schema:
  type: object
  properties:
    weight: {type: number, exclusiveMinimum: 0}
    customer: {type: object}
  required: [weight]
states:
  - name: packing
    initial: true
    after: {3600: expire}
    every: {600: remind, 86400: report}
  - {name: sent, terminal: true}
events: [{name: send}, {name: expire}, {name: remind}, {name: report}]
transitions:
  - {event: send, source: packing, target: sent}
  - {event: expire, source: packing, target: sent}
  - {event: remind, source: packing, target: packing}
  - {event: report, source: packing, target: packing}
"""


def write(tmp_path: Path) -> str:
    path = tmp_path / "parcel.yaml"
    path.write_text(PARCEL)
    return str(path)


def test_check_counts_every_timer_and_names_the_input_schema(cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path)
    summary = cli.json("check", path)
    assert (summary["timers"], summary["input_schema"]) == (3, True)
    text = cli("check", path).stdout
    assert "3 timer(s)" in text and text.rstrip().endswith("; input schema")


def test_a_start_that_fails_the_files_schema_is_refused(cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path)
    result = cli(
        "--app", path, "start", "parcel", "--id", "p1", "--input", '{"weight": 0}', code=2
    )
    lines = result.stderr.splitlines()
    assert lines[0] == (
        "error[input_not_accepted]: input of workflow type 'parcel' is invalid at weight: "
        "0 is less than or equal to the minimum of 0"
    )
    assert lines[1] == "  at weight: 0 is less than or equal to the minimum of 0"
    report = json.loads(cli("--json", "--app", path, "start", "parcel", code=2).stderr)
    assert report["errors"] == [{"path": "", "message": "'weight' is a required property"}]
    assert cli.error("--app", path, "show", "p1", code=1).startswith("error[workflow_not_found]")
    assert cli.json("--app", path, "start", "parcel", "--input", '{"weight": 2}')["state"] == (
        "packing"
    )
    # A typo names the types there are.
    assert cli.error("--app", path, "start", "parcl", code=1) == (
        "error[unknown_workflow_type]: unknown workflow type 'parcl' (known: agent_task, parcel)"
    )


def test_load_path_reads_the_machine_of_a_file_that_lists_type_options(tmp_path: Path) -> None:
    """``--app`` took a top-level ``redact:`` that ``load_path`` refused."""
    path = write(tmp_path)
    loaded = file_type(path)
    assert isinstance(loaded, WorkflowType)
    assert loaded.redact == ("customer.card",)
    assert loaded.input_schema is not None and loaded.input_schema["required"] == ["weight"]
    assert load_path(path) == loaded.machine


def test_check_reports_an_input_schema_that_is_not_one(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(PARCEL.replace("type: object\n  properties", "type: objekt\n  properties"))
    report = cli.json("check", str(path), code=1)
    assert report["ok"] is False
    assert [p["code"] for p in report["problems"]] == ["invalid_input_schema"]
