"""``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` of the documents the webhook builds, for less.

``json.JSONEncoder.encode`` makes a new C encoder for every call, a good part of encoding a plan annotation or a
JSONPatch: this one is made once.  The text is the same (the same C encoder, the same arguments); only the cycle
check is left out, which never fires on what the callers pass: dicts and lists built fresh for the call.

:func:`dumps_plain` is the same text for documents without floats (:data:`Plain`: what a plan annotation holds),
written by pydantic-core's encoder in about half the instructions; floats are where the two encoders differ
(``1e+16`` against ``1e16``, ``NaN`` against ``null``), so they are kept out by the type, not looked for.

Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any, TypeAlias

import pydantic_core

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# c_make_encoder(markers, default, encoder, indent, key_separator, item_separator, sort_keys, skipkeys, allow_nan)
_C_ENCODER = (
    None
    if json.encoder.c_make_encoder is None  # type: ignore[attr-defined]
    else json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, True
    )
)

# JSON without floats: strings, integers (bools among them), null, and lists and string-keyed maps of those.
Plain: TypeAlias = "str | int | None | list[Plain] | dict[str, Plain]"
PlainObject: TypeAlias = "dict[str, Plain]"


def dumps(value: dict[str, Any] | list[Any]) -> str:
    """The compact JSON text of ``value``, a dict or list built for this call (no cycle can be in it)."""
    if _C_ENCODER is None:  # pragma: no cover - CPython has the C encoder
        return _ENCODER.encode(value)
    return "".join(_C_ENCODER(value, 0))


def dumps_plain(value: PlainObject | list[Plain]) -> str:
    """:func:`dumps` of a document without floats, by pydantic-core; a string UTF-8 cannot carry takes :func:`dumps`.

    Same text (held by a property test over :data:`Plain`, every character class JSON escapes included).
    """
    try:
        return pydantic_core.to_json(value).decode()
    except pydantic_core.PydanticSerializationError:  # a lone surrogate, which json.dumps writes escaped
        return dumps(value)
