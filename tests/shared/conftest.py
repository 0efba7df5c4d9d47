"""Fixtures for the shared domain core: recorded Pod JSON (tests/fixtures/pods, made by kubectl)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pod_dicts import load_pod_json

from shared import pod as pod_model


@pytest.fixture
def pod_json() -> Callable[[str], dict[str, Any]]:
    """The raw object kubectl produced for ``tests/fixtures/pods/src/<name>.yaml``."""
    return load_pod_json


@pytest.fixture
def fixture_pod() -> Callable[[str], pod_model.Pod]:
    """The parsed :class:`shared.pod.Pod` of a recorded fixture."""
    return lambda name: pod_model.parse_pod(load_pod_json(name))
