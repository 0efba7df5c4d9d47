"""RFC 6902 JSONPatch operations against the raw object, and their wire encoding.

Mutations are computed as the *difference* between what an object carries and
what it should carry, never as blind additions: re-running a mutation on an
already-patched object (``reinvocationPolicy: IfNeeded``, W10) yields no
operation at all, and a value someone changed by hand is replaced rather than
duplicated.  The apiserver omits empty maps (admission-and-api.md §5), so a
missing ``/metadata/annotations`` is created whole instead of adding a key
under a parent that does not exist (R2.3).

Pure: nothing here reads pods beyond the mapping it is given.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from webhook import compact_json

OpName = Literal["add", "remove", "replace", "test"]


@dataclass(frozen=True, slots=True)
class Operation:
    """One JSONPatch operation; ``value`` is ignored for ``remove``."""

    op: OpName
    path: str
    value: compact_json.Plain = None  # what annotations hold: strings, and maps of them

    def to_json(self) -> compact_json.PlainObject:
        if self.op == "remove":
            return {"op": "remove", "path": self.path}
        return {"op": self.op, "path": self.path, "value": self.value}


def escape(token: str) -> str:
    """A JSON Pointer reference token: ``~`` -> ``~0`` first, then ``/`` -> ``~1`` (RFC 6901 §3)."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str) -> str:
    """``pointer("metadata", "annotations", "numaguard.io/plan")`` -> ``/metadata/annotations/numaguard.io~1plan``."""
    return "".join(f"/{escape(t)}" for t in tokens)


def map_entry_ops(parent: Sequence[str], current: object, desired: Mapping[str, str | None]) -> list[Operation]:
    """Operations that make the string map at ``parent`` hold ``desired``.

    ``desired`` maps a key to its value, or to ``None`` for "must be absent".
    Keys ``desired`` does not name are left alone.  ``current`` is the map as
    the object carries it (``None`` or a non-map when absent); ops come out in
    key order so equal inputs give byte-equal patches.
    """
    wanted: compact_json.PlainObject = {k: v for k, v in sorted(desired.items()) if v is not None}
    if not isinstance(current, Mapping):
        return [Operation("add", pointer(*parent), wanted)] if wanted else []
    ops: list[Operation] = []
    prefix = pointer(*parent)
    for key, value in sorted(desired.items()):
        path = f"{prefix}/{escape(key)}"  # pointer(*parent, key)
        if value is None:
            if key in current:
                ops.append(Operation("remove", path))
        elif key not in current:
            ops.append(Operation("add", path, value))
        elif current[key] != value:
            ops.append(Operation("replace", path, value))
    return ops


def annotation_ops(obj: Mapping[str, Any], desired: Mapping[str, str | None]) -> list[Operation]:
    """Operations that give ``obj`` (a Pod, a Binding) the ``desired`` annotations; ``[]`` when it already has them."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        wanted: compact_json.PlainObject = {k: v for k, v in sorted(desired.items()) if v is not None}
        return [Operation("add", "/metadata", {"annotations": wanted})] if wanted else []
    return map_entry_ops(("metadata", "annotations"), metadata.get("annotations"), desired)


def to_json(ops: Sequence[Operation]) -> bytes:
    return compact_json.dumps_plain([op.to_json() for op in ops]).encode("utf-8")


def encode(ops: Sequence[Operation]) -> str:
    """``AdmissionResponse.patch``: standard, padded base64 of the UTF-8 JSON array (R2.2)."""
    return base64.b64encode(to_json(ops)).decode("ascii")


# Replicas get the same annotations, so the same patch: kept for this many (desired, shape) pairs, each carrying at
# most this many characters of annotation values (a few MB in all).
_PATCH_MEMO_ENTRIES = 256
_PATCH_MEMO_CHARS = 16 * 1024

_Shape = tuple[tuple[str, str], ...] | Literal["no metadata", "no annotations"]


def encoded_annotation_ops(obj: Mapping[str, Any], desired: Mapping[str, str | None]) -> str:
    """``encode(annotation_ops(obj, desired))``, or ``""`` when there is nothing to patch.

    :func:`annotation_ops` reads of ``obj`` only whether it has a metadata map and an annotations map in it, and
    the annotations ``desired`` names; with those and ``desired`` as the key the encoded patch is kept, so the
    replicas of a Deployment (same plan, no numaguard annotations yet) share one.  A pod whose annotations hold
    anything but strings there, or much text, is patched from scratch.
    """
    shape = _annotation_shape(obj, desired)
    if shape is None:
        return _encoded_or_empty(annotation_ops(obj, desired))
    return _encoded_for_shape(tuple(desired.items()), shape)


def _annotation_shape(obj: Mapping[str, Any], desired: Mapping[str, str | None]) -> _Shape | None:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return "no metadata"
    current = metadata.get("annotations")
    if not isinstance(current, Mapping):
        return "no annotations"
    held: list[tuple[str, str]] = []
    chars = 0
    for key, wanted in desired.items():
        chars += len(key) + (len(wanted) if wanted is not None else 0)
        if key in current:
            value = current[key]
            if type(value) is not str:
                return None
            chars += len(value)
            held.append((key, value))
    return tuple(held) if chars <= _PATCH_MEMO_CHARS else None


@functools.lru_cache(maxsize=_PATCH_MEMO_ENTRIES)
def _encoded_for_shape(desired: tuple[tuple[str, str | None], ...], shape: _Shape) -> str:
    """The patch for any object of this shape: one rebuilt from it reads the same to :func:`annotation_ops`."""
    obj: dict[str, Any]
    if shape == "no metadata":
        obj = {}
    elif shape == "no annotations":
        obj = {"metadata": {}}
    else:
        obj = {"metadata": {"annotations": dict(shape)}}
    return _encoded_or_empty(annotation_ops(obj, dict(desired)))


def _encoded_or_empty(ops: Sequence[Operation]) -> str:
    return encode(ops) if ops else ""
