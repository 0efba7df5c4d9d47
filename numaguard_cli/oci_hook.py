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

import _socket  # the C module: ``socket`` costs ~30 ms of enum set-up at every container start
import os
import select
import sys
import time

# Names for the type checker only: importing ``typing`` alone costs ~20 ms at every container start, and
# argparse another ~20 ms (``numaguard oci-hook`` brings its own; the hook file parses four options by hand).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
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


# -- JSON without ``json``: its decoder imports ``re`` and ``enum``, tens of ms at every container start ------
# The state, config.json and the answer are parsed by this small RFC 8259 reader (strict: no NaN, no
# trailing commas, no comments); tests/hook/test_oci_hook.py checks it against ``json`` on random documents.


class JSONError(ValueError):
    pass


_ESCAPES: Final = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_WHITESPACE: Final = " \t\n\r"
MAX_DEPTH: Final = 64


def json_loads(data: bytes | str) -> object:
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    value, end = _value(text, _skip(text, 0), 0)
    end = _skip(text, end)
    if end != len(text):
        raise JSONError(f"extra data at character {end}")
    return value


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WHITESPACE:
        i += 1
    return i


def _value(text: str, i: int, depth: int) -> tuple[object, int]:
    if depth > MAX_DEPTH:
        raise JSONError("nested too deeply")
    if i >= len(text):
        raise JSONError("unexpected end of document")
    char = text[i]
    if char == "{":
        return _object(text, i + 1, depth + 1)
    if char == "[":
        return _array(text, i + 1, depth + 1)
    if char == '"':
        return _string(text, i + 1)
    for word, value in (("true", True), ("false", False), ("null", None)):
        if text.startswith(word, i):
            return value, i + len(word)
    return _number(text, i)


def _object(text: str, i: int, depth: int) -> tuple[object, int]:
    out: dict[str, object] = {}
    i = _skip(text, i)
    if i < len(text) and text[i] == "}":
        return out, i + 1
    while True:
        if i >= len(text) or text[i] != '"':
            raise JSONError(f"expected a key at character {i}")
        key, i = _string(text, i + 1)
        i = _skip(text, i)
        if i >= len(text) or text[i] != ":":
            raise JSONError(f"expected ':' at character {i}")
        out[key], i = _value(text, _skip(text, i + 1), depth)
        i = _skip(text, i)
        if i < len(text) and text[i] == ",":
            i = _skip(text, i + 1)
            continue
        if i < len(text) and text[i] == "}":
            return out, i + 1
        raise JSONError(f"expected ',' or '}}' at character {i}")


def _array(text: str, i: int, depth: int) -> tuple[object, int]:
    out: list[object] = []
    i = _skip(text, i)
    if i < len(text) and text[i] == "]":
        return out, i + 1
    while True:
        item, i = _value(text, i, depth)
        out.append(item)
        i = _skip(text, i)
        if i < len(text) and text[i] == ",":
            i = _skip(text, i + 1)
            continue
        if i < len(text) and text[i] == "]":
            return out, i + 1
        raise JSONError(f"expected ',' or ']' at character {i}")


def _string(text: str, i: int) -> tuple[str, int]:
    parts: list[str] = []
    start = i
    while True:
        if i >= len(text):
            raise JSONError("unterminated string")
        char = text[i]
        if char == '"':
            parts.append(text[start:i])
            return "".join(parts), i + 1
        if char < " ":
            raise JSONError(f"control character in a string at character {i}")
        if char != "\\":
            i += 1
            continue
        parts.append(text[start:i])
        escape = text[i + 1 : i + 2]
        if escape == "u":
            code, i = _hex4(text, i + 2)
            if 0xD800 <= code < 0xDC00 and text.startswith("\\u", i):
                low, after = _hex4(text, i + 2)
                if 0xDC00 <= low < 0xE000:
                    code, i = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00), after
            parts.append(chr(code))
        elif escape in _ESCAPES:
            parts.append(_ESCAPES[escape])
            i += 2
        else:
            raise JSONError(f"invalid escape at character {i}")
        start = i


def _hex4(text: str, i: int) -> tuple[int, int]:
    digits = text[i : i + 4]
    if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
        raise JSONError(f"invalid \\u escape at character {i}")
    return int(digits, 16), i + 4


def _number(text: str, i: int) -> tuple[object, int]:
    """``-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?``, as RFC 8259 spells a number."""
    start = i
    if text.startswith("-", i):
        i += 1
    if text.startswith("0", i):
        i += 1
    elif i < len(text) and "1" <= text[i] <= "9":
        i = _digits(text, i)
    else:
        raise JSONError(f"invalid value at character {start}")
    fraction = text.startswith(".", i)
    if fraction:
        i = _digits(text, i + 1, required=True)
    exponent = i < len(text) and text[i] in "eE"
    if exponent:
        i += 1
        if i < len(text) and text[i] in "+-":
            i += 1
        i = _digits(text, i, required=True)
    token = text[start:i]
    return (float(token) if fraction or exponent else int(token)), i


