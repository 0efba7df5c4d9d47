"""Read-only models of what numaguard reads from a Pod, and the edge that parses one.

:func:`parse_pod` turns a Pod object (an AdmissionReview ``object``, a watch
event, a scenario step) into a frozen :class:`Pod`.  Unknown fields are ignored:
nobody writes a Pod back from these models (mutations are JSONPatch operations
against the raw object), so nothing is lost.  The raw object is kept, read-only
by convention, for the few rules that compare whole containers (resize L4-L6):
a private copy, or the caller's own object when it says it will not change it
(``copy_raw=False``, a freshly decoded request body), since copying a pod costs
more than reading it.

A :class:`Pod` never changes, so what is derived from its quantities (the
defaulted requirements, the integer view) is computed once per pod and reused:
validating a pod and then planning it parses each quantity once.

Quantities stay the strings (or YAML numbers) the object carried: syntax errors
surface where a rule needs the value, as :class:`~shared.errors.QuantityError`
naming the Kubernetes field path (``spec.containers[0].resources.requests[cpu]``).
:meth:`Pod.to_resources` is the one way into the engine's integer view; it
applies the API server's defaulting first (:mod:`shared.defaults`).

This module must not do I/O, and must not grow behaviour that belongs to the
services: it describes a pod, it does not decide anything about it.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Self, TypeAlias, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic.alias_generators import to_camel

from shared import defaults, qos, quantity
from shared.errors import PodModelError, QuantityError
from shared.resources import (
    ContainerKind,
    ContainerResources,
    PodResources,
    QOSClass,
    Resources,
    quantity_to_int,
)

MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
WINDOWS = "windows"
_DERIVED = "__numaguard_derived__"  # the instance __dict__ key of Pod's derived values
_RAW = "__numaguard_raw__"  # the instance __dict__ key of the object a Pod was parsed from
_NO_RAW: Mapping[str, Any] = MappingProxyType({})
_T = TypeVar("_T")


def _quantity_text(value: object) -> object:
    """YAML hands us ``cpu: 2`` and ``cpu: 0.5`` as numbers; the API server would read them as quantities."""
    if isinstance(value, bool):
        raise ValueError("a quantity must be a string or a number")
    if isinstance(value, int | float):
        return str(value)
    return value


def _none_as_empty(value: object) -> object:
    # JSON ``null`` for a map or list means "unset", which these models spell as empty.
    return {} if value is None else value


def _none_as_empty_list(value: object) -> object:
    return [] if value is None else value


def _empty_as_none(value: object) -> object:
    return None if value == "" else value


def _resource_list(value: object, validate: ValidatorFunctionWrapHandler) -> object:
    """``null`` as empty; a map of strings as it is; anything else through the per-quantity validation.

    What the API server stores is a map of strings, and the full validation would return an equal copy after a
    Python call per quantity: only a map holding something else (a YAML number, a wrong type) needs it, and gets
    it, with its messages and field paths.
    """
    if value is None:
        return {}
    if type(value) is dict:
        for key, quantity_value in value.items():  # a loop: all() over a generator costs twice as much, per pod
            if type(key) is not str or type(quantity_value) is not str:
                return validate(value)
        return dict(value)
    return validate(value)


QuantityText = Annotated[str, BeforeValidator(_quantity_text)]
ResourceList = Annotated[dict[str, QuantityText], WrapValidator(_resource_list)]
StringMap = Annotated[dict[str, str], BeforeValidator(_none_as_empty)]


class _APIModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True)


class ObjectMeta(_APIModel):
    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: StringMap = Field(default_factory=dict)
    annotations: StringMap = Field(default_factory=dict)


class ResourceClaim(_APIModel):
    name: str = ""
    request: str = ""


class ResourceRequirements(_APIModel):
    requests: ResourceList = Field(default_factory=dict)
    limits: ResourceList = Field(default_factory=dict)
    # ``None`` (absent) and ``[]`` differ: upstream forbids any non-nil claims at pod level (V5).
    claims: list[ResourceClaim] | None = None

    def is_empty(self) -> bool:
        return not self.requests and not self.limits and not self.claims


class ContainerResizePolicy(_APIModel):
    resource_name: str = ""
    restart_policy: str = ""


class Container(_APIModel):
    name: str
    image: str = ""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    resize_policy: Annotated[list[ContainerResizePolicy], BeforeValidator(_none_as_empty_list)] = Field(
        default_factory=list
    )
    restart_policy: str | None = None

    @property
    def is_sidecar(self) -> bool:
        """A restartable init container (R1.3); meaningful only inside ``initContainers``."""
        return self.restart_policy == "Always"


class EphemeralContainer(_APIModel):
    name: str
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)


class PodOS(_APIModel):
    name: str = ""


class PodSpec(_APIModel):
    node_name: str = ""
    os: PodOS | None = None
    priority: int | None = None
    # the API server defaults an unset policy to Always (SetDefaults_PodSpec)
    restart_policy: str = "Always"
    resources: ResourceRequirements | None = None
    containers: list[Container]
    init_containers: Annotated[list[Container], BeforeValidator(_none_as_empty_list)] = Field(default_factory=list)
    ephemeral_containers: Annotated[list[EphemeralContainer], BeforeValidator(_none_as_empty_list)] = Field(
        default_factory=list
    )
    overhead: ResourceList = Field(default_factory=dict)


class ContainerState(_APIModel):
    running: dict[str, Any] | None = None
    waiting: dict[str, Any] | None = None
    terminated: dict[str, Any] | None = None


class ContainerStatus(_APIModel):
    name: str
    state: ContainerState = Field(default_factory=ContainerState)
    # requests the kubelet admitted (allocated); ``None`` when the kubelet does not report them
    allocated_resources: ResourceList | None = None
    # what the runtime actually applied; its absence on a running container means an old kubelet (L8)
    resources: ResourceRequirements | None = None


class PodCondition(_APIModel):
    type: str
    status: str = ""
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class PodStatus(_APIModel):
    phase: str = ""
    qos_class: Annotated[QOSClass | None, BeforeValidator(_empty_as_none)] = None
    container_statuses: Annotated[list[ContainerStatus], BeforeValidator(_none_as_empty_list)] = Field(
        default_factory=list
    )
    init_container_statuses: Annotated[list[ContainerStatus], BeforeValidator(_none_as_empty_list)] = Field(
        default_factory=list
    )
    # deprecated before v1.33 (R4.4) but still readable on old objects
    resize: str | None = None
    conditions: Annotated[list[PodCondition], BeforeValidator(_none_as_empty_list)] = Field(default_factory=list)
    resources: ResourceRequirements | None = None
    allocated_resources: ResourceList | None = None


RequirementQuantities: TypeAlias = tuple[
    list[defaults.ContainerRequirements[quantity.Quantity]], defaults.Requirements[quantity.Quantity] | None
]


class Pod(_APIModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec
    status: PodStatus = Field(default_factory=PodStatus)

    def _derived(self, what: str, pod_level_resources: bool) -> Any:
        """What ``what`` computed for this pod and gate, or None.

        Kept in the instance ``__dict__`` beside the fields, where pydantic tolerates derived values (as it does
        ``functools.cached_property``): equality, dumps and reprs ignore them, unlike private attributes.
        """
        return self.__dict__.get(_DERIVED, {}).get((what, pod_level_resources))

    def _remember(self, what: str, pod_level_resources: bool, value: _T) -> _T:
        self.__dict__.setdefault(_DERIVED, {})[(what, pod_level_resources)] = value
        return value

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` applied; it derives its own quantities (the update may change them)."""
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop(_DERIVED, None)
        return copied

    @property
    def raw(self) -> Mapping[str, Any]:
        """The object this pod was parsed from (a private copy unless the caller gave it up; never mutate it).

        Kept in the instance ``__dict__`` like the derived values, not as a pydantic private attribute: one makes
        pydantic run a Python hook for every pod it builds, on the webhook's path for every review.  Equality
        compares the fields only.
        """
        raw: Mapping[str, Any] = self.__dict__.get(_RAW, _NO_RAW)
        return raw

    @property
    def namespace(self) -> str:
        """``metadata.namespace``, ``default`` when unset (a manifest, or a CREATE in mutating admission)."""
        return self.metadata.namespace or "default"

    @property
    def is_mirror(self) -> bool:
        """A static pod's API mirror (L7)."""
        return MIRROR_POD_ANNOTATION in self.metadata.annotations

    @property
    def is_windows(self) -> bool:
        return self.spec.os is not None and self.spec.os.name == WINDOWS

    def containers_with_paths(self) -> list[tuple[ContainerKind, str, Container]]:
        """Init containers (spec order) then app containers, each with its kind and field path."""
        known: tuple[tuple[ContainerKind, str, Container], ...] | None = self._derived("containers", True)
        if known is None:  # the gate plays no part: one entry; planning a pod walks them three times
            result: list[tuple[ContainerKind, str, Container]] = []
            for i, c in enumerate(self.spec.init_containers):
                result.append(("sidecar" if c.is_sidecar else "init", f"spec.initContainers[{i}]", c))
            for i, c in enumerate(self.spec.containers):
                result.append(("app", f"spec.containers[{i}]", c))
            known = self._remember("containers", True, tuple(result))
        return list(known)  # a list of its own, as before: the memo must not change under the caller

    def spec_json(self) -> str:
        """``spec`` as JSON, by its API names, fields that are ``None`` left out; encoded once per pod.

        Injective on the typed spec: every field that may be ``None`` defaults to ``None``, so an
        absent key says what the field holds.  A value JSON cannot carry as UTF-8 (a lone surrogate)
        raises ``ValueError`` (pydantic's serialisation error), every time.
        """
        known: str | None = self._derived("spec_json", True)  # the gate plays no part: one entry
        if known is None:
            known = self._remember("spec_json", True, self.spec.model_dump_json(by_alias=True, exclude_none=True))
        return known

    def requirement_quantities(self, *, pod_level_resources: bool = True) -> RequirementQuantities:
        """Exact quantities of every container (order of :meth:`containers_with_paths`) and of
        ``spec.resources``, AFTER the API server's defaulting.  Raises ``QuantityError`` with the path."""
        known = self._defaulted(pod_level_resources)
        return list(known.containers), known.pod  # a list of its own: the memo must not change under the caller

    def container_aggregate(self, *, pod_level_resources: bool = True) -> defaults.Requirements[quantity.Quantity]:
        """:func:`shared.qos.aggregate` of the defaulted containers' requests and limits (R3.1-R3.4), as quantities.

        Defaulting ``spec.resources`` already summed them; a pod without that stanza sums them here, once.
        """
        known = self._defaulted(pod_level_resources)
        if known.aggregate is not None:
            return known.aggregate
        summed: defaults.Requirements[quantity.Quantity] | None = self._derived("aggregate", pod_level_resources)
        if summed is None:
            summed = defaults.Requirements(
                requests=qos.aggregate((c.kind, c.requirements.requests) for c in known.containers),
                limits=qos.aggregate((c.kind, c.requirements.limits) for c in known.containers),
            )
            self._remember("aggregate", pod_level_resources, summed)
        return summed

    def _defaulted(self, pod_level_resources: bool) -> defaults.Defaulted[quantity.Quantity]:
        known: defaults.Defaulted[quantity.Quantity] | None = self._derived("quantities", pod_level_resources)
        if known is None:
            containers = [
                defaults.ContainerRequirements(kind, _parse_stanza(c.resources, f"{path}.resources"))
                for kind, path, c in self.containers_with_paths()
            ]
            stanza = None if self.spec.resources is None else _parse_stanza(self.spec.resources, "spec.resources")
            known = self._remember(
                "quantities",
                pod_level_resources,
                defaults.defaulted_requirements(containers, stanza, pod_level_resources=pod_level_resources),
            )
        return known

    def to_resources(self, *, pod_level_resources: bool = True) -> PodResources:
        """The engine's integer view, after defaulting.  ``QuantityError`` names the offending field.

        With the PodLevelResources gate off, ``spec.resources`` is dropped as the API
        server's strategy drops it on create (V11).  Computed once per pod and gate (the view is frozen).
        """
        known: PodResources | None = self._derived("resources", pod_level_resources)
        if known is None:
            known = self._remember("resources", pod_level_resources, self._to_resources(pod_level_resources))
        return known

    def _to_resources(self, pod_level_resources: bool) -> PodResources:
        containers, stanza = self.requirement_quantities(pod_level_resources=pod_level_resources)
        overhead = _parse_list(self.spec.overhead, "spec.overhead")
        return PodResources(
            uid=self.metadata.uid,
            namespace=self.namespace,
            name=self.metadata.name,
            containers=tuple(
                ContainerResources(name=c.name, kind=kind, resources=_to_ints(req.requirements))
                for (kind, _, c), req in zip(self.containers_with_paths(), containers, strict=True)
            ),
            pod=_to_ints(stanza) if stanza is not None and pod_level_resources else None,
            qos_class=self.status.qos_class,
            priority=self.spec.priority or 0,
            overhead=_ints(overhead),
        )


