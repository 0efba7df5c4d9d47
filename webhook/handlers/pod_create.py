"""Pod CREATE: validate what the pod asks for, record its resource plan, remember it for the binding.

``/mutate`` (before schema validation, R1.3/W12): deny resources the API
server would reject (naming the field path and the rule), then patch the
plan annotation and clear binding-time keys a copied manifest may carry.  The
patch is the difference between the pod's annotations and the wanted ones, so
a reinvocation (W10) of an already annotated pod patches nothing; it never
reads ``metadata.uid`` (empty at this point).

``/validate`` sees the final object with its uid: it re-checks the resources
(a later mutating webhook may have changed them), warns when the plan
annotation no longer matches them, and files the pod under its uid, the best
key for the binding that follows.

Dry-run creates are judged the same way but not remembered (R1.9).
"""

from __future__ import annotations

import logging

from shared import contract, validation
from shared import pod as pod_model
from shared.errors import DomainError
from webhook import binding, decision, errors, plan, plan_memo, pod_cache, review, wording
from webhook.handlers import common
from webhook.services import Services

log = logging.getLogger(__name__)

REASON_INVALID = "Invalid"

# Keys only a binding (or the enforcer, after a resize) may write; a CREATE that carries them copied them.
_CLEARED_AT_CREATE: dict[str, str | None] = {
    key: None for key in (*binding.BINDING_ANNOTATIONS, contract.RESIZE_ANNOTATION)
}


async def handle(
    request: review.AdmissionRequest, *, mode: common.Mode, services: Services
) -> review.AdmissionResponse:
    pod = common.read_pod(request.obj)
    planned = services.plans.plan_of(pod, services.plan_policy, _plan)
    if not request.dry_run:
        services.seen_pods.remember(pod_cache.from_pod(pod, namespace=request.namespace, source=mode))
    if mode == "mutate":
        warnings = list(planned.plan.warnings)
        if pod.spec.node_name:
            warnings.append(
                f"spec.nodeName {pod.spec.node_name} skips scheduling, so no node checks the pod's NUMA fit at binding"
            )
        outcome = decision.Decision.allow(
            annotations={**_CLEARED_AT_CREATE, **planned.annotations()}, warnings=tuple(warnings)
        )
    else:
        outcome = decision.Decision.allow(warnings=_validate_warnings(pod, planned))
    return common.respond(request, outcome, mode=mode)


def _plan(pod: pod_model.Pod, policy: plan.PlanPolicy) -> plan.Plan:
    violations = validation.validate_pod_resources(pod)
    if violations:
        name = pod.metadata.name or pod.metadata.generate_name
        log.debug("pod invalid", extra={"pod": name, "rules": wording.rule_ids(violations)})
        raise errors.AdmissionDenied(
            f'Pod "{name}" is invalid: {wording.violations(violations)}', reason=REASON_INVALID, code=422
        )
    try:
        resources = pod.to_resources()
    except DomainError as err:  # validation reports every syntax error first; this is belt and braces
        raise errors.AdmissionDenied(str(err), reason=REASON_INVALID, code=422) from None
    return plan.plan_pod(resources, policy)


def _validate_warnings(pod: pod_model.Pod, planned: plan_memo.PlannedPod) -> tuple[str, ...]:
    recorded = pod.metadata.annotations.get(plan.PLAN_ANNOTATION)
    if recorded is None:
        return planned.plan.warnings  # the mutating webhook did not run: say what it would have said
    if recorded != planned.annotation_value:
        return (f"{plan.PLAN_ANNOTATION} is out of date: the pod's resources changed after numaguard planned them",)
    return ()
