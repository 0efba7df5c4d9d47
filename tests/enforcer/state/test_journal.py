"""The journaled state store: patches replay exactly, damage is always a typed error, crashes leave a whole state."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from enforcer.state import checkpoint, errors, journal

NOW = datetime(2026, 5, 1, 12, 30, tzinfo=UTC)
BASE: dict[str, Any] = {"node": "node-a", "topology": {"cpus": [0, 1]}, "pods": {}, "cpu": {"defaultCpuSet": "0-1"}}
CHANGES: list[list[dict[str, Any]]] = [
    [journal.set_op(["pods", "a"], {"cpus": "1", "big": 1.5e308}), journal.set_op(["cpu", "defaultCpuSet"], "0")],
    [journal.set_op(["pods", "b"], {"cpus": ""}), journal.set_op(["cpu", "entries", "b", "main"], "0")],
    [journal.del_op(["pods", "a"]), journal.set_op(["cpu", "defaultCpuSet"], "0-1")],
]


def expected_after(count: int) -> dict[str, Any]:
    document: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for ops in CHANGES[:count]:
        journal.apply_ops(document, ops)
    return document


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "numaguard_state.json"


def written(path: Path, changes: int = len(CHANGES)) -> journal.JournaledStore:
    store = journal.JournaledStore(path)
    assert store.load() is None
    store.save(BASE)
    for ops in CHANGES[:changes]:
        store.append(ops)
    store.close()
    return store


def journal_of(path: Path) -> Path:
    return path.with_name(path.name + ".journal")


def lines_of(path: Path) -> list[bytes]:
    """The journal's lines (newlines kept), without its NUL padding."""
    return journal_of(path).read_bytes().rstrip(b"\0").splitlines(keepends=True)


def rewrite(path: Path, lines: list[bytes]) -> None:
    """The journal with these lines in place of its own, padded with NUL bytes to the size it had."""
    size = journal_of(path).stat().st_size
    content = b"".join(lines)
    journal_of(path).write_bytes(content + bytes(max(0, size - len(content))))


def test_the_base_and_its_patches_load_back_as_the_document(path: Path) -> None:
    written(path)
    store = journal.JournaledStore(path)

    assert store.load() == expected_after(len(CHANGES))
    assert store.records == len(CHANGES) and not store.needs_save
    data = checkpoint.CheckpointStore(path).load()
    assert data is not None and (data["node"], data["topology"]) == ("node-a", BASE["topology"])  # start-up checks


def test_appends_continue_after_a_reload_and_a_compaction_empties_the_journal(path: Path) -> None:
    written(path, 1)
    store = journal.JournaledStore(path)
    store.load()
    store.append(CHANGES[1])
    store.close()
    assert journal.JournaledStore(path).load() == expected_after(2)

    store.save(expected_after(2))
    store.append(CHANGES[2])
    store.close()
    reloaded = journal.JournaledStore(path)
    assert reloaded.load() == expected_after(3) and reloaded.records == 1


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "old-unpadded"])
@pytest.mark.parametrize("cut", [1, 10, 40, -2])
def test_a_torn_last_append_is_dropped_and_zeroed_before_the_next(path: Path, cut: int, padded: bool) -> None:
    """A crash mid-append leaves a prefix of a line never acknowledged, in the padding or at an old file's end."""
    written(path, 2)
    lines = lines_of(path)
    line = journal.record_line(3, "sha256:" + "0" * 64, CHANGES[2])[0]
    if padded:
        rewrite(path, [*lines, line[:cut]])
    else:  # a journal from before the padding: the file ends where its writing stopped
        journal_of(path).write_bytes(b"".join([*lines, line[:cut]]))
    store = journal.JournaledStore(path)

    assert store.load() == expected_after(2)
    store.append(CHANGES[2])
    store.close()
    assert journal.JournaledStore(path).load() == expected_after(3)
    raw = journal_of(path).read_bytes()
    content = raw.rstrip(b"\0")
    assert content.endswith(b"}\n") and len(content.splitlines()) == 4  # the torn bytes are gone, not shifted
    assert len(raw) % journal.CHUNK_BYTES == 0 and b"\0" not in content


