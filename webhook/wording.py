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
    """``spec: Invalid value: "Burstable": Pod QOS Class may not change as a result of resizing (rule L2)``."""
    text = validation.format_violation(item)
    if not item.path:
        text = text.removeprefix(": ")
    return f"{text} (rule {item.rule})"


def violations(items: Iterable[validation.FieldViolation]) -> str:
    """Every violation once, in order, joined with ``; ``: the field path and the rule of each."""
    return "; ".join(dict.fromkeys(violation(v) for v in items))
