"""What every handler needs: reading a Pod out of a review, and turning a decision into a response.

A pod that cannot be read is a denial (``allowed: false``, code 400), not a
malformed review: the envelope was fine, the apiserver will show the reason.
Annotations become a JSONPatch only where a patch is meaningful: on the
mutating endpoint, and never for a resize (K5).
"""

from __future__ import annotations

from typing import Literal

from shared import pod as pod_model
from shared.errors import PodModelError
from webhook import decision, errors, patch, responses, review

Mode = Literal["mutate", "validate"]

REASON_BAD_REQUEST = "BadRequest"


def read_pod(obj: object, *, what: str = "object") -> pod_model.Pod:
    """``request.object`` (or ``oldObject``) as a Pod; ``AdmissionDenied`` (400) naming the bad field."""
    if obj is None:
        raise errors.AdmissionDenied(f"the review carries no {what}", reason=REASON_BAD_REQUEST, code=400)
    try:
        # the review's body was decoded for this request alone and nothing writes to it: no private copy needed
        return pod_model.parse_pod(obj, copy_raw=False)
    except PodModelError as err:
        raise errors.AdmissionDenied(f"{what} is not a valid Pod: {err}", reason=REASON_BAD_REQUEST, code=400) from None


def respond(
    request: review.AdmissionRequest, outcome: decision.Decision, *, mode: Mode, may_patch: bool = True
) -> review.AdmissionResponse:
    if outcome.denial is not None:
        return responses.from_denial(request.uid, outcome.denial, warnings=outcome.warnings)
    encoded = ""
    if mode == "mutate" and may_patch and outcome.annotations and isinstance(request.obj, dict):
        encoded = patch.encoded_annotation_ops(request.obj, outcome.annotations)
    return responses.patched_with(request.uid, encoded, warnings=outcome.warnings)
