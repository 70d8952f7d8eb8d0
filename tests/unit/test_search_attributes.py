"""Search attributes, declared and computed (issue 28, item 4): names checked when the type is
built, values as canonical text, only the changes a transition makes written (None: nothing
extra for a type without attributes or a patch not touching them), filters checked."""

from __future__ import annotations

from typing import Any

import pytest

from statewright import Engine, MachineBuilder, ManualClock, SQLiteStore, WorkflowType
from statewright.engine import search
from statewright.engine.changes import Fire
from statewright.errors import DefinitionError, InvalidInput, UnknownSearchAttribute
from statewright.store.queries import compact


def _machine(name: str = "order") -> Any:
    return (
        MachineBuilder(name)
        .state("new", initial=True)
        .state("done", terminal=True)
        .event("finish")
        .event("note")
        .transition("finish", "new", "done")
        .transition("note", "new", "new")
        .build()
    )


@pytest.mark.parametrize(
    ("names", "code"),
    [
        (("order-number",), "invalid_search_attribute"),
        (("a.b",), "invalid_search_attribute"),
        (("",), "invalid_search_attribute"),
        (("x" * 65,), "invalid_search_attribute"),
        (("a", "a"), "invalid_search_attributes"),
        ("order_number", "invalid_search_attributes"),
        (tuple(f"a{i}" for i in range(17)), "invalid_search_attributes"),
    ],
)
def test_bad_declarations_are_refused_when_the_type_is_built(names: Any, code: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        WorkflowType(_machine(), search_attributes=names)
    assert [p.code for p in caught.value.problems] == [code]


def test_a_list_is_kept_as_a_tuple_and_16_are_allowed() -> None:
    names = [f"a{i}" for i in range(16)]
    assert WorkflowType(_machine(), search_attributes=names).search_attributes == tuple(names)  # type: ignore[arg-type]
    assert WorkflowType(_machine()).search_attributes == ()


def test_values_as_canonical_text() -> None:
    assert search.text("A-1") == "A-1"
    assert search.text(7) == "7" and search.text(-3) == "-3"
    assert search.text(True) == "true" and search.text(False) == "false"
    for none in (None, 1.5, [1], {"a": 1}, "x" * (search.MAX_VALUE + 1)):
        assert search.text(none) is None
    ctx = {"a": "x", "b": 7, "c": None, "d": 2.5}
    assert search.attributes(("a", "b", "c", "d", "e"), ctx) == {"a": "x", "b": "7"}
    assert search.attributes(("c",), ctx) is None


def test_changes_are_only_what_a_patch_changes() -> None:
    names = ("a", "b", "c")
    before = {"a": "x", "b": 7}
    assert search.changes(names, before, {"other": 1}) is None
    assert search.changes(names, before, {"a": "x", "b": "7"}) is None  # same text
    assert search.changes(names, before, {"a": "y"}) == {"a": "y"}
    assert search.changes(names, before, {"b": None, "c": True}) == {"b": None, "c": "true"}
    assert search.changes(names, before, {"a": [1]}) == {"a": None}  # no longer indexable


def test_filters_are_checked() -> None:
    assert search.parse(["a=1", "b==x", "c="]) == (("a", "1"), ("b", "=x"), ("c", ""))
    with pytest.raises(InvalidInput, match="is not name=value"):
        search.parse(["a"])
    with pytest.raises(InvalidInput, match="invalid search attribute name"):
        search.parse(["a-b=1"])
    with pytest.raises(InvalidInput, match="at most 8"):
        search.parse([f"a{i}=1" for i in range(9)])
    assert search.from_mapping({"a": 7, "b": True, "c": "x"}) == (
        ("a", "7"),
        ("b", "true"),
        ("c", "x"),
    )
    with pytest.raises(InvalidInput, match="string, integer or boolean"):
        search.from_mapping({"a": 1.5})
    with pytest.raises(InvalidInput):
        search.from_mapping(["a"])
    declared = {"order": {"a"}, "other": {"b"}}
    search.check_known((("a", "1"),), declared, "order")
    search.check_known((("b", "1"),), declared, None)
    with pytest.raises(UnknownSearchAttribute, match="'b' for workflow type 'order'"):
        search.check_known((("b", "1"),), declared, "order")
    with pytest.raises(UnknownSearchAttribute, match="declared: a, b"):
        search.check_known((("z", "1"),), declared, None)


async def test_a_transition_carries_only_the_attributes_it_changes() -> None:
    plain = WorkflowType(_machine("plain"))
    indexed = WorkflowType(_machine(), search_attributes=("order_number",))
    async with Engine(SQLiteStore(":memory:"), [plain, indexed], clock=ManualClock()) as e:
        p = (await e.start("plain", {"order_number": "A-1"})).row
        o = (await e.start("order", {"order_number": "A-1"})).row
        plan = e.runtime.transitions.plan
        # a type without attributes: nothing, whatever the patch
        assert plan(p, Fire("note", {}, "t", context_patch={"order_number": "B"})).search is None
        # no patch, or one not touching them: nothing
        assert plan(o, Fire("note", {}, "t")).search is None
        assert plan(o, Fire("note", {}, "t", context_patch={"other": 1})).search is None
        assert plan(o, Fire("note", {}, "t", context_patch={"order_number": "A-1"})).search is None
        assert plan(o, Fire("note", {}, "t", context_patch={"order_number": "B"})).search == {
            "order_number": "B"
        }


def test_compacting_keeps_string_literals_and_drops_spaces_around_punctuation() -> None:
    sql = "SELECT a ,  b\n  FROM t WHERE x = 'a  ,  b' AND f( y ) <> 'it''s  ( )'"
    assert compact(sql) == "SELECT a,b FROM t WHERE x='a  ,  b' AND f(y)<>'it''s  ( )'"



def test_compacting_drops_comments_outside_literals() -> None:
    """A comment at the end of a line would hide the rest once the lines are joined: it goes
    first, an apostrophe in it included; ``--`` inside a literal stays."""
    sql = "SELECT a -- the row's version\nFROM t WHERE x = '--kept'  -- it's gone\nAND y = 1"
    assert compact(sql) == "SELECT a FROM t WHERE x='--kept' AND y=1"
