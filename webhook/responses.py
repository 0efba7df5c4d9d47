"""AdmissionResponse constructors (controller-runtime's ``Allowed`` / ``Denied`` / ``Patched``).

Every response the webhook sends is built here, so the rules of R2.1-R2.5
hold in one place: the request uid is echoed, a patch is always a base64
JSONPatch with ``patchType`` set, an empty patch is no patch, and warnings are
de-duplicated and cut to :data:`webhook.wording.MAX_WARNING_LENGTH` characters (the apiserver
truncates long ones and shows them as ``Warning: 299`` headers).

This module builds values only; it makes no decisions about pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from webhook import errors, patch, review, wording

MAX_WARNINGS = 10


def _warnings(items: Iterable[str]) -> list[str] | None:
    capped = list(dict.fromkeys(wording.cap(w) for w in items if w.strip()))
    return capped[:MAX_WARNINGS] or None


def allowed(uid: str, *, warnings: Iterable[str] = ()) -> review.AdmissionResponse:
    return review.AdmissionResponse(uid=uid, allowed=True, warnings=_warnings(warnings))


def patched(uid: str, ops: Sequence[patch.Operation], *, warnings: Iterable[str] = ()) -> review.AdmissionResponse:
    """Allowed with ``ops`` applied; without ops this is :func:`allowed` (no empty patch is ever sent)."""
    return patched_with(uid, patch.encode(ops) if ops else "", warnings=warnings)


def patched_with(uid: str, encoded_patch: str, *, warnings: Iterable[str] = ()) -> review.AdmissionResponse:
    """Allowed with an already encoded patch (:func:`webhook.patch.encode`); ``""`` means none: :func:`allowed`."""
    if not encoded_patch:
        return allowed(uid, warnings=warnings)
    return review.AdmissionResponse(
        uid=uid, allowed=True, patch=encoded_patch, patch_type="JSONPatch", warnings=_warnings(warnings)
    )


def denied(
    uid: str, message: str, *, reason: str, code: int = 403, warnings: Iterable[str] = ()
) -> review.AdmissionResponse:
    """``allowed: false``; a code below 400 would be turned into 400 by the apiserver, so it is refused here."""
    if code < 400:
        raise ValueError(f"a denial needs an HTTP error code (>= 400), got {code}")
    return review.AdmissionResponse(
        uid=uid,
        allowed=False,
        status=review.Status(code=code, reason=reason, message=message),
        warnings=_warnings(warnings),
    )


def from_denial(uid: str, denial: errors.AdmissionDenied, *, warnings: Iterable[str] = ()) -> review.AdmissionResponse:
    return denied(uid, denial.message, reason=denial.reason, code=denial.code, warnings=(*warnings, *denial.warnings))
