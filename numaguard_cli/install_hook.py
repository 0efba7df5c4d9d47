"""``numaguard install-hook``: put the OCI hook on a node, for containerd or CRI-O (and Podman).

What it writes on the node (``--host-root`` is where the node's ``/`` is mounted, ``/host`` in the DaemonSet):

* the hook itself: ``<hook dir>/oci_hook.py`` (a copy of ``numaguard_cli/oci_hook.py``, standard library only);
* CRI-O and Podman: ``<hooks.d>/numaguard.json`` (OCI hooks.d schema 1.0.0, read by
  ``containers/common/pkg/hooks``) matching every container that carries
  ``io.kubernetes.cri-o.ContainerType``, stage ``createRuntime``.  CRI-O rereads hooks.d without a restart;
* containerd: a CRI ``base_runtime_spec`` file (the node's default spec, from ``--base-spec`` or from
  ``ctr oci spec`` run on the host, with the hook added to ``hooks.createRuntime``) and the
  ``config.toml`` lines that point the runc runtime at it, printed for the operator (containerd
  loads base specs at start: restart it after adding them).

The hook runs on the host at every container start, so the host needs ``python3`` (3.8 or newer);
container-optimised images (COS, Bottlerocket, Talos, Flatcar) ship none.  The install step runs
the host's interpreter (in ``chroot <host root>``) and refuses, saying so, when it is missing.

``--print`` writes nothing: it prints the files it would write.  ``--uninstall`` removes them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

HELP = "install the OCI runtime hook on this node (containerd base spec or CRI-O/Podman hooks.d), or --print it"

HOOK_SOURCE: Final = Path(__file__).with_name("oci_hook.py")
HOOK_FILE_NAME: Final = "oci_hook.py"
HOOKS_D_FILE: Final = "numaguard.json"
BASE_SPEC_FILE: Final = "numaguard-base-spec.json"
MIN_PYTHON: Final = (3, 8)
DEFAULTS: Final = {
    "hook_dir": "/opt/numaguard",
    "python": "/usr/bin/python3",
    "socket": "/run/numaguard/hook.sock",
    "hooks_d": "/etc/containers/oci/hooks.d",
    "containerd_dir": "/etc/containerd",
}
# The marker that identifies our hook entry in a base spec (so a reinstall replaces it, uninstall removes it).
HOOK_MARKER: Final = "NUMAGUARD_HOOK=1"
CRIO_MATCH: Final = {"^io\\.kubernetes\\.cri-o\\.ContainerType$": "^(sandbox|container)$"}


class InstallError(Exception):
    pass


def hook_entry(*, python: str, hook_path: str, socket: str, deadline: float, failure_mode: str) -> dict[str, Any]:
    """One OCI ``hooks.<stage>[]`` entry; the runtime's own ``timeout`` backs up the hook's deadline."""
    return {
        "path": python,
        "args": [
            os.path.basename(python),
            "-I",  # isolated: no user site, no PYTHON* environment, no current directory on the path
            "-S",  # no site module: the hook is standard library only, and starts faster
            hook_path,
            "--socket",
            socket,
            "--deadline",
            f"{deadline:g}",
            "--failure-mode",
            failure_mode,
            "--quiet",
        ],
        "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", HOOK_MARKER],
        "timeout": int(math.ceil(deadline)) + 1,
    }


def crio_hooks_json(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The hooks.d 1.0.0 document (``version``, ``hook``, ``when``, ``stages``)."""
    return {
        "version": "1.0.0",
        "hook": dict(entry),
        "when": {"annotations": dict(CRIO_MATCH)},
        "stages": ["createRuntime"],
    }


def _is_ours(hook: object) -> bool:
    return isinstance(hook, dict) and HOOK_MARKER in (hook.get("env") or [])


def with_hook(spec: Mapping[str, Any], entry: Mapping[str, Any] | None) -> dict[str, Any]:
    """``spec`` with our ``createRuntime`` entry put first (replacing an older one); ``None`` removes it."""
    out = json.loads(json.dumps(spec))
    if not isinstance(out, dict) or "ociVersion" not in out:
        raise InstallError("the base spec is not an OCI runtime spec (no ociVersion)")
    hooks = out.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise InstallError("the base spec's hooks is not an object")
    stage = [h for h in hooks.get("createRuntime", []) if not _is_ours(h)]
    if entry is not None:
        stage.insert(0, dict(entry))
    if stage:
        hooks["createRuntime"] = stage
    else:
        hooks.pop("createRuntime", None)
    if not hooks:
        out.pop("hooks")
    return out


def containerd_toml(spec_path: str, *, config_version: int) -> str:
    section = (
        "plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc"
        if config_version >= 3
        else 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc'
    )
    return f'[{section}]\n  base_runtime_spec = "{spec_path}"\n'


def host_path(host_root: Path, path: str) -> Path:
    return host_root / path.lstrip("/")


