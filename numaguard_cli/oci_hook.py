"""``numaguard oci-hook``: the OCI runtime hook that pins a container before its first instruction.

The runtime (runc, crun) runs this at ``createRuntime`` (or ``prestart``): the
container's process exists, sits in its cgroup and has not executed a single
instruction of the image yet.  The hook reads the OCI state on stdin, finds the
pod and container in the runtime's annotations and asks the node's enforcer,
over a local unix socket, to program that container's cgroup.  It returns only
when the enforcer answered (or the deadline passed), so the container starts on
its allocation.  The hook never writes cgroupfs itself: the enforcer does.

Standard library only, and nothing of the numaguard package is imported: the
runtime starts this file at every container start, on the host, as
``python3 -I /opt/numaguard/oci_hook.py --socket ...`` (or ``numaguard
oci-hook`` where the package is installed).  Start-up is one interpreter plus
``json``/``socket``/``select`` (measured with the whole round trip in bench/bench_hook.py).

Annotations (checked in the runtimes' sources):

* containerd CRI (``DefaultCRIAnnotations``): ``io.kubernetes.cri.sandbox-uid``,
  ``io.kubernetes.cri.container-name``, ``io.kubernetes.cri.container-type``
  (``sandbox`` / ``container``).
* CRI-O (``internal/factory/container/container.go`` ``SpecAddAnnotations`` and
  ``server/sandbox_run_linux.go`` copy the kubelet's labels into the spec):
  ``io.kubernetes.pod.uid``, ``io.kubernetes.container.name``,
  ``io.kubernetes.cri-o.ContainerType``.

Wire format (one JSON line each way; docs/runtime-hook.md):
request ``{"version": 1, "containerId", "pid", "podUID", "containerName",
"containerType", "runtime", "cgroup"}`` (``cgroup``: the process's
``/proc/<pid>/cgroup`` as the host sees it); answer ``{"ok": true, "cpus",
"mems", "pool", "cgroup"}`` or ``{"ok": false, "reason", "message"}``.

Failure modes: ``fail-open`` (default) exits 0 with one stderr line and leaves
the request in the spool directory (``<socket dir>/pending``) so the enforcer
repairs the container when it can; ``fail-closed`` exits 1, the runtime fails
the container and the kubelet retries it.  Every step has the deadline: the
hook never hangs a container start.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Final

HELP = "OCI createRuntime/prestart hook: have the enforcer pin this container before it starts"

DEFAULT_SOCKET: Final = "/run/numaguard/hook.sock"
DEFAULT_DEADLINE_SECONDS: Final = 2.0
FAIL_OPEN: Final = "fail-open"
FAIL_CLOSED: Final = "fail-closed"
PROTOCOL_VERSION: Final = 1
SPOOL_DIR_NAME: Final = "pending"
MAX_STATE_BYTES: Final = 1 << 20
MAX_CONFIG_BYTES: Final = 16 << 20
MAX_ANSWER_BYTES: Final = 64 << 10

# (pod uid, container name, container type) keys per runtime, in lookup order.
ANNOTATION_KEYS: Final = (
    (
        "containerd",
        "io.kubernetes.cri.sandbox-uid",
        "io.kubernetes.cri.container-name",
        "io.kubernetes.cri.container-type",
    ),
    ("cri-o", "io.kubernetes.pod.uid", "io.kubernetes.container.name", "io.kubernetes.cri-o.ContainerType"),
)
CONTAINER_TYPES: Final = ("sandbox", "container")


class HookError(Exception):
    """Why the container could not be pinned; ``reason`` is a stable CamelCase word for logs."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Deadline:
    """The time left for the whole hook; every blocking call gets at most this."""

    def __init__(self, seconds: float) -> None:
        self.expires = time.monotonic() + seconds
        self.seconds = seconds

    def left(self) -> float:
        remaining = self.expires - time.monotonic()
        if remaining <= 0:
            raise HookError("DeadlineExceeded", f"no answer within the {self.seconds:g}s deadline")
        return remaining


