"""``apply_transition`` for a transition that changes search attributes, and
``create_workflow`` for a workflow that has some: the same statements with one more part,
writing them (``search``: a JSON object of name -> text, a null value for an attribute that
is gone; see :mod:`statewright.engine.search`).

A write without any (every one of a type without search attributes, a transition not
touching them) runs the statement as ``queries.sql`` has it: nothing more is planned, locked
or executed for it.
"""

from __future__ import annotations

from statewright.store.queries import compact, load_queries

SEARCHED = compact(
    """, searched AS (
        INSERT INTO search_attributes (workflow_id, name, value)
        SELECT moved.id, s.key, s.value FROM moved, jsonb_each_text(%(search)s::jsonb) AS s
        ON CONFLICT (workflow_id, name) DO UPDATE SET value = excluded.value
    )"""
)
CREATED = compact(
    """, searched AS (
        INSERT INTO search_attributes (workflow_id, name, value)
        SELECT ins.id, s.key, s.value FROM ins, jsonb_each_text(%(search)s::jsonb) AS s
    )"""
)


def _with(statement: str, part: str, result: str) -> str:
    """``statement`` with ``part`` as its last CTE (before the final ``result`` select)."""
    end = statement.rindex(compact(f") {result}")) + 1
    return statement[:end] + part + statement[end:]


def query_name(search: object) -> str:
    """The statement a transition runs: with its search attributes only when it has some."""
    return "apply_transition_search" if search else "apply_transition"


def create_name(search: object) -> str:
    """The statement a create runs: with its search attributes only when it has some."""
    return "create_workflow_search" if search else "create_workflow"


_NAMED = load_queries("postgres")
QUERIES = {
    **_NAMED,
    "apply_transition_search": _with(_NAMED["apply_transition"], SEARCHED, "SELECT moved.*,"),
    "create_workflow_search": _with(_NAMED["create_workflow"], CREATED, "SELECT ins.*,"),
}
"""The named queries of ``queries.sql``, and their variants writing search attributes."""
