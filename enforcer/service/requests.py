"""Request bodies to engine values: the pod of an allocation or resize request, parsed once, at the edge.

A pod that cannot be read, that the API server would reject, or that has no
uid is an :class:`~enforcer.service.errors.InvalidRequestError` (HTTP 422)
whose ``field`` is the JSON path inside the request body
(``pod.spec.containers[0].resources.limits[cpu]``), so a client can point at
the offending value.  Nothing here touches the engine.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from enforcer.service.errors import InvalidRequestError
from shared import pod as pod_model
from shared import qos, validation
from shared.errors import DomainError
from shared.resources import PodResources

POD_FIELD = "pod"


_UID = re.compile(r"[0-9a-z](?:[0-9a-z-]{0,126}[0-9a-z])?")


def _in_body(path: str | None) -> str:
    return f"{POD_FIELD}.{path}" if path else POD_FIELD


def pod_resources(raw: Mapping[str, Any], *, pod_level_resources: bool, uid: str | None = None) -> PodResources:
    """The engine's view of ``raw``; ``uid`` fills (or must equal) ``metadata.uid`` when the path names the pod."""
    try:
        # no copy of ``raw``: the parsed Pod (whose ``raw`` it would be) never leaves this function, only
        # the PodResources built from its fields does
        pod = pod_model.parse_pod(raw, copy_raw=False)
    except DomainError as err:
        raise InvalidRequestError(err.message, field=_in_body(err.field)) from None
    violations = validation.validate_pod_resources(pod, pod_level_resources=pod_level_resources)
    if violations:
        name = pod.metadata.name or pod.metadata.generate_name or "pod"
        raise InvalidRequestError(validation.invalid_message(name, violations), field=_in_body(violations[0].path))
    try:
        resources = pod.to_resources(pod_level_resources=pod_level_resources)
    except DomainError as err:
        raise InvalidRequestError(err.message, field=_in_body(err.field)) from None
    # The API server sets status.qosClass on create and it never changes; a pod sent before that is
    # given the class it will get, so a retry with or without the status is the same request.
    resources = _with(resources, qos_class=qos.qos_class(resources, pod_level_resources_gate=pod_level_resources))
    if uid is not None:
        if resources.uid and resources.uid != uid:
            raise InvalidRequestError(
                f"the pod's uid {resources.uid!r} is not the uid in the path {uid!r}", field=_in_body("metadata.uid")
            )
        resources = _with(resources, uid=uid)
    if not resources.uid:
        raise InvalidRequestError(
            "allocations are keyed by pod uid: metadata.uid is required (call at binding time, when the pod has one)",
            field=_in_body("metadata.uid"),
        )
    if not _UID.fullmatch(resources.uid):
        # The API server's uids are RFC 4122 UUIDs. Anything else could not be addressed as
        # /allocations/{uid} ("/", "..") or name the pod's cgroups ("_" breaks the systemd slice name),
        # so its CPUs would be held for good.
        raise InvalidRequestError(
            f"metadata.uid {resources.uid!r} is not a Kubernetes uid: lowercase letters, digits and '-' only",
            field=_in_body("metadata.uid"),
        )
    if not resources.name:
        raise InvalidRequestError("metadata.name is required", field=_in_body("metadata.name"))
    return resources


def _with(pod: PodResources, **changes: Any) -> PodResources:
    return dataclasses.replace(pod, **changes)