def check_python(host_root: Path, python: str) -> str:
    """The host interpreter's version; raises InstallError saying what the node lacks."""
    if not host_path(host_root, python).exists():
        raise InstallError(
            f"the hook needs python3 >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]} on the host at {python}, and there is none: "
            "container-optimised node images (COS, Bottlerocket, Talos, Flatcar) ship no Python. Install it, point "
            "--python at one, or leave this node to the watch path (pods pinned seconds after start)"
        )
    command = [python, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    if host_root.resolve() != Path("/"):
        command = ["chroot", str(host_root), *command]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise InstallError(f"cannot run the host's {python}: {err}") from None
    version = done.stdout.strip()
    try:
        parsed = tuple(int(p) for p in version.split("."))
    except ValueError:
        raise InstallError(f"the host's {python} does not run: {done.stderr.strip() or version!r}") from None
    if parsed < MIN_PYTHON:
        raise InstallError(f"the host's {python} is Python {version}; the hook needs {MIN_PYTHON[0]}.{MIN_PYTHON[1]}+")
    return version


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix="." + path.name)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _base_spec(args: argparse.Namespace, host_root: Path, target: Path) -> dict[str, Any]:
    if args.base_spec is not None:
        source = Path(args.base_spec)
        text = source.read_text()
    elif target.exists():
        text = target.read_text()  # a reinstall: keep the spec we wrote before
    else:
        command = ["ctr", "oci", "spec"]
        if host_root.resolve() != Path("/"):
            command = ["chroot", str(host_root), *command]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError) as err:
            raise InstallError(
                f"no --base-spec and `ctr oci spec` failed on the host ({err}); give the node's base spec"
            ) from None
        text = done.stdout
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as err:
        raise InstallError(f"the base spec is not JSON: {err}") from None
    if not isinstance(spec, dict):
        raise InstallError("the base spec is not a JSON object")
    return spec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runtime", choices=("containerd", "crio"), required=True)
    parser.add_argument("--print", action="store_true", dest="print_only", help="print the files, change nothing")
    parser.add_argument("--uninstall", action="store_true", help="remove what install-hook wrote")
    parser.add_argument("--socket", default=DEFAULTS["socket"], help="the enforcer's hookSocket")
    parser.add_argument("--deadline", type=float, default=2.0, help="seconds the hook may take (default 2)")
    parser.add_argument("--failure-mode", choices=("fail-open", "fail-closed"), default="fail-open")
    parser.add_argument("--hook-dir", default=DEFAULTS["hook_dir"], help="host directory for oci_hook.py")
    parser.add_argument("--python", default=DEFAULTS["python"], help="the host's python3 (>= 3.8)")
    parser.add_argument("--host-root", type=Path, default=Path("/"), help="where the node's / is mounted")
    parser.add_argument("--hooks-d", default=DEFAULTS["hooks_d"], help="CRI-O/Podman hooks directory")
    parser.add_argument("--containerd-dir", default=DEFAULTS["containerd_dir"], help="where the base spec goes")
    parser.add_argument("--base-spec", help="containerd: the node's base spec (default: `ctr oci spec` on the host)")
    parser.add_argument(
        "--containerd-config-version", type=int, default=3, help="config.toml version (2: containerd 1.x, 3: 2.x)"
    )


def run(args: argparse.Namespace) -> int:
    if not 0 < args.deadline <= 30:
        return _fail("--deadline must be in (0, 30] seconds")
    hook_path = f"{args.hook_dir.rstrip('/')}/{HOOK_FILE_NAME}"
    entry = hook_entry(
        python=args.python,
        hook_path=hook_path,
        socket=args.socket,
        deadline=args.deadline,
        failure_mode=args.failure_mode,
    )
    root: Path = args.host_root
    try:
        if args.runtime == "crio":
            return _crio(args, root, entry, hook_path)
        return _containerd(args, root, entry, hook_path)
    except (InstallError, OSError) as err:
        return _fail(str(err))


def _crio(args: argparse.Namespace, root: Path, entry: dict[str, Any], hook_path: str) -> int:
    document = json.dumps(crio_hooks_json(entry), indent=2) + "\n"
    target = f"{args.hooks_d.rstrip('/')}/{HOOKS_D_FILE}"
    if args.print_only:
        print(f"# {target}\n{document}", end="")
        return 0
    if args.uninstall:
        for path in (target, hook_path):
            host_path(root, path).unlink(missing_ok=True)
        print(f"removed {target} and {hook_path}; CRI-O and Podman stop running the hook for new containers")
        return 0
    version = check_python(root, args.python)
    _install_hook_file(root, hook_path)
    _write(host_path(root, target), document)
    print(f"installed {hook_path} (host Python {version}) and {target}; CRI-O picks hooks.d changes up live")
    return 0


def _containerd(args: argparse.Namespace, root: Path, entry: dict[str, Any], hook_path: str) -> int:
    spec_path = f"{args.containerd_dir.rstrip('/')}/{BASE_SPEC_FILE}"
    toml = containerd_toml(spec_path, config_version=args.containerd_config_version)
    if args.print_only:
        print("# hooks for containerd's CRI base_runtime_spec (merged into the node's base spec):")
        print(json.dumps({"hooks": {"createRuntime": [entry]}}, indent=2))
        print(f"# containerd config.toml, then restart containerd:\n{toml}", end="")
        return 0
    target = host_path(root, spec_path)
    if args.uninstall:
        if target.exists():
            _write(target, json.dumps(with_hook(json.loads(target.read_text()), None), indent=2) + "\n")
        host_path(root, hook_path).unlink(missing_ok=True)
        print(
            f"removed the hook from {spec_path} and {hook_path}; remove base_runtime_spec from config.toml "
            "(or keep the now hook-less spec) and restart containerd"
        )
        return 0
    version = check_python(root, args.python)
    spec = with_hook(_base_spec(args, root, target), entry)
    _install_hook_file(root, hook_path)
    _write(target, json.dumps(spec, indent=2) + "\n")
    print(f"installed {hook_path} (host Python {version}) and {spec_path}; add to config.toml and restart containerd:")
    print(toml, end="")
    return 0


def _install_hook_file(root: Path, hook_path: str) -> None:
    target = host_path(root, hook_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name("." + target.name + ".tmp")
    shutil.copyfile(HOOK_SOURCE, temporary)
    os.chmod(temporary, 0o755)
    os.replace(temporary, target)


def _fail(message: str) -> int:
    print(f"numaguard install-hook: {message}", file=sys.stderr)
    return 2
