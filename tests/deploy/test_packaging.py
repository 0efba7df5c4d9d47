"""pyproject.toml metadata: a fresh ``pip install`` prints no setuptools deprecation.

setuptools >= 77 deprecates ``project.license`` as a TOML table (``{text = ...}``) and warns on every
build; PEP 639 wants an SPDX expression string, which only setuptools >= 77 understands. Checked once
by hand with ``python -m venv /tmp/v && /tmp/v/bin/pip install -v --no-deps -e .`` (no
``SetuptoolsDeprecationWarning`` in the output; the table form printed three).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_license_is_an_spdx_expression() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"


def test_the_build_backend_understands_spdx_licenses() -> None:
    requires = PYPROJECT["build-system"]["requires"]
    (setuptools,) = [r for r in requires if r.startswith("setuptools")]
    match = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", setuptools)
    assert match and int(match.group(1)) >= 77, setuptools


def test_license_classifiers_are_not_mixed_with_the_spdx_field() -> None:
    """PEP 639: setuptools refuses ``License ::`` classifiers next to an SPDX ``license``."""
    assert not [c for c in PYPROJECT["project"].get("classifiers", []) if c.startswith("License ::")]
