"""The suite runs every property test under the fixed, deterministic Hypothesis profile (root conftest.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings


@pytest.mark.skipif(
    os.environ.get("CI", "").lower() != "true" and os.environ.get("HYPOTHESIS_PROFILE", "ci") != "ci",
    reason="another Hypothesis profile was asked for",
)
def test_property_tests_are_deterministic_and_untimed() -> None:
    profile = settings.default
    assert profile.derandomize and profile.database is None
    assert profile.deadline is None  # no wall-clock limit on any example
    assert profile.max_examples == 100
