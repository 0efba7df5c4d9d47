"""What a resize (``pods/resize``, or a Pod UPDATE that changes resources) decides.

Two questions, in order:

1. **Legality** (apiserver rules L1-L11, ``shared.resize.resize_violations``):
   an illegal resize is denied naming every field path and the rule it breaks.
   All-``Forbidden`` violations answer 403 Forbidden (the resize is not
   allowed at all); anything else is an invalid spec, 422 Invalid (R2.4).
2. **Feasibility** on the pod's node (bound pods only): the enforcer's
   ``Accepted`` allows; ``Deferred`` allows with a warning (the node applies
   it when room frees up); ``Infeasible`` denies with the node's reason.

A resize never carries a patch: the apiserver keeps only the resource
changes of a resize (K5), so anything recorded here would be silently lost.
Pure: the enforcer call happens in :mod:`webhook.handlers.pod_resize`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from shared import contract
from shared.validation import FieldViolation
from webhook import decision, errors, wording

log = logging.getLogger(__name__)

REASON_INVALID = "Invalid"
REASON_FORBIDDEN = "Forbidden"
REASON_INFEASIBLE = "Infeasible"


def illegal(violations: Sequence[FieldViolation], *, pod_key: str) -> decision.Decision:
    forbidden = all(v.type == "Forbidden" for v in violations)
    details = wording.violations(violations)
    log.debug("resize illegal", extra={"pod": pod_key, "rules": wording.rule_ids(violations)})
    return decision.Decision.deny(
        errors.AdmissionDenied(
            f"resize of pod {pod_key} is not allowed: {details}",
            reason=REASON_FORBIDDEN if forbidden else REASON_INVALID,
            code=403 if forbidden else 422,
        )
    )


def judged(result: contract.ResizeResult, *, node: str, pod_key: str) -> decision.Decision:
    """The node's verdict (R4.2): Accepted, Deferred (allowed, warned) or Infeasible (denied)."""
    detail = ": ".join(part for part in (result.reason, result.message) if part)
    if result.status == "Accepted":
        return decision.Decision.allow()
    if result.status == "Deferred":
        return decision.Decision.allow(
            warnings=(wording.deferred_warning(node=node, reason=result.reason, message=result.message),)
        )
    return decision.Decision.deny(
        errors.AdmissionDenied(
            f"node {node} cannot resize pod {pod_key}: {detail or 'the resize is infeasible'}",
            reason=result.reason or REASON_INFEASIBLE,
            code=403,
        )
    )


def unknown_on_node(*, node: str, pod_key: str) -> decision.Decision:
    """The node holds no allocation for the pod (admitted before numaguard ran): nothing to protect, so allow."""
    return decision.Decision.allow(
        warnings=(f"node {node} holds no numaguard allocation for pod {pod_key}; the resize was not checked there",)
    )


def refused(err: errors.EnforcerRefused, *, node: str, pod_key: str) -> decision.Decision:
    """A resize the node refused outright (a 4xx with a reason, not a ResizeResult)."""
    return decision.Decision.deny(
        errors.AdmissionDenied(
            f"node {node} cannot resize pod {pod_key}: {err.reason}: {err.message}",
            reason=err.reason or REASON_INFEASIBLE,
            code=409 if isinstance(err, errors.EnforcerConflict) else 403,
        )
    )
