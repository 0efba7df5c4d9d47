"""Fixtures of the reliability suites: one PKI per session, an enforcer node per test, where figures go.

The long versions are ``@pytest.mark.slow`` (deselected by default)::

    .venv/bin/pytest -m slow tests/reliability

They write their figures to ``tests/reliability/results/latest.json`` (the
file RELIABILITY.md cites); the default, short versions write to the test's
``tmp_path`` so an ordinary run never touches the committed file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The helpers sit next to the tests; make them importable whatever the import mode.
sys.path.insert(0, str(Path(__file__).parent))

from reliability_kit import RESULTS, EnforcerNode, Pki, issue_pki  # noqa: E402


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return issue_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def node(tmp_path: Path, pki: Pki) -> EnforcerNode:
    return EnforcerNode(tmp_path / "node", pki)


@pytest.fixture
def results_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where a test writes its figures: the committed results file under the slow marker, else tmp_path."""
    if request.node.get_closest_marker("slow") is not None:
        return RESULTS / "latest.json"
    return tmp_path / "results.json"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
