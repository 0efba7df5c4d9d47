"""Evaluates the shipped ValidatingAdmissionPolicy with cel-python the way the API server does.

cel-python implements the CEL language and its standard macros, not the Kubernetes extension
libraries the apiserver adds (``quantity()``, the Kubernetes list functions ``sum``/``max``/``indexOf``,
the strings extension's ``join``/``indexOf``).  Those are supplied here as custom functions, exact
through :mod:`shared.quantity`, so the expressions under test are byte for byte the ones in
``manifests/optional/validating-admission-policy/policy.yaml``.

The apiserver hands a policy the STORED pod: defaulted (container requests from limits, pod-level
defaults), quantities rounded up to milli precision and serialised canonically, an empty
``resources`` struct on every container.  :func:`stored_pod` builds that view from a manifest with the
same defaulting the Python rules use, so both sides judge one object.

Variables are evaluated eagerly, in order (the apiserver evaluates them lazily); an expression error
is raised, never swallowed: the policy must not error on any pod the tests give it.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import celpy
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from shared import quantity as quantities
from shared.pod import parse_pod

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "manifests" / "optional" / "validating-admission-policy"
_INT64 = range(-(2**63), 2**63)


# -- the Kubernetes CEL libraries, for cel-python ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class K8sQuantity:
    """A ``Quantity`` CEL value: its exact value (Go's ``resource.Quantity`` compares values only)."""

    value: Decimal


def _quantity(text: object) -> K8sQuantity:
    if not isinstance(text, str):
        raise TypeError(f"quantity() takes a string, got {type(text).__name__}")
    try:
        return K8sQuantity(quantities.parse(str(text)).value)
    except Exception as err:  # a bad quantity is a CEL evaluation error (ValueError -> CELEvalError)
        raise ValueError(f"quantities must match the regular expression: {text!r}") from err


def _is_quantity(text: object) -> celtypes.BoolType:
    try:
        _quantity(text)
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _q(value: object) -> K8sQuantity:
    if not isinstance(value, K8sQuantity):
        raise TypeError(f"expected a quantity, got {type(value).__name__}")
    return value


def _as_int64(q: K8sQuantity) -> int | None:
    """Go's ``AsInt64``: the value when it is a whole number within int64, else nothing."""
    if q.value != q.value.to_integral_value():
        return None
    whole = int(q.value)
    return whole if whole in _INT64 else None


def _is_integer(q: object) -> celtypes.BoolType:
    return celtypes.BoolType(_as_int64(_q(q)) is not None)


def _as_integer(q: object) -> celtypes.IntType:
    whole = _as_int64(_q(q))
    if whole is None:
        raise ValueError("cannot convert value to integer")
    return celtypes.IntType(whole)


def _as_approximate_float(q: object) -> celtypes.DoubleType:
    return celtypes.DoubleType(float(_q(q).value))


def _sign(q: object) -> celtypes.IntType:
    value = _q(q).value
    return celtypes.IntType((value > 0) - (value < 0))


def _compare_to(a: object, b: object) -> celtypes.IntType:
    x, y = _q(a).value, _q(b).value
    return celtypes.IntType((x > y) - (x < y))


def _is_greater_than(a: object, b: object) -> celtypes.BoolType:
    return celtypes.BoolType(_q(a).value > _q(b).value)


def _is_less_than(a: object, b: object) -> celtypes.BoolType:
    return celtypes.BoolType(_q(a).value < _q(b).value)


def _operand(value: object) -> Decimal:
    if isinstance(value, K8sQuantity):
        return value.value
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    raise TypeError(f"expected a quantity or an int, got {type(value).__name__}")


def _add(a: object, b: object) -> K8sQuantity:
    return K8sQuantity(_q(a).value + _operand(b))


def _sub(a: object, b: object) -> K8sQuantity:
    return K8sQuantity(_q(a).value - _operand(b))


def _sum(values: object) -> object:
    """Kubernetes ``<list>.sum()``: ints (int64-checked) or doubles; an empty list sums to 0."""
    items = list(_list(values))
    ints = [v for v in items if isinstance(v, int) and not isinstance(v, bool)]
    if len(ints) == len(items):
        total = sum(int(v) for v in ints)  # plain ints: ``in range`` on an int subclass scans the range
        if total not in _INT64:
            raise ValueError("overflow")
        return celtypes.IntType(total)
    doubles = [v for v in items if isinstance(v, float)]
    if len(doubles) == len(items):
        return celtypes.DoubleType(sum(doubles))
    raise TypeError("sum() needs a list of numbers of one type")


def _max(values: object) -> object:
    items: list[Any] = list(_list(values))
    if not items:
        raise ValueError("max called on empty list")
    return max(items)


def _index_of(target: object, item: object) -> celtypes.IntType:
    """Kubernetes ``<list>.indexOf(x)`` and the strings extension's ``<string>.indexOf(s)``."""
    if isinstance(target, str):
        if not isinstance(item, str):
            raise TypeError("string indexOf takes a string")
        return celtypes.IntType(target.find(item))
    for i, value in enumerate(_list(target)):
        if value == item:
            return celtypes.IntType(i)
    return celtypes.IntType(-1)


def _join(values: object, separator: object = "") -> celtypes.StringType:
    items = list(_list(values))
    if not all(isinstance(v, str) for v in items) or not isinstance(separator, str):
        raise TypeError("join() needs a list of strings and a string separator")
    return celtypes.StringType(str(separator).join(str(v) for v in items))


def _list(value: object) -> Sequence[object]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


KUBERNETES_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": _as_approximate_float,
    "sign": _sign,
    "compareTo": _compare_to,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
    "add": _add,
    "sub": _sub,
    "sum": _sum,
    "max": _max,
    "indexOf": _index_of,
    "join": _join,
}


