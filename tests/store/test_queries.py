"""The named queries as sent: no comments, and short enough for psycopg's conversion cache."""

from __future__ import annotations

from psycopg import _queries

from statewright.store.queries import load_queries


def test_queries_are_sent_without_comments() -> None:
    for dialect in ("sqlite", "postgres"):
        for name, sql in load_queries(dialect).items():
            assert "\n--" not in sql and not sql.startswith("--"), name


def test_every_postgres_query_fits_psycopgs_conversion_cache() -> None:
    # psycopg re-parses a query's %(name)s placeholders on every execution when its text is
    # longer than this (a private constant: this test notices if it goes or shrinks); for
    # apply_transition that cost ~100 us of CPU per transition.
    limit = _queries.MAX_CACHED_STATEMENT_LENGTH
    too_long = {
        name: len(sql.encode())
        for name, sql in load_queries("postgres").items()
        if len(sql.encode()) > limit
    }
    assert not too_long, f"longer than {limit} bytes: {too_long}"


def test_the_hot_path_statements_fit_with_their_search_attributes() -> None:
    # A transition changing search attributes runs apply_transition with one more part
    # (statewright.store.postgres.searched); the others run it as queries.sql has it.
    from statewright.store.postgres.searched import (
        CREATED,
        QUERIES,
        SEARCHED,
        create_name,
        query_name,
    )

    limit = _queries.MAX_CACHED_STATEMENT_LENGTH
    plain, searched = QUERIES["apply_transition"], QUERIES["apply_transition_search"]
    assert "search_attributes" not in plain and "%(search)s" not in plain
    assert searched.count(SEARCHED) == 1 and searched.replace(SEARCHED, "") == plain
    plain, searched = QUERIES["create_workflow"], QUERIES["create_workflow_search"]
    assert "search_attributes" not in plain and "%(search)s" not in plain
    assert searched.count(CREATED) == 1 and searched.replace(CREATED, "") == plain
    for name in QUERIES:
        assert len(QUERIES[name].encode()) <= limit, name
    assert create_name(None) == "create_workflow"
    assert create_name({"a": "1"}) == "create_workflow_search"
    assert query_name(None) == query_name({}) == "apply_transition"
    assert query_name({"a": "1"}) == "apply_transition_search"
