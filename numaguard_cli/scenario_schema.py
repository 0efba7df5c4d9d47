"""Every key of a scenario file is one the plan contract defines (``../shared/contracts/plan.md``).

YAML forgives typos silently: ``stepz:`` is simply another key, and a scenario without its steps
"passes" with nothing checked; ``resoures:`` in a container makes a Guaranteed pod BestEffort.  So
each level is checked for unknown keys before anything runs, and the error names the field by its
path (``steps[0].add.spec.containers[0].resoures``), with the nearest known name when one is close,
as ``kubectl --validate=strict`` does for manifests.  The ``kubelet`` section is checked where it is
parsed (:func:`enforcer.engine.config.from_kubelet`); topology documents by their own parser.

Pod manifests are checked at the levels that decide resources: the object, ``metadata``, ``spec``,
each container (regular, init, ephemeral) and its ``resources``.  The field lists are the Kubernetes
v1.35 API (``kubernetes`` client 35 ``attribute_map``; tests keep them in step) plus the v1.36 fields
numaguard reads.  Pure: documents in, :class:`~enforcer.engine.scenario.ScenarioError` out.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from enforcer.engine.scenario import ScenarioError

SCENARIO_FIELDS = frozenset({"node", "steps", "expect"})
NODE_FIELDS = frozenset({"name", "compatibility", "topology", "topologyFile", "kubelet"})
STEP_OPS = frozenset({"add", "resize", "remove"})

POD_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
OBJECT_META_FIELDS = frozenset(
    {
        "annotations", "creationTimestamp", "deletionGracePeriodSeconds", "deletionTimestamp", "finalizers",
        "generateName", "generation", "labels", "managedFields", "name", "namespace", "ownerReferences",
        "resourceVersion", "selfLink", "uid",
    }
)  # fmt: skip
POD_SPEC_FIELDS = frozenset(
    {
        "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers", "dnsConfig",
        "dnsPolicy", "enableServiceLinks", "ephemeralContainers", "hostAliases", "hostIPC", "hostNetwork",
        "hostPID", "hostUsers", "hostname", "hostnameOverride", "imagePullSecrets", "initContainers", "nodeName",
        "nodeSelector", "os", "overhead", "preemptionPolicy", "priority", "priorityClassName", "readinessGates",
        "resourceClaims", "resources", "restartPolicy", "runtimeClassName", "schedulerName", "schedulingGates",
        "securityContext", "serviceAccount", "serviceAccountName", "setHostnameAsFQDN", "shareProcessNamespace",
        "subdomain", "terminationGracePeriodSeconds", "tolerations", "topologySpreadConstraints", "volumes",
        "workloadRef",
    }
)  # fmt: skip
CONTAINER_FIELDS = frozenset(
    {
        "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "name",
        "ports", "readinessProbe", "resizePolicy", "resources", "restartPolicy", "restartPolicyRules",
        "securityContext", "startupProbe", "stdin", "stdinOnce", "terminationMessagePath",
        "terminationMessagePolicy", "tty", "volumeDevices", "volumeMounts", "workingDir",
        "targetContainerName",  # ephemeral containers
    }
)  # fmt: skip
RESOURCE_REQUIREMENTS_FIELDS = frozenset({"claims", "limits", "requests"})


def unknown_field(path: str, key: object, known: Iterable[str]) -> ScenarioError:
    """``steps[0].add.spec.resoures: unknown field (did you mean "resources"?)``."""
    where = f"{path}.{key}" if path else str(key)
    close = difflib.get_close_matches(str(key), sorted(known), n=1)
    hint = f' (did you mean "{close[0]}"?)' if close else f" (known: {', '.join(sorted(known))})"
    return ScenarioError(f"{where}: unknown field{hint}")


def _known_keys(value: object, path: str, known: frozenset[str]) -> Mapping[str, object] | None:
    if not isinstance(value, Mapping):
        return None
    for key in value:
        if key not in known:
            raise unknown_field(path, key, known)
    return value


def check_scenario(doc: object) -> None:
    """Raise ScenarioError for the first unknown key at any level the scenario format defines."""
    scenario = _known_keys(doc, "", SCENARIO_FIELDS)
    if scenario is None:
        return  # the engine says what is wrong with a non-object
    _known_keys(scenario.get("node"), "node", NODE_FIELDS)
    steps = scenario.get("steps")
    if isinstance(steps, list):
        for i, step in enumerate(steps):
            body = _known_keys(step, f"steps[{i}]", STEP_OPS)
            if body is None:
                continue
            for op in ("add", "resize"):
                if op in body:
                    check_pod(body[op], f"steps[{i}].{op}")
    expect = scenario.get("expect")
    if expect is not None and not (isinstance(expect, list) and all(isinstance(e, Mapping) for e in expect)):
        raise ScenarioError("expect: expected a list of step objects (only the keys each one checks)")


def check_pod(pod: object, path: str) -> None:
    """Unknown keys of a Pod manifest at the levels that decide its resources."""
    body = _known_keys(pod, path, POD_FIELDS)
    if body is None:
        return
    _known_keys(body.get("metadata"), f"{path}.metadata", OBJECT_META_FIELDS)
    spec = _known_keys(body.get("spec"), f"{path}.spec", POD_SPEC_FIELDS)
    if spec is None:
        return
    _known_keys(spec.get("resources"), f"{path}.spec.resources", RESOURCE_REQUIREMENTS_FIELDS)
    for key in ("initContainers", "containers", "ephemeralContainers"):
        containers = spec.get(key)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            where = f"{path}.spec.{key}[{i}]"
            fields = _known_keys(container, where, CONTAINER_FIELDS)
            if fields is not None:
                _known_keys(fields.get("resources"), f"{where}.resources", RESOURCE_REQUIREMENTS_FIELDS)