def _flip(raw: bytes, bits: list[int]) -> bytes:
    damaged = bytearray(raw)
    for bit in bits:
        damaged[(bit // 8) % len(damaged)] ^= 1 << (bit % 8)
    return bytes(damaged)


@settings(max_examples=300, deadline=None)
@given(bits=st.lists(st.integers(min_value=0), min_size=1, max_size=3))
def test_flipped_bits_anywhere_in_the_journal_never_yield_wrong_data(tmp_path_factory: Any, bits: list[int]) -> None:
    """Up to three flipped bits in the lines or the padding after them: corruption, or (flips undone) all of it."""
    path = tmp_path_factory.mktemp("flip") / "state.json"
    written(path)
    raw = journal_of(path).read_bytes()
    reach = len(raw.rstrip(b"\0")) + 3 * journal.TORN_UNIT  # the lines, then sectors of padding
    damaged = _flip(raw[:reach], bits) + raw[reach:]
    assume(damaged != raw)
    journal_of(path).write_bytes(damaged)

    try:
        loaded = journal.JournaledStore(path).load()
    except errors.CheckpointError:
        return
    assert loaded == expected_after(len(CHANGES))


@pytest.mark.parametrize(
    ("name", "damage", "says"),
    [
        ("a record dropped from the middle", lambda lines: [lines[0], lines[1], lines[3]], "seq 3, expected 2"),
        ("two records swapped", lambda lines: [lines[0], lines[2], lines[1], lines[3]], "seq"),
        ("the header gone", lambda lines: lines[1:], "damaged: fields"),
        ("a record's line end damaged", lambda lines: [*lines[:-1], lines[-1][:-1] + b" "], "line end is damaged"),
        ("a record's line end zeroed", lambda lines: [*lines[:-1], lines[-1][:-1] + b"\0"], "line end is damaged"),
        ("not UTF-8", lambda lines: [*lines[:-1], b"\xff" + lines[-1]], "not UTF-8"),
        ("a number past the double range", lambda lines: [x.replace(b"e+308", b"e+309") for x in lines], "range"),
        (
            "nested past the reader's depth",
            lambda lines: [*lines[:-1], b"[" * 100_000 + b"]" * 100_000 + b"\n"],
            "JSON",
        ),
    ],
)
def test_damage_inside_the_journal_is_reported_as_corruption(
    path: Path, name: str, damage: Callable[[list[bytes]], list[bytes]], says: str
) -> None:
    written(path)
    rewrite(path, damage(lines_of(path)))

    with pytest.raises(errors.CheckpointCorruptError, match=says) as caught:
        journal.JournaledStore(path).load()
    assert caught.value.message.startswith("checkpoint is corrupted: ")


def test_a_journal_from_another_generation_is_refused_and_the_one_just_superseded_is_ignored(path: Path) -> None:
    written(path)
    old_journal = journal_of(path).read_bytes()
    store = journal.JournaledStore(path)
    store.load()
    store.save(expected_after(3))  # generation 2
    store.close()

    journal_of(path).write_bytes(old_journal)  # as a crash between the base's rename and the journal's leaves it
    stale = journal.JournaledStore(path)
    assert stale.load() == expected_after(3)
    assert stale.needs_save  # appending to the superseded journal would be lost: compact first
    stale.save(expected_after(3))
    stale.append(CHANGES[0])
    stale.close()

    journal_of(path).write_bytes(old_journal)  # generation 1 under a generation 3 base
    with pytest.raises(errors.CheckpointCorruptError, match="does not continue state file generation 3"):
        journal.JournaledStore(path).load()


def test_a_missing_journal_or_a_journal_without_its_base_is_corruption(path: Path) -> None:
    written(path)
    journal_of(path).rename(path.with_name("elsewhere"))
    with pytest.raises(errors.CheckpointCorruptError, match="is missing"):
        journal.JournaledStore(path).load()

    path.unlink()
    path.with_name("elsewhere").rename(journal_of(path))
    with pytest.raises(errors.CheckpointCorruptError, match="holds changes"):
        journal.JournaledStore(path).load()


def test_a_first_save_cut_short_before_its_base_reads_as_never_saved(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = journal.JournaledStore(path)
    store.load()
    monkeypatch.setattr(checkpoint.CheckpointStore, "save", _crashing)
    with pytest.raises(RuntimeError):
        store.save(BASE)
    monkeypatch.undo()

    assert journal_of(path).exists() and not path.exists()
    fresh = journal.JournaledStore(path)
    assert fresh.load() is None
    fresh.save(BASE)
    fresh.append(CHANGES[0])
    assert journal.JournaledStore(path).load() == expected_after(1)


def _crashing(*_: object, **__: object) -> None:
    raise RuntimeError("killed")


def test_a_compaction_killed_before_the_journal_rename_keeps_every_change(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written(path)
    store = journal.JournaledStore(path)
    store.load()
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        if Path(dst) == journal_of(path):
            raise RuntimeError("killed")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(RuntimeError):
        store.save(expected_after(3))
    monkeypatch.undo()

    assert journal.JournaledStore(path).load() == expected_after(3)


def test_a_failed_append_refuses_further_appends_until_a_save(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written(path, 1)
    store = journal.JournaledStore(path)
    store.load()

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", no_space)
    with pytest.raises(errors.CheckpointWriteError, match="No space left"):
        store.append(CHANGES[1])
    monkeypatch.undo()

    assert store.needs_save
    with pytest.raises(errors.CheckpointWriteError):
        store.append(CHANGES[2])
    store.save(expected_after(1))
    store.append(CHANGES[1])
    assert journal.JournaledStore(path).load() == expected_after(2)


def test_a_journal_moved_away_while_open_fails_the_append(path: Path) -> None:
    written(path, 1)
    store = journal.JournaledStore(path)
    store.load()
    store.append(CHANGES[1])
    journal_of(path).rename(path.with_name("moved"))
    with pytest.raises(errors.CheckpointWriteError, match="No such file"):
        store.append(CHANGES[2])

    store.save(expected_after(2))
    store.append(CHANGES[2])
    journal_of(path).rename(path.with_name("moved"))
    journal_of(path).write_bytes(path.with_name("moved").read_bytes())  # a copy in its place
    with pytest.raises(errors.CheckpointWriteError, match="not reachable"):
        store.append(CHANGES[0])


def test_ops_that_are_not_plain_json_are_refused_before_anything_is_written(path: Path) -> None:
    written(path, 0)
    store = journal.JournaledStore(path)
    store.load()
    before = journal_of(path).read_bytes()

    for ops in (
        [journal.set_op(["x"], (1, 2))],
        [journal.set_op(["x"], float("nan"))],
        [journal.set_op(["x"], {1: 2})],
    ):
        with pytest.raises(errors.CheckpointWriteError):
            store.append(ops)
    assert journal_of(path).read_bytes() == before


def test_recover_check_reports_base_backup_and_journal(path: Path) -> None:
    written(path)
    result = journal.recover(path, mode="check")
    assert result.status == "valid"
    assert any(line.startswith("journal: valid: generation 1, 3 change(s)") for line in result.actions)

    rewrite(path, [*lines_of(path)[:-1], lines_of(path)[-1][:-3] + b"}}\n"])
    assert journal.recover(path, mode="check").status == "corrupt"


def test_quarantine_moves_the_journal_aside_too(path: Path) -> None:
    written(path)
    journal_of(path).unlink()

    result = journal.recover(path, mode="quarantine", now=NOW)

    assert not path.exists() and not journal_of(path).exists()
    assert (path, path.with_name("numaguard_state.json.corrupt-20260501T123000Z")) in result.moved
    assert journal.JournaledStore(path).load() is None


def test_from_backup_restores_the_previous_base_with_an_empty_journal(path: Path) -> None:
    written(path)
    store = journal.JournaledStore(path)
    store.load()
    store.save(expected_after(3))  # the generation 1 base becomes the backup
    store.append([journal.set_op(["pods", "c"], {})])
    store.close()
    path.write_bytes(path.read_bytes()[:50])

    with pytest.raises(errors.CheckpointCorruptError):
        journal.JournaledStore(path).load()
    result = journal.recover(path, mode="from-backup", now=NOW)

    assert result.restored_from == path.with_name("numaguard_state.json.bak")
    assert journal.JournaledStore(path).load() == BASE
    assert any("every change journaled since is missing" in line for line in result.actions)
    assert path.with_name("numaguard_state.json.journal.corrupt-20260501T123000Z").exists()


def test_recovery_refuses_a_valid_state_without_force(path: Path) -> None:
    written(path)
    with pytest.raises(errors.RecoveryError, match="refusing to quarantine"):
        journal.recover(path, mode="quarantine", now=NOW)
    assert journal.JournaledStore(path).load() == expected_after(3)


@pytest.mark.parametrize(
    "op",
    [{"set": "pods"}, {"set": [], "value": 1}, {"del": [1]}, {"set": ["cpu", "defaultCpuSet", "x"], "value": 1}, "op"],
)
def test_a_malformed_op_is_refused_by_name(op: Any) -> None:
    with pytest.raises(ValueError, match="op 0"):
        journal.apply_ops({"cpu": {"defaultCpuSet": "0"}}, [op])
