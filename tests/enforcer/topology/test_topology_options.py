"""Topology Manager options and startup checks: the kubelet's parse rules, order and messages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from enforcer.errors import ConfigError
from enforcer.topology import options

EIGHT = tuple(range(8))
NINE = tuple(range(9))
DISTANCES = {i: tuple(10 if i == j else 20 for j in range(9)) for i in range(9)}


@dataclass(frozen=True)
class OptionsCase:
    description: str
    raw: Mapping[str, str] | None
    expected: options.TopologyManagerOptions | None = None
    error: str | None = None


OPTION_CASES = [
    OptionsCase("unset options give the defaults", None, options.TopologyManagerOptions()),
    OptionsCase("an empty map gives the defaults", {}, options.TopologyManagerOptions()),
    OptionsCase(
        "prefer-closest accepts Go booleans",
        {"prefer-closest-numa-nodes": "T"},
        options.TopologyManagerOptions(prefer_closest_numa=True),
    ),
    OptionsCase(
        "prefer-closest false is off",
        {"prefer-closest-numa-nodes": "0"},
        options.TopologyManagerOptions(prefer_closest_numa=False),
    ),
    OptionsCase(
        "prefer-closest refuses yes",
        {"prefer-closest-numa-nodes": "yes"},
        error='bad value for option "prefer-closest-numa-nodes": strconv.ParseBool: parsing "yes": invalid syntax',
    ),
    OptionsCase(
        "max-allowable raises the limit",
        {"max-allowable-numa-nodes": "64"},
        options.TopologyManagerOptions(max_allowable_numa_nodes=64),
    ),
    OptionsCase(
        "max-allowable accepts a signed integer",
        {"max-allowable-numa-nodes": "+8"},
        options.TopologyManagerOptions(max_allowable_numa_nodes=8),
    ),
    OptionsCase(
        "max-allowable below eight fails",
        {"max-allowable-numa-nodes": "4"},
        error='the minimum value of "max-allowable-numa-nodes" should not be less than 8',
    ),
    OptionsCase(
        "max-allowable must be an integer",
        {"max-allowable-numa-nodes": "x"},
        error='unable to convert policy option to integer "max-allowable-numa-nodes": '
        'strconv.Atoi: parsing "x": invalid syntax',
    ),
    OptionsCase(
        "max-allowable refuses spaces Go's Atoi refuses",
        {"max-allowable-numa-nodes": " 16"},
        error='unable to convert policy option to integer "max-allowable-numa-nodes": '
        'strconv.Atoi: parsing " 16": invalid syntax',
    ),
    OptionsCase(
        "max-allowable beyond int64 is out of range",
        {"max-allowable-numa-nodes": "9223372036854775808"},
        error='unable to convert policy option to integer "max-allowable-numa-nodes": '
        'strconv.Atoi: parsing "9223372036854775808": value out of range',
    ),
    OptionsCase(
        "an unknown option fails",
        {"distribute-cpus": "true"},
        error='unknown Topology Manager Policy option: "distribute-cpus"',
    ),
]


@pytest.mark.parametrize("case", OPTION_CASES, ids=lambda c: c.description)
def test_policy_options_parse_like_the_kubelet(case: OptionsCase) -> None:
    if case.error is None:
        assert options.parse_policy_options(case.raw) == case.expected
    else:
        with pytest.raises(ConfigError) as caught:
            options.parse_policy_options(case.raw)
        assert caught.value.message == case.error


@given(st.text(max_size=6))
def test_prefer_closest_accepts_exactly_go_parse_bool_spellings(value: str) -> None:
    accepted = {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}
    raw = {options.PREFER_CLOSEST_NUMA_NODES: value}
    if value in accepted:
        assert options.parse_policy_options(raw).prefer_closest_numa is (
            value in {"1", "t", "T", "TRUE", "true", "True"}
        )
    else:
        with pytest.raises(ConfigError, match="strconv.ParseBool"):
            options.parse_policy_options(raw)


def test_unknown_policy_name_fails_kubelet_config_validation() -> None:
    with pytest.raises(ConfigError) as caught:
        options.validate_policy_name("packed")
    assert caught.value.message == (
        'invalid configuration: topologyManagerPolicy (--topology-manager-policy) "packed" must be one of: '
        '["none" "best-effort" "restricted" "single-numa-node"]'
    )


def test_unknown_scope_name_fails_kubelet_config_validation() -> None:
    with pytest.raises(ConfigError) as caught:
        options.validate_scope_name("node")
    assert caught.value.message == (
        'invalid configuration: topologyManagerScope (--topology-manager-scope) "node" must be one of: '
        '"container", or "pod"'
    )


def _startup(**overrides: object) -> options.TopologyManagerOptions:
    arguments: dict[str, object] = {
        "policy_name": options.POLICY_RESTRICTED,
        "scope_name": options.SCOPE_CONTAINER,
        "numa_ids": EIGHT,
        "raw_options": None,
        "distances": None,
    }
    arguments.update(overrides)
    return options.check_startup(**arguments)  # type: ignore[arg-type]


def test_startup_refuses_more_than_eight_numa_nodes_by_default() -> None:
    with pytest.raises(ConfigError, match="^unsupported on machines with more than 8 NUMA Nodes$"):
        _startup(numa_ids=NINE)


def test_startup_accepts_nine_numa_nodes_when_max_allowable_is_raised() -> None:
    opts = _startup(numa_ids=NINE, raw_options={"max-allowable-numa-nodes": "16"})
    assert opts.max_allowable_numa_nodes == 16


def test_startup_with_policy_none_skips_the_numa_limit_and_the_options() -> None:
    opts = _startup(policy_name=options.POLICY_NONE, numa_ids=NINE, raw_options={"max-allowable-numa-nodes": "2"})
    assert opts == options.TopologyManagerOptions()


def test_startup_needs_distances_for_prefer_closest() -> None:
    with pytest.raises(ConfigError) as caught:
        _startup(raw_options={"prefer-closest-numa-nodes": "true"})
    assert caught.value.message == "cannot discover NUMA topology: error getting NUMA distances from cadvisor"
    assert _startup(raw_options={"prefer-closest-numa-nodes": "true"}, distances=DISTANCES).prefer_closest_numa


def test_startup_checks_distances_before_the_numa_limit() -> None:
    with pytest.raises(ConfigError, match="error getting NUMA distances"):
        _startup(numa_ids=NINE, raw_options={"prefer-closest-numa-nodes": "true"})


def test_startup_options_need_the_policy_options_gate() -> None:
    with pytest.raises(ConfigError) as caught:
        _startup(
            raw_options={"prefer-closest-numa-nodes": "true", "max-allowable-numa-nodes": "8"},
            policy_options_gate=False,
        )
    assert caught.value.message == (
        "topology manager policy options map[max-allowable-numa-nodes:8 prefer-closest-numa-nodes:true] "
        'require feature gates "TopologyManagerPolicyOptions" enabled'
    )


def test_startup_validates_the_policy_name_before_anything_else() -> None:
    with pytest.raises(ConfigError, match="topologyManagerPolicy"):
        _startup(policy_name="bogus", scope_name="bogus", numa_ids=NINE)


def test_startup_validates_the_scope_name() -> None:
    with pytest.raises(ConfigError, match="topologyManagerScope"):
        _startup(scope_name="node")


def test_go_quote_escapes_like_strconv_quote() -> None:
    assert options.go_quote('a"b\\c\n') == '"a\\"b\\\\c\\n"'
    assert options.go_quote("\x01") == '"\\x01"'
