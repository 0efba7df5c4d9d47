"""Static policy options (cpu-manager.md §4): parsing, maturity gating, exclusive pairs, machine checks."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from enforcer.cpumanager.options import (
    MUTUALLY_EXCLUSIVE,
    OPTION_MATURITY,
    StaticPolicyOptions,
    parse_go_bool,
)
from enforcer.errors import ConfigError
from enforcer.features import FeatureGates

from .cpu_policy_builders import dual_socket_ht_32, kubelet_topology

ALPHA_ON = FeatureGates(cpu_manager_policy_alpha_options=True)


@dataclass(frozen=True)
class GateCase:
    description: str
    option: str
    gates: FeatureGates
    error: str | None


GATE_CASES = [
    GateCase(
        "§4 full-pcpus-only is GA: no gate needed",
        "full-pcpus-only",
        FeatureGates(cpu_manager_policy_beta_options=False),
        None,
    ),
    GateCase(
        "§4 strict-cpu-reservation is GA",
        "strict-cpu-reservation",
        FeatureGates(cpu_manager_policy_beta_options=False),
        None,
    ),
    GateCase(
        "§4 prefer-align-cpus-by-uncorecache is GA",
        "prefer-align-cpus-by-uncorecache",
        FeatureGates(cpu_manager_policy_beta_options=False),
        None,
    ),
    GateCase(
        "§4 distribute-cpus-across-numa is beta, on by default", "distribute-cpus-across-numa", FeatureGates(), None
    ),
    GateCase(
        "§4 distribute-cpus-across-numa needs the beta gate",
        "distribute-cpus-across-numa",
        FeatureGates(cpu_manager_policy_beta_options=False),
        'CPU Manager Policy Beta-level Options not enabled, but option "distribute-cpus-across-numa" provided',
    ),
    GateCase(
        "§4 align-by-socket is alpha, off by default",
        "align-by-socket",
        FeatureGates(),
        'CPU Manager Policy Alpha-level Options not enabled, but option "align-by-socket" provided',
    ),
    GateCase(
        "§4 distribute-cpus-across-cores is alpha, off by default",
        "distribute-cpus-across-cores",
        FeatureGates(),
        'CPU Manager Policy Alpha-level Options not enabled, but option "distribute-cpus-across-cores" provided',
    ),
    GateCase("§4 alpha options pass with the alpha gate", "align-by-socket", ALPHA_ON, None),
    GateCase(
        "§4 unknown options fail startup", "full-pcpus", ALPHA_ON, 'unknown CPU Manager Policy option: "full-pcpus"'
    ),
]


@pytest.mark.parametrize("case", GATE_CASES, ids=lambda c: c.description)
def test_option_maturity_is_gated_by_the_kubelet_feature_gates(case: GateCase) -> None:
    if case.error is None:
        assert StaticPolicyOptions.from_map({case.option: "true"}, case.gates).enabled(case.option)
    else:
        with pytest.raises(ConfigError) as err:
            StaticPolicyOptions.from_map({case.option: "true"}, case.gates)
        assert err.value.message == case.error


def test_maturity_table_matches_kubernetes_1_36() -> None:
    """§4: GA full-pcpus-only/strict/uncore, beta distribute-across-numa, alpha align-by-socket/cores."""
    assert OPTION_MATURITY == {
        "full-pcpus-only": "stable",
        "strict-cpu-reservation": "stable",
        "prefer-align-cpus-by-uncorecache": "stable",
        "distribute-cpus-across-numa": "beta",
        "align-by-socket": "alpha",
        "distribute-cpus-across-cores": "alpha",
    }


@pytest.mark.parametrize(("first", "second"), MUTUALLY_EXCLUSIVE, ids=lambda n: str(n))
def test_mutually_exclusive_options_fail_startup_naming_both(first: str, second: str) -> None:
    """§4.7."""
    with pytest.raises(ConfigError) as err:
        StaticPolicyOptions.from_map({first: "true", second: "true"}, ALPHA_ON)
    assert err.value.message == f"static policy options {first} and {second} can not be used at the same time"


def test_exclusive_pairs_are_the_four_of_the_spec() -> None:
    assert set(MUTUALLY_EXCLUSIVE) == {
        ("full-pcpus-only", "distribute-cpus-across-cores"),
        ("distribute-cpus-across-numa", "distribute-cpus-across-cores"),
        ("prefer-align-cpus-by-uncorecache", "distribute-cpus-across-cores"),
        ("prefer-align-cpus-by-uncorecache", "distribute-cpus-across-numa"),
    }


def test_a_disabled_option_does_not_conflict() -> None:
    opts = StaticPolicyOptions.from_map({"full-pcpus-only": "true", "distribute-cpus-across-cores": "false"}, ALPHA_ON)
    assert opts.full_pcpus_only and not opts.distribute_cpus_across_cores


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_go_true_spellings_enable_an_option(text: str) -> None:
    assert StaticPolicyOptions.from_map({"full-pcpus-only": text}, FeatureGates()).full_pcpus_only


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_go_false_spellings_disable_an_option(text: str) -> None:
    assert not StaticPolicyOptions.from_map({"full-pcpus-only": text}, FeatureGates()).full_pcpus_only


@given(
    st.text(max_size=8).filter(
        lambda t: t not in {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}
    )
)
def test_any_other_value_is_rejected_with_go_parse_bool_wording(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        StaticPolicyOptions.from_map({"strict-cpu-reservation": text}, FeatureGates())
    assert err.value.message.startswith('bad value for option "strict-cpu-reservation": strconv.ParseBool: parsing ')
    assert err.value.message.endswith(": invalid syntax")
    with pytest.raises(ValueError):
        parse_go_bool(text)


def test_yaml_booleans_are_accepted_as_their_strings() -> None:
    assert StaticPolicyOptions.from_map({"full-pcpus-only": True}, FeatureGates()).full_pcpus_only


def test_non_string_values_are_rejected() -> None:
    with pytest.raises(ConfigError, match="expected a string"):
        StaticPolicyOptions.from_map({"full-pcpus-only": 1}, FeatureGates())


def test_options_round_trip_through_their_map() -> None:
    opts = StaticPolicyOptions(full_pcpus_only=True, strict_cpu_reservation=True)
    assert StaticPolicyOptions.from_map(opts.to_map(), FeatureGates()) == opts


def test_align_by_socket_rejects_the_single_numa_node_topology_manager_policy() -> None:
    """§4.3: startup fails with the kubelet's (misspelt) message."""
    opts = StaticPolicyOptions(align_by_socket=True)
    with pytest.raises(ConfigError) as err:
        opts.validate_for_machine(dual_socket_ht_32(), "single-numa-node")
    assert err.value.message == (
        "Topolgy manager single-numa-node policy is incompatible with CPUManager align-by-socket policy option"
    )


