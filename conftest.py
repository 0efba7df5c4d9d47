"""Suite-wide test settings: the Hypothesis profiles every property test runs under.

* ``ci`` (the default, and what ``CI=true`` selects): deterministic. Each test draws the same examples on
  every run and every machine (``derandomize``, no example database), a fixed number of examples unless a
  test says otherwise, and no per-example time limit: a wall-clock deadline is a timed unit test, which
  fails on a loaded machine without anything being wrong.
* ``explore`` (``HYPOTHESIS_PROFILE=explore``): random examples, five times as many, the example database
  on, for hunting new counter-examples by hand; still no deadline. A failure it finds is replayed with
  the seed Hypothesis prints (``--hypothesis-seed``).

This conftest (at the repository root, so that ``tests/`` never lands on ``sys.path`` ahead of the
packages) is loaded before any test module, so the ``@settings`` of each test inherit the profile
for everything they do not set themselves.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=100,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore",
    deadline=None,
    max_examples=500,
    suppress_health_check=[HealthCheck.too_slow],
)


def _profile() -> str:
    """``ci`` under ``CI=true`` whatever else is set; otherwise ``HYPOTHESIS_PROFILE``, defaulting to ``ci``."""
    if os.environ.get("CI", "").lower() == "true":
        return "ci"
    return os.environ.get("HYPOTHESIS_PROFILE") or "ci"


settings.load_profile(_profile())
