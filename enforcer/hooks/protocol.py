"""The hook's wire format: one JSON request line, one JSON answer line, over a unix stream socket.

The hook side is ``numaguard_cli/oci_hook.py`` (standard library only, so it
cannot import this module); tests run both sides against each other.

Request::

    {"version": 1, "containerId": "<runtime id>", "pid": 4242, "podUID": "<uid>",
     "containerName": "app", "containerType": "container" | "sandbox", "runtime": "containerd" | "cri-o",
     "cgroup": "<the process's /proc/<pid>/cgroup as the hook reads it, in the host's cgroup namespace>"}

Answer::

    {"ok": true, "cpus": "1", "mems": "0", "pool": "exclusive", "cgroup": "/kubepods/pod<uid>/<id>"}
    {"ok": false, "reason": "CgroupWriteFailed", "message": "..."}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final, Literal

from enforcer.errors import EnforcerError

PROTOCOL_VERSION: Final = 1
MAX_REQUEST_BYTES: Final = 64 << 10

ContainerType = Literal["sandbox", "container"]
Pool = Literal["exclusive", "pod-shared", "node-shared", "pod-pool"]


class HookRequestError(EnforcerError):
    """A request line that is not a valid hook request."""

    reason = "InvalidRequest"


@dataclass(frozen=True, slots=True)
class HookRequest:
    container_id: str
    pid: int
    pod_uid: str
    container_name: str
    container_type: ContainerType
    runtime: str
    cgroup_text: str = ""
    """``/proc/<pid>/cgroup`` as the hook read it (host cgroup namespace); "" when it sent none."""

    @property
    def label(self) -> str:
        name = self.container_name or "<sandbox>"
        return f"pod {self.pod_uid} container {name} ({self.container_id[:12]})"

    def to_wire(self) -> dict[str, object]:
        return {
            "version": PROTOCOL_VERSION,
            "containerId": self.container_id,
            "pid": self.pid,
            "podUID": self.pod_uid,
            "containerName": self.container_name,
            "containerType": self.container_type,
            "runtime": self.runtime,
            **({"cgroup": self.cgroup_text} if self.cgroup_text else {}),
        }


def _text(document: dict[str, object], key: str, *, required: bool = True, limit: int = 256) -> str:
    value = document.get(key, "")
    if not isinstance(value, str):
        raise HookRequestError(f"{key}: expected a string, got {type(value).__name__}")
    if required and not value:
        raise HookRequestError(f"{key}: required")
    if len(value) > limit or "\x00" in value or "/" in value:
        raise HookRequestError(f"{key}: not a valid value ({value[:40]!r})")
    return value


def parse_request(document: object) -> HookRequest:
    """A decoded JSON document as a request; raises HookRequestError naming the field."""
    if not isinstance(document, dict):
        raise HookRequestError("the request is not a JSON object")
    version = document.get("version")
    if version != PROTOCOL_VERSION:
        raise HookRequestError(f"version: this enforcer speaks version {PROTOCOL_VERSION}, got {version!r}")
    pid = document.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise HookRequestError(f"pid: expected a positive integer, got {pid!r}")
    container_type = document.get("containerType")
    if container_type not in ("sandbox", "container"):
        raise HookRequestError(f"containerType: expected sandbox or container, got {container_type!r}")
    name = _text(document, "containerName", required=container_type == "container")
    cgroup = document.get("cgroup", "")
    if not isinstance(cgroup, str) or len(cgroup) > 16384:
        raise HookRequestError("cgroup: expected the text of /proc/<pid>/cgroup")
    return HookRequest(
        container_id=_text(document, "containerId"),
        pid=pid,
        pod_uid=_text(document, "podUID", limit=128),
        container_name=name,
        container_type="sandbox" if container_type == "sandbox" else "container",
        runtime=_text(document, "runtime", required=False, limit=32),
        cgroup_text=cgroup,
    )


def decode_request(line: bytes) -> HookRequest:
    try:
        document = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise HookRequestError(f"the request is not JSON: {err}") from None
    return parse_request(document)


@dataclass(frozen=True, slots=True)
class HookAnswer:
    ok: bool
    cpus: str = ""
    mems: str = ""
    pool: str = ""
    cgroup: str = ""
    reason: str = ""
    message: str = ""

    @classmethod
    def failure(cls, reason: str, message: str) -> HookAnswer:
        return cls(ok=False, reason=reason, message=message)

    def encode(self) -> bytes:
        if self.ok:
            document: dict[str, object] = {
                "ok": True,
                "cpus": self.cpus,
                "mems": self.mems,
                "pool": self.pool,
                "cgroup": self.cgroup,
            }
        else:
            document = {"ok": False, "reason": self.reason, "message": self.message}
        return json.dumps(document, separators=(",", ":")).encode() + b"\n"
