from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from enforcer.cgroups import errors, naming
from shared.resources import QOSClass

UID = "1234-abcd-5678-efgh"
CID = "0123456789abcdef"


@dataclass(frozen=True)
class PodPathCase:
    description: str
    qos: QOSClass
    driver: naming.CgroupDriverName
    expected: str
    cgroup_root: naming.CgroupName = ()


POD_PATH_CASES = [
    PodPathCase("cgroupfs guaranteed sits under kubepods", "Guaranteed", "cgroupfs", f"/kubepods/pod{UID}"),
    PodPathCase("cgroupfs burstable", "Burstable", "cgroupfs", f"/kubepods/burstable/pod{UID}"),
    PodPathCase("cgroupfs besteffort", "BestEffort", "cgroupfs", f"/kubepods/besteffort/pod{UID}"),
    PodPathCase("systemd guaranteed", "Guaranteed", "systemd", "/kubepods.slice/kubepods-pod1234_abcd_5678_efgh.slice"),
    PodPathCase(
        "systemd burstable (the kubelet's own ToSystemd example)",
        "Burstable",
        "systemd",
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice",
    ),
    PodPathCase(
        "systemd besteffort",
        "BestEffort",
        "systemd",
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_abcd_5678_efgh.slice",
    ),
    PodPathCase(
        "cgroupfs with a custom cgroup root",
        "Burstable",
        "cgroupfs",
        f"/custom/root/kubepods/burstable/pod{UID}",
        cgroup_root=("custom", "root"),
    ),
    PodPathCase(
        "systemd with a custom cgroup root",
        "Guaranteed",
        "systemd",
        "/custom.slice/custom-kubepods.slice/custom-kubepods-pod1234_abcd_5678_efgh.slice",
        cgroup_root=("custom",),
    ),
]


@pytest.mark.parametrize("case", POD_PATH_CASES, ids=lambda c: c.description)
def test_pod_cgroup_path_matches_the_kubelet(case: PodPathCase) -> None:
    path = naming.pod_cgroup_path(case.qos, UID, driver=case.driver, cgroup_root=case.cgroup_root)

    assert path == case.expected


@dataclass(frozen=True)
class ContainerCase:
    description: str
    driver: naming.CgroupDriverName
    runtime: naming.RuntimeName
    expected_leaf: str


CONTAINER_CASES = [
    ContainerCase("containerd with cgroupfs uses the bare id", "cgroupfs", "containerd", CID),
    ContainerCase("cri-o with cgroupfs prefixes crio-", "cgroupfs", "cri-o", f"crio-{CID}"),
    ContainerCase(
        "containerd with systemd uses a cri-containerd scope", "systemd", "containerd", f"cri-containerd-{CID}.scope"
    ),
    ContainerCase("cri-o with systemd uses a crio scope", "systemd", "cri-o", f"crio-{CID}.scope"),
]


@pytest.mark.parametrize("case", CONTAINER_CASES, ids=lambda c: c.description)
def test_container_cgroup_leaf_depends_on_driver_and_runtime(case: ContainerCase) -> None:
    assert naming.container_cgroup_leaf(CID, driver=case.driver, runtime=case.runtime) == case.expected_leaf


@pytest.mark.parametrize("case", CONTAINER_CASES, ids=lambda c: c.description)
def test_container_id_with_its_runtime_scheme_needs_no_runtime_argument(case: ContainerCase) -> None:
    status_id = f"{case.runtime}://{CID}"

    assert naming.container_cgroup_leaf(status_id, driver=case.driver) == case.expected_leaf


def test_container_cgroup_path_joins_the_pod_path_and_the_leaf() -> None:
    pod = naming.pod_cgroup_path("Burstable", UID, driver="systemd")

    path = naming.container_cgroup_path(pod, f"containerd://{CID}", driver="systemd")

    assert path == (
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice/"
        f"cri-containerd-{CID}.scope"
    )


@pytest.mark.parametrize(
    ("container_id", "runtime"),
    [
        ("docker://abc", None),
        (CID, None),
        (f"containerd://{CID}", "cri-o"),
        ("containerd://", None),
        ("containerd://a/b", None),
        ("containerd://..", None),
    ],
    ids=[
        "unknown runtime",
        "bare id without runtime",
        "scheme disagrees with runtime",
        "empty id",
        "id with a slash",
        "dot-dot id",
    ],
)
def test_container_ids_that_cannot_name_a_cgroup_are_rejected(
    container_id: str, runtime: naming.RuntimeName | None
) -> None:
    with pytest.raises(errors.CgroupNameError):
        naming.container_cgroup_leaf(container_id, driver="cgroupfs", runtime=runtime)


@pytest.mark.parametrize("uid", ["", "a/b", "under_score", "..", "."])
def test_pod_uids_the_kubelet_would_panic_on_are_rejected(uid: str) -> None:
    with pytest.raises(errors.CgroupNameError):
        naming.pod_cgroup_path("Burstable", uid, driver="systemd")


@pytest.mark.parametrize(
    ("flag", "driver", "expected"),
    [
        ("/", "cgroupfs", ()),
        ("", "cgroupfs", ()),
        ("/custom/root/", "cgroupfs", ("custom", "root")),
        ("/", "systemd", ()),
        ("-.slice", "systemd", ()),
        ("custom.slice", "systemd", ("custom",)),
        ("/my.slice/my-root.slice", "systemd", ("my", "root")),
        ("my_app.slice", "systemd", ("my-app",)),
    ],
)
def test_cgroup_root_flag_parses_like_the_kubelet(
    flag: str, driver: naming.CgroupDriverName, expected: naming.CgroupName
) -> None:
    assert naming.parse_cgroup_root(flag, driver) == expected


def test_a_systemd_cgroup_root_must_be_a_slice() -> None:
    with pytest.raises(errors.CgroupNameError):
        naming.parse_cgroup_root("/custom", "systemd")


def test_the_root_name_is_the_root_path_for_both_drivers() -> None:
    assert naming.to_systemd(()) == "/"
    assert naming.to_cgroupfs(()) == "/"


_COMPONENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)


@given(st.lists(_COMPONENT, min_size=1, max_size=5).map(tuple))
def test_systemd_paths_expand_every_ancestor_and_parse_back_to_the_name(name: naming.CgroupName) -> None:
    path = naming.to_systemd(name)
    elements = path.split("/")[1:]

    assert len(elements) == len(name)
    assert all(e.endswith(".slice") for e in elements)
    for parent, child in zip(elements, elements[1:], strict=False):
        assert child.startswith(parent.removesuffix(".slice") + "-")
    assert naming.parse_cgroup_root(path, "systemd") == name