def read_stdin(stream: int, deadline: Deadline, limit: int = MAX_STATE_BYTES) -> bytes:
    """All of stdin (the runtime closes it after the state), within the deadline and ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        ready, _, _ = select.select([stream], [], [], deadline.left())
        if not ready:
            raise HookError("DeadlineExceeded", "the OCI state did not arrive on stdin before the deadline")
        chunk = os.read(stream, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise HookError("InvalidState", f"the OCI state on stdin is larger than {limit} bytes")
        chunks.append(chunk)


def parse_state(data: bytes) -> dict[str, object]:
    """The OCI state document (runtime-spec ``state``): ``id``, ``pid``, ``bundle``, ``annotations``."""
    try:
        state = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise HookError("InvalidState", f"stdin is not an OCI state JSON document: {err}") from None
    if not isinstance(state, dict):
        raise HookError("InvalidState", "stdin is not an OCI state JSON object")
    return state


def _string_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def bundle_annotations(bundle: str) -> dict[str, str]:
    """``annotations`` of the bundle's ``config.json`` (runtimes that leave them out of the state)."""
    path = os.path.join(bundle, "config.json")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise HookError("InvalidState", f"cannot read {path}: {err.strerror or err}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise HookError("InvalidState", f"{path} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        config = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise HookError("InvalidState", f"{path} is not JSON: {err}") from None
    return _string_map(config.get("annotations") if isinstance(config, dict) else None)


def build_request(state: Mapping[str, object]) -> dict[str, object]:
    """The enforcer request for this container; raises HookError naming what is missing."""
    pid = state.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise HookError("InvalidState", f"the OCI state has no valid pid (got {pid!r})")
    container_id = state.get("id")
    if not isinstance(container_id, str) or not container_id:
        raise HookError("InvalidState", "the OCI state has no container id")
    annotations = _string_map(state.get("annotations"))
    if not annotations:  # the state's annotations are the config's (runtime-spec); some runtimes leave them out
        bundle = state.get("bundle")
        if isinstance(bundle, str) and bundle:
            annotations.update(bundle_annotations(bundle))
    for runtime, uid_key, name_key, type_key in ANNOTATION_KEYS:
        pod_uid = annotations.get(uid_key)
        if pod_uid is None:
            continue
        container_type = annotations.get(type_key, "")
        if container_type not in CONTAINER_TYPES:
            raise HookError(
                "InvalidAnnotations",
                f"{type_key}={container_type!r} (expected one of {', '.join(CONTAINER_TYPES)})",
            )
        name = annotations.get(name_key, "")
        if container_type == "container" and not name:
            raise HookError("InvalidAnnotations", f"container {container_id} has {uid_key} but no {name_key}")
        if not pod_uid or len(pod_uid) > 128 or not all(c.isalnum() or c in "-_" for c in pod_uid):
            raise HookError("InvalidAnnotations", f"{uid_key}={pod_uid!r} is not a pod UID")
        request: dict[str, object] = {
            "version": PROTOCOL_VERSION,
            "containerId": container_id,
            "pid": pid,
            "podUID": pod_uid,
            "containerName": name,
            "containerType": container_type,
            "runtime": runtime,
        }
        cgroup = process_cgroup(pid)
        if cgroup:
            request["cgroup"] = cgroup
        return request
    wanted = " or ".join(keys[1] for keys in ANNOTATION_KEYS)
    raise HookError("NoPodAnnotations", f"container {container_id} carries no pod annotations ({wanted})")


def process_cgroup(pid: int, proc_root: str = "/proc") -> str:
    """The process's ``/proc/<pid>/cgroup`` as the runtime sees it (the host's cgroup namespace), or ``""``.

    The enforcer usually runs in a private cgroup namespace, where the same file
    shows paths relative to its own cgroup; the hook's view names the cgroup exactly.
    """
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), "rb") as handle:
            return handle.read(16384).decode("ascii", "replace")
    except OSError:
        return ""


