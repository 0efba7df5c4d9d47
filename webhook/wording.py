"""How the webhook words texts for people: warnings, name lists, field violations.

Warnings reach users as ``Warning: 299`` headers and the apiserver truncates
long ones (admission-and-api.md R2.5), so every warning is one line of at most
:data:`MAX_WARNING_LENGTH` characters, cut with an ellipsis rather than
mid-word by the apiserver.  Pure string helpers; no decisions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from shared import validation

MAX_WARNING_LENGTH = 120
_MAX_NAMES = 3


def cap(text: str, limit: int = MAX_WARNING_LENGTH) -> str:
    """One line of at most ``limit`` characters; an ellipsis marks a cut."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    return line[: limit - 1].rstrip() + "…"


def names(items: Sequence[str]) -> str:
    """``a, b and 2 more``: container names short enough to leave room for the point of a warning."""
    shown = [n if len(n) <= 24 else n[:23] + "…" for n in items[:_MAX_NAMES]]
    rest = len(items) - len(shown)
    if rest > 0:
        return ", ".join(shown) + f" and {rest} more"
    if len(shown) > 1:
        return ", ".join(shown[:-1]) + " and " + shown[-1]
    return "".join(shown)


def violation(item: validation.FieldViolation) -> str:
    """``spec: Invalid value: "Burstable": Pod QOS Class may not change as a result of resizing``.

    The API server's ``field.Error`` text, nothing more: the spec's rule id (``item.rule``) is for
    code, tests and logs (:func:`rule_ids`), not for the person reading the denial."""
    text = validation.format_violation(item)
    if not item.path:
        text = text.removeprefix(": ")
    return text


def violations(items: Iterable[validation.FieldViolation]) -> str:
    """The API server's aggregate: each distinct text once, ``, ``-joined, in ``[...]`` when more than one.

    (``utilerrors.NewAggregate(...).Error()``, the text ``kubectl`` prints after ``is invalid:``.)"""
    texts = list(dict.fromkeys(violation(v) for v in items))
    if len(texts) == 1:
        return texts[0]
    return "[" + ", ".join(texts) + "]"


def rule_ids(items: Iterable[validation.FieldViolation]) -> list[str]:
    """The spec rule ids behind a denial, each once, for the log line next to it."""
    return list(dict.fromkeys(v.rule for v in items))


def deferred_warning(*, node: str, reason: str | None, message: str | None) -> str:
    """The warning on a resize the node Deferred, key facts first so the 120-character cut spares them.

    The node's message leads (how much is missing, where the pod is, what is free); the node's name
    comes last, since the pod's own ``spec.nodeName`` already tells it.  The reason is dropped when it
    only repeats ``Deferred``."""
    detail = ": ".join(part for part in (None if reason == "Deferred" else reason, message) if part)
    return cap(f"resize deferred: {detail or 'waiting for room'} (node {node})")
