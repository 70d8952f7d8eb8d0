"""The Prometheus rules file ``statewright alerts --prometheus-rules`` writes: ``promtool check
rules`` accepts it, and ``promtool test rules`` passes on series that make each of the seven
rules fire and not fire. promtool comes from the Debian package ``prometheus`` (scripts/test
installs it); without it these tests fail, they never skip."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from statewright import Engine, MachineBuilder, SQLiteStore, WorkflowType
from statewright.observability.alerts import RULES, AlertThresholds
from statewright.observability.prom_rules import prometheus_rules, rules_yaml
from tests.integration.conftest import Cli

TH = AlertThresholds(
    running_too_long=600,
    paused_too_long=1200,
    blocked_too_long=1800,
    retry_transitions=3,
    retry_window=900,
    failure_ratio=0.25,
    failure_window=3600,
    failure_min_ended=5,
    rejection_spike=20,
    rejection_window=300,
    parked_workflows=2,
)


def _machine() -> WorkflowType:
    machine = (
        MachineBuilder("job")
        .state("queued", initial=True)
        .state("working")
        .state("review")
        .state("blocked")
        .state("done", terminal=True)
        .state("failed", terminal=True)
        .event("go")
        .event("ask")
        .event("approve", approval=True)
        .event("block")
        .event("finish")
        .event("fail")
        .event("unblock")
        .transition("go", "queued", "working")
        .transition("ask", "working", "review")
        .transition("approve", "review", "done")
        .transition("block", "working", "blocked")
        .transition("finish", "working", "done")
        .transition("fail", "working", "failed")
        .transition("unblock", "blocked", "working")
        .build()
    )

    async def work(run: Any) -> None:
        return None

    # "working" has a handler: a working state; "review" waits for a person (approval).
    return WorkflowType(machine, handlers={"working": work})


def _rules(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    async def go() -> tuple[str, dict[str, Any]]:
        async with Engine(SQLiteStore(tmp_path / "r.db"), [_machine()]) as e:
            return rules_yaml(e, TH), prometheus_rules(e, TH)

    text, doc = asyncio.run(go())
    path = tmp_path / "statewright.rules.yml"
    path.write_text(text)
    return path, doc


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    assert exe, "promtool is missing: apt-get install -y prometheus (scripts/test does)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)


def test_promtool_checks_the_generated_rules(tmp_path: Path) -> None:
    path, doc = _rules(tmp_path)
    done = _promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 9 rules found" in done.stdout  # 7 alerts, 2 recording rules
    assert [r["alert"] for r in doc["groups"][0]["rules"]] == [
        "running_too_long",
        "paused_abandoned",
        "blocked_too_long",
        "retry_flapping",
        "failure_ratio",
        "invalid_transition_spike",
        "workflow_parked",
    ]
    assert sorted(r["alert"] for r in doc["groups"][0]["rules"]) == sorted(RULES)
    assert [r["record"] for r in doc["groups"][1]["rules"]] == [
        "statewright:failures:rate5m",
        "statewright:step_failures:rate5m",
    ]


def _expanded(rule: dict[str, Any], labels: dict[str, str]) -> dict[str, str]:
    """The rule's annotations with its label templates filled in, as Prometheus does."""
    out = {}
    for k, v in rule["annotations"].items():
        for name, value in labels.items():
            v = v.replace(f"{{{{ $labels.{name} }}}}", value)
        out[k] = v
    return out


