"""``numaguard install-hook``: the generated hooks.d file and containerd base spec, and that they pin for real."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from hook_kit import HookNode, guaranteed
from runc_kit import containerd_annotations, crio_annotations, unique

from numaguard_cli import install_hook, main

OCI_STAGES = {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}


def _install(tmp_path: Path, *extra: str, socket: str = "/run/numaguard/hook.sock") -> int:
    return main.main(
        [
            "install-hook",
            *extra,
            "--python",
            sys.executable,
            "--hook-dir",
            str(tmp_path / "opt"),
            "--hooks-d",
            str(tmp_path / "hooks.d"),
            "--containerd-dir",
            str(tmp_path / "containerd"),
            "--socket",
            socket,
        ]
    )


def _check_hooks_d_schema(document: dict[str, Any]) -> None:
    """The OCI hooks.d 1.0.0 schema (containers/common pkg/hooks/1.0.0): required fields and their types."""
    assert document["version"] == "1.0.0"
    hook = document["hook"]
    assert Path(hook["path"]).is_absolute()
    assert all(isinstance(a, str) for a in hook["args"]) and all("=" in e for e in hook["env"])
    assert isinstance(hook["timeout"], int) and hook["timeout"] > 0
    assert set(document["stages"]) <= OCI_STAGES and document["stages"]
    for key, value in document["when"]["annotations"].items():
        re.compile(key), re.compile(value)


def _matches(document: dict[str, Any], annotations: dict[str, str]) -> bool:
    """hooks.d ``when.annotations``: some annotation whose key and value match each pair."""
    return all(
        any(re.search(k, key) and re.search(v, value) for key, value in annotations.items())
        for k, v in document["when"]["annotations"].items()
    )


def test_print_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _install(tmp_path, "--runtime", "crio", "--print") == 0
    printed = capsys.readouterr().out
    document = json.loads(printed.split("\n", 1)[1])
    _check_hooks_d_schema(document)
    assert not (tmp_path / "hooks.d").exists() and not (tmp_path / "opt").exists()
    assert _install(tmp_path, "--runtime", "containerd", "--print") == 0
    assert "base_runtime_spec" in capsys.readouterr().out


def test_hooks_d_matches_cri_o_containers_and_not_plain_podman_ones(tmp_path: Path) -> None:
    assert _install(tmp_path, "--runtime", "crio") == 0
    document = json.loads((tmp_path / "hooks.d" / "numaguard.json").read_text())
    _check_hooks_d_schema(document)
    assert _matches(document, crio_annotations("u", "main"))
    assert _matches(document, crio_annotations("u", "", kind="sandbox"))
    assert not _matches(document, {"io.podman.annotations.autoremove": "TRUE"})
    assert (tmp_path / "opt" / "oci_hook.py").read_bytes() == install_hook.HOOK_SOURCE.read_bytes()
    assert _install(tmp_path, "--runtime", "crio", "--uninstall") == 0
    assert not (tmp_path / "hooks.d" / "numaguard.json").exists() and not (tmp_path / "opt" / "oci_hook.py").exists()


def test_containerd_base_spec_keeps_the_spec_and_replaces_its_own_hook(tmp_path: Path) -> None:
    base = {"ociVersion": "1.1.0", "process": {"cwd": "/"}, "hooks": {"createRuntime": [{"path": "/bin/other"}]}}
    (tmp_path / "base.json").write_text(json.dumps(base))
    assert _install(tmp_path, "--runtime", "containerd", "--base-spec", str(tmp_path / "base.json")) == 0
    written = tmp_path / "containerd" / install_hook.BASE_SPEC_FILE
    spec = json.loads(written.read_text())
    assert spec["process"] == base["process"]
    assert [h["path"] for h in spec["hooks"]["createRuntime"]] == [sys.executable, "/bin/other"]
    assert _install(tmp_path, "--runtime", "containerd", "--deadline", "1") == 0  # reinstall: same spec, new hook
    again = json.loads(written.read_text())["hooks"]["createRuntime"]
    assert len(again) == 2 and again[0]["timeout"] == 2
    assert _install(tmp_path, "--runtime", "containerd", "--uninstall") == 0
    assert json.loads(written.read_text())["hooks"]["createRuntime"] == [{"path": "/bin/other"}]


@pytest.mark.parametrize(
    ("script", "message"),
    [(None, "ship no Python"), ("#!/bin/sh\necho 3.6\n", "needs 3.8+"), ("#!/bin/sh\nexit 1\n", "does not run")],
)
def test_install_refuses_a_host_without_a_usable_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], script: str | None, message: str
) -> None:
    python = tmp_path / "python3"
    if script is not None:
        python.write_text(script)
        python.chmod(0o755)
    code = main.main(["install-hook", "--runtime", "crio", "--python", str(python), "--hooks-d", str(tmp_path / "d")])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


@pytest.mark.kernel
@pytest.mark.parametrize("runtime", ["crio", "containerd"])
def test_generated_hook_pins_a_runc_container(hook_node: HookNode, tmp_path: Path, runtime: str) -> None:
    """The hook exactly as install-hook wrote it, run by runc: the container starts on its exclusive CPU."""
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"ociVersion": "1.0.2"}))
    extra = ["--base-spec", str(base)] if runtime == "containerd" else []
    assert _install(tmp_path, "--runtime", runtime, *extra, socket=str(hook_node.socket)) == 0
    if runtime == "crio":
        document = json.loads((tmp_path / "hooks.d" / "numaguard.json").read_text())
        hooks = {stage: [document["hook"]] for stage in document["stages"]}
    else:
        hooks = json.loads((tmp_path / "containerd" / install_hook.BASE_SPEC_FILE).read_text())["hooks"]
    uid = str(uuid.uuid4())
    hook_node.allocate(guaranteed("db", uid))
    annotations = crio_annotations(uid, "main") if runtime == "crio" else containerd_annotations(uid, "main")
    rt = hook_node.runtime
    container_id = unique("ctr")
    bundle = rt.bundle(
        container_id,
        annotations=annotations,
        cgroups_path=rt.cgroups_path(uid, container_id),
        hook_args=None,
        hooks=hooks,
    )
    result = rt.run(container_id, bundle)
    assert result.returncode == 0, result.stderr
    assert result.allowed() == {"Cpus_allowed_list": "1", "Mems_allowed_list": "0"}


def test_podman_runs_the_hooks_d_file(hook_node: HookNode, tmp_path: Path) -> None:
    """Podman reads hooks.d the way CRI-O does (containers/common pkg/hooks); skipped where it cannot run here."""
    import shutil

    podman = shutil.which("podman")
    if podman is None:
        pytest.skip("podman is not installed (NUMAGUARD_TEST_PODMAN=1 scripts/install-test-deps.sh installs it)")
    rootfs = hook_node.runtime.rootfs()
    probe = subprocess.run(
        [podman, "--cgroup-manager", "cgroupfs", "run", "--rm", "--network", "none", "--rootfs", str(rootfs),
         "/bin/busybox", "true"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"podman cannot run containers on this machine: {probe.stderr.strip()[-200:]}")
    assert _install(tmp_path, "--runtime", "crio", socket=str(hook_node.socket)) == 0
    uid = str(uuid.uuid4())
    hook_node.allocate(guaranteed("db", uid))
    cgroup_parent = f"/{hook_node.runtime.cgroup_root}/kubepods/pod{uid}"
    args = [podman, "--cgroup-manager", "cgroupfs", "run", "--rm", "--network", "none", "--rootfs", str(rootfs)]
    args += ["--hooks-dir", str(tmp_path / "hooks.d"), "--cgroup-parent", cgroup_parent]
    for key, value in crio_annotations(uid, "main").items():
        args += ["--annotation", f"{key}={value}"]
    done = subprocess.run([*args, "/bin/busybox", "grep", "_allowed_list", "/proc/self/status"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Cpus_allowed_list:\t1" in done.stdout
