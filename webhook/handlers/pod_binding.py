"""``pods/binding``: ask the chosen node's enforcer to allocate the pod, then record or deny.

Flow: read the Binding (namespace, name, the uid the scheduler set, the
target node) -> is the node enforced at all (:mod:`webhook.discovery`; if not,
allow: numaguard has no say there) -> find the pod (:mod:`webhook.pod_cache`)
-> already bound? deny as the apiserver would, asking nobody -> ``POST
/allocations`` over mutual TLS inside the call budget, naming this admission
request as the *attempt* -> :mod:`webhook.binding` decides.

When the enforcer cannot be asked, only a pod that needs exclusive resources
is denied (:mod:`webhook.scope`); the others bind in the shared pool.  A
binding denied after the request was sent (timed out, cut off) releases what
the node may still decide for it, naming the attempt: the node only withdraws
that attempt's claim, so a late release never removes the allocation of the
scheduler's retry of the same pod (see ``enforcer/service/attempts.py``).

Only the mutating hook handles bindings (the manifests register no validating
binding hook), so a binding reaches the node once per attempt.  A dry-run
binding asks the node nothing (R1.9, sideEffects NoneOnDryRun): allowed with a
warning saying so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from shared import contract
from webhook import binding, decision, errors, review, scope
from webhook.handlers import common
from webhook.services import Services

log = logging.getLogger(__name__)


async def handle(
    request: review.AdmissionRequest, *, mode: common.Mode, services: Services
) -> review.AdmissionResponse:
    target = binding.read_binding(request.obj, namespace=request.namespace, name=request.name)
    if request.dry_run:
        outcome = binding.dry_run(target)
    else:
        outcome = await _allocate(target, request_id=request.uid, services=services)
    return common.respond(request, outcome, mode=mode)


async def _allocate(target: binding.BindingTarget, *, request_id: str, services: Services) -> decision.Decision:
    settings = services.settings
    action = f"the binding of pod {target.pod_key} to node {target.node}"
    if not services.enforcers.is_enforced(target.node):
        return decision.not_enforced(target.node, action=action)
    seen = await services.pods.find(namespace=target.namespace, name=target.name, uid=target.uid)
    unknown_mode = settings.effective_unknown_pod_mode()
    if seen is None:
        detail = (
            "it is not among the pending pods the webhook watches, and the API does not know it"
            if settings.pod_source == "kubernetes"
            else "this webhook replica did not admit it (created before it started, or by another replica)"
        )
        return binding.unknown_pod(target, mode=unknown_mode, detail=detail)
    target = dataclasses.replace(target, uid=target.uid or seen.uid)
    if not target.uid:
        return binding.unknown_pod(
            target, mode=unknown_mode, detail="neither the binding nor the admitted pod carries a uid"
        )
    if seen.node_name:
        return binding.already_bound(target, seen.node_name)
    url = services.enforcers.url_for(target.node)
    if url is None:
        missing = errors.NoEnforcerForNode(
            f"the numaguard enforcer on node {target.node} is not ready", node=target.node
        )
        return decision.enforcer_unavailable(
            missing,
            failure_mode=settings.failure_mode,
            action=action,
            exclusive=scope.seen_pod_needs_exclusive_resources(seen),
        )
    allocation_request = contract.AllocationRequest(
        pod=seen.with_identity(name=target.name, uid=target.uid), node_name=target.node
    )
    try:
        allocation = await services.client.allocate(
            url, allocation_request, node=target.node, budget=services.enforcer_budget, request_id=request_id
        )
    except errors.EnforcerRefused as err:
        return binding.refused(err, target)
    except errors.EnforcerError as err:  # unreachable, timed out, 404 or a reply outside the contract
        outcome = decision.enforcer_unavailable(
            err,
            failure_mode=settings.failure_mode,
            action=action,
            exclusive=scope.seen_pod_needs_exclusive_resources(seen),
        )
        if not outcome.allowed and isinstance(err, errors.EnforcerTimeout | errors.EnforcerProtocolError):
            # The node may still decide after we gave up (or decided and answered out of contract):
            # withdraw this attempt's claim on whatever it holds.
            _release_later(services, url, target, request_id)
        return outcome
    outcome = binding.allocated(allocation, target)
    if not outcome.allowed:
        _release_later(services, url, target, request_id)
    return outcome


_PENDING_RELEASES: set[asyncio.Task[None]] = set()
RELEASE_BUDGET_SECONDS = 5.0


async def finish_pending_releases() -> None:
    """Wait for this event loop's releases still in flight (app shutdown), each bounded by its own budget."""
    loop = asyncio.get_running_loop()
    mine = [task for task in _PENDING_RELEASES if task.get_loop() is loop]
    if mine:
        await asyncio.gather(*mine, return_exceptions=True)


def _release_later(services: Services, url: str, target: binding.BindingTarget, request_id: str) -> None:
    """Best effort, after answering: the enforcer also refuses to decide past our budget, and in a
    cluster it releases allocations whose pod never shows up bound to its node.  Conditional on the
    attempt, so it is harmless when the scheduler's retry was admitted meanwhile."""

    async def release() -> None:
        try:
            await services.client.release(
                url,
                target.uid,
                node=target.node,
                budget=RELEASE_BUDGET_SECONDS,
                request_id=request_id,
                attempt=request_id,
            )
        except errors.EnforcerError as err:
            log.warning(
                "release after a denied binding failed",
                extra={"uid": target.uid, "node": target.node, "error": err.message},
            )

    task = asyncio.get_running_loop().create_task(release())
    _PENDING_RELEASES.add(task)  # keep a reference until it finishes
    task.add_done_callback(_PENDING_RELEASES.discard)
