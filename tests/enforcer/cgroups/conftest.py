from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The fixture tree builder sits next to the tests; make it importable whatever the import mode.
sys.path.insert(0, str(Path(__file__).parent))

from cgroup_tree import CONTAINER_A, POD, V1Group, V2Group, build_v1_tree, build_v2_tree  # noqa: E402

from enforcer.cgroups import v1, v2  # noqa: E402


@pytest.fixture
def v2_root(tmp_path: Path) -> Path:
    return build_v2_tree(
        tmp_path / "unified",
        {
            "kubepods": V2Group(cpus="0-7", mems="0-1"),
            "kubepods/burstable": V2Group(cpus="0-7", mems="0-1"),
            POD: V2Group(cpus="0-7", mems="0-1"),
            CONTAINER_A: V2Group(cpus="0-7", mems="0-1"),
        },
    )


@pytest.fixture
def v2_driver(v2_root: Path) -> v2.V2CgroupDriver:
    return v2.V2CgroupDriver(v2_root, page_size=4096)


@pytest.fixture
def v1_mount(tmp_path: Path) -> Path:
    return build_v1_tree(
        tmp_path / "v1",
        {
            "kubepods": V1Group(cpus="0-7", mems="0-1"),
            POD: V1Group(cpus="0-7", mems="0-1"),
            CONTAINER_A: V1Group(cpus="0-7", mems="0-1"),
        },
    )


@pytest.fixture
def v1_driver(v1_mount: Path) -> v1.V1CgroupDriver:
    return v1.V1CgroupDriver.under(v1_mount, page_size=4096)
