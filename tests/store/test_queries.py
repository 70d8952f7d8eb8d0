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
