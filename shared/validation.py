"""The API server's validation of pod resources, as field violations with rule ids.

Reproduces ``validatePodResources`` / ``validatePodResourceConsistency`` (V1-V13)
and the container basics of ``ValidateResourceRequirements`` (non-negative
values, request <= limit, hugepages) and ``validateResizePolicy`` from
``pkg/apis/core/validation/validation.go``, so the webhook can deny with the
exact path and message the API server would give, plus the spec rule id.

Validation runs on the pod AFTER defaulting, as in the API server; the quantities
printed in messages are the stored (defaulted, milli-rounded) ones and sums keep
the format of their first addend, as Go's ``Quantity.Add`` does.

This module decides nothing about nodes and does no I/O: it answers "would the
API server accept these resources".
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from shared import defaults, quantity
from shared.errors import QUANTITY_FORMAT_MESSAGE, QuantityError
from shared.pod import Container, Pod, ResourceRequirements
from shared.resources import (
    HUGEPAGES_PREFIX,
    QOS_RESOURCES,
    SUPPORTED_POD_LEVEL_RESOURCES,
    is_hugepages,
    is_native_resource,
    is_overcommit_allowed,
    is_supported_pod_level_resource,
)

ViolationType = Literal["Invalid", "Forbidden", "Required", "NotSupported", "Duplicate"]

# field.ErrorType.String() for each type
_TYPE_LABELS: dict[ViolationType, str] = {
    "Invalid": "Invalid value",
    "Forbidden": "Forbidden",
    "Required": "Required value",
    "NotSupported": "Unsupported value",
    "Duplicate": "Duplicate value",
}


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One field error, as ``field.Error`` carries it, plus the spec rule it enforces.

    ``value`` is the offending value as the API server prints it.  ``quoted`` is
    False for values Go prints bare (resource names and quantities are
    ``fmt.Stringer`` values; plain strings are ``%q``-quoted).
    """

    path: str
    type: ViolationType
    message: str
    rule: str
    value: str | None = None
    quoted: bool = True

    def __str__(self) -> str:
        return format_violation(self)


def format_violation(violation: FieldViolation) -> str:
    """``field.Error.Error()``: ``<path>: <Type>[: <value>][: <message>]``."""
    body = _TYPE_LABELS[violation.type]
    if violation.type not in ("Required", "Forbidden"):
        if violation.value is None:
            rendered = "null"
        elif violation.quoted:
            rendered = json.dumps(violation.value, ensure_ascii=False)
        else:
            rendered = violation.value
        body = f"{body}: {rendered}"
    if violation.message:
        body = f"{body}: {violation.message}"
    return f"{violation.path}: {body}"


def aggregate_message(violations: Iterable[FieldViolation]) -> str:
    """``ErrorList.ToAggregate().Error()``: duplicates dropped, one message bare, several in brackets."""
    messages = list(dict.fromkeys(format_violation(v) for v in violations))
    if len(messages) == 1:
        return messages[0]
    return "[" + ", ".join(messages) + "]"


def invalid_message(name: str, violations: Sequence[FieldViolation], *, kind: str = "Pod") -> str:
    """The client's error text, e.g. ``Pod "db" is invalid: spec.resources.requests[memory]: ...``."""
    return f'{kind} "{name}" is invalid: {aggregate_message(violations)}'


def validate_pod_resources(
    pod: Pod, *, pod_level_resources: bool = True, allow_indivisible_hugepages: bool = False
) -> list[FieldViolation]:
    """Every resource error the API server would report for ``pod`` on create (V1-V13).

    An unparsable quantity fails decoding in the API server before validation; it
    is reported alone (one violation per bad value).  ``pod_level_resources`` is
    the PodLevelResources gate: off, ``spec.resources`` is dropped, not validated (V11).
    """
    # The (remembered) requirements parse every container and pod-level quantity: when they can be read, only
    # spec.overhead is left to check, so the walk over every value runs only where an error is to be reported.
    try:
        containers, stanza = pod.requirement_quantities(pod_level_resources=pod_level_resources)
    except QuantityError:
        return quantity_syntax_violations(pod)
    if pod.spec.overhead:
        syntax = quantity_syntax_violations(pod)
        if syntax:
            return syntax
    entries = list(zip(pod.containers_with_paths(), containers, strict=True))
    violations: list[FieldViolation] = []
    # upstream order: containers, then initContainers, then ephemeral, then pod-level
    ordered = [e for e in entries if e[0][0] == "app"] + [e for e in entries if e[0][0] != "app"]
    for (_, path, container), requirements in ordered:
        violations += _requirements_violations(
            requirements.requirements,
            f"{path}.resources",
            _checked_container_resource_name,
            allow_indivisible_hugepages,
        )
        if container.resize_policy:  # an empty policy breaks no rule
            violations += _resize_policy_violations(container, f"{path}.resizePolicy", pod.spec.restart_policy)
    for i, ephemeral in enumerate(pod.spec.ephemeral_containers):
        if not ephemeral.resources.is_empty():
            violations.append(
                FieldViolation(
                    f"spec.ephemeralContainers[{i}].resources",
                    "Forbidden",
                    "cannot be set for an Ephemeral Container",
                    "V13",
                )
            )
    if pod_level_resources and pod.spec.resources is not None and stanza is not None:
        violations += _pod_level_violations(pod, pod.spec.resources, stanza, containers, allow_indivisible_hugepages)
    return violations


