"""``cpuManagerPolicyOptions`` of the static policy: parsing, maturity gating and compatibility checks.

This is the kubelet's ``policy_options.go``: option names, the alpha/beta/GA gating through the
``CPUManagerPolicy{Alpha,Beta}Options`` feature gates, Go ``strconv.ParseBool`` values, the mutually
exclusive pairs (cpu-manager.md §4.7) and the align-by-socket machine checks (§4.3).  Every failure
is a :class:`~enforcer.errors.ConfigError` carrying the kubelet's message, because the kubelet
refuses to start on them.

Maturity follows Kubernetes v1.36 (cpu-manager.md §4), which is newer than the indexed upstream file:
full-pcpus-only, strict-cpu-reservation and prefer-align-cpus-by-uncorecache are GA,
distribute-cpus-across-numa is beta, align-by-socket and distribute-cpus-across-cores are alpha.

This module does not choose CPUs and holds no state.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Literal

from enforcer.errors import ConfigError
from enforcer.features import FeatureGates
from enforcer.topology.machine import CPUTopology

FULL_PCPUS_ONLY = "full-pcpus-only"
DISTRIBUTE_CPUS_ACROSS_NUMA = "distribute-cpus-across-numa"
ALIGN_BY_SOCKET = "align-by-socket"
DISTRIBUTE_CPUS_ACROSS_CORES = "distribute-cpus-across-cores"
STRICT_CPU_RESERVATION = "strict-cpu-reservation"
PREFER_ALIGN_CPUS_BY_UNCORECACHE = "prefer-align-cpus-by-uncorecache"

Maturity = Literal["alpha", "beta", "stable"]

OPTION_MATURITY: Mapping[str, Maturity] = {
    FULL_PCPUS_ONLY: "stable",
    STRICT_CPU_RESERVATION: "stable",
    PREFER_ALIGN_CPUS_BY_UNCORECACHE: "stable",
    DISTRIBUTE_CPUS_ACROSS_NUMA: "beta",
    ALIGN_BY_SOCKET: "alpha",
    DISTRIBUTE_CPUS_ACROSS_CORES: "alpha",
}

# Option name -> StaticPolicyOptions field.
_FIELD_OF_OPTION: Mapping[str, str] = {
    FULL_PCPUS_ONLY: "full_pcpus_only",
    DISTRIBUTE_CPUS_ACROSS_NUMA: "distribute_cpus_across_numa",
    ALIGN_BY_SOCKET: "align_by_socket",
    DISTRIBUTE_CPUS_ACROSS_CORES: "distribute_cpus_across_cores",
    STRICT_CPU_RESERVATION: "strict_cpu_reservation",
    PREFER_ALIGN_CPUS_BY_UNCORECACHE: "prefer_align_cpus_by_uncorecache",
}

# The kubelet checks these pairs in this order, so the first conflict found names the same pair.
MUTUALLY_EXCLUSIVE: tuple[tuple[str, str], ...] = (
    (FULL_PCPUS_ONLY, DISTRIBUTE_CPUS_ACROSS_CORES),
    (DISTRIBUTE_CPUS_ACROSS_NUMA, DISTRIBUTE_CPUS_ACROSS_CORES),
    (PREFER_ALIGN_CPUS_BY_UNCORECACHE, DISTRIBUTE_CPUS_ACROSS_CORES),
    (PREFER_ALIGN_CPUS_BY_UNCORECACHE, DISTRIBUTE_CPUS_ACROSS_NUMA),
)

SINGLE_NUMA_NODE_POLICY = "single-numa-node"

_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def go_quote(text: str) -> str:
    """Go's ``%q`` for the option names and values users type (printable text quotes the same way)."""
    return json.dumps(text, ensure_ascii=False)


