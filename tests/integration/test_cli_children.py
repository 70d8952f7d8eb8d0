"""``statewright show`` of a parent and of a child (issue 25): the parent's children with
their states and outcomes, the child's parent; ``--json`` has the same."""

from __future__ import annotations

from pathlib import Path

from tests.integration.conftest import Cli

FAMILY = str(Path(__file__).resolve().parents[1] / "family_app.py")


def test_show_lists_a_parents_children_and_names_a_childs_parent(cli: Cli) -> None:
    app = ("--app", FAMILY)
    cli(*app, "start", "shipment", "--id", "s1", "--input", '{"parcels": ["a", "b", "c"]}')
    cli(*app, "worker", "--until-idle")  # the parent starts its 3 children
    cli(*app, "send", "s1.0", "ship")
    cli(*app, "send", "s1.1", "lose")
    cli(*app, "worker", "--until-idle")  # and hears that two ended

    shown = cli(*app, "show", "s1").stdout
    assert "children  2 of 3 children done (1 failed)" in shown
    cells = [
        [c.strip() for c in line.split("│")[2:-2]] for line in shown.splitlines() if "s1." in line
    ]
    assert cells == [
        ["s1.0", "parcel", "shipped", "succeeded"],
        ["s1.1", "parcel", "failed", "failed"],
        ["s1.2", "parcel", "shipping", ""],
    ]
    assert "parent " not in shown

    child = cli(*app, "show", "s1.2").stdout
    assert "parent    s1 (child key 2)" in child
    assert "children " not in child

    details = cli.json(*app, "show", "s1")
    assert details["children_counts"] == {
        "total": 3, "live": 1, "ended": 2, "failed": 1, "more": False,
        "text": "2 of 3 children done (1 failed)",
    }  # fmt: skip
    assert [(c["id"], c["succeeded"]) for c in details["children"]] == [
        ("s1.0", True),
        ("s1.1", False),
        ("s1.2", None),
    ]
    assert details["more_children"] is False
    child_details = cli.json(*app, "show", "s1.2")
    assert (child_details["workflow"]["parent"], child_details["workflow"]["parent_key"]) == (
        "s1",
        "2",
    )
    assert child_details["children"] == [] and child_details["children_counts"]["total"] == 0
    # An unknown id: the same one-line error as before, nothing shown.
    assert cli.error(*app, "show", "s9", code=1).startswith("error[workflow_not_found]")