def _parse_list(values: Mapping[str, str], path: str, part: str = "") -> dict[str, quantity.Quantity]:
    """The quantities of one map; an error names ``<path>.<part>[<name>]`` (``<path>[<name>]`` without ``part``)."""
    if not values:  # most stanzas of a pod are empty (sidecars, overhead)
        return {}
    try:
        return {name: _stored_quantity(text) for name, text in values.items()}
    except QuantityError:  # again, naming the field: the first bad value raises as parsing it alone would
        where = f"{path}.{part}" if part else path
        return {
            name: quantity.parse(text, field=f"{where}[{name}]").rounded_up_to_milli() for name, text in values.items()
        }


@functools.lru_cache(maxsize=quantity.PARSE_CACHE_SIZE)
def _stored_quantity(text: str) -> quantity.Quantity:
    # SetDefaults_ResourceList rounds every stored quantity up to milli precision.
    return quantity.parse(text).rounded_up_to_milli()


def _parse_stanza(resources: ResourceRequirements, path: str) -> defaults.Requirements[quantity.Quantity]:
    return defaults.Requirements(
        requests=_parse_list(resources.requests, path, "requests"),
        limits=_parse_list(resources.limits, path, "limits"),
    )


def _to_ints(stanza: defaults.Requirements[quantity.Quantity]) -> Resources:
    return Resources(requests=_ints(stanza.requests), limits=_ints(stanza.limits))