def test_promtool_unit_tests_make_each_rule_fire_and_not_fire(tmp_path: Path) -> None:
    path, doc = _rules(tmp_path)
    rules = {r["alert"]: r for r in doc["groups"][0]["rules"]}
    age = "statewright_workflow_oldest_age_seconds"
    # One sample a minute. Ages grow by 60s a minute from 0; the other "job" states stay young.
    series = [
        # working: past 600s after 11 minutes
        {"series": f'{age}{{machine="job",state="working"}}', "values": "0+60x60"},
        # review (approval out of it): past 1200s after 21 minutes
        {"series": f'{age}{{machine="job",state="review"}}', "values": "0+60x60"},
        # blocked: past 1800s after 31 minutes
        {"series": f'{age}{{machine="job",state="blocked"}}', "values": "0+60x60"},
        # queued is no working state: never fires, however old
        {"series": f'{age}{{machine="job",state="queued"}}', "values": "100000+60x60"},
        # a machine this engine does not register: judged by the threshold sets' names
        {"series": f'{age}{{machine="other",state="running"}}', "values": "0+60x60"},
        # retries: "job" 1 a minute (15 in 15m), "calm" 1 in the hour
        {"series": 'statewright_retries_total{machine="job",state="working",mode="in_place"}',
         "values": "0+1x60"},
        {"series": 'statewright_retries_total{machine="calm",state="working",mode="in_place"}',
         "values": "0x30 1x30"},
        # endings: "job" 1 failed per done (50%), and a second instance counting too
        {"series": 'statewright_transitions_total{machine="job",event="fail",to_state="failed",'
                   'instance="a"}', "values": "0+1x60"},
        {"series": 'statewright_transitions_total{machine="job",event="finish",to_state="done",'
                   'instance="b"}', "values": "0+1x60"},
        # refusals: 10 a minute on "job" from minute 40; version conflicts never count
        {"series": 'statewright_rejected_transitions_total{machine="job",event="go",'
                   'code="illegal_transition"}', "values": "0x40 10+10x20"},
        {"series": 'statewright_rejected_transitions_total{machine="job",event="go",'
                   'code="version_conflict"}', "values": "0+100x60"},
        # parked (threshold 2 per machine and state): "job" working gets one for one reason
        # from minute 5, a second for another reason from minute 10, the same in two scraping
        # processes (taken once); "job" review only ever has one
        *[{"series": f'statewright_workflows_parked{{machine="job",state="working",'
                     f'reason="step_outcome_unknown",instance="{i}"}}', "values": "0x5 1x55"}
          for i in ("a", "b")],
        *[{"series": f'statewright_workflows_parked{{machine="job",state="working",'
                     f'reason="fatal_error",instance="{i}"}}', "values": "0x10 1x50"}
          for i in ("a", "b")],
        {"series": 'statewright_workflows_parked{machine="job",state="review",'
                   'reason="fatal_error",instance="a"}', "values": "1x60"},
    ]  # fmt: skip

    def firing(rule: str, at: str, *labelsets: dict[str, str]) -> dict[str, Any]:
        exp = []
        for ls in labelsets:
            labels = {**ls, "severity": rules[rule]["labels"]["severity"]}
            exp.append({"exp_labels": labels, "exp_annotations": _expanded(rules[rule], labels)})
        return {"eval_time": at, "alertname": rule, "exp_alerts": exp}

    job_working = {"machine": "job", "state": "working"}
    alert_rule_test = [
        firing("running_too_long", "9m"),
        firing("running_too_long", "12m", job_working, {"machine": "other", "state": "running"}),
        firing("paused_abandoned", "19m"),
        firing("paused_abandoned", "22m", {"machine": "job", "state": "review"}),
        firing("blocked_too_long", "29m"),
        firing("blocked_too_long", "32m", {"machine": "job", "state": "blocked"}),
        firing("retry_flapping", "2m"),
        firing("retry_flapping", "20m", {"machine": "job"}),
        firing("failure_ratio", "1m"),  # fewer than 5 ended
        firing("failure_ratio", "40m", {"machine": "job"}),
        firing("invalid_transition_spike", "30m"),  # only version conflicts so far
        firing("invalid_transition_spike", "50m", {"machine": "job"}),
        firing("workflow_parked", "7m"),  # one parked (counted once over two processes)
        firing("workflow_parked", "12m", job_working),  # two: fires at once, no `for`
    ]
    tests = {
        "rule_files": [str(path)],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m", "input_series": series, "alert_rule_test": alert_rule_test},
            {
                # half failed, but fewer than failure_min_ended ended within the window
                "interval": "1m",
                "input_series": [
                    {"series": 'statewright_transitions_total{machine="job",to_state="failed"}',
                     "values": "0x30 1x30"},
                    {"series": 'statewright_transitions_total{machine="job",to_state="done"}',
                     "values": "0x30 1x30"},
                ],
                "alert_rule_test": [
                    {"eval_time": "40m", "alertname": "failure_ratio", "exp_alerts": []}
                ],
            },
        ],
    }  # fmt: skip
    unit = tmp_path / "statewright.rules.test.yml"
    unit.write_text(yaml.safe_dump(tests, sort_keys=False))
    done = _promtool("test", "rules", str(unit))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_the_recording_rules_rank_the_steps_that_fail_most(tmp_path: Path) -> None:
    """``statewright:step_failures:rate5m`` sums the failed attempts of each step over the
    processes (and states, errors); ``topk`` over it answers "which step fails most"; handler
    failures are in ``statewright:failures:rate5m`` only."""
    path, _ = _rules(tmp_path)
    failures = "statewright_failures_total"
    series = [
        # "charge": 6 failed attempts a minute over two workers and two errors
        {"series": f'{failures}{{machine="job",state="working",step="charge",kind="step",'
                   'error="transient",instance="a"}', "values": "0+3x20"},
        {"series": f'{failures}{{machine="job",state="working",step="charge",kind="step",'
                   'error="fatal",instance="b"}', "values": "0+3x20"},
        # "notify": 1 a minute; its handler failures (kind handler) are not step failures
        {"series": f'{failures}{{machine="job",state="working",step="notify",kind="step",'
                   'error="transient",instance="a"}', "values": "0+1x20"},
        {"series": f'{failures}{{machine="job",state="working",step="notify",kind="handler",'
                   'error="transient",instance="a"}', "values": "0+12x20"},
    ]  # fmt: skip
    tests = {
        "rule_files": [str(path)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": "topk(1, statewright:step_failures:rate5m)",
                        "eval_time": "10m",
                        "exp_samples": [
                            {"labels": 'statewright:step_failures:rate5m{machine="job",'
                                       'step="charge"}', "value": 0.1},
                        ],
                    },
                    {
                        "expr": 'statewright:step_failures:rate5m{step="notify"}',
                        "eval_time": "10m",
                        "exp_samples": [
                            {"labels": 'statewright:step_failures:rate5m{machine="job",'
                                       'step="notify"}', "value": 1 / 60},
                        ],
                    },
                    {
                        "expr": 'statewright:failures:rate5m{kind="handler"}',
                        "eval_time": "10m",
                        "exp_samples": [
                            {"labels": 'statewright:failures:rate5m{machine="job",'
                                       'state="working",step="notify",kind="handler",'
                                       'error="transient"}', "value": 0.2},
                        ],
                    },
                ],
            }
        ],
    }  # fmt: skip
    unit = tmp_path / "records.test.yml"
    unit.write_text(yaml.safe_dump(tests, sort_keys=False))
    done = _promtool("test", "rules", str(unit))
    assert done.returncode == 0, done.stdout + done.stderr