def test_align_by_socket_rejects_machines_with_more_sockets_than_numa_nodes() -> None:
    """§4.3: several sockets per NUMA node cannot be aligned by socket."""
    opts = StaticPolicyOptions(align_by_socket=True)
    with pytest.raises(ConfigError) as err:
        opts.validate_for_machine(kubelet_topology("fakeTopoMultiSocketDualSocketPerNumaHT"), "restricted")
    assert err.value.message == (
        "Align by socket is not compatible with hardware where number of sockets are more than number of NUMA"
    )


def test_align_by_socket_accepts_numa_per_socket_machines_with_other_policies() -> None:
    StaticPolicyOptions(align_by_socket=True).validate_for_machine(
        kubelet_topology("topoDualSocketMultiNumaPerSocketHT"), "restricted"
    )


def test_machine_checks_ignore_align_by_socket_when_off() -> None:
    StaticPolicyOptions().validate_for_machine(
        kubelet_topology("fakeTopoMultiSocketDualSocketPerNumaHT"), "single-numa-node"
    )


def test_parse_runs_the_machine_checks_after_the_map_checks() -> None:
    from enforcer.cpumanager.options import parse

    with pytest.raises(ConfigError, match="^Topolgy manager single-numa-node policy"):
        parse(
            {"align-by-socket": "true"},
            gates=ALPHA_ON,
            topology=dual_socket_ht_32(),
            topology_manager_policy="single-numa-node",
        )
    assert parse(
        {"full-pcpus-only": "true"},
        gates=FeatureGates(),
        topology=dual_socket_ht_32(),
        topology_manager_policy="single-numa-node",
    ) == StaticPolicyOptions(full_pcpus_only=True)
