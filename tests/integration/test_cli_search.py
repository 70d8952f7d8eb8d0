"""Search attributes through the CLI (issue 28, item 4): a definition file declares them
(``check`` lists them, a bad name is a problem), ``list --where`` and ``bulk --where`` filter
by them (repeatable), an unknown name or a malformed filter is an error, ``show`` has them."""

from __future__ import annotations

from pathlib import Path

from tests.integration.conftest import Cli

PARCEL = """\
name: parcel
search_attributes: [order_number, customer_id]
states:
  - {name: packing, initial: true}
  - {name: cancelled, terminal: true}
events: [{name: cancel}]
transitions:
  - {event: cancel, source: packing, target: cancelled}
"""


def test_list_and_bulk_by_search_attributes(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "parcel.yaml"
    path.write_text(PARCEL)
    summary = cli.json("check", str(path))
    assert summary["search_attributes"] == ["order_number", "customer_id"]
    assert "; search attributes order_number, customer_id" in cli("check", str(path)).stdout
    a = ("--app", str(path))
    for i, customer in enumerate(["c1", "c1", "c2"]):
        data = f'{{"order_number": "A-{i}", "customer_id": "{customer}"}}'
        cli(*a, "start", "parcel", "--id", f"p{i}", "--input", data)
    listed = cli.json(*a, "list", "--where", "customer_id=c1")
    assert sorted(w["id"] for w in listed) == ["p0", "p1"]
    both = cli.json(*a, "list", "--where", "customer_id=c1", "--where", "order_number=A-1")
    assert [w["id"] for w in both] == ["p1"]
    assert "p2" in cli(*a, "list", "--where", "customer_id=c2").stdout
    line = cli.error(*a, "list", "--where", "colour=red", code=2)
    assert line.startswith("error[unknown_search_attribute]: unknown search attribute 'colour'")
    assert "is not name=value" in cli.error(*a, "list", "--where", "colour", code=2)
    shown = cli.json(*a, "show", "p2")
    assert shown["search_attributes"] == {"customer_id": "c2", "order_number": "A-2"}
    assert "search    customer_id=c2, order_number=A-2" in cli(*a, "show", "p2").stdout

    done = cli.json(*a, "bulk", "cancel", "--where", "customer_id=c1", "--reason", "asked")
    assert (done["matched"], done["applied"]) == (2, 2)
    assert cli.json(*a, "show", "p0")["workflow"]["state"] == "cancelled"
    assert cli.json(*a, "show", "p2")["workflow"]["state"] == "packing"


def test_a_bad_search_attribute_name_is_a_problem(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "parcel.yaml"
    path.write_text(PARCEL.replace("order_number, customer_id", "order-number"))
    report = cli.json("check", str(path), code=1)
    assert [p["code"] for p in report["problems"]] == ["invalid_search_attribute"]