def _pod_level_violations(
    pod: Pod,
    declared: ResourceRequirements,
    stanza: defaults.Requirements[quantity.Quantity],
    containers: Sequence[defaults.ContainerRequirements[quantity.Quantity]],
    allow_indivisible_hugepages: bool,
) -> list[FieldViolation]:
    if pod.is_windows and not declared.is_empty():
        # V1: the pod-level stanza means nothing on Windows; nothing else about it is worth reporting
        return [FieldViolation("spec.resources", "Forbidden", "may not be set for a windows pod", "V1")]
    violations: list[FieldViolation] = []
    if declared.claims is not None:
        violations.append(
            FieldViolation(
                "spec.resources.claims", "Forbidden", "claims cannot be set for Resources at pod-level", "V5"
            )
        )
    violations += _requirements_violations(
        stanza, "spec.resources", _checked_pod_resource_name, allow_indivisible_hugepages
    )
    violations += _consistency_violations(pod.container_aggregate(pod_level_resources=True), stanza, containers)
    return violations


def _consistency_violations(
    aggregate: defaults.Requirements[quantity.Quantity],
    stanza: defaults.Requirements[quantity.Quantity],
    containers: Sequence[defaults.ContainerRequirements[quantity.Quantity]],
) -> list[FieldViolation]:
    """``validatePodResourceConsistency``: V6 (requests), V7 (hugepages limits), V8 (each app container's limits).

    ``aggregate`` is :func:`shared.qos.aggregate` of ``containers`` (:meth:`shared.pod.Pod.container_aggregate`).
    """
    violations: list[FieldViolation] = []
    for name, agg in aggregate.requests.items():
        pod_request = stanza.requests.get(name)
        if pod_request and agg > pod_request:
            violations.append(
                FieldViolation(
                    f"spec.resources.requests[{name}]",
                    "Invalid",
                    f"must be greater than or equal to aggregate container requests of {agg}",
                    "V6",
                    value=str(pod_request),
                )
            )
    for name, agg in aggregate.limits.items():
        pod_limit = stanza.limits.get(name)
        if is_hugepages(name) and pod_limit is not None and agg > pod_limit:
            violations.append(
                FieldViolation(
                    f"spec.resources.limits[{name}]",
                    "Invalid",
                    f"must be greater than or equal to aggregate container limits of {agg}",
                    "V7",
                    value=str(pod_limit),
                )
            )
    app = [c for c in containers if c.kind == "app"]
    for i, container in enumerate(app):
        for name, limit in container.requirements.limits.items():
            pod_limit = stanza.limits.get(name)
            if pod_limit is not None and limit > pod_limit:
                violations.append(
                    FieldViolation(
                        # the odd path is upstream's: fldPath.Child("containers").Index(i).Key(name).Child("limits")
                        f"spec.resources.containers[{i}][{name}].limits",
                        "Invalid",
                        f"must be less than or equal to pod limits of {pod_limit}",
                        "V8",
                        value=str(limit),
                    )
                )
    return violations


NameCheck = Callable[[str, str], list[FieldViolation]]


