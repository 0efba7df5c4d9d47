"""Atomicity and durability of ``save``: fsync order, crashes at every step, temp file clean-up."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from enforcer.state import checkpoint, errors


class SimulatedCrash(BaseException):
    """The process dies here: nothing after it runs, no ``except Exception`` handler sees it."""


@pytest.fixture
def store(tmp_path: Path) -> checkpoint.CheckpointStore:
    return checkpoint.CheckpointStore(tmp_path / "numaguard_state.json")


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def _record_syscalls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Record fsync (by the path behind the fd) and rename calls, then perform them."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", _fd_path(fd)))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        events.append(("rename", f"{Path(src).name} -> {Path(dst).name}"))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_save_fsyncs_the_temp_file_then_renames_then_fsyncs_the_directory(
    store: checkpoint.CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _record_syscalls(monkeypatch)

    store.save({"generation": 1})

    assert len(events) == 3
    (kind0, file0), (kind1, rename), (kind2, file2) = events
    assert kind0 == "fsync" and Path(file0).name.startswith(".numaguard_state.json.tmp-")
    assert kind1 == "rename" and rename == f"{Path(file0).name} -> numaguard_state.json"
    assert (kind2, file2) == ("fsync", str(store.directory))


def test_save_over_an_existing_file_keeps_the_backup_before_the_rename(
    store: checkpoint.CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.save({"generation": 1})
    events = _record_syscalls(monkeypatch)

    store.save({"generation": 2})

    renames = [detail for kind, detail in events if kind == "rename"]
    assert renames[-1].endswith("-> numaguard_state.json")
    assert any(r.endswith("-> numaguard_state.json.bak") for r in renames[:-1])
    assert events[-1] == ("fsync", str(store.directory))


def _crash_when(condition: Callable[..., bool], real: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        if condition(*args):
            raise SimulatedCrash
        return real(*args)

    return wrapper


def _temp_files(store: checkpoint.CheckpointStore) -> list[Path]:
    return sorted(store.directory.glob(".numaguard_state.json.tmp-*"))


def test_a_crash_between_the_temp_write_and_the_rename_leaves_the_old_state(
    store: checkpoint.CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.save({"generation": 1})
    monkeypatch.setattr(os, "replace", _crash_when(lambda src, dst: Path(dst) == store.path, os.replace))

    with pytest.raises(SimulatedCrash):
        store.save({"generation": 2})
    monkeypatch.undo()

    assert _temp_files(store), "the crashed save left its temp file, as a real crash would"
    assert checkpoint.CheckpointStore(store.path).load() == {"generation": 1}


def test_a_crash_while_writing_the_temp_file_leaves_the_old_state(
    store: checkpoint.CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.save({"generation": 1})
    real_write = os.write

    def write_a_little_then_die(fd: int, data: Any) -> int:
        real_write(fd, bytes(data)[:10])
        raise SimulatedCrash

    monkeypatch.setattr(os, "write", write_a_little_then_die)

    with pytest.raises(SimulatedCrash):
        store.save({"generation": 2})
    monkeypatch.undo()

    assert checkpoint.CheckpointStore(store.path).load() == {"generation": 1}


def test_a_crash_before_the_directory_fsync_leaves_old_or_new_never_neither(
    store: checkpoint.CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.save({"generation": 1})
    directory = str(store.directory)
    monkeypatch.setattr(os, "fsync", _crash_when(lambda fd: _fd_path(fd) == directory, os.fsync))

    with pytest.raises(SimulatedCrash):
        store.save({"generation": 2})
    monkeypatch.undo()

    assert checkpoint.CheckpointStore(store.path).load() in ({"generation": 1}, {"generation": 2})


def test_leftover_temp_files_are_ignored_by_load_and_removed_by_the_next_save(
    store: checkpoint.CheckpointStore,
) -> None:
    store.save({"generation": 1})
    leftover = store.directory / ".numaguard_state.json.tmp-999-deadbeef"
    leftover.write_text('{"format": "numaguard-state", "version": 1, "garbage')

    assert store.load() == {"generation": 1}

    store.save({"generation": 2})

    assert _temp_files(store) == []
    assert store.load() == {"generation": 2}


def test_a_failed_save_reports_a_write_error_and_leaves_no_temp_file(
    store: checkpoint.CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.save({"generation": 1})
    real_replace = os.replace

    def refuse(src: Any, dst: Any) -> None:
        if Path(dst) == store.path:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", refuse)

    with pytest.raises(errors.CheckpointWriteError, match="No space left"):
        store.save({"generation": 2})
    monkeypatch.undo()

    assert _temp_files(store) == []
    assert store.load() == {"generation": 1}


def test_save_creates_the_state_directory(tmp_path: Path) -> None:
    store = checkpoint.CheckpointStore(tmp_path / "a" / "b" / "state.json")

    store.save({"generation": 1})

    assert store.load() == {"generation": 1}
