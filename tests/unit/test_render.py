from __future__ import annotations

import re

from statewright.definition import Machine, MachineBuilder, agent_task_machine, to_dot, to_mermaid


def odd_names() -> Machine:
    return (
        MachineBuilder("odd.names")
        .state("start here", initial=True)
        .state("end", terminal=True)
        .state('say "hi"; #1', description="line one\nline two")
        .event("go")
        .event("back\\slash")
        .transition("go", "start here", 'say "hi"; #1', guard="payload.n < 3")
        .transition("back\\slash", 'say "hi"; #1', "end")
        .transition("go", "start here", "end")
        .build()
    )


def test_mermaid_has_every_edge_start_and_end() -> None:
    machine = agent_task_machine()
    text = to_mermaid(machine)
    lines = text.splitlines()
    assert lines[0] == "stateDiagram-v2"
    assert "    [*] --> planned" in lines
    assert "    done --> [*]" in lines
    assert "    failed --> [*]" in lines
    for t in machine.transitions:
        for source in t.sources:
            prefix = f"    {source} --> {t.target} : {t.event}"
            assert any(line.startswith(prefix) for line in lines), prefix
    assert "running --> retrying : error_transient [payload.attempt #lt;= payload." in text
    assert "paused --> failed : approval_timeout (after 86400s)" in text
    assert "classDef" not in text


def test_mermaid_marks_current_state() -> None:
    text = to_mermaid(agent_task_machine(), current="paused")
    assert "classDef current " in text
    assert text.rstrip().endswith("class paused current")
    assert "class " not in to_mermaid(agent_task_machine(), current="nowhere")


def test_mermaid_escapes_odd_names() -> None:
    text = to_mermaid(odd_names(), current='say "hi"; #1')
    assert 'state "start here" as s0' in text
    assert 'state "say #quot;hi#quot;#59; #35;1" as s2' in text
    assert 'state "end" as s1' in text  # 'end' is a Mermaid keyword
    assert "s0 --> s2 : go [payload.n #lt; 3]" in text
    assert "s2 : line one line two" in text
    assert "class s2 current" in text
    for line in text.splitlines()[1:]:
        assert '"' not in line or line.lstrip().startswith("state ")


def test_dot_has_every_edge_and_shapes() -> None:
    machine = agent_task_machine()
    text = to_dot(machine, current="running")
    assert text.startswith('digraph "agent_task" {')
    assert text.rstrip().endswith("}")
    for t in machine.transitions:
        for source in t.sources:
            assert re.search(rf'"{source}" -> "{t.target}" \[label="{t.event}', text)
    assert '"__start__" -> "planned";' in text
    assert re.search(r'"done" \[shape=doublecircle', text)
    assert re.search(r'"failed" \[shape=doublecircle', text)
    assert re.search(r'"running" \[style=filled', text)
    assert 'label="error_transient [payload.attempt <= payload.max_attempts]"' in text


def test_dot_escapes_quotes_backslashes_and_newlines() -> None:
    text = to_dot(odd_names())
    assert text.startswith('digraph "odd.names" {')
    assert '"say \\"hi\\"; #1" -> "end" [label="back\\\\slash"];' in text
    assert 'tooltip="line one\\nline two"' in text
    assert "filled" not in text


def test_output_is_deterministic() -> None:
    for render in (to_mermaid, to_dot):
        assert render(agent_task_machine(), "paused") == render(agent_task_machine(), "paused")
        assert render(odd_names()) == render(odd_names())