def _requirements_violations(
    stanza: defaults.Requirements[quantity.Quantity],
    path: str,
    name_check: NameCheck,
    allow_indivisible_hugepages: bool,
) -> list[FieldViolation]:
    """``validateResourceRequirements`` (V2-V4): names, values, request <= limit, hugepages."""
    violations: list[FieldViolation] = []
    limits_path, requests_path = f"{path}.limits", f"{path}.requests"
    has_cpu_or_memory = has_hugepages = False
    for name, limit in stanza.limits.items():
        field = f"{limits_path}[{name}]"
        violations += name_check(name, field)
        violations += _value_violations(name, limit, field)
        if is_hugepages(name):
            has_hugepages = True
            violations += _hugepage_value_violations(name, limit, field, allow_indivisible_hugepages)
        has_cpu_or_memory |= name in QOS_RESOURCES
    for name, request in stanza.requests.items():
        field = f"{requests_path}[{name}]"
        violations += name_check(name, field)
        violations += _value_violations(name, request, field)
        limit_for_request = stanza.limits.get(name)
        if limit_for_request is not None:
            if request.same_value(limit_for_request):
                pass  # equal to its limit: neither rule below can apply (the usual case, asked first)
            elif not is_overcommit_allowed(name):
                violations.append(
                    FieldViolation(
                        requests_path,
                        "Invalid",
                        f"must be equal to {name} limit of {limit_for_request}",
                        "V2",
                        value=str(request),
                    )
                )
            elif request > limit_for_request:
                violations.append(
                    FieldViolation(
                        requests_path,
                        "Invalid",
                        f"must be less than or equal to {name} limit of {limit_for_request}",
                        "V2",
                        value=str(request),
                    )
                )
        elif not is_overcommit_allowed(name):
            violations.append(
                FieldViolation(limits_path, "Required", "Limit must be set for non overcommitable resources", "V2")
            )
        if is_hugepages(name):
            has_hugepages = True
            violations += _hugepage_value_violations(name, request, field, allow_indivisible_hugepages)
        has_cpu_or_memory |= name in QOS_RESOURCES
    if has_hugepages and not has_cpu_or_memory:
        violations.append(FieldViolation(path, "Forbidden", "HugePages require cpu or memory", "V2"))
    return violations


def _value_violations(name: str, value: quantity.Quantity, field: str) -> list[FieldViolation]:
    """``ValidateResourceQuantityValue``: non-negative; integer for integer resources."""
    violations: list[FieldViolation] = []
    if value.value < 0:
        violations.append(
            FieldViolation(field, "Invalid", "must be greater than or equal to 0", "V2", value=str(value))
        )
    if _is_integer_resource(name) and value.milli() % 1000 != 0:
        violations.append(FieldViolation(field, "Invalid", "must be an integer", "V2", value=str(value), quoted=False))
    return violations


def _hugepage_value_violations(
    name: str, value: quantity.Quantity, field: str, allow_indivisible: bool
) -> list[FieldViolation]:
    if allow_indivisible or _hugepage_value_divisible(name, value):
        return []
    return [
        FieldViolation(field, "Invalid", f"{value} is not positive integer multiple of {name}", "V2", value=str(value))
    ]


def _hugepage_value_divisible(name: str, value: quantity.Quantity) -> bool:
    """``IsHugePageResourceValueDivisible``: a whole number of pages of the size the name encodes."""
    try:
        page = quantity.parse(name.removeprefix(HUGEPAGES_PREFIX))
    except QuantityError:
        return False
    if page.value <= 0 or page.milli() % 1000 != 0:
        return False
    return value.integer() % page.integer() == 0


def quantity_syntax_violations(pod: Pod) -> list[FieldViolation]:
    """Quantities the API server could not even decode; every other check needs their values."""
    violations: list[FieldViolation] = []
    stanzas: list[tuple[str, ResourceRequirements]] = [
        (f"{path}.resources", c.resources) for _, path, c in pod.containers_with_paths()
    ]
    if pod.spec.resources is not None:
        stanzas.append(("spec.resources", pod.spec.resources))
    lists = [(f"{path}.{part}", getattr(r, part)) for path, r in stanzas for part in ("limits", "requests")]
    lists.append(("spec.overhead", pod.spec.overhead))
    for path, values in lists:
        for name, text in values.items():
            try:
                quantity.parse(text)
            except QuantityError:
                violations.append(
                    FieldViolation(f"{path}[{name}]", "Invalid", QUANTITY_FORMAT_MESSAGE, "V2", value=text)
                )
    return violations


# -- resize policy -------------------------------------------------------------

_RESIZE_POLICIES = ("NotRequired", "RestartContainer")


def _resize_policy_violations(container: Container, path: str, pod_restart_policy: str) -> list[FieldViolation]:
    """``validateResizePolicy``: cpu/memory once each, a known policy, NotRequired under restartPolicy Never (L10)."""
    violations: list[FieldViolation] = []
    seen: set[str] = set()
    for i, policy in enumerate(container.resize_policy):
        name, restart = policy.resource_name, policy.restart_policy
        if name in seen:
            violations.append(FieldViolation(f"{path}[{i}]", "Duplicate", "", "R3.1", value=name, quoted=False))
        seen.add(name)
        if name == "":
            violations.append(FieldViolation(path, "Required", "", "R3.1"))
        elif name not in QOS_RESOURCES:
            violations.append(
                FieldViolation(path, "NotSupported", _supported(QOS_RESOURCES), "R3.1", value=name, quoted=False)
            )
        if restart == "":
            violations.append(FieldViolation(path, "Required", "", "R3.1"))
        elif restart not in _RESIZE_POLICIES:
            violations.append(FieldViolation(path, "NotSupported", _supported(_RESIZE_POLICIES), "R3.1", value=restart))
        if pod_restart_policy == "Never" and restart != "NotRequired":
            violations.append(
                FieldViolation(
                    path, "Invalid", "must be 'NotRequired' when `restartPolicy` is 'Never'", "L10", value=restart
                )
            )
    return violations


