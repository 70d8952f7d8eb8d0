"""A new timer's key is checked by one pattern, stated as it is in the OpenAPI document."""

from __future__ import annotations

import itertools
import re

import pytest

from statewright.engine.timers import TIMER_KEY_PATTERN, check_key
from statewright.errors import InvalidInput


def _meant(key: str) -> bool:
    """The rule in words: printable ASCII, 1-200 characters, no '.' or '..' between slashes."""
    return (
        0 < len(key) <= 200
        and all(0x21 <= ord(c) <= 0x7E for c in key)
        and not any(part in (".", "..") for part in key.split("/"))
    )


def test_the_pattern_is_the_rule_for_every_short_key() -> None:
    pattern = re.compile(TIMER_KEY_PATTERN)
    # Every key of up to 6 characters over the characters that matter (and a space).
    for n in range(1, 7):
        for chars in itertools.product("./a- ", repeat=n):
            key = "".join(chars)
            assert bool(pattern.match(key)) == _meant(key), key


@pytest.mark.parametrize("key", ["..", ".", "a/../b", "./x", "x/.", "a b", "é", "x" * 201])
def test_a_key_the_pattern_refuses_is_refused(key: str) -> None:
    with pytest.raises(InvalidInput):
        check_key(key)


@pytest.mark.parametrize("key", ["remind/1", "...", ".a/b.", "a//b", "/", "x" * 200])
def test_a_key_the_pattern_admits_is_taken(key: str) -> None:
    assert check_key(key) == key