# -- the policy ---------------------------------------------------------------------------------------


def policy_documents() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((POLICY_DIR / "policy.yaml").read_text()) if doc]


def binding_documents() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((POLICY_DIR / "binding.yaml").read_text()) if doc]


@dataclass(frozen=True, slots=True)
class Validation:
    """One entry of ``spec.validations``; ``findings`` names the variable its expression tests."""

    findings: str
    reason: str
    message: str
    expression: Any
    message_expression: Any


@dataclass(frozen=True, slots=True)
class Denial:
    """A failed validation with the message the apiserver would return."""

    findings: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Every variable's value (CEL values) and the validations that failed, in policy order."""

    variables: Mapping[str, Any]
    denials: tuple[Denial, ...]

    def findings(self, name: str) -> list[str]:
        return [str(f) for f in self.variables[name]]

    def denial(self, findings: str) -> Denial | None:
        return next((d for d in self.denials if d.findings == findings), None)


_FINDINGS_EXPRESSION = re.compile(r"size\(variables\.(\w+)\) == 0")


class CompiledPolicy:
    """The policy's variables and validations, compiled once for cel-python."""

    def __init__(self, policy: Mapping[str, Any]) -> None:
        self._env = celpy.Environment()
        spec = policy["spec"]
        self.variables: list[tuple[str, Any]] = [(v["name"], self._compile(v["expression"])) for v in spec["variables"]]
        self.validations: list[Validation] = []
        for raw in spec["validations"]:
            match = _FINDINGS_EXPRESSION.fullmatch(raw["expression"])
            if match is None:
                raise ValueError(f"validation {raw['expression']!r} does not test one findings variable")
            self.validations.append(
                Validation(
                    findings=match.group(1),
                    reason=raw["reason"],
                    message=raw["message"],
                    expression=self._compile(raw["expression"]),
                    message_expression=self._compile(raw["messageExpression"]),
                )
            )

    def _compile(self, text: str) -> Any:
        return self._env.program(self._env.compile(text), functions=KUBERNETES_FUNCTIONS)

    def evaluate(
        self,
        obj: Mapping[str, Any],
        *,
        old: Mapping[str, Any] | None = None,
        operation: str = "CREATE",
        sub_resource: str = "",
    ) -> Evaluation:
        """Admission of ``obj`` (``old`` for an UPDATE) as the apiserver runs a Deny policy."""
        request = {"operation": operation, "subResource": sub_resource, "kind": {"kind": "Pod"}}
        values: dict[str, Any] = {}
        base = {
            "object": json_to_cel(copy.deepcopy(dict(obj))),
            "oldObject": json_to_cel(copy.deepcopy(dict(old)) if old is not None else None),
            "request": json_to_cel(request),
        }

        def activation() -> dict[str, Any]:
            return {**base, "variables": celtypes.MapType({celtypes.StringType(k): v for k, v in values.items()})}

        for name, program in self.variables:
            try:
                values[name] = program.evaluate(activation())
            except CELEvalError as err:
                raise AssertionError(f"variable {name} failed to evaluate: {err}") from err
        denials: list[Denial] = []
        for validation in self.validations:
            passed = validation.expression.evaluate(activation())
            if not isinstance(passed, celtypes.BoolType):
                raise AssertionError(f"validation on {validation.findings} returned {passed!r}, not a bool")
            if passed:
                continue
            message = validation.message_expression.evaluate(activation())
            text = str(message) if isinstance(message, str) and message and "\n" not in message else validation.message
            denials.append(Denial(validation.findings, validation.reason, text))
        return Evaluation(values, tuple(denials))


@functools.cache
def compiled_policy() -> CompiledPolicy:
    [policy] = policy_documents()
    return CompiledPolicy(policy)


# -- the pod as the apiserver stores it ----------------------------------------------------------------


def stored_pod(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` after the apiserver's defaulting and serialisation of resources.

    Every container gets a ``resources`` object (Go never omits a struct) holding the defaulted
    requests/limits as canonical quantities (maps omitted when empty, claims only when non-empty);
    ``spec.resources`` is rewritten the same way when present.
    """
    pod = parse_pod(raw)
    containers, stanza = pod.requirement_quantities()
    doc = copy.deepcopy(dict(raw))
    spec = doc["spec"]
    slots = [("initContainers", i) for i in range(len(pod.spec.init_containers))]
    slots += [("containers", i) for i in range(len(pod.spec.containers))]
    for (key, index), defaulted in zip(slots, containers, strict=True):
        container = spec[key][index]
        container["resources"] = _serialised(
            container.get("resources"), defaulted.requirements.requests, defaulted.requirements.limits
        )
    if stanza is not None:
        spec["resources"] = _serialised(spec.get("resources"), stanza.requests, stanza.limits)
    return doc


def _serialised(
    raw: object, requests: Mapping[str, quantities.Quantity], limits: Mapping[str, quantities.Quantity]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = {name: str(q) for name, q in limits.items()}
    if requests:
        out["requests"] = {name: str(q) for name, q in requests.items()}
    claims = raw.get("claims") if isinstance(raw, Mapping) else None
    if claims:
        out["claims"] = copy.deepcopy(claims)
    return out
