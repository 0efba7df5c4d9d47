"""Topology Manager configuration: policy options, policy/scope names, the startup checks.

Parses the kubelet's ``topologyManagerPolicyOptions`` map (kubelet
``policy_options.go``) and repeats the checks the kubelet makes before it runs a
single merge, in the kubelet's order and with the kubelet's messages (they reach
operators through :class:`~enforcer.errors.ConfigError`):

1. kubelet config validation: the policy name, then the scope name;
2. ``server.go``: options need the ``TopologyManagerPolicyOptions`` gate;
3. ``NewManager``: policy ``none`` stops here (options are not even parsed);
   otherwise the options are parsed, ``prefer-closest-numa-nodes`` needs NUMA
   distances, and more NUMA nodes than ``max-allowable-numa-nodes`` (default 8)
   fails startup (topology-manager.md P5).

Both options are GA (stable): they need no beta or alpha gate. Only the two
options the kubelet knows as stable are accepted; anything else is an unknown
option, as in the kubelet.

This module decides whether a configuration can start; it never merges hints
and never reads the machine.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from enforcer.errors import ConfigError

log = logging.getLogger(__name__)

PREFER_CLOSEST_NUMA_NODES = "prefer-closest-numa-nodes"
MAX_ALLOWABLE_NUMA_NODES = "max-allowable-numa-nodes"
DEFAULT_MAX_ALLOWABLE_NUMA_NODES = 8
STABLE_OPTIONS = frozenset({PREFER_CLOSEST_NUMA_NODES, MAX_ALLOWABLE_NUMA_NODES})

POLICY_NONE = "none"
POLICY_BEST_EFFORT = "best-effort"
POLICY_RESTRICTED = "restricted"
POLICY_SINGLE_NUMA_NODE = "single-numa-node"
POLICY_NAMES = (POLICY_NONE, POLICY_BEST_EFFORT, POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE)
"""The values of ``topologyManagerPolicy``, in the order the kubelet's message lists them."""

SCOPE_CONTAINER = "container"
SCOPE_POD = "pod"
SCOPE_NAMES = (SCOPE_CONTAINER, SCOPE_POD)

POLICY_OPTIONS_GATE = "TopologyManagerPolicyOptions"

_GO_BOOL = {
    "1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
    "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False,
}  # fmt: skip
_GO_INT = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class TopologyManagerOptions:
    """The parsed ``topologyManagerPolicyOptions`` (kubelet ``PolicyOptions``)."""

    prefer_closest_numa: bool = False
    max_allowable_numa_nodes: int = DEFAULT_MAX_ALLOWABLE_NUMA_NODES


def parse_policy_options(raw: Mapping[str, str] | None) -> TopologyManagerOptions:
    """``NewPolicyOptions``: raise :class:`ConfigError` with the kubelet's message on a bad option.

    The kubelet ranges over a Go map, so with several bad options the one it
    reports is random; we report the first in name order, to be deterministic.
    """
    prefer_closest = False
    max_allowable = DEFAULT_MAX_ALLOWABLE_NUMA_NODES
    for name, value in sorted((raw or {}).items()):
        if name not in STABLE_OPTIONS:
            raise ConfigError(f"unknown Topology Manager Policy option: {go_quote(name)}")
        if name == PREFER_CLOSEST_NUMA_NODES:
            parsed = _go_parse_bool(value)
            if parsed is None:
                raise ConfigError(
                    f"bad value for option {go_quote(name)}: "
                    f"strconv.ParseBool: parsing {go_quote(value)}: invalid syntax"
                )
            prefer_closest = parsed
        else:
            max_allowable = _parse_max_allowable(name, value)
    return TopologyManagerOptions(prefer_closest_numa=prefer_closest, max_allowable_numa_nodes=max_allowable)