def test_failure_ratio_below_the_threshold_does_not_fire(tmp_path: Path) -> None:
    path, _ = _rules(tmp_path)
    series = [
        {"series": 'statewright_transitions_total{machine="job",event="fail",to_state="failed"}',
         "values": "0+1x60"},
        {"series": 'statewright_transitions_total{machine="job",event="finish",to_state="done"}',
         "values": "0+10x60"},
    ]  # fmt: skip
    tests = {
        "rule_files": [str(path)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "30m", "alertname": "failure_ratio", "exp_alerts": []}
                ],
            }
        ],
    }
    unit = tmp_path / "ratio.test.yml"
    unit.write_text(yaml.safe_dump(tests, sort_keys=False))
    done = _promtool("test", "rules", str(unit))
    assert done.returncode == 0, done.stdout + done.stderr


def test_cli_writes_the_rules_file(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "cli.db")
    target = tmp_path / "out.rules.yml"
    result = cli("alerts", "--prometheus-rules", str(target), "--threshold", "running_too_long=60")
    assert f"wrote {target}" in result.stdout
    doc = yaml.safe_load(target.read_text())
    expr = doc["groups"][0]["rules"][0]["expr"]
    assert expr.endswith("> 60") and "statewright_workflow_oldest_age_seconds" in expr
    done = _promtool("check", "rules", str(target))
    assert done.returncode == 0, done.stdout + done.stderr


def test_cli_writes_the_rules_to_stdout(tmp_path: Path) -> None:
    result = Cli(tmp_path / "cli.db")("alerts", "--prometheus-rules", "-")
    doc = yaml.safe_load(result.stdout)
    assert len(doc["groups"][0]["rules"]) == 7
    assert result.stdout.startswith("# Prometheus alerting rules")
