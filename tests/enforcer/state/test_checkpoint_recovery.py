"""``recover`` and the ``numaguard recover-state`` command bring a damaged state back to a startable one."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from enforcer.state import checkpoint, errors
from numaguard_cli import main as cli

NOW = datetime(2026, 5, 1, 12, 30, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> checkpoint.CheckpointStore:
    store = checkpoint.CheckpointStore(tmp_path / "numaguard_state.json")
    store.save({"generation": 1})
    store.save({"generation": 2})
    return store


def _corrupt(store: checkpoint.CheckpointStore) -> None:
    store.path.write_bytes(store.path.read_bytes()[:40])


def test_quarantine_moves_the_bad_file_and_its_backup_aside_so_the_enforcer_starts_empty(
    store: checkpoint.CheckpointStore,
) -> None:
    _corrupt(store)

    result = checkpoint.recover(store.path, mode="quarantine", now=NOW)

    quarantined = store.directory / "numaguard_state.json.corrupt-20260501T123000Z"
    assert result.status == "corrupt"
    assert (store.path, quarantined) in result.moved
    assert quarantined.read_bytes()[:10] == b'{\n  "forma'
    assert not store.path.exists() and not store.backup_path.exists()
    assert checkpoint.CheckpointStore(store.path).load() is None
    assert any("Drain the node" in line for line in result.actions)


def test_quarantine_refuses_a_valid_file_unless_forced(store: checkpoint.CheckpointStore) -> None:
    with pytest.raises(errors.RecoveryError, match="valid; refusing"):
        checkpoint.recover(store.path, mode="quarantine", now=NOW)
    assert store.load() == {"generation": 2}

    checkpoint.recover(store.path, mode="quarantine", force=True, now=NOW)
    assert store.load() is None


def test_quarantine_twice_in_one_second_keeps_both_files(store: checkpoint.CheckpointStore) -> None:
    _corrupt(store)
    checkpoint.recover(store.path, mode="quarantine", now=NOW)
    store.path.write_text("again")

    second = checkpoint.recover(store.path, mode="quarantine", now=NOW)

    assert second.moved[0][1].name == "numaguard_state.json.corrupt-20260501T123000Z-1"


def test_from_backup_restores_the_previous_good_state(store: checkpoint.CheckpointStore) -> None:
    _corrupt(store)

    result = checkpoint.recover(store.path, mode="from-backup", now=NOW)

    assert store.load() == {"generation": 1}
    assert result.restored_from == store.backup_path
    assert (store.directory / "numaguard_state.json.corrupt-20260501T123000Z").exists()
    assert store.backup_path.exists()


def test_from_backup_also_recovers_a_deleted_state_file(store: checkpoint.CheckpointStore) -> None:
    store.path.unlink()
    with pytest.raises(errors.CheckpointCorruptError):
        store.load()

    checkpoint.recover(store.path, mode="from-backup", now=NOW)

    assert store.load() == {"generation": 1}


def test_from_backup_refuses_without_a_valid_backup(store: checkpoint.CheckpointStore) -> None:
    _corrupt(store)
    store.backup_path.write_text("{}")

    with pytest.raises(errors.RecoveryError, match="no valid backup"):
        checkpoint.recover(store.path, mode="from-backup", now=NOW)


def test_recovery_refuses_while_an_enforcer_holds_the_state(store: checkpoint.CheckpointStore) -> None:
    _corrupt(store)

    with store.claim(), pytest.raises(errors.RecoveryError, match="running enforcer"):
        checkpoint.recover(store.path, mode="quarantine", now=NOW)

    assert store.path.exists()


def test_check_reports_without_changing_anything(store: checkpoint.CheckpointStore) -> None:
    _corrupt(store)
    before = sorted(p.name for p in store.directory.iterdir())

    result = checkpoint.recover(store.path, mode="check")

    assert result.status == "corrupt"
    assert not result.changed_anything
    assert sorted(p.name for p in store.directory.iterdir()) == before
    assert result.actions[0].startswith("state file: corrupt: checkpoint is corrupted")


def test_recover_state_command_quarantines_and_prints_what_it_did(
    store: checkpoint.CheckpointStore, capsys: pytest.CaptureFixture[str]
) -> None:
    _corrupt(store)

    code = cli.main(["recover-state", "--state-dir", str(store.directory), "--mode", "quarantine"])

    out = capsys.readouterr().out
    assert code == 0
    assert f"moved {store.path} to {store.path}.corrupt-" in out
    assert "Drain the node" in out
    assert checkpoint.CheckpointStore(store.path).load() is None


def test_recover_state_command_restores_from_backup_with_an_absolute_state_file(
    store: checkpoint.CheckpointStore, capsys: pytest.CaptureFixture[str]
) -> None:
    _corrupt(store)

    code = cli.main(["recover-state", "--state-file", str(store.path), "--mode", "from-backup"])

    assert code == 0
    assert f"restored {store.path} from {store.backup_path}" in capsys.readouterr().out
    assert store.load() == {"generation": 1}


def test_recover_state_command_check_exits_nonzero_on_a_bad_file(
    store: checkpoint.CheckpointStore, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["recover-state", "--state-dir", str(store.directory), "--mode", "check"]
    assert cli.main(args) == 0
    _corrupt(store)

    assert cli.main(args) == 1
    assert "state file: corrupt" in capsys.readouterr().out


def test_recover_state_command_explains_a_refusal_on_stderr(
    store: checkpoint.CheckpointStore, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["recover-state", "--state-dir", str(store.directory), "--mode", "quarantine"])

    assert code == 1
    assert "refusing to quarantine it without --force" in capsys.readouterr().err
