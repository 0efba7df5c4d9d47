"""What a ``pods/binding`` review decides, given what the node's enforcer answered.

Annotations a mutating webhook puts on a Binding are copied onto the Pod when
the binding is stored (admission-and-api.md K4): that is how the node's
allocation (node, NUMA nodes, every container's CPUs and assignment) ends up
on the pod, under the keys of ``shared.contract``.  A refusal denies the
binding with the node's kubelet reason (``TopologyAffinityError``,
``SMTAlignmentError``, ``EmptyPodSharedPoolError``, ...) and code 403, so the
scheduler tries again (Example 3) instead of the kubelet failing the pod.

Pure: the enforcer call and the pod lookup happen in
:mod:`webhook.handlers.pod_binding`; this module only maps their results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from shared import contract
from webhook import decision, errors

REASON_INVALID_BINDING = "Invalid"
REASON_POD_UNKNOWN = "PodUnknown"
REASON_ALLOCATION_CONFLICT = "AllocationConflict"
REASON_ALREADY_BOUND = "Conflict"

# Every key a binding records; CREATE clears them so a copied manifest cannot pretend to be allocated.
BINDING_ANNOTATIONS = (contract.NODE_ANNOTATION, contract.ALLOCATION_ANNOTATION, contract.SPEC_HASH_ANNOTATION)
# The pod's annotations must stay under 256 KiB in total (K3); an allocation never needs more than this.
MAX_ALLOCATION_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class BindingTarget:
    """What a Binding object says: which pod goes to which node."""

    namespace: str
    name: str
    uid: str
    node: str

    @property
    def pod_key(self) -> str:
        return f"{self.namespace}/{self.name}"


def read_binding(obj: object, *, namespace: str, name: str) -> BindingTarget:
    """The target of a Binding (R1.6); ``AdmissionDenied`` (400) when it names no node."""
    if not isinstance(obj, Mapping):
        raise errors.AdmissionDenied("the Binding object is missing", reason=REASON_INVALID_BINDING, code=400)
    raw_metadata = obj.get("metadata")
    metadata: Mapping[str, Any] = raw_metadata if isinstance(raw_metadata, Mapping) else {}
    target = obj.get("target")
    if not isinstance(target, Mapping) or not isinstance(target.get("name"), str) or not target.get("name"):
        raise errors.AdmissionDenied("target.name: Required value", reason=REASON_INVALID_BINDING, code=400)
    kind = target.get("kind") or "Node"
    if kind != "Node":
        message = f'target.kind: Unsupported value: "{kind}": supported values: "Node"'
        raise errors.AdmissionDenied(message, reason=REASON_INVALID_BINDING, code=400)
    return BindingTarget(
        namespace=namespace or _text(metadata.get("namespace")) or "default",
        name=name or _text(metadata.get("name")),
        uid=_text(metadata.get("uid")),
        node=str(target["name"]),
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def allocation_annotations(allocation: contract.Allocation) -> dict[str, str]:
    return {
        contract.NODE_ANNOTATION: allocation.node,
        contract.ALLOCATION_ANNOTATION: allocation.to_json(),
        contract.SPEC_HASH_ANNOTATION: allocation.spec_hash,
    }


def allocated(allocation: contract.Allocation, target: BindingTarget) -> decision.Decision:
    """Record the node's allocation on the Binding; an answer about another pod or node is outside the contract."""
    if allocation.uid != target.uid or allocation.node != target.node:
        err = errors.EnforcerProtocolError(
            f"the enforcer on node {target.node} answered with the allocation of pod {allocation.uid} "
            f"on node {allocation.node}",
            node=target.node,
        )
        return decision.Decision.deny(
            errors.AdmissionDenied(err.message, reason=decision.REASON_ENFORCER_UNAVAILABLE, code=503)
        )
    annotations = allocation_annotations(allocation)
    if len(annotations[contract.ALLOCATION_ANNOTATION].encode()) > MAX_ALLOCATION_BYTES:
        del annotations[contract.ALLOCATION_ANNOTATION]
        return decision.Decision.allow(
            annotations=annotations,
            warnings=(f"the allocation on node {target.node} is too large to record on the pod",),
        )
    return decision.Decision.allow(annotations=annotations)


RETRY_NOTE = "; the scheduler will retry the pod, on another node if one can align it"
"""Said on every binding a node refuses (403: alignment or capacity): the denial is a scheduling retry,
not the pod failing (kube-scheduler records a SchedulerError and requeues the pod with backoff)."""


def refused(err: errors.EnforcerRefused, target: BindingTarget) -> decision.Decision:
    """The node cannot admit the pod: deny with the node's reason so the scheduler picks again."""
    code = 409 if isinstance(err, errors.EnforcerConflict) else (403 if err.status_code == 403 else 422)
    where = f" ({err.field})" if err.field else ""
    retry = RETRY_NOTE if code == 403 else ""  # an invalid pod or a uid conflict is not cured by another node
    return decision.Decision.deny(
        errors.AdmissionDenied(
            f"node {target.node} cannot admit pod {target.pod_key}: {err.reason}: {err.message}{where}{retry}",
            reason=err.reason or REASON_ALLOCATION_CONFLICT,
            code=code,
        )
    )


def unknown_pod(target: BindingTarget, *, mode: Literal["deny", "allow"], detail: str) -> decision.Decision:
    """The webhook cannot tell the node what the pod asks for (it never saw the pod)."""
    message = f"pod {target.pod_key} (uid {target.uid or 'unknown'}) is unknown to the numaguard webhook: {detail}"
    if mode == "allow":
        warning = f"pod {target.pod_key} was bound to {target.node} without a NUMA allocation: {detail}"
        return decision.Decision.allow(warnings=(warning,))
    return decision.Decision.deny(errors.AdmissionDenied(message, reason=REASON_POD_UNKNOWN, code=503))


def already_bound(target: BindingTarget, bound_node: str) -> decision.Decision:
    """The pod is bound already: the apiserver refuses the binding (409) after admission, so the node is not asked.

    Asking would leave an allocation on ``target.node`` for a pod that runs elsewhere.  The wording is the
    apiserver's own (``pkg/registry/core/pod/storage``: "pod %v is already assigned to node %q").
    """
    return decision.Decision.deny(
        errors.AdmissionDenied(
            f'pod {target.name} is already assigned to node "{bound_node}"', reason=REASON_ALREADY_BOUND, code=409
        )
    )


def dry_run(target: BindingTarget) -> decision.Decision:
    """A dry-run binding reserves nothing (R1.9), and the enforcer has no read-only allocation call: ask nothing."""
    return decision.Decision.allow(
        warnings=(f"dry run: node {target.node} was not asked to allocate pod {target.pod_key}",)
    )