def ask_enforcer(socket_path: str, request: Mapping[str, object], deadline: Deadline) -> dict[str, object]:
    """Send one request line, read one answer line; every step bounded by the deadline."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(deadline.left())
        try:
            conn.connect(socket_path)
        except FileNotFoundError:
            raise HookError("EnforcerUnreachable", f"no enforcer socket at {socket_path}") from None
        except OSError as err:
            raise HookError("EnforcerUnreachable", f"cannot connect to {socket_path}: {err.strerror or err}") from None
        conn.settimeout(deadline.left())
        conn.sendall(json.dumps(request, separators=(",", ":")).encode() + b"\n")
        buffer = b""
        while b"\n" not in buffer:
            conn.settimeout(deadline.left())
            try:
                chunk = conn.recv(65536)
            except (TimeoutError, socket.timeout):  # noqa: UP041 -- socket.timeout differs before Python 3.10
                raise HookError(
                    "DeadlineExceeded", f"the enforcer did not answer within {deadline.seconds:g}s"
                ) from None
            if not chunk:
                break
            buffer += chunk
            if len(buffer) > MAX_ANSWER_BYTES:
                raise HookError("InvalidAnswer", "the enforcer's answer is too large")
    except (TimeoutError, socket.timeout):  # noqa: UP041 -- hosts may run Python 3.8
        raise HookError("DeadlineExceeded", f"the enforcer did not answer within {deadline.seconds:g}s") from None
    except OSError as err:
        raise HookError("EnforcerUnreachable", f"talking to {socket_path}: {err.strerror or err}") from None
    finally:
        conn.close()
    line = buffer.partition(b"\n")[0]
    try:
        answer = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise HookError("InvalidAnswer", "the enforcer closed the connection without a JSON answer") from None
    if not isinstance(answer, dict):
        raise HookError("InvalidAnswer", "the enforcer's answer is not a JSON object")
    if answer.get("ok") is not True:
        raise HookError(str(answer.get("reason") or "Refused"), str(answer.get("message") or "refused"))
    return answer


def spool(socket_path: str, request: Mapping[str, object], error: HookError) -> str | None:
    """Leave the request for the enforcer to repair later (fail-open); the spool path, or None if it failed."""
    directory = os.path.join(os.path.dirname(socket_path) or ".", SPOOL_DIR_NAME)
    name = f"{request['containerId']}.json"
    if "/" in name or name.startswith("."):
        return None
    document = dict(request)
    document["failure"] = {"reason": error.reason, "message": error.message, "at": time.time()}
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        temporary = os.path.join(directory, "." + name + ".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump(document, handle)
        final = os.path.join(directory, name)
        os.replace(temporary, final)
        return final
    except OSError:
        return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--socket", default=DEFAULT_SOCKET, help=f"the enforcer's hook socket (default {DEFAULT_SOCKET})"
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=DEFAULT_DEADLINE_SECONDS,
        help=f"seconds the hook may take in all (default {DEFAULT_DEADLINE_SECONDS:g})",
    )
    parser.add_argument(
        "--failure-mode",
        choices=(FAIL_OPEN, FAIL_CLOSED),
        default=FAIL_OPEN,
        help="fail-open (default): start unpinned, repaired later; fail-closed: the runtime fails the container",
    )
    parser.add_argument("--quiet", action="store_true", help="no stderr line on success")


def run(args: argparse.Namespace, *, stdin: int | None = None) -> int:
    deadline = Deadline(max(0.05, float(args.deadline)))
    request: dict[str, object] | None = None
    try:
        state = parse_state(read_stdin(sys.stdin.fileno() if stdin is None else stdin, deadline))
        request = build_request(state)
        answer = ask_enforcer(str(args.socket), request, deadline)
    except HookError as error:
        return _failed(args, request, error)
    except Exception as error:  # the hook must answer the runtime whatever happens
        return _failed(args, request, HookError("HookCrashed", f"{type(error).__name__}: {error}"))
    if not args.quiet:
        print(
            f"numaguard oci-hook: pinned container {request['containerId']} ({answer.get('pool')}): "
            f"cpus {answer.get('cpus')} mems {answer.get('mems')}",
            file=sys.stderr,
        )
    return 0


def _failed(args: argparse.Namespace, request: Mapping[str, object] | None, error: HookError) -> int:
    container = request["containerId"] if request is not None else "?"
    if args.failure_mode == FAIL_CLOSED:
        print(
            f"numaguard oci-hook: {error.reason}: {error.message} (fail-closed: container {container} refused)",
            file=sys.stderr,
        )
        return 1
    spooled = None
    if request is not None and error.reason in ("EnforcerUnreachable", "DeadlineExceeded", "InvalidAnswer"):
        spooled = spool(str(args.socket), request, error)
    tail = f"; queued for repair in {spooled}" if spooled else ""
    print(
        f"numaguard oci-hook: {error.reason}: {error.message} (fail-open: container {container} starts unpinned{tail})",
        file=sys.stderr,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="numaguard-oci-hook", description=HELP)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