def _supported(values: Iterable[str]) -> str:
    return "supported values: " + ", ".join(json.dumps(v) for v in values)


# -- resource names ------------------------------------------------------------

_STANDARD_RESOURCES = frozenset(
    {
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "storage",
        "requests.storage",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_INTEGER_RESOURCES = frozenset(
    {
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_REQUESTS_PREFIX = "requests."


def _is_standard_resource(name: str) -> bool:
    return name in _STANDARD_RESOURCES or name.startswith((HUGEPAGES_PREFIX, _REQUESTS_PREFIX + HUGEPAGES_PREFIX))


def _is_extended_resource(name: str) -> bool:
    """``IsExtendedResourceName``: outside kubernetes.io, and still a qualified name as a quota key."""
    if is_native_resource(name) or name.startswith(_REQUESTS_PREFIX):
        return False
    return not qualified_name_errors(_REQUESTS_PREFIX + name)


@functools.lru_cache(maxsize=1024)  # pure in the name; pods name the same few resources over and over
def _is_integer_resource(name: str) -> bool:
    return name in _INTEGER_RESOURCES or _is_extended_resource(name)


def _resource_name(name: str, field: str) -> list[FieldViolation]:
    """``validateResourceName`` (V3)."""
    errors = qualified_name_errors(name)
    if errors:
        return [FieldViolation(field, "Invalid", e, "V3", value=name, quoted=False) for e in errors]
    if "/" not in name and not _is_standard_resource(name):
        return [
            FieldViolation(
                field, "Invalid", "must be a standard resource type or fully qualified", "V3", value=name, quoted=False
            )
        ]
    return []


def _container_resource_name(name: str, field: str) -> list[FieldViolation]:
    """``validateContainerResourceName``."""
    violations = _resource_name(name, field)
    if "/" not in name:
        if name not in _STANDARD_CONTAINER_RESOURCES and not is_hugepages(name):
            violations.append(
                FieldViolation(
                    field, "Invalid", "must be a standard resource for containers", "V3", value=name, quoted=False
                )
            )
    elif not is_native_resource(name) and not _is_extended_resource(name):
        violations.append(
            FieldViolation(
                field, "Invalid", "doesn't follow extended resource name standard", "V3", value=name, quoted=False
            )
        )
    return violations


def _pod_resource_name(name: str, field: str) -> list[FieldViolation]:
    """``validatePodResourceName`` (V3, then V4: only cpu, memory and hugepages-* at pod level)."""
    violations = _resource_name(name, field)
    if violations:
        return violations
    if not is_supported_pod_level_resource(name):
        return [
            FieldViolation(
                field, "NotSupported", _supported(SUPPORTED_POD_LEVEL_RESOURCES), "V4", value=name, quoted=False
            )
        ]
    return []


_NAME_CHECK_CACHE_SIZE = 1024


def _remembered(check: NameCheck) -> NameCheck:
    """``check`` computed once per resource name (its verdict depends on the name alone, ``field`` only names where).

    Every pod names the same few resources (cpu, memory, hugepages-2Mi) in every stanza; the regexes behind the
    verdict need not run for each of them.  Bounded, so arbitrary names cannot grow it without limit.
    """

    @functools.lru_cache(maxsize=_NAME_CHECK_CACHE_SIZE)
    def verdict(name: str) -> tuple[FieldViolation, ...]:
        return tuple(check(name, ""))

    def checked(name: str, field: str) -> list[FieldViolation]:
        found = verdict(name)
        return [dataclasses.replace(v, path=field) for v in found] if found else []

    return checked


_checked_container_resource_name = _remembered(_container_resource_name)
_checked_pod_resource_name = _remembered(_pod_resource_name)


# -- qualified names (apimachinery content.IsLabelKey) ------------------------

_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_KEY_RE = re.compile(_LABEL_KEY_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)


def _regex_error(message: str, regex: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{regex}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{regex}')"


def qualified_name_errors(value: str) -> list[str]:
    """``IsQualifiedName``: an optional DNS-1123 subdomain prefix and '/', then a name of at most 63 characters."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                errors.append("prefix part must be no more than 253 bytes")
            if not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
                errors.append(
                    "prefix part " + _regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com")
                )
    else:
        return [
            "a valid label key "
            + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 bytes")
    if not _LABEL_KEY_RE.fullmatch(name):
        errors.append("name part " + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errors
