"""Journal lines are built from one canonical encoding: byte for byte the two-encoding construction they replace."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from enforcer.state import checkpoint, errors, journal


def two_encodings(fields: dict[str, Any]) -> tuple[bytes, str]:
    """The line as it was built before: the checksum over the fields, then the whole line encoded again."""
    checksum = "sha256:" + hashlib.sha256(checkpoint.canonical_json(fields)).hexdigest()
    return checkpoint.canonical_json({**fields, "checksum": checksum}) + b"\n", checksum


KEYS = st.text(max_size=6)  # any text: escapes, non-ASCII, empty keys, keys sorting before "checksum"
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)
PATHS = st.lists(KEYS, min_size=1, max_size=3)
OPS = st.lists(
    st.one_of(
        st.builds(journal.set_op, PATHS, JSON_VALUES),
        st.builds(journal.del_op, PATHS),
    ),
    max_size=5,
)
PREVS = st.from_regex(r"\Asha256:[0-9a-f]{64}\Z") | st.text(max_size=8)


@given(ops=OPS, prev=PREVS, seq=st.integers(min_value=0))
def test_a_record_line_is_the_two_encoding_line(ops: list[dict[str, Any]], prev: str, seq: int) -> None:
    line, checksum = journal.record_line(seq, prev, ops)
    assert (line, checksum) == two_encodings({"ops": ops, "prev": prev, "seq": seq})
    assert json.loads(line)["checksum"] == checksum


@given(generation=st.integers(min_value=0))
def test_a_header_line_is_the_two_encoding_line(generation: int) -> None:
    fields = {"format": journal.FORMAT, "generation": generation, "version": journal.VERSION}
    assert journal.header_line(generation) == two_encodings(fields)


def test_the_seed_records_are_the_two_encoding_lines() -> None:
    """Fixed bytes as well: the very line a journal of this format holds for one change."""
    ops = [journal.set_op(["pods", "a"], {"cpus": "1", "big": 1.5e308, "é": None}), journal.del_op(["pods", "b"])]
    line, checksum = journal.record_line(2, "sha256:" + "0" * 64, ops)
    assert line == two_encodings({"ops": ops, "prev": "sha256:" + "0" * 64, "seq": 2})[0]
    assert line.startswith(b'{"checksum":"' + checksum.encode() + b'","ops":[{"set":["pods","a"],"value":{"big":')
    assert line.endswith(b'"prev":"sha256:' + b"0" * 64 + b'","seq":2}\n')


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ((1, 2), "would not load back equal"),  # a tuple is written as a list
        ({1: "x"}, "would not load back equal"),  # an int key is written as a string
        ({1: "x", "a": "y"}, "not plain JSON"),  # mixed keys cannot be sorted
        (math.nan, "not plain JSON"),
        (math.inf, "not plain JSON"),
        ({"x"}, "not plain JSON"),
    ],
)
def test_ops_that_are_not_plain_json_are_refused(value: object, why: str) -> None:
    with pytest.raises(errors.CheckpointWriteError, match=why):
        journal.record_line(1, "sha256:" + "0" * 64, [journal.set_op(["pods", "a"], value)])


def old_record_line(seq: int, prev: str, ops: list[dict[str, Any]]) -> tuple[bytes, str] | str:
    """The record line as built before (two encodings, then a load-back of the line), or its refusal's message."""
    try:
        line, checksum = two_encodings({"ops": list(ops), "prev": prev, "seq": seq})
    except (TypeError, ValueError):
        return "not plain JSON"
    if json.loads(line)["ops"] != list(ops):
        return "would not load back equal"
    return line, checksum


class Text(str):
    pass


class Number(int):
    pass


class Listed(list[Any]):
    pass


ANY_KEYS = KEYS | st.integers(-3, 3) | st.builds(Text, KEYS)
ANY_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.builds(Text, st.text(max_size=4))
    | st.builds(Number, st.integers()),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.lists(inner, max_size=3).map(Listed)
        | st.dictionaries(KEYS, inner, max_size=3)
        | st.dictionaries(ANY_KEYS, inner, max_size=3)
    ),
    max_leaves=15,
)


@given(values=st.lists(ANY_VALUES, max_size=3))
@example(values=[{"a": [1, (2,)]}])
@example(values=[[{1: "x"}]])
@example(values=[Listed([Text("t"), Number(2)])])
def test_the_walk_that_skips_the_load_back_refuses_and_accepts_what_the_load_back_did(values: list[Any]) -> None:
    """Plain values skip the load-back; tuples, int keys and subclasses still get it: same lines, same refusals."""
    ops = [journal.set_op(["pods", str(i)], value) for i, value in enumerate(values)]
    expected = old_record_line(3, "sha256:" + "0" * 64, ops)
    try:
        actual: tuple[bytes, str] | str = journal.record_line(3, "sha256:" + "0" * 64, ops)
    except errors.CheckpointWriteError as error:
        actual = "would not load back equal" if "load back equal" in error.message else "not plain JSON"
    assert actual == expected