def _digits(text: str, i: int, *, required: bool = False) -> int:
    begin = i
    while i < len(text) and "0" <= text[i] <= "9":
        i += 1
    if required and i == begin:
        raise JSONError(f"invalid number at character {begin}")
    return i


def json_dumps(value: object) -> str:
    """Compact JSON of str/int/float/bool/None/list/dict values (what the request and the spool file hold)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):  # noqa: UP038 -- the hook runs on Python 3.8+
        return repr(value)
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, (list, tuple)):  # noqa: UP038
        return "[" + ",".join(json_dumps(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_quote(str(k)) + ":" + json_dumps(v) for k, v in value.items()) + "}"
    raise TypeError(f"cannot encode {type(value).__name__}")


def _quote(text: str) -> str:
    out = ['"']
    for char in text:
        if char == '"' or char == "\\":
            out.append("\\" + char)
        elif char < " " or char == "\x7f":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


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
        state = json_loads(data)
    except (UnicodeDecodeError, JSONError) as err:
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
        config = json_loads(data)
    except (UnicodeDecodeError, JSONError) as err:
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
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.settimeout(deadline.left())
        try:
            conn.connect(socket_path)
        except FileNotFoundError:
            raise HookError("EnforcerUnreachable", f"no enforcer socket at {socket_path}") from None
        except OSError as err:
            raise HookError("EnforcerUnreachable", f"cannot connect to {socket_path}: {err.strerror or err}") from None
        conn.settimeout(deadline.left())
        conn.sendall(json_dumps(dict(request)).encode() + b"\n")
        buffer = b""
        while b"\n" not in buffer:
            conn.settimeout(deadline.left())
            try:
                chunk = conn.recv(65536)
            except (TimeoutError, _socket.timeout):  # noqa: UP041 -- socket.timeout differs before Python 3.10
                raise HookError(
                    "DeadlineExceeded", f"the enforcer did not answer within {deadline.seconds:g}s"
                ) from None
            if not chunk:
                break
            buffer += chunk
            if len(buffer) > MAX_ANSWER_BYTES:
                raise HookError("InvalidAnswer", "the enforcer's answer is too large")
    except (TimeoutError, _socket.timeout):  # noqa: UP041 -- hosts may run Python 3.8
        raise HookError("DeadlineExceeded", f"the enforcer did not answer within {deadline.seconds:g}s") from None
    except OSError as err:
        raise HookError("EnforcerUnreachable", f"talking to {socket_path}: {err.strerror or err}") from None
    finally:
        conn.close()
    line = buffer.partition(b"\n")[0]
    try:
        answer = json_loads(line)
    except (UnicodeDecodeError, JSONError):
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
            handle.write(json_dumps(document))
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


class Options:
    """The hook's four options (what ``argparse.Namespace`` carries under ``numaguard oci-hook``)."""

    def __init__(
        self, socket: str = DEFAULT_SOCKET, deadline: float = DEFAULT_DEADLINE_SECONDS,
        failure_mode: str = FAIL_OPEN, quiet: bool = False,
    ) -> None:  # fmt: skip
        self.socket = socket
        self.deadline = deadline
        self.failure_mode = failure_mode
        self.quiet = quiet


USAGE: Final = (
    "usage: oci_hook.py [--socket PATH] [--deadline SECONDS] [--failure-mode fail-open|fail-closed] [--quiet]"
)


def parse_options(argv: Sequence[str]) -> Options:
    """The options without argparse; raises ValueError with a usage line."""
    options = Options()
    items = list(argv)
    while items:
        item = items.pop(0)
        name, has_value, value = item.partition("=")
        if name == "--quiet" and not has_value:
            options.quiet = True
            continue
        if name not in ("--socket", "--deadline", "--failure-mode"):
            raise ValueError(f"unknown option {item!r}\n{USAGE}")
        if not has_value:
            if not items:
                raise ValueError(f"{name} needs a value\n{USAGE}")
            value = items.pop(0)
        if name == "--socket":
            options.socket = value
        elif name == "--deadline":
            try:
                options.deadline = float(value)
            except ValueError:
                raise ValueError(f"--deadline: not a number: {value!r}") from None
        elif value in (FAIL_OPEN, FAIL_CLOSED):
            options.failure_mode = value
        else:
            raise ValueError(f"--failure-mode: {FAIL_OPEN} or {FAIL_CLOSED}, not {value!r}")
    return options


def run(args: argparse.Namespace | Options, *, stdin: int | None = None) -> int:
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


def _failed(args: argparse.Namespace | Options, request: Mapping[str, object] | None, error: HookError) -> int:
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
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments and arguments[0] in ("-h", "--help"):
        print(f"{USAGE}\n\n{HELP}")
        return 0
    try:
        options = parse_options(arguments)
    except ValueError as err:
        print(f"numaguard oci-hook: {err}", file=sys.stderr)
        return 2
    return run(options)


if __name__ == "__main__":
    sys.exit(main())
