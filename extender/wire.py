"""The kube-scheduler extender wire format (``k8s.io/kube-scheduler/extender/v1``), parsed and built.

Upstream types (kubernetes/kubernetes ``staging/src/k8s.io/kube-scheduler/extender/v1/types.go``)
carry no JSON tags, so Go's ``encoding/json`` writes the Go field names as they are and reads them
case-insensitively:

* ``ExtenderArgs {Pod *v1.Pod, Nodes *v1.NodeList, NodeNames *[]string}``: with
  ``nodeCacheCapable: true`` the scheduler sends ``NodeNames`` and ``"Nodes": null``
  (``pkg/scheduler/extender.go`` ``HTTPExtender.Filter``/``Prioritize``); without it, ``Nodes``.
* ``ExtenderFilterResult {Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error}``:
  the scheduler reads ``NodeNames`` when node-cache capable (a name not in its input is an error)
  and ``Nodes`` otherwise; a non-empty ``Error`` fails the whole call.
* ``HostPriorityList [{Host, Score}]``, scores within ``MinExtenderPriority``..``MaxExtenderPriority``
  (0..10); the scheduler multiplies by the configured ``weight`` and by ``MaxNodeScore /
  MaxExtenderPriority`` (``prioritizeNodes`` in ``schedule_one.go``).

Keys are matched case-insensitively, as Go does.  Anything that is not that shape is a
:class:`MalformedArgs` (HTTP 400 with the message); the scheduler then treats the call as failed,
and ``ignorable: true`` makes it go on without this extender.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10


class MalformedArgs(Exception):
    """The request body is not an ``ExtenderArgs`` (answered 400 with ``message``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: Mapping[str, Any]
    node_names: tuple[str, ...]
    nodes: tuple[Mapping[str, Any], ...] | None  # the NodeList items when the scheduler sent full nodes

    @property
    def node_cache_capable(self) -> bool:
        return self.nodes is None


def _field(obj: Mapping[str, Any], name: str) -> Any:
    """Go's case-insensitive field match (an exact match wins)."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    for key, value in obj.items():
        if isinstance(key, str) and key.lower() == lowered:
            return value
    return None


def parse_args(body: object) -> ExtenderArgs:
    if not isinstance(body, Mapping):
        raise MalformedArgs(f"ExtenderArgs must be a JSON object, got {type(body).__name__}")
    pod = _field(body, "Pod")
    if not isinstance(pod, Mapping):
        raise MalformedArgs("ExtenderArgs.Pod: a v1.Pod object is required")
    names_raw = _field(body, "NodeNames")
    nodes_raw = _field(body, "Nodes")
    if names_raw is not None:
        if not isinstance(names_raw, Sequence) or isinstance(names_raw, str | bytes):
            raise MalformedArgs("ExtenderArgs.NodeNames: expected a list of node names")
        for i, name in enumerate(names_raw):
            if not isinstance(name, str) or not name:
                raise MalformedArgs(f"ExtenderArgs.NodeNames[{i}]: expected a node name, got {name!r}")
        return ExtenderArgs(pod, tuple(names_raw), None)
    if nodes_raw is None:
        raise MalformedArgs("ExtenderArgs: neither NodeNames (nodeCacheCapable) nor Nodes is set")
    if not isinstance(nodes_raw, Mapping):
        raise MalformedArgs("ExtenderArgs.Nodes: expected a v1.NodeList object")
    items = _field(nodes_raw, "items") or []
    if not isinstance(items, Sequence) or isinstance(items, str | bytes):
        raise MalformedArgs("ExtenderArgs.Nodes.items: expected a list of v1.Node objects")
    names = []
    for i, node in enumerate(items):
        metadata = node.get("metadata") if isinstance(node, Mapping) else None
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str) or not name:
            raise MalformedArgs(f"ExtenderArgs.Nodes.items[{i}].metadata.name: a node name is required")
        names.append(name)
    return ExtenderArgs(pod, tuple(names), tuple(items))


def filter_result(
    args: ExtenderArgs,
    passed: Sequence[str],
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str],
    error: str = "",
) -> dict[str, Any]:
    """An ``ExtenderFilterResult`` in the shape the request came in (names, or the full NodeList)."""
    result: dict[str, Any] = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": dict(failed),
        "FailedAndUnresolvableNodes": dict(unresolvable),
        "Error": error,
    }
    if args.nodes is None:
        result["NodeNames"] = list(passed)
    else:
        keep = set(passed)
        items = [n for n, name in zip(args.nodes, args.node_names, strict=True) if name in keep]
        result["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": items}
    return result


def host_priority_list(scores: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    return [
        {"Host": host, "Score": max(MIN_EXTENDER_PRIORITY, min(MAX_EXTENDER_PRIORITY, score))} for host, score in scores
    ]
