"""FamilyMemo: computed once per key, least recently used out first, kept only when the caller says so."""

from __future__ import annotations

from enforcer.topology.family_memo import FamilyMemo


def test_a_kept_family_is_computed_once_and_the_least_recently_used_goes_first() -> None:
    memo: FamilyMemo[int, str] = FamilyMemo(2)
    calls: list[int] = []

    def compute(key: int) -> str:
        calls.append(key)
        return f"family {key}"

    for key in (1, 2, 1, 3, 1, 2):  # 3 pushes out 2 (1 was used after it), so 2 is computed again
        assert memo.get(key, lambda key=key: compute(key), lambda _: True) == f"family {key}"
    assert calls == [1, 2, 3, 2]


def test_a_family_the_caller_does_not_keep_is_computed_every_time() -> None:
    memo: FamilyMemo[str, list[int]] = FamilyMemo(4)
    calls = 0

    def compute() -> list[int]:
        nonlocal calls
        calls += 1
        return []

    for _ in range(3):
        assert memo.get("empty", compute, bool) == []
    assert calls == 3
