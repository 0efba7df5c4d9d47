"""The hook executable against the real socket server: bad input, deadlines and the two failure modes.

No runtime here: the OCI state goes to the hook's stdin as runc would write
it.  The server side is the enforcer's real :class:`HookSocketServer` with a
handler that records the request (or never answers).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from enforcer.errors import ConfigError
from enforcer.hooks import protocol
from enforcer.hooks.protocol import HookAnswer, HookRequest
from enforcer.hooks.server import HookSocketServer
from numaguard_cli import oci_hook

UID = "3f0e9a52-7c1b-4c55-9d2e-2a1b4c5d6e7f"
CRI = {
    "io.kubernetes.cri.sandbox-uid": UID,
    "io.kubernetes.cri.container-name": "main",
    "io.kubernetes.cri.container-type": "container",
}


def _state(annotations: dict[str, str] | None = None, **extra: object) -> bytes:
    state: dict[str, object] = {"ociVersion": "1.0.2", "id": "abc123", "status": "created", "pid": 4242}
    state["bundle"] = "/nonexistent"
    if annotations is not None:
        state["annotations"] = annotations
    state.update(extra)
    return json.dumps(state).encode()


def _run(socket_path: Path, stdin: bytes | None, *, mode: str = "fail-open", deadline: float = 2.0) -> tuple[int, str]:
    read, write = os.pipe()
    if stdin is not None:
        os.write(write, stdin)
        os.close(write)
    args = argparse.Namespace(socket=str(socket_path), deadline=deadline, failure_mode=mode, quiet=False)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = oci_hook.run(args, stdin=read)
    finally:
        os.close(read)
        if stdin is None:
            os.close(write)
    return code, err.getvalue()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Path, list[HookRequest]]]:
    seen: list[HookRequest] = []

    def handler(request: HookRequest) -> HookAnswer:
        seen.append(request)
        return HookAnswer(ok=True, cpus="1", mems="0", pool="exclusive", cgroup="/kubepods/pod/x")

    path = tmp_path / "run" / "hook.sock"
    hook_server = HookSocketServer(path, handler, deadline=2.0)
    hook_server.start()
    try:
        yield path, seen
    finally:
        hook_server.stop()


def test_pins_and_sends_the_pod_and_container(server: tuple[Path, list[HookRequest]]) -> None:
    path, seen = server
    code, err = _run(path, _state(CRI))
    assert code == 0 and "pinned container abc123 (exclusive): cpus 1" in err
    assert seen == [HookRequest("abc123", 4242, UID, "main", "container", "containerd")]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_annotations_from_the_bundle_when_the_state_has_none(
    server: tuple[Path, list[HookRequest]], tmp_path: Path
) -> None:
    path, seen = server
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    crio = {"io.kubernetes.pod.uid": UID, "io.kubernetes.cri-o.ContainerType": "sandbox"}
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "annotations": crio}))
    code, _ = _run(path, _state(None, bundle=str(bundle)))
    assert code == 0
    assert seen == [HookRequest("abc123", 4242, UID, "", "sandbox", "cri-o")]


@pytest.mark.parametrize(
    ("stdin", "reason"),
    [
        (b"\x00garbage{", "InvalidState"),
        (b"[1, 2]", "InvalidState"),
        (_state(CRI, pid=0), "InvalidState"),
        (_state({"unrelated": "x"}), "NoPodAnnotations"),
        (_state({**CRI, "io.kubernetes.cri.container-type": "vm"}), "InvalidAnnotations"),
        (_state({k: v for k, v in CRI.items() if k != "io.kubernetes.cri.container-name"}), "InvalidAnnotations"),
        (_state({**CRI, "io.kubernetes.cri.sandbox-uid": "a/../../b"}), "InvalidAnnotations"),
    ],
)
@pytest.mark.parametrize(("mode", "exit_code"), [("fail-open", 0), ("fail-closed", 1)])
def test_bad_input_gets_one_clear_line_and_the_failure_modes_outcome(
    server: tuple[Path, list[HookRequest]], stdin: bytes, reason: str, mode: str, exit_code: int
) -> None:
    path, seen = server
    code, err = _run(path, stdin, mode=mode)
    assert code == exit_code
    assert err.count("\n") == 1 and reason in err and mode in err
    assert seen == []


def test_enforcer_down_fail_open_queues_the_container_for_repair(tmp_path: Path) -> None:
    socket_path = tmp_path / "run" / "hook.sock"
    code, err = _run(socket_path, _state(CRI))
    assert code == 0 and "EnforcerUnreachable" in err and "starts unpinned" in err
    spooled = json.loads((tmp_path / "run" / "pending" / "abc123.json").read_text())
    assert protocol.parse_request(spooled).pod_uid == UID
    assert spooled["failure"]["reason"] == "EnforcerUnreachable"


def test_enforcer_down_fail_closed_refuses(tmp_path: Path) -> None:
    code, err = _run(tmp_path / "hook.sock", _state(CRI), mode="fail-closed")
    assert code == 1 and "EnforcerUnreachable" in err and "refused" in err
    assert not (tmp_path / "pending").exists()


def test_an_enforcer_that_never_answers_meets_the_deadline(tmp_path: Path) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "mute.sock"))
    listener.listen(1)
    try:
        code, err = _run(tmp_path / "mute.sock", _state(CRI), deadline=0.3)
    finally:
        listener.close()
    assert code == 0 and "DeadlineExceeded" in err


def test_stdin_that_never_closes_meets_the_deadline(tmp_path: Path) -> None:
    code, err = _run(tmp_path / "hook.sock", None, deadline=0.2, mode="fail-closed")
    assert code == 1 and "DeadlineExceeded" in err


def test_the_enforcers_refusal_is_passed_on(tmp_path: Path) -> None:
    path = tmp_path / "hook.sock"
    hook_server = HookSocketServer(path, lambda r: HookAnswer.failure("CgroupWriteFailed", "EBUSY"), deadline=2.0)
    hook_server.start()
    try:
        code, err = _run(path, _state(CRI), mode="fail-closed")
    finally:
        hook_server.stop()
    assert code == 1 and "CgroupWriteFailed: EBUSY" in err


def test_only_allowed_uids_may_ask(tmp_path: Path) -> None:
    path = tmp_path / "hook.sock"
    hook_server = HookSocketServer(path, lambda r: HookAnswer(ok=True), deadline=2.0, allowed_uids=frozenset({4321}))
    hook_server.start()
    try:
        code, err = _run(path, _state(CRI), mode="fail-closed")
    finally:
        hook_server.stop()
    assert code == 1 and "Forbidden" in err


def test_the_socket_path_is_checked_at_start(tmp_path: Path) -> None:
    taken = tmp_path / "file.sock"
    taken.write_text("not a socket")
    with pytest.raises(ConfigError, match="not a socket"):
        HookSocketServer(taken, lambda r: HookAnswer(ok=True), deadline=1.0).start()
    stale = tmp_path / "stale.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(stale))
    dead.close()  # a socket file nobody serves, as a killed enforcer leaves it
    first = HookSocketServer(stale, lambda r: HookAnswer(ok=True), deadline=1.0)
    first.start()
    try:
        with pytest.raises(ConfigError, match="another process"):
            HookSocketServer(stale, lambda r: HookAnswer(ok=True), deadline=1.0).start()
    finally:
        first.stop()
    assert not stale.exists()


def test_a_silent_client_does_not_hold_the_server(server: tuple[Path, list[HookRequest]]) -> None:
    path, seen = server
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(str(path))
    try:
        code, _ = _run(path, _state(CRI))  # served on its own thread meanwhile
    finally:
        silent.close()
    assert code == 0 and len(seen) == 1


_values = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20), st.lists(st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*CRI, "pid", "id", "annotations", "x"]), _values, max_size=6))
def test_any_state_is_a_request_or_a_hook_error(document: dict[str, object]) -> None:
    try:
        oci_hook.build_request(document)
    except oci_hook.HookError as err:
        assert err.reason in ("InvalidState", "InvalidAnnotations", "NoPodAnnotations")


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["version", "pid", "podUID", "containerName", "containerType", "containerId", "runtime"]),
        _values,
        max_size=7,
    )
)
def test_any_request_document_parses_or_names_its_field(document: dict[str, object]) -> None:
    try:
        protocol.parse_request(document)
    except protocol.HookRequestError as err:
        assert err.message


def test_both_sides_speak_the_same_request(server: tuple[Path, list[HookRequest]]) -> None:
    request = oci_hook.build_request(json.loads(_state(CRI)))
    assert protocol.parse_request(request).to_wire() == request


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(_json_values)
def test_the_hooks_json_reads_and_writes_what_json_does(value: object) -> None:
    """The hook parses JSON without ``json`` (its import costs tens of ms per container start)."""
    assert oci_hook.json_loads(json.dumps(value)) == value
    assert oci_hook.json_loads(json.dumps(value, indent=2, ensure_ascii=False)) == value
    assert json.loads(oci_hook.json_dumps(value)) == value


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='{}[]",:0123456789.eE+-truefalsn\\u \t', max_size=30))
def test_the_hooks_json_rejects_what_json_rejects(text: str) -> None:
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(oci_hook.JSONError):
            oci_hook.json_loads(text)
    else:
        assert oci_hook.json_loads(text) == expected
