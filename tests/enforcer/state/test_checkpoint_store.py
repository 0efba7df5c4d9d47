from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest

from enforcer.state import checkpoint, errors

STATE: dict[str, Any] = {
    "cpu": {"policyName": "static", "defaultCpuSet": "0,5-15", "entries": {"pod-1": {"app": "1-4"}}},
    "memory": {"machineState": {"0": {"memory": {"free": 1024, "reserved": 0}}}},
    "admitted": ["pod-1"],
    "generation": 7,
}


@pytest.fixture
def store(tmp_path: Path) -> checkpoint.CheckpointStore:
    return checkpoint.CheckpointStore(tmp_path / "state" / "numaguard_state.json")


def test_load_returns_none_before_anything_was_saved(store: checkpoint.CheckpointStore) -> None:
    assert store.load() is None


def test_saved_state_loads_back_equal(store: checkpoint.CheckpointStore) -> None:
    store.save(STATE)

    assert store.load() == STATE


def test_a_new_store_on_the_same_path_reads_what_the_last_one_saved(store: checkpoint.CheckpointStore) -> None:
    store.save({"generation": 1})
    store.save(STATE)

    assert checkpoint.CheckpointStore(store.path).load() == STATE


def test_the_file_is_our_envelope_with_a_sha256_over_format_version_and_data(
    store: checkpoint.CheckpointStore,
) -> None:
    store.save(STATE)

    envelope = json.loads(store.path.read_text())
    canonical = json.dumps(
        {"data": STATE, "format": "numaguard-state", "version": 1}, sort_keys=True, separators=(",", ":")
    )
    assert list(envelope) == ["format", "version", "checksum", "data"]
    assert envelope["format"] == "numaguard-state"
    assert envelope["version"] == 1
    assert envelope["checksum"] == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    assert envelope["data"] == STATE


def test_unicode_and_floats_round_trip_exactly(store: checkpoint.CheckpointStore) -> None:
    data = {"note": "café ☕", "ratio": 0.1 + 0.2, "big": 2**70, "nested": [None, True, {"é": -1}]}

    store.save(data)

    assert store.load() == data


@pytest.mark.parametrize(
    "data",
    [{"cpus": (1, 2)}, {"by_node": {0: "free"}}, {"x": math.nan}, {"x": object()}, {"x": {1, 2}}],
    ids=["tuple", "int key", "NaN", "object", "set"],
)
def test_save_refuses_data_that_would_not_load_back_equal(
    store: checkpoint.CheckpointStore, data: dict[str, Any]
) -> None:
    with pytest.raises(errors.CheckpointWriteError):
        store.save(data)

    assert not store.path.exists()


def test_the_previous_good_file_is_kept_as_backup(store: checkpoint.CheckpointStore) -> None:
    store.save({"generation": 1})
    store.save({"generation": 2})

    assert checkpoint.CheckpointStore(store.backup_path).load() == {"generation": 1}
    assert store.load() == {"generation": 2}


def test_a_damaged_file_never_replaces_a_good_backup(store: checkpoint.CheckpointStore) -> None:
    store.save({"generation": 1})
    store.save({"generation": 2})
    store.path.write_text("garbage")

    store.save({"generation": 3})

    assert checkpoint.CheckpointStore(store.backup_path).load() == {"generation": 1}
    assert store.load() == {"generation": 3}


def test_no_backup_is_kept_when_disabled(tmp_path: Path) -> None:
    store = checkpoint.CheckpointStore(tmp_path / "s.json", keep_backup=False)
    store.save({"generation": 1})
    store.save({"generation": 2})

    assert not store.backup_path.exists()


def test_a_missing_state_file_next_to_its_backup_is_not_a_fresh_start(store: checkpoint.CheckpointStore) -> None:
    store.save({"generation": 1})
    store.save({"generation": 2})
    store.path.unlink()

    with pytest.raises(errors.CheckpointCorruptError, match="recover-state"):
        store.load()


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    upgraded = {key: value for key, value in data.items() if key != "admitted"}
    upgraded.update(pods=data["admitted"], schema=2)
    return upgraded


def test_an_older_version_is_upgraded_through_the_migrations(store: checkpoint.CheckpointStore) -> None:
    store.save({"admitted": ["p"]})
    upgraded = checkpoint.CheckpointStore(store.path, version=2, migrations={1: _v1_to_v2})

    assert upgraded.load() == {"pods": ["p"], "schema": 2}


def test_a_version_without_an_upgrade_path_is_refused(store: checkpoint.CheckpointStore) -> None:
    store.save({"admitted": ["p"]})
    newer_build = checkpoint.CheckpointStore(store.path, version=3, migrations={1: _v1_to_v2})

    with pytest.raises(errors.CheckpointVersionError, match="no upgrade path from version 2 to 3"):
        newer_build.load()


def test_a_file_from_a_newer_build_is_refused_with_the_versions_named(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    checkpoint.CheckpointStore(path, version=2).save({"generation": 1})

    with pytest.raises(errors.CheckpointVersionError, match="version 2 was written by a newer numaguard") as caught:
        checkpoint.CheckpointStore(path).load()

    assert caught.value.found_version == 2
    assert caught.value.reason == "CheckpointVersionUnsupported"


def test_status_classifies_without_raising(store: checkpoint.CheckpointStore) -> None:
    assert store.status()[0] == "missing"
    store.save(STATE)
    assert store.status()[0] == "valid"
    store.path.write_text('{"format": "other", "version": 1}')
    assert store.status()[0] == "unsupported"
    store.path.write_text("{")
    assert store.status()[0] == "corrupt"


def test_a_claim_is_exclusive_until_released(store: checkpoint.CheckpointStore) -> None:
    claim = store.claim()

    with pytest.raises(errors.CheckpointError, match="in use"):
        store.claim()
    assert store.is_claimed()

    claim.release()
    assert not store.is_claimed()
