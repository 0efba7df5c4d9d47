"""``/proc/<pid>/cgroup`` parsing and resolution, on fixture proc trees (the lines as the kernel writes them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from enforcer.cgroups import proc

V1 = """12:pids:/kubepods/podu1/c1
11:cpuset:/kubepods/podu1/c1
4:cpu,cpuacct:/kubepods/podu1/c1
3:memory:/kubepods/podu1/c1
1:name=systemd:/kubepods/podu1/c1
0::/
"""
V2 = "0::/kubepods.slice/kubepods-podu1.slice/cri-containerd-c1.scope\n"
V2_PRIVATE_NS = "0::/../../kubepods.slice/kubepods-podu1.slice/cri-containerd-c1.scope\n"


def _proc(tmp_path: Path, pid: int, text: str) -> Path:
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "cgroup").write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("text", "version", "expected"),
    [
        (V1, "v1", "/kubepods/podu1/c1"),
        (V2, "v2", "/kubepods.slice/kubepods-podu1.slice/cri-containerd-c1.scope"),
    ],
)
def test_the_kernels_path_is_taken_as_is(tmp_path: Path, text: str, version: str, expected: str) -> None:
    assert proc.process_cgroup(7, version, proc_root=_proc(tmp_path, 7, text)) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "version", "message"),
    [
        (V1.replace("3:memory:/kubepods/podu1/c1", "3:memory:/other"), "v1", "differ"),
        (V2, "v1", "is this a v2 node"),
        (V1.replace("0::/\n", ""), "v2", "is this a v1 node"),
        ("0::/\n", "v2", "root cgroup"),
        ("garbage\n", "v2", "unexpected"),
        (V2_PRIVATE_NS, "v2", "cgroup namespace"),
    ],
)
def test_unusable_answers_are_refused_saying_why(tmp_path: Path, text: str, version: str, message: str) -> None:
    with pytest.raises(proc.CgroupLookupError, match=message):
        proc.process_cgroup(7, version, proc_root=_proc(tmp_path, 7, text))  # type: ignore[arg-type]


def test_a_private_cgroup_namespace_uses_the_hooks_view(tmp_path: Path) -> None:
    root = _proc(tmp_path, 7, V2_PRIVATE_NS)
    assert proc.resolve(7, "v2", reported=V2, proc_root=root).endswith("cri-containerd-c1.scope")
    with pytest.raises(proc.CgroupLookupError, match="does not exist"):
        proc.resolve(8, "v2", reported=V2, proc_root=root)  # a process that is gone is gone, whatever was sent
