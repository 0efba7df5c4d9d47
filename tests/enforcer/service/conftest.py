from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The shared helpers sit next to the tests; make them importable whatever the import mode.
sys.path.insert(0, str(Path(__file__).parent))

from servicekit import certs  # noqa: E402


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> certs.Bundle:
    return certs.issue_bundle(tmp_path_factory.mktemp("certs"), namespace="numaguard")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
