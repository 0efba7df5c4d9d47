from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from enforcer.cgroups import driver, errors, recording
from shared.cpuset import CPUSet

Q = driver.CPUQuota


@pytest.mark.parametrize(
    ("quota", "period"),
    [(1_000, 999), (1_000, 1_000_001), (999, 100_000), (0, 100_000)],
    ids=["period below 1ms", "period above 1s", "quota below 1ms", "zero quota"],
)
def test_cpu_quota_outside_the_kernel_bounds_is_refused_before_any_write(quota: int, period: int) -> None:
    with pytest.raises(errors.InvalidCgroupValue):
        Q(quota, period)


def test_cpu_quota_prints_like_cpu_max() -> None:
    assert str(Q(None)) == "max 100000"
    assert str(Q(150_000, 100_000)) == "150000 100000"


@pytest.mark.parametrize(
    ("a", "b", "a_exceeds_b"),
    [
        (Q(None), Q(100_000), True),
        (Q(100_000), Q(None), False),
        (Q(None), Q(None), False),
        (Q(50_000, 50_000), Q(100_000, 100_000), False),
        (Q(100_001, 100_000), Q(50_000, 50_000), True),
    ],
    ids=[
        "unlimited beats any quota",
        "no quota beats unlimited",
        "unlimited ties",
        "same ratio, other period",
        "slightly more than one cpu",
    ],
)
def test_cpu_quota_compares_shares_not_raw_numbers(a: driver.CPUQuota, b: driver.CPUQuota, a_exceeds_b: bool) -> None:
    assert a.exceeds(b) is a_exceeds_b


@given(
    st.integers(1_000, 10**8), st.integers(1_000, 1_000_000), st.integers(1_000, 10**8), st.integers(1_000, 1_000_000)
)
def test_cpu_quota_exceeds_is_a_strict_order_on_ratios(qa: int, pa: int, qb: int, pb: int) -> None:
    a, b = Q(qa, pa), Q(qb, pb)

    assert not (a.exceeds(b) and b.exceeds(a))
    assert a.exceeds(b) == (qa * pb > qb * pa)


def test_mems_are_normalized_to_sorted_unique_node_ids() -> None:
    assert driver.normalize_mems([3, 1, 1, 0]) == (0, 1, 3)
    assert driver.format_mems((0, 1, 3)) == "0-1,3"


@pytest.mark.parametrize("bad", [(-1,), (True,)])
def test_mems_refuse_values_that_are_not_node_ids(bad: tuple[int, ...]) -> None:
    with pytest.raises(errors.InvalidCgroupValue):
        driver.normalize_mems(bad)


@pytest.mark.parametrize(
    ("desired", "actual", "matches"),
    [
        (None, None, True),
        (None, 4096, False),
        (4096, None, False),
        (1_000_000, 999_424, True),
        (1_000_000, 1_000_000, False),
        (8192, 8192, True),
    ],
    ids=[
        "both unlimited",
        "limit where none wanted",
        "none where one wanted",
        "kernel rounded down",
        "not rounded is not what the kernel keeps",
        "page multiple",
    ],
)
def test_memory_limits_match_at_page_granularity(desired: int | None, actual: int | None, matches: bool) -> None:
    assert driver.memory_limit_matches(desired, actual, 4096) is matches


def test_write_field_refuses_a_value_of_the_wrong_kind() -> None:
    rec = recording.RecordingCgroupDriver(auto_create=True)

    with pytest.raises(errors.InvalidCgroupValue):
        driver.write_field(rec, "g", "cpus", (0, 1))
    with pytest.raises(errors.InvalidCgroupValue):
        driver.write_field(rec, "g", "memory_limit", True)
    assert rec.writes == []


def test_read_field_and_write_field_dispatch_to_the_matching_file() -> None:
    rec = recording.RecordingCgroupDriver(auto_create=True)

    driver.write_field(rec, "g", "cpus", CPUSet([3]))
    driver.write_field(rec, "g", "mems", (1,))
    driver.write_field(rec, "g", "cpu_quota", Q(5_000))
    driver.write_field(rec, "g", "memory_limit", 8192)

    fields: tuple[driver.CgroupField, ...] = ("cpus", "mems", "cpu_quota", "memory_limit")
    assert [driver.read_field(rec, "g", f) for f in fields] == [CPUSet([3]), (1,), Q(5_000), 8192]
