from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The helpers sit next to the tests; the enforcer service's helpers (a real enforcer over TLS) one directory over.
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "enforcer" / "service"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