def _ints(values: Mapping[str, quantity.Quantity]) -> dict[str, int]:
    if not values:  # most stanzas are empty: no comprehension to run
        return {}
    return {n: quantity_to_int(n, q) for n, q in values.items()}


# Fields whose values are maps keyed by user data: their keys print as ``[key]``.
_MAP_FIELDS = frozenset({"requests", "limits", "labels", "annotations", "allocatedResources", "overhead"})


def parse_pod(raw: object, *, copy_raw: bool = True) -> Pod:
    """Read a Pod object; ``PodModelError`` names every bad field by its Kubernetes path.

    ``copy_raw=False`` is the caller's promise that nobody changes ``raw`` any more (a request body decoded for
    this call alone): :attr:`Pod.raw` is then ``raw`` itself rather than a copy.
    """
    if not isinstance(raw, Mapping):
        raise PodModelError(f"a pod must be a JSON object, got {type(raw).__name__}")
    try:
        pod = Pod.model_validate(raw)
    except ValidationError as exc:
        problems = [(_field_path(err["loc"]), err["msg"].removeprefix("Value error, ")) for err in exc.errors()]
        first_path, first_msg = problems[0]
        rest = "".join(f"; {path}: {msg}" for path, msg in problems[1:])
        raise PodModelError(f"{first_msg}{rest}", field=first_path or None) from None
    pod.__dict__[_RAW] = _json_copy(raw) if copy_raw else (raw if isinstance(raw, dict) else dict(raw))
    return pod


def _json_copy(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a decoded JSON/YAML object, several times cheaper than ``copy.deepcopy`` on such trees."""
    try:
        return {key: _json_value_copy(value) for key, value in raw.items()}
    except RecursionError:  # a self-referencing YAML alias, in a field the models ignore
        return copy.deepcopy(dict(raw))


def _json_value_copy(value: Any) -> Any:
    if type(value) is dict:
        return {key: _json_value_copy(item) for key, item in value.items()}
    if type(value) is list:
        return [_json_value_copy(item) for item in value]
    if isinstance(value, str | int | float | None):  # immutable: shared, as deepcopy shares them
        return value
    return copy.deepcopy(value)


def _field_path(loc: tuple[int | str, ...]) -> str:
    """Pydantic's ``('spec', 'containers', 1, 'resources', 'limits', 'cpu')`` as
    ``spec.containers[1].resources.limits[cpu]``."""
    path = ""
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int) or previous in _MAP_FIELDS:
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
        previous = part
    return path
