"""webhook.compact_json writes what json.dumps writes for the webhook's documents (plan annotations, JSONPatches)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from webhook import compact_json

_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=30)


@given(st.lists(_VALUES) | st.dictionaries(st.text(), _VALUES))
def test_dumps_is_json_dumps_compact_without_ascii_escapes(value: dict[str, Any] | list[Any]) -> None:
    assert compact_json.dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


_PLAIN_SCALARS = st.none() | st.booleans() | st.integers() | st.text()
_PLAIN = st.recursive(_PLAIN_SCALARS, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=30)


@given(st.lists(_PLAIN) | st.dictionaries(st.text(), _PLAIN))
def test_dumps_plain_is_dumps_for_documents_without_floats(value: compact_json.PlainObject | list[Any]) -> None:
    assert compact_json.dumps_plain(value) == compact_json.dumps(value)


def test_dumps_plain_writes_what_utf8_cannot_carry_as_dumps_does() -> None:
    value: compact_json.PlainObject = {"lone": "\ud800", "n": [1, None, True]}
    assert compact_json.dumps_plain(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
