from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The shared helpers sit next to the tests; make them importable whatever the import mode.
sys.path.insert(0, str(Path(__file__).parent))

from service_fixtures import make_settings  # noqa: E402

from enforcer.cgroups import recording  # noqa: E402
from enforcer.service import runtime  # noqa: E402
from enforcer.service.metrics import EnforcerMetrics  # noqa: E402
from enforcer.service.node_service import NodeService  # noqa: E402
from servicekit import certs  # noqa: E402


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> certs.Bundle:
    return certs.issue_bundle(tmp_path_factory.mktemp("certs"), namespace="numaguard")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[NodeService]:
    """The seed node started as the enforcer starts it; cgroups in the recorder (every path exists); worker stopped."""
    running = runtime.start(
        make_settings(tmp_path / "state"), EnforcerMetrics(), driver=recording.RecordingCgroupDriver(auto_create=True)
    )
    running.service.reconciler.stop()
    yield running.service
    running.stop()