def _parse_max_allowable(name: str, value: str) -> int:
    if not _GO_INT.fullmatch(value):
        raise ConfigError(
            f"unable to convert policy option to integer {go_quote(name)}: "
            f"strconv.Atoi: parsing {go_quote(value)}: invalid syntax"
        )
    number = int(value)
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise ConfigError(
            f"unable to convert policy option to integer {go_quote(name)}: "
            f"strconv.Atoi: parsing {go_quote(value)}: value out of range"
        )
    if number < DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
        raise ConfigError(
            f"the minimum value of {go_quote(name)} should not be less than {DEFAULT_MAX_ALLOWABLE_NUMA_NODES}"
        )
    if number > DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
        log.warning(
            "the value of max-allowable-numa-nodes is more than the default recommended value",
            extra={"max_allowable_numa_nodes": number, "default": DEFAULT_MAX_ALLOWABLE_NUMA_NODES},
        )
    return number


def validate_policy_name(name: str) -> None:
    """Kubelet config validation of ``topologyManagerPolicy``."""
    if name not in POLICY_NAMES:
        allowed = "[" + " ".join(go_quote(p) for p in POLICY_NAMES) + "]"
        raise ConfigError(
            f"invalid configuration: topologyManagerPolicy (--topology-manager-policy) {go_quote(name)} "
            f"must be one of: {allowed}"
        )


def validate_scope_name(name: str) -> None:
    """Kubelet config validation of ``topologyManagerScope``."""
    if name not in SCOPE_NAMES:
        raise ConfigError(
            f"invalid configuration: topologyManagerScope (--topology-manager-scope) {go_quote(name)} "
            f"must be one of: {go_quote(SCOPE_CONTAINER)}, or {go_quote(SCOPE_POD)}"
        )


def require_distances(numa_ids: Sequence[int], distances: Mapping[int, Sequence[int]] | None) -> None:
    """``NewNUMAInfo`` with prefer-closest: every NUMA node needs its distance row."""
    if distances is None or any(distances.get(n) is None for n in numa_ids):
        raise ConfigError("cannot discover NUMA topology: error getting NUMA distances from cadvisor")


def check_numa_node_count(numa_node_count: int, options: TopologyManagerOptions) -> None:
    """P5: the merge is combinatorial in the NUMA count, so the kubelet caps it."""
    if numa_node_count > options.max_allowable_numa_nodes:
        raise ConfigError(f"unsupported on machines with more than {options.max_allowable_numa_nodes} NUMA Nodes")


def check_startup(
    *,
    policy_name: str,
    scope_name: str,
    numa_ids: Sequence[int],
    raw_options: Mapping[str, str] | None,
    distances: Mapping[int, Sequence[int]] | None,
    policy_options_gate: bool = True,
) -> TopologyManagerOptions:
    """Every startup check of the Topology Manager, in the kubelet's order; the options to run with.

    ``raw_options`` is ``None`` when the field is unset: the kubelet's gate check
    fires for any non-nil map, even an empty one.
    """
    validate_policy_name(policy_name)
    validate_scope_name(scope_name)
    if raw_options is not None and not policy_options_gate:
        raise ConfigError(
            f"topology manager policy options {go_map(raw_options)} require feature gates "
            f"{go_quote(POLICY_OPTIONS_GATE)} enabled"
        )
    if policy_name == POLICY_NONE:
        return TopologyManagerOptions()
    options = parse_policy_options(raw_options)
    if options.prefer_closest_numa:
        require_distances(numa_ids, distances)
    check_numa_node_count(len(numa_ids), options)
    return options


def _go_parse_bool(value: str) -> bool | None:
    return _GO_BOOL.get(value)


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """Go's ``%q`` (``strconv.Quote``) for the strings that appear in the kubelet's messages."""
    out = ['"']
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def go_map(raw: Mapping[str, str]) -> str:
    """Go's ``%v`` of a ``map[string]string``: keys sorted, ``map[k:v k:v]``."""
    return "map[" + " ".join(f"{k}:{v}" for k, v in sorted(raw.items())) + "]"
