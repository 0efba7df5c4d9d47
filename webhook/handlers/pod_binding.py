"""``pods/binding``: ask the chosen node's enforcer to allocate the pod, then record or deny.

Flow: read the Binding (namespace, name, the uid the scheduler set, the
target node) -> find the pod (:mod:`webhook.pod_cache`) -> find the node's
enforcer (:mod:`webhook.discovery`) -> ``POST /allocations`` over mutual TLS
inside the call budget -> :mod:`webhook.binding` decides.  The allocation is
idempotent by pod uid, so a retried binding (or both the mutating and the
validating webhook handling it) gets the same allocation back.

A dry-run binding asks the node nothing: the enforcer has no read-only
allocation call, and a dry run must reserve nothing (R1.9, sideEffects
NoneOnDryRun).  The review is allowed with a warning saying so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from shared import contract
from webhook import binding, decision, errors, review
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
    seen = await services.pods.find(namespace=target.namespace, name=target.name, uid=target.uid)
    if seen is None:
        detail = (
            "it is not among the pending pods the webhook watches"
            if settings.pod_source == "kubernetes"
            else "this webhook replica did not admit it (created before it started, or by another replica)"
        )
        return binding.unknown_pod(target, mode=settings.unknown_pod_mode, detail=detail)
    target = dataclasses.replace(target, uid=target.uid or seen.uid)
    if not target.uid:
        return binding.unknown_pod(
            target, mode=settings.unknown_pod_mode, detail="neither the binding nor the admitted pod carries a uid"
        )
    action = f"the binding of pod {target.pod_key} to node {target.node}"
    url = services.enforcers.url_for(target.node)
    if url is None:
        missing = errors.NoEnforcerForNode(f"no numaguard enforcer is known for node {target.node}", node=target.node)
        return decision.enforcer_unavailable(missing, failure_mode=settings.failure_mode, action=action)
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
        if isinstance(err, errors.EnforcerTimeout) and settings.failure_mode == "deny":
            # The node may still decide after we gave up; the binding is denied, so give back what it holds.
            _release_later(services, url, target, request_id)
        return decision.enforcer_unavailable(err, failure_mode=settings.failure_mode, action=action)
    return binding.allocated(allocation, target)


_PENDING_RELEASES: set[asyncio.Task[None]] = set()
RELEASE_BUDGET_SECONDS = 5.0


async def finish_pending_releases() -> None:
    """Wait for releases still in flight (app shutdown), each bounded by its own budget."""
    if _PENDING_RELEASES:
        await asyncio.gather(*_PENDING_RELEASES, return_exceptions=True)


def _release_later(services: Services, url: str, target: binding.BindingTarget, request_id: str) -> None:
    """Best effort, after answering: the enforcer also refuses to decide past our budget, and in a
    cluster it releases allocations whose pod never shows up bound to its node."""

    async def release() -> None:
        try:
            await services.client.release(
                url, target.uid, node=target.node, budget=RELEASE_BUDGET_SECONDS, request_id=request_id
            )
        except errors.EnforcerError as err:
            log.warning(
                "release after a timed-out binding failed",
                extra={"uid": target.uid, "node": target.node, "error": err.message},
            )

    task = asyncio.get_running_loop().create_task(release())
    _PENDING_RELEASES.add(task)  # keep a reference until it finishes
    task.add_done_callback(_PENDING_RELEASES.discard)
