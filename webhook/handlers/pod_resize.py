"""``pods/resize`` and Pod UPDATE: is the resize legal, and can the pod's node honour it?

Legality first (``shared.resize``, apiserver rules L1-L11); then, for a
bound pod, the node's enforcer judges feasibility (``POST
/allocations/{uid}/resize``).  A dry-run review asks with ``?dryRun=true`` so
the node changes nothing (R1.9).

A plain Pod UPDATE that leaves resources alone is allowed untouched.  One
that changes them is checked the same way but the node is only asked
``dryRun=true``: since v1.33 the apiserver rejects resource changes outside
the ``resize`` subresource (in-place-resize.md R1.1), so applying it on the
node would record a resize that never happens.

Decided once, by the validating hook: it sees the final object (after every
mutating webhook), and a node that applies a resize must be asked exactly once.
On ``/mutate`` (a configuration that still registers a mutating resize hook)
only legality is judged and the node is not asked.

Scope: a node numaguard does not enforce is not asked (allowed); when an
enforced node's enforcer cannot be asked, only a pod that needs exclusive
resources is denied (:mod:`webhook.scope`).

Never a patch, in either mode: the apiserver keeps only the resource changes
of a resize (K5).
"""

from __future__ import annotations

from shared import contract, resize
from shared import pod as pod_model
from shared.errors import DomainError
from webhook import decision, errors, resize_decision, review, scope
from webhook.handlers import common
from webhook.services import Services


async def handle(
    request: review.AdmissionRequest, *, mode: common.Mode, services: Services
) -> review.AdmissionResponse:
    new = common.read_pod(request.obj)
    old = common.read_pod(request.old_obj, what="oldObject")
    is_resize = request.sub_resource == "resize"
    if not is_resize and not _resources_change(old, new):
        return common.respond(request, decision.Decision.allow(), mode=mode, may_patch=False)
    outcome = await _judge(
        request, old, new, dry_run=request.dry_run or not is_resize, ask_node=mode == "validate", services=services
    )
    return common.respond(request, outcome, mode=mode, may_patch=False)


def _resources_change(old: pod_model.Pod, new: pod_model.Pod) -> bool:
    try:
        return bool(resize.resource_changes(old, new))
    except DomainError:
        return True  # an unparsable quantity: let the legality check name it


async def _judge(
    request: review.AdmissionRequest,
    old: pod_model.Pod,
    new: pod_model.Pod,
    *,
    dry_run: bool,
    ask_node: bool,
    services: Services,
) -> decision.Decision:
    pod_key = f"{new.namespace}/{new.metadata.name or request.name}"
    try:
        violations = resize.resize_violations(old, new)
    except DomainError as err:  # the stored pod itself does not parse: nothing to compare against
        denial = errors.AdmissionDenied(f"oldObject: {err}", reason=common.REASON_BAD_REQUEST, code=400)
        return decision.Decision.deny(denial)
    if violations:
        return resize_decision.illegal(violations, pod_key=pod_key)
    node = old.spec.node_name or new.spec.node_name
    uid = old.metadata.uid or new.metadata.uid
    if not node or not uid or not ask_node:
        return decision.Decision.allow()  # not bound yet (no node holds anything), or the validating hook asks
    action = f"the resize of pod {pod_key} on node {node}"
    if not services.enforcers.is_enforced(node):
        return decision.not_enforced(node, action=action)
    exclusive = scope.needs_exclusive_resources(old)
    url = services.enforcers.url_for(node)
    if url is None:
        missing = errors.NoEnforcerForNode(f"the numaguard enforcer on node {node} is not ready", node=node)
        return decision.enforcer_unavailable(
            missing, failure_mode=services.settings.failure_mode, action=action, exclusive=exclusive
        )
    body = contract.ResizeRequest(pod=dict(new.raw))
    try:
        result = await services.client.resize(
            url, uid, body, node=node, dry_run=dry_run, budget=services.enforcer_budget, request_id=request.uid
        )
    except errors.EnforcerPodUnknown:
        return resize_decision.unknown_on_node(node=node, pod_key=pod_key)
    except errors.EnforcerRefused as err:
        return resize_decision.refused(err, node=node, pod_key=pod_key)
    except errors.EnforcerError as err:
        return decision.enforcer_unavailable(
            err, failure_mode=services.settings.failure_mode, action=action, exclusive=exclusive
        )
    return resize_decision.judged(result, node=node, pod_key=pod_key)