def parse_go_bool(value: str) -> bool:
    """``strconv.ParseBool``; raises ``ValueError`` with Go's message on anything else."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise ValueError(f"strconv.ParseBool: parsing {go_quote(value)}: invalid syntax")


def check_option_available(name: str, gates: FeatureGates) -> None:
    """``CheckPolicyOptionAvailable``: known name, and its maturity gate enabled."""
    maturity = OPTION_MATURITY.get(name)
    if maturity is None:
        raise ConfigError(f"unknown CPU Manager Policy option: {go_quote(name)}")
    if maturity == "alpha" and not gates.cpu_manager_policy_alpha_options:
        raise ConfigError(f"CPU Manager Policy Alpha-level Options not enabled, but option {go_quote(name)} provided")
    if maturity == "beta" and not gates.cpu_manager_policy_beta_options:
        raise ConfigError(f"CPU Manager Policy Beta-level Options not enabled, but option {go_quote(name)} provided")


@dataclass(frozen=True, slots=True)
class StaticPolicyOptions:
    """The parsed options; every flag defaults to the kubelet's default (off)."""

    full_pcpus_only: bool = False
    distribute_cpus_across_numa: bool = False
    align_by_socket: bool = False
    distribute_cpus_across_cores: bool = False
    strict_cpu_reservation: bool = False
    prefer_align_cpus_by_uncorecache: bool = False

    @classmethod
    def from_map(cls, raw: Mapping[str, object] | None, gates: FeatureGates) -> StaticPolicyOptions:
        """``NewStaticPolicyOptions``: gate, parse and cross-check ``cpuManagerPolicyOptions``."""
        values: dict[str, bool] = {}
        for name, value in (raw or {}).items():
            name = str(name)
            check_option_available(name, gates)
            if isinstance(value, bool):  # YAML readers hand unquoted true/false over as booleans
                value = "true" if value else "false"
            if not isinstance(value, str):
                raise ConfigError(f"bad value for option {go_quote(name)}: expected a string, got {value!r}")
            try:
                values[_FIELD_OF_OPTION[name]] = parse_go_bool(value)
            except ValueError as err:
                raise ConfigError(f"bad value for option {go_quote(name)}: {err}") from None
        options = cls(**values)
        options.check_exclusive_pairs()
        return options

    def enabled(self, name: str) -> bool:
        return bool(getattr(self, _FIELD_OF_OPTION[name]))

    def check_exclusive_pairs(self) -> None:
        for first, second in MUTUALLY_EXCLUSIVE:
            if self.enabled(first) and self.enabled(second):
                raise ConfigError(f"static policy options {first} and {second} can not be used at the same time")

    def validate_for_machine(self, topology: CPUTopology, topology_manager_policy: str) -> None:
        """``ValidateStaticPolicyOptions``: align-by-socket needs a NUMA-or-coarser socket layout."""
        if not self.align_by_socket:
            return
        if topology_manager_policy == SINGLE_NUMA_NODE_POLICY:
            # "Topolgy" is the kubelet's spelling; the message is a contract.
            raise ConfigError(
                f"Topolgy manager {SINGLE_NUMA_NODE_POLICY} policy is incompatible with CPUManager "
                f"{ALIGN_BY_SOCKET} policy option"
            )
        if topology.num_sockets > len(topology.numa_masks):
            raise ConfigError(
                "Align by socket is not compatible with hardware where number of sockets are more than number of NUMA"
            )

    def to_map(self) -> dict[str, str]:
        """The enabled options as a ``cpuManagerPolicyOptions`` map (for reports and round trips)."""
        by_field = {f: n for n, f in _FIELD_OF_OPTION.items()}
        return {by_field[f.name]: "true" for f in fields(self) if getattr(self, f.name)}


def parse(
    raw: Mapping[str, object] | None,
    *,
    gates: FeatureGates,
    topology: CPUTopology,
    topology_manager_policy: str,
) -> StaticPolicyOptions:
    """``NewStaticPolicyOptions`` then ``ValidateStaticPolicyOptions``: everything startup checks."""
    options = StaticPolicyOptions.from_map(raw, gates)
    options.validate_for_machine(topology, topology_manager_policy)
    return options
